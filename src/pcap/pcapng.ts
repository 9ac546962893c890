// A small pcapng writer (draft-ietf-opsawg-pcapng; what Wireshark writes by default): enough for
// `kubetun tap`, one section with several interfaces and packets carrying a comment.
//
// Every block, little-endian here (the Section Header's magic tells readers the byte order):
//
//   +---------------------------------------------------------------+
//   |                      Block Type (u32)                         |
//   |                  Block Total Length (u32)                     |  = the whole block, bytes
//   /                  Block Body (padded to 32 bits)               /
//   |                  Block Total Length (u32)                     |  (again: read backwards)
//   +---------------------------------------------------------------+
//
//   Section Header Block, type 0x0A0D0D0A: byte-order magic 0x1A2B3C4D, version 1.0 (u16 u16),
//     section length (i64, -1 = not given), options.
//   Interface Description Block, type 1: link type (u16), reserved (u16), snaplen (u32),
//     options: if_name (2), if_description (3), if_tsresol (9: one byte, 6 = microseconds).
//     Interfaces are numbered by their order in the section, from 0.
//   Enhanced Packet Block, type 6: interface id (u32), timestamp high and low (u32 u32, in the
//     interface's resolution since the epoch), captured length, original length (u32 u32),
//     packet data padded to 32 bits, options: opt_comment (1).
//   Options: code (u16), length (u16), value padded to 32 bits; the list ends with
//     opt_endofopt (code 0, length 0). Strings are UTF-8, not NUL-terminated.
//
// The link type of kubetun's captures is LINKTYPE_RAW (101): IP packets with no link header,
// the TUN's own framing (as the classic pcap writer beside this one uses).
import { LINKTYPE_RAW } from './format.ts';

export const PCAPNG_SHB = 0x0a0d0d0a;
export const PCAPNG_IDB = 0x00000001;
export const PCAPNG_EPB = 0x00000006;
export const PCAPNG_BYTE_ORDER_MAGIC = 0x1a2b3c4d;
const OPT_ENDOFOPT = 0;
const OPT_COMMENT = 1;
const SHB_USERAPPL = 4;
const IF_NAME = 2;
const IF_DESCRIPTION = 3;
const IF_TSRESOL = 9;

type Option = { code: number; value: Uint8Array };

const utf8 = (s: string) => new TextEncoder().encode(s);
const pad4 = (n: number) => (n + 3) & ~3;

function optionsLen(opts: readonly Option[]): number {
  if (opts.length === 0) return 0;
  return opts.reduce((n, o) => n + 4 + pad4(o.value.length), 0) + 4;
}

function writeOptions(v: DataView, b: Uint8Array, at: number, opts: readonly Option[]): number {
  if (opts.length === 0) return at;
  for (const o of opts) {
    v.setUint16(at, o.code, true);
    v.setUint16(at + 2, o.value.length, true);
    b.set(o.value, at + 4);
    at += 4 + pad4(o.value.length);
  }
  v.setUint16(at, OPT_ENDOFOPT, true);
  v.setUint16(at + 2, 0, true);
  return at + 4;
}

/** One block: type, body (fixed part written by `body`, then options), both lengths. */
function block(
  type: number,
  fixedLen: number,
  opts: readonly Option[],
  body: (v: DataView, b: Uint8Array) => void,
): Uint8Array {
  const total = 12 + pad4(fixedLen) + optionsLen(opts);
  const b = new Uint8Array(total);
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  v.setUint32(0, type, true);
  v.setUint32(4, total, true);
  body(new DataView(b.buffer, b.byteOffset + 8, pad4(fixedLen)), b.subarray(8, 8 + pad4(fixedLen)));
  writeOptions(v, b, 8 + pad4(fixedLen), opts);
  v.setUint32(total - 4, total, true);
  return b;
}

export interface PcapngInterface {
  name: string;
  description?: string;
  linkType?: number;
  snaplen?: number;
}

/**
 * Writes a pcapng stream through `sink` (a file's write, an array's push): the Section Header
 * at once, then interfaces and packets as they come. Microsecond timestamps.
 */
export class PcapngWriter {
  private interfaces = 0;
  /** packets written */
  count = 0;

  constructor(
    private readonly sink: (chunk: Uint8Array) => void,
    app = 'kubetun',
  ) {
    const opts = [{ code: SHB_USERAPPL, value: utf8(app) }];
    this.sink(
      block(PCAPNG_SHB, 16, opts, (v) => {
        v.setUint32(0, PCAPNG_BYTE_ORDER_MAGIC, true);
        v.setUint16(4, 1, true);
        v.setUint16(6, 0, true);
        v.setBigInt64(8, -1n, true);
      }),
    );
  }

  /** Adds an interface; returns its id (0, 1, …) for packet(). */
  addInterface(i: PcapngInterface): number {
    const opts: Option[] = [{ code: IF_NAME, value: utf8(i.name) }];
    if (i.description) opts.push({ code: IF_DESCRIPTION, value: utf8(i.description) });
    opts.push({ code: IF_TSRESOL, value: Uint8Array.of(6) });
    this.sink(
      block(PCAPNG_IDB, 8, opts, (v) => {
        v.setUint16(0, i.linkType ?? LINKTYPE_RAW, true);
        v.setUint16(2, 0, true);
        v.setUint32(4, i.snaplen ?? 0, true);
      }),
    );
    return this.interfaces++;
  }

  /**
   * One packet on interface `ifId` at `timeUs` (µs since the epoch); `origLen` is the length on
   * the wire when `data` was cut to the snap length; `comment` becomes opt_comment.
   */
  packet(
    ifId: number,
    timeUs: number,
    data: Uint8Array,
    origLen = data.length,
    comment?: string,
  ): void {
    if (!Number.isInteger(ifId) || ifId < 0 || ifId >= this.interfaces) {
      throw new RangeError(`pcapng: no interface ${ifId} (${this.interfaces} added)`);
    }
    const opts = comment ? [{ code: OPT_COMMENT, value: utf8(comment) }] : [];
    const ts = BigInt(Math.round(timeUs));
    this.sink(
      block(PCAPNG_EPB, 20 + data.length, opts, (v, b) => {
        v.setUint32(0, ifId, true);
        v.setUint32(4, Number(ts >> 32n), true);
        v.setUint32(8, Number(ts & 0xffffffffn), true);
        v.setUint32(12, data.length, true);
        v.setUint32(16, Math.max(origLen, data.length), true);
        b.set(data, 20);
      }),
    );
    this.count++;
  }
}

/** The blocks of a pcapng buffer (type, body) — for tests and tools reading our own files. */
export function pcapngBlocks(buf: Uint8Array): { type: number; body: Uint8Array }[] {
  const v = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const out: { type: number; body: Uint8Array }[] = [];
  let at = 0;
  while (at + 12 <= buf.length) {
    const type = v.getUint32(at, true);
    const len = v.getUint32(at + 4, true);
    if (
      len < 12 ||
      len % 4 !== 0 ||
      at + len > buf.length ||
      v.getUint32(at + len - 4, true) !== len
    ) {
      throw new Error(`pcapng: bad block at byte ${at}`);
    }
    out.push({ type, body: buf.subarray(at + 8, at + len - 4) });
    at += len;
  }
  return out;
}

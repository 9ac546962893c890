// SCTP common header and chunks (RFC 9260, sections 3.1 and 3.2):
//
//     0                   1                   2                   3
//     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |     Source Port Number        |     Destination Port Number   |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                      Verification Tag                         |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                           Checksum                            |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |   Chunk Type  | Chunk  Flags  |        Chunk Length           |  } one or more
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  } chunks, each
//    \                  Chunk Value (Chunk Length - 4 bytes)         \  } padded to a
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  } multiple of 4
//
// RFC 9260 on Chunk Length: "This value represents the size of the chunk in bytes, including
// the Chunk Type, Chunk Flags, Chunk Length, and Chunk Value fields. ... The Chunk Length field
// does not count any chunk padding." A length below 4 cannot even cover the chunk header (the
// kernel's conntrack calls a zero length invalid; it would loop forever): SCTP_ERR_CHUNK_LEN.
//
// The checksum is CRC32c (Castagnoli, reflected polynomial 0x82F63B78) over the whole SCTP
// packet with the checksum field taken as zero. There is no pseudo-header: a NAT that changes
// only addresses leaves it valid, one that changes a port must recompute it over every byte of
// the packet (RFC 1624 does not apply: CRCs have no incremental one's complement update). The
// field holds the CRC's bytes least significant first (RFC 9260 appendix A's sample code
// byte-swaps before storing in network order), so the bytes "aa 36 91 8a" are CRC 0x8a9136aa.
//
// Validation contract: sctpCheck(buf, off, end) — `off` the L4 offset, `end` the end of the IP
// packet — returns SCTP_OK or an error. After SCTP_OK the 12-byte common header and every chunk
// header lie within [off, end), each chunk's announced length (without padding) too, and there
// is at least one chunk. The checksum is not verified here (sctpCrcValid). Accessors take
// (buf, off) and never allocate; the CRC is table-driven over a table built once at load.

import { read16, read32, write16 } from './bytes.ts';

export const SCTP_OK = 0;
/** fewer than 12 bytes */
export const SCTP_ERR_TRUNCATED = 1;
/** no chunk after the common header */
export const SCTP_ERR_NO_CHUNKS = 2;
/** a chunk length below 4, or a chunk beyond end */
export const SCTP_ERR_CHUNK_LEN = 3;

export const SCTP_ERR_NAMES: readonly string[] = ['ok', 'truncated', 'no-chunks', 'chunk-len'];

export const SCTP_HEADER_LEN = 12;
export const SCTP_CHUNK_HEADER_LEN = 4;

// Chunk types (RFC 9260 section 3.2; 12 and 13 are ECN, RFC 9260 appendix A).
export const SCTP_DATA = 0;
export const SCTP_INIT = 1;
export const SCTP_INIT_ACK = 2;
export const SCTP_SACK = 3;
export const SCTP_HEARTBEAT = 4;
export const SCTP_HEARTBEAT_ACK = 5;
export const SCTP_ABORT = 6;
export const SCTP_SHUTDOWN = 7;
export const SCTP_SHUTDOWN_ACK = 8;
export const SCTP_ERROR = 9;
export const SCTP_COOKIE_ECHO = 10;
export const SCTP_COOKIE_ACK = 11;
export const SCTP_ECNE = 12;
export const SCTP_CWR = 13;
export const SCTP_SHUTDOWN_COMPLETE = 14;
/** ABORT / SHUTDOWN COMPLETE flag: the sender used the peer's tag (RFC 9260 8.5.1) */
export const SCTP_CHUNK_FLAG_T = 0x01;

// Chunk summary (sctpChunks): the first chunk's bit in the low 16 bits (bit t for chunk type
// t < 15, bit 15 for any other type), the bits of the chunks after it shifted left by 16.
/** bit of chunk type `t` in a summary's low half */
export function sctpChunkBit(t: number): number {
  return t < 15 ? 1 << t : 1 << 15;
}
export const SCTP_CHUNKS_LATER_SHIFT = 16;

const SPORT = 0;
const DPORT = 2;
const VTAG = 4;
const CSUM = 8;
const CH_TYPE = 0;
const CH_FLAGS = 1;
const CH_LEN = 2;

/** Validate the header and walk the chunks; see the contract above. Never throws. */
export function sctpCheck(buf: Uint8Array, off: number, end: number): number {
  if (end > buf.length) end = buf.length;
  if (off < 0 || end - off < SCTP_HEADER_LEN) return SCTP_ERR_TRUNCATED;
  let at = off + SCTP_HEADER_LEN;
  if (at >= end) return SCTP_ERR_NO_CHUNKS;
  while (at < end) {
    if (end - at < SCTP_CHUNK_HEADER_LEN) return SCTP_ERR_CHUNK_LEN;
    const len = read16(buf, at + CH_LEN);
    if (len < SCTP_CHUNK_HEADER_LEN || at + len > end) return SCTP_ERR_CHUNK_LEN;
    at += (len + 3) & ~3;
  }
  return SCTP_OK;
}

/**
 * Which chunk types the packet carries, as one number: the first chunk's sctpChunkBit, or'ed
 * with those of the chunks after it << SCTP_CHUNKS_LATER_SHIFT. Precondition: sctpCheck
 * returned SCTP_OK.
 * Conntrack needs exactly this: the types for its state table, and which came later than the
 * first (INIT, INIT ACK and SHUTDOWN COMPLETE must be alone, COOKIE ECHO / ACK first).
 */
export function sctpChunks(buf: Uint8Array, off: number, end: number): number {
  let at = off + SCTP_HEADER_LEN;
  let first = 0;
  let later = 0;
  let n = 0;
  while (at < end) {
    const bit = sctpChunkBit(buf[at + CH_TYPE]);
    if (n === 0) first = bit;
    else later |= bit;
    n++;
    at += (read16(buf, at + CH_LEN) + 3) & ~3;
  }
  return first | (later << SCTP_CHUNKS_LATER_SHIFT);
}

export function sctpSrcPort(buf: Uint8Array, off: number): number {
  return read16(buf, off + SPORT);
}
export function sctpDstPort(buf: Uint8Array, off: number): number {
  return read16(buf, off + DPORT);
}
/** Verification tag, unsigned. */
export function sctpVtag(buf: Uint8Array, off: number): number {
  return read32(buf, off + VTAG);
}
/** The checksum field as the CRC value it holds (bytes least significant first), unsigned. */
export function sctpCsum(buf: Uint8Array, off: number): number {
  const at = off + CSUM;
  return (buf[at] | (buf[at + 1] << 8) | (buf[at + 2] << 16) | (buf[at + 3] << 24)) >>> 0;
}
/** Type of the first chunk. */
export function sctpFirstChunkType(buf: Uint8Array, off: number): number {
  return buf[off + SCTP_HEADER_LEN + CH_TYPE];
}
/** Flags of the first chunk. */
export function sctpFirstChunkFlags(buf: Uint8Array, off: number): number {
  return buf[off + SCTP_HEADER_LEN + CH_FLAGS];
}

export function sctpSetSrcPort(buf: Uint8Array, off: number, port: number): void {
  write16(buf, off + SPORT, port);
}
export function sctpSetDstPort(buf: Uint8Array, off: number, port: number): void {
  write16(buf, off + DPORT, port);
}
export function sctpSetVtag(buf: Uint8Array, off: number, tag: number): void {
  buf[off + VTAG] = tag >>> 24;
  buf[off + VTAG + 1] = tag >>> 16;
  buf[off + VTAG + 2] = tag >>> 8;
  buf[off + VTAG + 3] = tag;
}
export function sctpSetCsum(buf: Uint8Array, off: number, crc: number): void {
  const at = off + CSUM;
  buf[at] = crc;
  buf[at + 1] = crc >>> 8;
  buf[at + 2] = crc >>> 16;
  buf[at + 3] = crc >>> 24;
}

// ---- CRC32c ------------------------------------------------------------------------------

/** CRC32c byte table (reflected 0x82F63B78), built once: 1 KiB. */
const CRC32C_TABLE = (() => {
  const t = new Int32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[n] = c;
  }
  return t;
})();

/** CRC32c of buf[from, to), continuing from `crc` (the running, not yet inverted value). */
function crc32cRun(buf: Uint8Array, from: number, to: number, crc: number): number {
  const t = CRC32C_TABLE;
  for (let i = from; i < to; i++) crc = t[(crc ^ buf[i]) & 0xff] ^ (crc >>> 8);
  return crc;
}

/** CRC32c of buf[off, off + len), unsigned (the standard check value of "123456789" is 0xe3069283). */
export function crc32c(buf: Uint8Array, off: number, len: number): number {
  return ~crc32cRun(buf, off, off + len, -1) >>> 0;
}

/** CRC32c of the SCTP packet [off, end) with its checksum field taken as zero; unsigned. */
export function sctpCrc(buf: Uint8Array, off: number, end: number): number {
  let c = crc32cRun(buf, off, off + CSUM, -1);
  const t = CRC32C_TABLE;
  for (let k = 0; k < 4; k++) c = t[c & 0xff] ^ (c >>> 8); // the four zero bytes
  return ~crc32cRun(buf, off + CSUM + 4, end, c) >>> 0;
}

/** Whether the stored checksum matches the packet [off, end). */
export function sctpCrcValid(buf: Uint8Array, off: number, end: number): boolean {
  return sctpCrc(buf, off, end) === sctpCsum(buf, off);
}

/** Recompute the checksum of the packet [off, end) and store it (after a port rewrite). */
export function sctpFillCsum(buf: Uint8Array, off: number, end: number): void {
  sctpSetCsum(buf, off, sctpCrc(buf, off, end));
}

// ---- slow world --------------------------------------------------------------------------

/** One chunk: type, flags and the value bytes (without the 4-byte chunk header or padding). */
export interface SctpChunkRepr {
  type: number;
  flags: number;
  value: Uint8Array;
}

export interface SctpRepr {
  srcPort: number;
  dstPort: number;
  vtag: number;
  chunks: SctpChunkRepr[];
}

/** Decode the packet [off, end); throws Error naming the check failure. Slow world only. */
export function sctpParse(buf: Uint8Array, off: number, end: number): SctpRepr {
  const rc = sctpCheck(buf, off, end);
  if (rc !== SCTP_OK) throw new Error(`sctp: ${SCTP_ERR_NAMES[rc]}`);
  const chunks: SctpChunkRepr[] = [];
  let at = off + SCTP_HEADER_LEN;
  while (at < end) {
    const len = read16(buf, at + CH_LEN);
    chunks.push({ type: buf[at], flags: buf[at + CH_FLAGS], value: buf.slice(at + 4, at + len) });
    at += (len + 3) & ~3;
  }
  return {
    srcPort: sctpSrcPort(buf, off),
    dstPort: sctpDstPort(buf, off),
    vtag: sctpVtag(buf, off),
    chunks,
  };
}

/** Bytes sctpEmit writes for `repr` (each chunk padded to 4). */
export function sctpEmitLen(repr: SctpRepr): number {
  let n = SCTP_HEADER_LEN;
  for (const c of repr.chunks) n += (SCTP_CHUNK_HEADER_LEN + c.value.length + 3) & ~3;
  return n;
}

/** Write the packet at `off` with zero padding and a correct CRC32c; returns its length. */
export function sctpEmit(repr: SctpRepr, buf: Uint8Array, off: number): number {
  sctpSetSrcPort(buf, off, repr.srcPort);
  sctpSetDstPort(buf, off, repr.dstPort);
  sctpSetVtag(buf, off, repr.vtag);
  let at = off + SCTP_HEADER_LEN;
  for (const c of repr.chunks) {
    const len = SCTP_CHUNK_HEADER_LEN + c.value.length;
    buf[at] = c.type;
    buf[at + CH_FLAGS] = c.flags;
    write16(buf, at + CH_LEN, len);
    buf.set(c.value, at + 4);
    const padded = (len + 3) & ~3;
    buf.fill(0, at + len, at + padded);
    at += padded;
  }
  sctpFillCsum(buf, off, at);
  return at - off;
}

import { describe, expect, it } from 'vitest';
import {
  crc32c,
  SCTP_COOKIE_ACK,
  SCTP_COOKIE_ECHO,
  SCTP_DATA,
  SCTP_ERR_CHUNK_LEN,
  SCTP_ERR_NO_CHUNKS,
  SCTP_ERR_TRUNCATED,
  SCTP_INIT,
  SCTP_OK,
  SCTP_SACK,
  sctpCheck,
  sctpChunkBit,
  sctpChunks,
  sctpCrc,
  sctpCrcValid,
  sctpCsum,
  sctpDstPort,
  sctpEmit,
  sctpEmitLen,
  sctpFillCsum,
  sctpFirstChunkType,
  sctpParse,
  type SctpRepr,
  sctpSetDstPort,
  sctpSrcPort,
  sctpVtag,
} from '../../src/wire/sctp.ts';
import { SCTP_INIT_FROM_LINUX, SCTP_INIT_FROM_LINUX_L4, SCTP_INIT_TO_VIP } from './golden.ts';
import { refCrc32c } from '../datapath/harness.ts';
import { guardsIntact, mulberry32, oddView } from './helpers.ts';

/** Bit at a time, straight from the definition: the slow reference beside the table. */
const crc32cBitwise = (b: Uint8Array) => refCrc32c(b, 0, b.length);

const bytes = (...a: number[]) => Uint8Array.from(a);

describe('crc32c', () => {
  // RFC 3720 appendix B.4 (iSCSI, the same CRC32c): bytes as transmitted, least significant first.
  const le = (c: number) => [c & 0xff, (c >>> 8) & 0xff, (c >>> 16) & 0xff, c >>> 24];
  it('matches the RFC 3720 B.4 test vectors and the "123456789" check value', () => {
    const inc = Uint8Array.from({ length: 32 }, (_, i) => i);
    const dec = Uint8Array.from({ length: 32 }, (_, i) => 31 - i);
    expect(le(crc32c(new Uint8Array(32), 0, 32))).toEqual([0xaa, 0x36, 0x91, 0x8a]);
    expect(le(crc32c(new Uint8Array(32).fill(0xff), 0, 32))).toEqual([0x43, 0xab, 0xa8, 0x62]);
    expect(le(crc32c(inc, 0, 32))).toEqual([0x4e, 0x79, 0xdd, 0x46]);
    expect(le(crc32c(dec, 0, 32))).toEqual([0x5c, 0xdb, 0x3f, 0x11]);
    expect(crc32c(new TextEncoder().encode('123456789'), 0, 9)).toBe(0xe3069283);
  });

  it('equals the bitwise reference on random data at odd offsets (seeded)', () => {
    const rnd = mulberry32(19);
    for (let n = 0; n < 300; n++) {
      const len = Math.floor(rnd() * 200);
      const b = Uint8Array.from({ length: len }, () => Math.floor(rnd() * 256));
      const v = oddView(b);
      expect(crc32c(v, 0, len)).toBe(crc32cBitwise(b));
    }
  });
});

describe('sctp deconstruct (a Linux INIT)', () => {
  const L4 = SCTP_INIT_FROM_LINUX_L4;
  const END = SCTP_INIT_FROM_LINUX.length;
  it('reads the header and verifies the kernel-computed CRC at an odd offset', () => {
    const v = oddView(SCTP_INIT_FROM_LINUX);
    expect(sctpCheck(v, L4, END)).toBe(SCTP_OK);
    expect(sctpSrcPort(v, L4)).toBe(40000);
    expect(sctpDstPort(v, L4)).toBe(9900);
    expect(sctpVtag(v, L4)).toBe(0);
    expect(sctpFirstChunkType(v, L4)).toBe(SCTP_INIT);
    expect(sctpCrcValid(v, L4, END)).toBe(true);
    expect(sctpCrc(v, L4, END)).toBe(sctpCsum(v, L4));
    expect(sctpChunks(v, L4, END)).toBe(sctpChunkBit(SCTP_INIT));
    expect(guardsIntact(v)).toBe(true);
  });

  it('computes the CRC the kernel accepted on the packet it was sent as', () => {
    expect(sctpCrcValid(SCTP_INIT_TO_VIP, 20, SCTP_INIT_TO_VIP.length)).toBe(true);
    const bad = SCTP_INIT_TO_VIP.slice();
    bad[bad.length - 1] ^= 1; // even a padding byte is covered
    expect(sctpCrcValid(bad, 20, bad.length)).toBe(false);
  });

  it('a port change invalidates the CRC; sctpFillCsum restores it to what a full compute gives', () => {
    const v = oddView(SCTP_INIT_FROM_LINUX);
    sctpSetDstPort(v, L4, 9000);
    expect(sctpCrcValid(v, L4, END)).toBe(false);
    sctpFillCsum(v, L4, END);
    const seg = v.slice(L4, END);
    seg.fill(0, 8, 12);
    const c = crc32cBitwise(seg);
    expect(sctpCsum(v, L4)).toBe(c);
    expect(guardsIntact(v)).toBe(true);
  });
});

describe('sctp check', () => {
  const hdr = [0x9c, 0x40, 0x26, 0xac, 0, 0, 0, 1, 0, 0, 0, 0];
  it('wants 12 header bytes and at least one chunk', () => {
    expect(sctpCheck(bytes(...hdr.slice(0, 11)), 0, 11)).toBe(SCTP_ERR_TRUNCATED);
    expect(sctpCheck(bytes(...hdr), 0, 12)).toBe(SCTP_ERR_NO_CHUNKS);
    expect(sctpCheck(bytes(...hdr, 11, 0, 0, 4), 0, 16)).toBe(SCTP_OK); // COOKIE ACK
  });

  it('rejects a chunk shorter than its header, cut short, or beyond the packet end', () => {
    expect(sctpCheck(bytes(...hdr, 11, 0, 0, 0), 0, 16)).toBe(SCTP_ERR_CHUNK_LEN); // length 0
    expect(sctpCheck(bytes(...hdr, 11, 0, 0, 3), 0, 16)).toBe(SCTP_ERR_CHUNK_LEN);
    expect(sctpCheck(bytes(...hdr, 11, 0, 0, 8, 0, 0), 0, 18)).toBe(SCTP_ERR_CHUNK_LEN);
    expect(sctpCheck(bytes(...hdr, 11, 0, 0, 4, 0, 0), 0, 18)).toBe(SCTP_ERR_CHUNK_LEN); // 2 stray
    // the end passed in bounds the walk, not the buffer: bytes after it are not looked at
    expect(sctpCheck(bytes(...hdr, 11, 0, 0, 4, 0xff), 0, 16)).toBe(SCTP_OK);
  });

  it('accepts an unpadded last chunk (padding is not counted in Chunk Length)', () => {
    expect(sctpCheck(bytes(...hdr, 0, 3, 0, 17, ...new Array(13).fill(0)), 0, 29)).toBe(SCTP_OK);
  });
});

describe('sctp chunk summary', () => {
  it('names every type, and which came after the first', () => {
    const r: SctpRepr = {
      srcPort: 1,
      dstPort: 2,
      vtag: 7,
      chunks: [
        { type: SCTP_COOKIE_ECHO, flags: 0, value: bytes(1, 2, 3) },
        { type: SCTP_DATA, flags: 3, value: new Uint8Array(13) },
        { type: 0xc0, flags: 0, value: new Uint8Array(0) }, // FORWARD TSN: "other"
      ],
    };
    const b = new Uint8Array(sctpEmitLen(r));
    sctpEmit(r, b, 0);
    const s = sctpChunks(b, 0, b.length);
    const later = sctpChunkBit(SCTP_DATA) | sctpChunkBit(0xc0);
    expect(s).toBe(sctpChunkBit(SCTP_COOKIE_ECHO) | (later << 16));
    expect(s & (sctpChunkBit(SCTP_SACK) | sctpChunkBit(SCTP_COOKIE_ACK))).toBe(0);
  });
});

describe('sctp parse / emit', () => {
  it('emits what it parses, byte for byte, for the Linux INIT', () => {
    const L4 = SCTP_INIT_FROM_LINUX_L4;
    const r = sctpParse(SCTP_INIT_FROM_LINUX, L4, SCTP_INIT_FROM_LINUX.length);
    expect(r.chunks.map((c) => c.type)).toEqual([SCTP_INIT]);
    const out = oddView(new Uint8Array(sctpEmitLen(r)));
    expect(sctpEmit(r, out, 0)).toBe(SCTP_INIT_FROM_LINUX.length - L4);
    expect([...out]).toEqual([...SCTP_INIT_FROM_LINUX.subarray(L4)]);
    expect(guardsIntact(out)).toBe(true);
  });

  it('pads chunks with zeros and throws on a malformed packet', () => {
    const r: SctpRepr = {
      srcPort: 5,
      dstPort: 6,
      vtag: 0xdeadbeef,
      chunks: [{ type: SCTP_DATA, flags: 3, value: bytes(9, 9, 9, 9, 9) }],
    };
    const b = new Uint8Array(sctpEmitLen(r)).fill(0xee);
    expect(sctpEmit(r, b, 0)).toBe(24);
    expect([...b.subarray(12)]).toEqual([0, 3, 0, 9, 9, 9, 9, 9, 9, 0, 0, 0]);
    expect(sctpVtag(b, 0)).toBe(0xdeadbeef);
    expect(sctpCrcValid(b, 0, 24)).toBe(true);
    expect(() => sctpParse(b, 0, 12)).toThrow(/no-chunks/);
  });
});

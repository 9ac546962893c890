// IPv6 header (RFC 8200, section 3):
//
//     0                   1                   2                   3
//     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |Version| Traffic Class |           Flow Label                  |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |         Payload Length        |  Next Header  |   Hop Limit   |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                 Source Address (128 bits)                     |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |              Destination Address (128 bits)                   |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Extension headers (RFC 8200, section 4) sit between the fixed header and the upper layer,
// each naming the next in its first byte. Hop-by-Hop Options, Routing and Destination Options
// are (Hdr Ext Len + 1) * 8 bytes long; the Fragment header is always 8:
//
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |  Next Header  |   Reserved    |      Fragment Offset    |Res|M|
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                         Identification                        |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// RFC 8200 4.3: "The Hop-by-Hop Options header ... when present, MUST immediately follow the
// IPv6 header"; anywhere else it is IPV6_ERR_EXT (the kernel answers with a Parameter Problem).
// A chain of more than 8 extension headers is IPV6_ERR_EXT_CHAIN (no real packet carries one;
// the bound keeps the walk's cost fixed). After a Fragment header with a non-zero offset the
// walk stops: what follows is fragment data, not a header (its Next Header names the first
// header of the fragmentable part, which only the first fragment carries), so ipv6L4Off of a
// later fragment is where its data starts and ipv6L4Proto that Next Header.
// Payload Length 0 announces a jumbogram (RFC 2675), which no TUN here carries: IPV6_ERR_PAYLEN.
//
// Validation contract: ipv6Check(buf, off, end) returns IPV6_OK or one specific error. After
// IPV6_OK the fixed header and every extension header lie within [off, off + 40 + Payload
// Length) ⊆ [off, end), the walk ended at an upper-layer protocol (or No Next Header, 59) and
// ipv6L4Off / ipv6L4Proto / ipv6FragHdrOff answer without bounds checks: the L4 header starts at
// ipv6L4Off; check it against ipv6End. There is no header checksum in IPv6: the upper layers'
// pseudo-header (checksum.ts ipv6PseudoHeaderSum) covers the addresses.
//
// Accessors take (buf, off) and never allocate; addresses are four int32 words (`| 0`, as the
// IPv4 side keeps them), word 0 the most significant. The Repr at the bottom is the slow world.

import { read16, read32s, write16, write32 } from './bytes.ts';

export const IPV6_OK = 0;
/** fewer than 40 bytes */
export const IPV6_ERR_TRUNCATED = 1;
/** version field is not 6 */
export const IPV6_ERR_VERSION = 2;
/** payload length 0 (jumbogram) or beyond end */
export const IPV6_ERR_PAYLEN = 3;
/** an extension header beyond the payload, or Hop-by-Hop not first */
export const IPV6_ERR_EXT = 4;
/** more than 8 extension headers */
export const IPV6_ERR_EXT_CHAIN = 5;

export const IPV6_ERR_NAMES: readonly string[] = [
  'ok',
  'truncated',
  'version',
  'paylen',
  'ext',
  'ext-chain',
];

export const IPV6_HEADER_LEN = 40;

// Next Header values of the extension headers walked here (IANA), and No Next Header.
export const IPV6_EXT_HOPOPTS = 0;
export const IPV6_EXT_ROUTING = 43;
export const IPV6_EXT_FRAGMENT = 44;
export const IPV6_EXT_DSTOPTS = 60;
export const IPV6_NO_NEXT_HEADER = 59;
/** a walk longer than this is refused: a bounded loop, and more than any real packet carries */
const MAX_EXT_HEADERS = 8;

const VTF = 0;
const PAYLEN = 4;
const NEXT = 6;
const HLIM = 7;
const SADDR = 8;
const DADDR = 24;
const FRAG_HDR_LEN = 8;

/**
 * Walk the extension headers: (L4 offset - off) * 256 + L4 protocol, -2 when malformed, -3
 * when the chain is too long; with `want` an extension type, the offset of that header (or a
 * negative number). `end` is the packet end. Never throws, never allocates.
 */
function walk(buf: Uint8Array, off: number, end: number, want: number): number {
  let nh = buf[off + NEXT];
  let at = off + IPV6_HEADER_LEN;
  for (let n = 0; n <= MAX_EXT_HEADERS; n++) {
    if (
      nh !== IPV6_EXT_HOPOPTS &&
      nh !== IPV6_EXT_ROUTING &&
      nh !== IPV6_EXT_FRAGMENT &&
      nh !== IPV6_EXT_DSTOPTS
    ) {
      return want < 0 ? (at - off) * 256 + nh : -1;
    }
    if (nh === IPV6_EXT_HOPOPTS && n !== 0) return -2;
    if (end - at < 8) return -2;
    if (nh === want) return at - off;
    if (nh === IPV6_EXT_FRAGMENT && ((buf[at + 2] << 5) | (buf[at + 3] >>> 3)) !== 0) {
      return want < 0 ? (at + FRAG_HDR_LEN - off) * 256 + buf[at] : -1; // a later fragment
    }
    const len = nh === IPV6_EXT_FRAGMENT ? FRAG_HDR_LEN : (buf[at + 1] + 1) << 3;
    if (at + len > end) return -2;
    nh = buf[at];
    at += len;
  }
  return -3;
}

function walkError(r: number): number {
  return r >= 0 ? IPV6_OK : r === -3 ? IPV6_ERR_EXT_CHAIN : IPV6_ERR_EXT;
}

/** Validate the header and the extension-header chain at `off`; see the contract. */
export function ipv6Check(buf: Uint8Array, off: number, end: number): number {
  if (end > buf.length) end = buf.length;
  if (off < 0 || end - off < IPV6_HEADER_LEN) return IPV6_ERR_TRUNCATED;
  if (buf[off + VTF] >>> 4 !== 6) return IPV6_ERR_VERSION;
  const pl = read16(buf, off + PAYLEN);
  if (pl === 0 || off + IPV6_HEADER_LEN + pl > end) return IPV6_ERR_PAYLEN;
  return walkError(walk(buf, off, off + IPV6_HEADER_LEN + pl, -1));
}

/**
 * Validate a header quoted inside an ICMPv6 error: the invoking packet may be cut short (RFC
 * 4443 quotes as much as fits in 1280 bytes), so Payload Length only bounds the walk, which must
 * reach the upper layer within [off, end). After IPV6_OK ipv6QuotedL4Off / ipv6QuotedL4Proto
 * name it; the L4 bytes present are [ipv6QuotedL4Off, min(end, ipv6End)).
 */
export function ipv6CheckQuoted(buf: Uint8Array, off: number, end: number): number {
  if (end > buf.length) end = buf.length;
  if (off < 0 || end - off < IPV6_HEADER_LEN) return IPV6_ERR_TRUNCATED;
  if (buf[off + VTF] >>> 4 !== 6) return IPV6_ERR_VERSION;
  const stop = Math.min(end, ipv6End(buf, off));
  return walkError(walk(buf, off, stop, -1));
}
/** Upper-layer offset of a quoted header that passed ipv6CheckQuoted against `end`. */
export function ipv6QuotedL4Off(buf: Uint8Array, off: number, end: number): number {
  return off + Math.floor(walk(buf, off, Math.min(end, ipv6End(buf, off)), -1) / 256);
}
/** Offset of a quoted header's Fragment header (ipv6CheckQuoted passed), or -1 if none. */
export function ipv6QuotedFragHdrOff(buf: Uint8Array, off: number, end: number): number {
  const r = walk(buf, off, Math.min(end, ipv6End(buf, off)), IPV6_EXT_FRAGMENT);
  return r < 0 ? -1 : off + r;
}
/** Upper-layer protocol of a quoted header that passed ipv6CheckQuoted against `end`. */
export function ipv6QuotedL4Proto(buf: Uint8Array, off: number, end: number): number {
  return walk(buf, off, Math.min(end, ipv6End(buf, off)), -1) & 0xff;
}

export function ipv6Version(buf: Uint8Array, off: number): number {
  return buf[off + VTF] >>> 4;
}
export function ipv6TrafficClass(buf: Uint8Array, off: number): number {
  return ((buf[off] & 0x0f) << 4) | (buf[off + 1] >>> 4);
}
export function ipv6FlowLabel(buf: Uint8Array, off: number): number {
  return ((buf[off + 1] & 0x0f) << 16) | (buf[off + 2] << 8) | buf[off + 3];
}
export function ipv6PayloadLen(buf: Uint8Array, off: number): number {
  return read16(buf, off + PAYLEN);
}
/** End of the packet: off + 40 + Payload Length. */
export function ipv6End(buf: Uint8Array, off: number): number {
  return off + IPV6_HEADER_LEN + read16(buf, off + PAYLEN);
}
/** The fixed header's Next Header (the first extension header, or the upper layer). */
export function ipv6NextHeader(buf: Uint8Array, off: number): number {
  return buf[off + NEXT];
}
export function ipv6HopLimit(buf: Uint8Array, off: number): number {
  return buf[off + HLIM];
}
/** Word k (0..3, most significant first) of the source address, as int32. */
export function ipv6SrcWord(buf: Uint8Array, off: number, k: number): number {
  return read32s(buf, off + SADDR + 4 * k);
}
/** Word k (0..3) of the destination address, as int32. */
export function ipv6DstWord(buf: Uint8Array, off: number, k: number): number {
  return read32s(buf, off + DADDR + 4 * k);
}
/** Offset of the source address (16 bytes), for copies and pseudo-header sums. */
export function ipv6SrcOff(off: number): number {
  return off + SADDR;
}
/** Offset of the destination address (16 bytes). */
export function ipv6DstOff(off: number): number {
  return off + DADDR;
}

/** Where the upper-layer header starts. Precondition: ipv6Check returned IPV6_OK. */
export function ipv6L4Off(buf: Uint8Array, off: number): number {
  return off + Math.floor(walk(buf, off, ipv6End(buf, off), -1) / 256);
}
/** The upper-layer protocol after the extension headers (59: none). Precondition: IPV6_OK. */
export function ipv6L4Proto(buf: Uint8Array, off: number): number {
  return walk(buf, off, ipv6End(buf, off), -1) & 0xff;
}
/** Offset of the Fragment header, or -1 if the packet has none. Precondition: IPV6_OK. */
export function ipv6FragHdrOff(buf: Uint8Array, off: number): number {
  const r = walk(buf, off, ipv6End(buf, off), IPV6_EXT_FRAGMENT);
  return r < 0 ? -1 : off + r;
}
/** Whether the packet carries any extension header (its Next Header is not the L4 one). */
export function ipv6HasExt(buf: Uint8Array, off: number): boolean {
  const nh = buf[off + NEXT];
  return (
    nh === IPV6_EXT_HOPOPTS ||
    nh === IPV6_EXT_ROUTING ||
    nh === IPV6_EXT_FRAGMENT ||
    nh === IPV6_EXT_DSTOPTS
  );
}
/** Fragment Offset in 8-byte units, of the Fragment header at `fh`. */
export function ipv6FragOffset(buf: Uint8Array, fh: number): number {
  return read16(buf, fh + 2) >>> 3;
}
/** M flag (more fragments) of the Fragment header at `fh`. */
export function ipv6FragMore(buf: Uint8Array, fh: number): boolean {
  return (buf[fh + 3] & 1) !== 0;
}
/** Identification of the Fragment header at `fh`, unsigned. */
export function ipv6FragId(buf: Uint8Array, fh: number): number {
  return read32s(buf, fh + 4) >>> 0;
}

export function ipv6SetPayloadLen(buf: Uint8Array, off: number, len: number): void {
  write16(buf, off + PAYLEN, len);
}
export function ipv6SetHopLimit(buf: Uint8Array, off: number, h: number): void {
  buf[off + HLIM] = h;
}
export function ipv6SetSrcWord(buf: Uint8Array, off: number, k: number, w: number): void {
  write32(buf, off + SADDR + 4 * k, w);
}
export function ipv6SetDstWord(buf: Uint8Array, off: number, k: number, w: number): void {
  write32(buf, off + DADDR + 4 * k, w);
}

// ---- slow world ----------------------------------------------------------------------------

/** One extension header as carried: its type and its bytes after the Next Header byte. */
export interface Ipv6ExtRepr {
  type: number;
  /** for HBH/Routing/DstOpts: bytes 1.. of the header (Hdr Ext Len first), (n*8 - 1) long */
  body: Uint8Array;
}

export interface Ipv6Repr {
  trafficClass: number;
  flowLabel: number;
  hopLimit: number;
  /** 16 bytes each */
  src: Uint8Array;
  dst: Uint8Array;
  ext: Ipv6ExtRepr[];
  /** the upper-layer protocol after the extension headers */
  proto: number;
  /** bytes after the extension headers */
  payloadLen: number;
}

/** Decode the header and extension headers at `off`; throws naming the failure. */
export function ipv6Parse(buf: Uint8Array, off: number, end: number): Ipv6Repr {
  const rc = ipv6Check(buf, off, end);
  if (rc !== IPV6_OK) throw new Error(`ipv6: ${IPV6_ERR_NAMES[rc]}`);
  const ext: Ipv6ExtRepr[] = [];
  const l4 = ipv6L4Off(buf, off);
  let nh = buf[off + NEXT];
  for (let at = off + IPV6_HEADER_LEN; at < l4; ) {
    const len = nh === IPV6_EXT_FRAGMENT ? FRAG_HDR_LEN : (buf[at + 1] + 1) << 3;
    ext.push({ type: nh, body: buf.slice(at + 1, at + len) });
    nh = buf[at];
    at += len;
  }
  return {
    trafficClass: ipv6TrafficClass(buf, off),
    flowLabel: ipv6FlowLabel(buf, off),
    hopLimit: ipv6HopLimit(buf, off),
    src: buf.slice(off + SADDR, off + SADDR + 16),
    dst: buf.slice(off + DADDR, off + DADDR + 16),
    ext,
    proto: nh,
    payloadLen: ipv6End(buf, off) - l4,
  };
}

/** Write header and extension headers at `off`; returns their length. The payload is the caller's. */
export function ipv6Emit(repr: Ipv6Repr, buf: Uint8Array, off: number): number {
  const tc = repr.trafficClass & 0xff;
  const fl = repr.flowLabel & 0xfffff;
  write32(buf, off, (6 << 28) | (tc << 20) | fl);
  buf[off + HLIM] = repr.hopLimit;
  buf.set(repr.src, off + SADDR);
  buf.set(repr.dst, off + DADDR);
  let at = off + IPV6_HEADER_LEN;
  let prev = off + NEXT;
  for (const e of repr.ext) {
    if ((e.body.length + 1) % 8 !== 0) throw new Error('ipv6: extension header not 8n bytes');
    buf[prev] = e.type;
    prev = at;
    buf.set(e.body, at + 1);
    at += e.body.length + 1;
  }
  buf[prev] = repr.proto;
  write16(buf, off + PAYLEN, at - off - IPV6_HEADER_LEN + repr.payloadLen);
  return at - off;
}

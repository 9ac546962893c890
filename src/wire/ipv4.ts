// IPv4 header (RFC 791, section 3.1):
//
//     0                   1                   2                   3
//     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |Version|  IHL  |Type of Service|          Total Length         |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |         Identification        |Flags|      Fragment Offset    |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |  Time to Live |    Protocol   |         Header Checksum       |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                       Source Address                          |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                    Destination Address                        |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                    Options                    |    Padding    |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
//    Flags: bit 0 reserved (must be zero), bit 1 DF (don't fragment), bit 2 MF (more fragments).
//
// Validation contract: ipv4Check(buf, off, end) returns IPV4_OK or one specific error. After
// IPV4_OK, the header (IHL*4 bytes, options included) and the whole packet (Total Length bytes)
// lie within [off, end), and no accessor here reads outside the header. `end` may lie beyond
// off + Total Length (Ethernet padding, a larger receive buffer); the packet ends at
// off + ipv4TotalLen. The L4 header starts at off + ipv4HeaderLen; check it against that end.
//
// RFC 791 on IHL: "Internet Header Length is the length of the internet header in 32 bit words,
// and thus points to the beginning of the data. Note that the minimum value for a correct
// header is 5." A smaller IHL would make the fixed fields overlap the payload: IPV4_ERR_IHL.
//
// RFC 791 on Total Length: "Total Length is the length of the datagram, measured in octets,
// including internet header and data." Less than the header length, or more than the buffer
// holds, is IPV4_ERR_TOTLEN.
//
// Accessors take (buf, off) and never allocate; setters are raw (no checksum patch) unless
// their name says WithCsum. The Repr at the bottom is for the slow world (tests, lab, control).

import { read16, read32s, write16, write32 } from './bytes.ts';
import { csumAdd, csumFold, csumReplace16, ipv4HeaderChecksum } from './checksum.ts';
import {
  IPV4_CSUM as CSUM,
  IPV4_DADDR as DADDR,
  IPV4_FLAGS_FRAG as FLAGS_FRAG,
  IPV4_ID as ID,
  IPV4_PROTO as PROTO,
  IPV4_SADDR as SADDR,
  IPV4_TOS as TOS,
  IPV4_TOTLEN as TOTLEN,
  IPV4_TTL as TTL,
  IPV4_VER_IHL as VER_IHL,
} from './layout.ts';

export const IPV4_OK = 0;
/** fewer than 20 bytes, or IHL*4 beyond end */
export const IPV4_ERR_TRUNCATED = 1;
/** version field is not 4 */
export const IPV4_ERR_VERSION = 2;
/** IHL < 5 */
export const IPV4_ERR_IHL = 3;
/** total length < IHL*4, or off + total length beyond end */
export const IPV4_ERR_TOTLEN = 4;
/** header checksum does not verify */
export const IPV4_ERR_CSUM = 5;

export const IPV4_ERR_NAMES: readonly string[] = ['ok', 'truncated', 'version', 'ihl', 'totlen', 'csum'];

/** Fixed header length in bytes (IHL 5). */
export const IPV4_MIN_HEADER_LEN = 20;

const FLAG_DF = 0x40;
const FLAG_MF = 0x20;
const FRAG_MASK = 0x1fff;

/** Validate the header at `off`; see the contract above. Never throws. */
export function ipv4Check(buf: Uint8Array, off: number, end: number): number {
  if (end > buf.length) end = buf.length;
  if (off < 0 || end - off < IPV4_MIN_HEADER_LEN) return IPV4_ERR_TRUNCATED;
  const vi = buf[off + VER_IHL];
  if (vi >>> 4 !== 4) return IPV4_ERR_VERSION;
  const hlen = (vi & 0x0f) << 2;
  if (hlen < IPV4_MIN_HEADER_LEN) return IPV4_ERR_IHL;
  if (off + hlen > end) return IPV4_ERR_TRUNCATED;
  const tot = ipv4TotalLen(buf, off);
  if (tot < hlen || off + tot > end) return IPV4_ERR_TOTLEN;
  // A correct header sums, checksum included, to 0xffff (one's complement negative zero).
  if (csumFold(csumAdd(buf, off, hlen)) !== 0xffff) return IPV4_ERR_CSUM;
  return IPV4_OK;
}

/**
 * Validate a header quoted inside an ICMP error: like ipv4Check, but the datagram may be cut
 * short (RFC 792 quotes "the internet header + 64 bits of data"), so Total Length only has to
 * cover the header. After IPV4_OK the header lies within [off, end); the quoted L4 bytes are
 * [off + IHL*4, min(end, off + total length)).
 */
export function ipv4CheckQuoted(buf: Uint8Array, off: number, end: number): number {
  if (end > buf.length) end = buf.length;
  if (off < 0 || end - off < IPV4_MIN_HEADER_LEN) return IPV4_ERR_TRUNCATED;
  const vi = buf[off + VER_IHL];
  if (vi >>> 4 !== 4) return IPV4_ERR_VERSION;
  const hlen = (vi & 0x0f) << 2;
  if (hlen < IPV4_MIN_HEADER_LEN) return IPV4_ERR_IHL;
  if (off + hlen > end) return IPV4_ERR_TRUNCATED;
  if (ipv4TotalLen(buf, off) < hlen) return IPV4_ERR_TOTLEN;
  if (csumFold(csumAdd(buf, off, hlen)) !== 0xffff) return IPV4_ERR_CSUM;
  return IPV4_OK;
}

export function ipv4Version(buf: Uint8Array, off: number): number {
  return buf[off + VER_IHL] >>> 4;
}
/** Header length in bytes (IHL * 4), options included. */
export function ipv4HeaderLen(buf: Uint8Array, off: number): number {
  return (buf[off + VER_IHL] & 0x0f) << 2;
}
export function ipv4Tos(buf: Uint8Array, off: number): number {
  return buf[off + TOS];
}
export function ipv4TotalLen(buf: Uint8Array, off: number): number {
  return read16(buf, off + TOTLEN);
}
export function ipv4Id(buf: Uint8Array, off: number): number {
  return read16(buf, off + ID);
}
export function ipv4Df(buf: Uint8Array, off: number): boolean {
  return (buf[off + FLAGS_FRAG] & FLAG_DF) !== 0;
}
export function ipv4Mf(buf: Uint8Array, off: number): boolean {
  return (buf[off + FLAGS_FRAG] & FLAG_MF) !== 0;
}
/** Fragment offset in 8-byte units. */
export function ipv4FragOffset(buf: Uint8Array, off: number): number {
  return ((buf[off + FLAGS_FRAG] << 8) | buf[off + FLAGS_FRAG + 1]) & FRAG_MASK;
}
/** Part of a fragmented datagram: MF set or a non-zero offset. */
export function ipv4IsFragment(buf: Uint8Array, off: number): boolean {
  return (((buf[off + FLAGS_FRAG] << 8) | buf[off + FLAGS_FRAG + 1]) & (FRAG_MASK | 0x2000)) !== 0;
}
/**
 * Fragment offset 0: the packet starts its datagram, so it carries the L4 header. True for
 * unfragmented packets too — use `ipv4IsFragment && ipv4IsFirstFragment` for "first of several".
 */
export function ipv4IsFirstFragment(buf: Uint8Array, off: number): boolean {
  return ipv4FragOffset(buf, off) === 0;
}
export function ipv4Ttl(buf: Uint8Array, off: number): number {
  return buf[off + TTL];
}
export function ipv4Proto(buf: Uint8Array, off: number): number {
  return buf[off + PROTO];
}
export function ipv4Csum(buf: Uint8Array, off: number): number {
  return read16(buf, off + CSUM);
}
/**
 * Source address as a signed 32-bit number (`| 0`, the fast path's form: never a heap number);
 * `>>> 0` gives the unsigned form ipv4ToU32 returns.
 */
export function ipv4Src(buf: Uint8Array, off: number): number {
  return read32s(buf, off + SADDR);
}
/** Destination address as a signed 32-bit number (see ipv4Src). */
export function ipv4Dst(buf: Uint8Array, off: number): number {
  return read32s(buf, off + DADDR);
}

export function ipv4SetTos(buf: Uint8Array, off: number, tos: number): void {
  buf[off + TOS] = tos;
}
export function ipv4SetTotalLen(buf: Uint8Array, off: number, len: number): void {
  write16(buf, off + TOTLEN, len);
}
export function ipv4SetId(buf: Uint8Array, off: number, id: number): void {
  write16(buf, off + ID, id);
}
/** Flags and fragment offset (8-byte units) together, as they share a 16-bit word. */
export function ipv4SetFlagsFrag(
  buf: Uint8Array,
  off: number,
  df: boolean,
  mf: boolean,
  fragOffset: number,
): void {
  write16(buf, off + FLAGS_FRAG, (df ? 0x4000 : 0) | (mf ? 0x2000 : 0) | (fragOffset & FRAG_MASK));
}
export function ipv4SetTtl(buf: Uint8Array, off: number, ttl: number): void {
  buf[off + TTL] = ttl;
}
export function ipv4SetProto(buf: Uint8Array, off: number, proto: number): void {
  buf[off + PROTO] = proto;
}
export function ipv4SetCsum(buf: Uint8Array, off: number, csum: number): void {
  write16(buf, off + CSUM, csum);
}
export function ipv4SetSrc(buf: Uint8Array, off: number, addr: number): void {
  write32(buf, off + SADDR, addr);
}
export function ipv4SetDst(buf: Uint8Array, off: number, addr: number): void {
  write32(buf, off + DADDR, addr);
}

/** Set TTL and patch the header checksum (TTL shares its 16-bit word with Protocol). */
export function ipv4SetTtlWithCsum(buf: Uint8Array, off: number, ttl: number): void {
  const proto = buf[off + PROTO];
  const old = (buf[off + TTL] << 8) | proto;
  buf[off + TTL] = ttl;
  ipv4SetCsum(buf, off, csumReplace16(ipv4Csum(buf, off), old, ((ttl & 0xff) << 8) | proto));
}

/** Recompute the header checksum from scratch and store it. */
export function ipv4FillCsum(buf: Uint8Array, off: number): void {
  ipv4SetCsum(buf, off, ipv4HeaderChecksum(buf, off));
}

// ---- slow world ----------------------------------------------------------------------------

/** A decoded IPv4 header. `payloadLen` is Total Length minus the header length. */
export interface Ipv4Repr {
  tos: number;
  id: number;
  df: boolean;
  mf: boolean;
  /** in 8-byte units */
  fragOffset: number;
  ttl: number;
  proto: number;
  src: number;
  dst: number;
  /** raw option bytes, padded: length a multiple of 4, at most 40 */
  options: Uint8Array;
  payloadLen: number;
}

/** Decode the header at `off`; throws Error naming the check failure. Slow world only. */
export function ipv4Parse(buf: Uint8Array, off: number, end: number): Ipv4Repr {
  const rc = ipv4Check(buf, off, end);
  if (rc !== IPV4_OK) throw new Error(`ipv4: ${IPV4_ERR_NAMES[rc]}`);
  const hlen = ipv4HeaderLen(buf, off);
  return {
    tos: ipv4Tos(buf, off),
    id: ipv4Id(buf, off),
    df: ipv4Df(buf, off),
    mf: ipv4Mf(buf, off),
    fragOffset: ipv4FragOffset(buf, off),
    ttl: ipv4Ttl(buf, off),
    proto: ipv4Proto(buf, off),
    src: ipv4Src(buf, off) >>> 0,
    dst: ipv4Dst(buf, off) >>> 0,
    options: buf.slice(off + IPV4_MIN_HEADER_LEN, off + hlen),
    payloadLen: ipv4TotalLen(buf, off) - hlen,
  };
}

/**
 * Write the header (options included) at `off` with Total Length = header + payloadLen and a
 * correct checksum; returns the header length. The payload is the caller's.
 */
export function ipv4Emit(repr: Ipv4Repr, buf: Uint8Array, off: number): number {
  const optLen = repr.options.length;
  if (optLen % 4 !== 0 || optLen > 40) throw new Error('ipv4: options length must be 4k <= 40');
  const hlen = IPV4_MIN_HEADER_LEN + optLen;
  buf[off + VER_IHL] = 0x40 | (hlen >>> 2);
  buf[off + TOS] = repr.tos;
  ipv4SetTotalLen(buf, off, hlen + repr.payloadLen);
  ipv4SetId(buf, off, repr.id);
  ipv4SetFlagsFrag(buf, off, repr.df, repr.mf, repr.fragOffset);
  buf[off + TTL] = repr.ttl;
  buf[off + PROTO] = repr.proto;
  ipv4SetSrc(buf, off, repr.src);
  ipv4SetDst(buf, off, repr.dst);
  buf.set(repr.options, off + IPV4_MIN_HEADER_LEN);
  ipv4FillCsum(buf, off);
  return hlen;
}

// ICMP (RFC 792). Every message starts with the same 4 bytes; the next 4 depend on the type:
//
//     0                   1                   2                   3
//     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |     Type      |     Code      |          Checksum             |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |           Identifier          |        Sequence Number        |  echo / echo reply
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                             unused                            |  dest unreach,
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  time exceeded
//    |           unused = 0          |         Next-Hop MTU          |  frag needed (RFC 1191)
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |      Internet Header + 64 bits of Original Data Datagram      |  errors: the quote,
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  at ICMP_EMBEDDED_OFF
//
// The checksum covers the whole ICMP message, no pseudo-header. RFC 1812 4.3.2.3 lets a router
// quote more than 64 bits: "the ICMP datagram SHOULD contain as much of the original datagram
// as possible without the length of the ICMP datagram exceeding 576 bytes" — Linux icmp_send
// does exactly that, and so does icmpBuildError below.
//
// Validation contract: icmpCheck(buf, off, end) — `off` the L4 offset, `end` the end of the IP
// packet — returns ICMP_OK when the 8-byte header lies within [off, end); no accessor here
// reads past it. For error types, validate the quoted header with
// ipv4CheckQuoted(buf, off + ICMP_EMBEDDED_OFF, end) before reading it; the quote may be cut
// short of its Total Length. The checksum is verified by l4ChecksumValid (checksum.ts).

import { read16, read32, read32s, write16, write32 } from './bytes.ts';
import { csumAdd, csumFinish, ipv4HeaderChecksum } from './checksum.ts';
import {
  ICMP_CODE as CODE,
  ICMP_CSUM as CSUM,
  ICMP_ECHO_ID as ECHO_ID,
  ICMP_ECHO_SEQ as ECHO_SEQ,
  ICMP_MTU as MTU,
  ICMP_REST as REST,
  ICMP_TYPE as TYPE,
  IPV4_CSUM,
  IPV4_DADDR,
  IPV4_FLAGS_FRAG,
  IPV4_ID,
  IPV4_PROTO,
  IPV4_SADDR,
  IPV4_TOS,
  IPV4_TOTLEN,
  IPV4_TTL,
} from './layout.ts';
import { IPPROTO_ICMP } from './proto.ts';
import { IPV4_MIN_HEADER_LEN as IP_HDR } from './ipv4.ts';

export const ICMP_ECHO_REPLY = 0;
export const ICMP_DEST_UNREACH = 3;
export const ICMP_SOURCE_QUENCH = 4;
export const ICMP_REDIRECT = 5;
export const ICMP_ECHO = 8;
export const ICMP_TIME_EXCEEDED = 11;
export const ICMP_PARAMETER_PROBLEM = 12;

// Destination-unreachable codes (RFC 792, RFC 1812 5.2.7.1)
export const ICMP_NET_UNREACH = 0;
export const ICMP_HOST_UNREACH = 1;
export const ICMP_PROT_UNREACH = 2;
export const ICMP_PORT_UNREACH = 3;
export const ICMP_FRAG_NEEDED = 4;
export const ICMP_PKT_FILTERED = 13;
// Time-exceeded codes
export const ICMP_EXC_TTL = 0;
export const ICMP_EXC_FRAGTIME = 1;

export const ICMP_OK = 0;
/** fewer than 8 bytes */
export const ICMP_ERR_TRUNCATED = 1;

export const ICMP_ERR_NAMES: readonly string[] = ['ok', 'truncated'];

export const ICMP_HEADER_LEN = 8;
/** Offset of the quoted IPv4 header from the start of an ICMP error message. */
export const ICMP_EMBEDDED_OFF = 8;
/** RFC 1812 4.3.2.3 / Linux icmp_send: an ICMP error datagram is at most 576 bytes. */
export const ICMP_ERROR_MAX_DATAGRAM = 576;

/** Validate the ICMP header at `off` against the packet end; see the contract above. */
export function icmpCheck(buf: Uint8Array, off: number, end: number): number {
  if (end > buf.length) end = buf.length;
  if (off < 0 || end - off < ICMP_HEADER_LEN) return ICMP_ERR_TRUNCATED;
  return ICMP_OK;
}

export function icmpType(buf: Uint8Array, off: number): number {
  return buf[off + TYPE];
}
export function icmpCode(buf: Uint8Array, off: number): number {
  return buf[off + CODE];
}
export function icmpCsum(buf: Uint8Array, off: number): number {
  return read16(buf, off + CSUM);
}
export function icmpEchoId(buf: Uint8Array, off: number): number {
  return read16(buf, off + ECHO_ID);
}
export function icmpEchoSeq(buf: Uint8Array, off: number): number {
  return read16(buf, off + ECHO_SEQ);
}
/** Next-hop MTU of a fragmentation-needed message (RFC 1191); 0 from old routers. */
export function icmpNextHopMtu(buf: Uint8Array, off: number): number {
  return read16(buf, off + MTU);
}
/** Bytes 4..8 as one unsigned number (whatever the type puts there). */
export function icmpRest(buf: Uint8Array, off: number): number {
  return read32(buf, off + REST);
}

/** Types that carry a quoted datagram (Linux icmp_is_err): never answered with an error. */
export function icmpIsError(type: number): boolean {
  return (
    type === ICMP_DEST_UNREACH ||
    type === ICMP_SOURCE_QUENCH ||
    type === ICMP_REDIRECT ||
    type === ICMP_TIME_EXCEEDED ||
    type === ICMP_PARAMETER_PROBLEM
  );
}

export function icmpSetType(buf: Uint8Array, off: number, type: number): void {
  buf[off + TYPE] = type;
}
export function icmpSetCode(buf: Uint8Array, off: number, code: number): void {
  buf[off + CODE] = code;
}
export function icmpSetCsum(buf: Uint8Array, off: number, csum: number): void {
  write16(buf, off + CSUM, csum);
}
export function icmpSetEchoId(buf: Uint8Array, off: number, id: number): void {
  write16(buf, off + ECHO_ID, id);
}
export function icmpSetEchoSeq(buf: Uint8Array, off: number, seq: number): void {
  write16(buf, off + ECHO_SEQ, seq);
}
export function icmpSetNextHopMtu(buf: Uint8Array, off: number, mtu: number): void {
  write16(buf, off + MTU - 2, 0);
  write16(buf, off + MTU, mtu);
}
export function icmpSetRest(buf: Uint8Array, off: number, rest: number): void {
  write32(buf, off + REST, rest);
}
/** Recompute the checksum over [off, end) and store it. */
export function icmpFillCsum(buf: Uint8Array, off: number, end: number): void {
  write16(buf, off + CSUM, 0);
  write16(buf, off + CSUM, csumFinish(csumAdd(buf, off, end - off)));
}

// ---- building errors (fast path: no allocation, no throw) ---------------------------------

const LINUX_TOS_MASK = 0x1e; // IPTOS_TOS_MASK
const IPTOS_PREC_INTERNETCONTROL = 0xc0;

/**
 * May an ICMP error be sent about this packet? RFC 1122 3.2.2: "An ICMP error message MUST NOT
 * be sent as the result of receiving: an ICMP error message, or a datagram destined to an IP
 * broadcast or IP multicast address, or ... a non-initial fragment, or a datagram whose source
 * address does not define a single host". Checked here: at least a 20-byte IHL>=5 header, fragment
 * offset 0, source not in 0/8 or 224/3 (multicast, class E, broadcast), destination not in 224/3,
 * and for ICMP a known non-error type (like Linux: an unknown type may be an error too).
 */
export function icmpErrorAllowed(orig: Uint8Array, origOff: number, origLen: number): boolean {
  if (origLen < IP_HDR || origOff < 0 || origOff + origLen > orig.length) return false;
  const ihl = (orig[origOff] & 0x0f) << 2;
  if (orig[origOff] >>> 4 !== 4 || ihl < IP_HDR || ihl > origLen) return false;
  if ((read16(orig, origOff + IPV4_FLAGS_FRAG) & 0x1fff) !== 0) return false;
  const src = orig[origOff + IPV4_SADDR];
  const dst = orig[origOff + IPV4_DADDR];
  if (src === 0 || src >= 224 || dst >= 224) return false;
  if (orig[origOff + IPV4_PROTO] === IPPROTO_ICMP) {
    if (origLen < ihl + 1) return false;
    const t = orig[origOff + ihl];
    if (t > 18 || icmpIsError(t)) return false;
  }
  return true;
}

/**
 * Write a complete IPv4 + ICMP error into `out` at `outOff` (at most `outCap` bytes) about the
 * packet `orig[origOff, origOff + origLen)`, the way Linux icmp_send builds it: IPv4 header with
 * TOS = (original TOS & 0x1e) | 0xc0, DF clear, id 0, the given TTL, source `srcAddr`,
 * destination the original source; ICMP `type`/`code`, bytes 4..8 = `rest` (0, or the next-hop
 * MTU for frag-needed), then the original datagram from its IP header, cut so the whole error
 * is at most 576 bytes (and fits `outCap`). All checksums filled. Returns bytes written, or 0
 * when icmpErrorAllowed says no or the room cannot hold the IP header + 8 bytes of the original.
 * `out` and `orig` must not overlap.
 */
export function icmpBuildError(
  out: Uint8Array,
  outOff: number,
  outCap: number,
  orig: Uint8Array,
  origOff: number,
  origLen: number,
  type: number,
  code: number,
  rest: number,
  srcAddr: number,
  ttl: number,
): number {
  if (outOff < 0 || !icmpErrorAllowed(orig, origOff, origLen)) return 0;
  const ihl = (orig[origOff] & 0x0f) << 2;
  const totLen = read16(orig, origOff + IPV4_TOTLEN);
  // Quote the datagram, not trailing bytes after it (Ethernet padding).
  let quote = totLen >= ihl && totLen < origLen ? totLen : origLen;
  if (quote > ICMP_ERROR_MAX_DATAGRAM - IP_HDR - ICMP_HEADER_LEN) {
    quote = ICMP_ERROR_MAX_DATAGRAM - IP_HDR - ICMP_HEADER_LEN;
  }
  const room = Math.min(outCap, out.length - outOff) - IP_HDR - ICMP_HEADER_LEN;
  if (room < quote) {
    if (room < ihl + 8) return 0;
    quote = room;
  }
  const total = IP_HDR + ICMP_HEADER_LEN + quote;
  const o = outOff;
  out[o] = 0x45;
  out[o + IPV4_TOS] = (orig[origOff + IPV4_TOS] & LINUX_TOS_MASK) | IPTOS_PREC_INTERNETCONTROL;
  write16(out, o + IPV4_TOTLEN, total);
  // id 0, flags 0 (DF clear: the kernel's ICMP socket uses PMTUDISC_DONT)
  write32(out, o + IPV4_ID, 0);
  out[o + IPV4_TTL] = ttl;
  out[o + IPV4_PROTO] = IPPROTO_ICMP;
  write32(out, o + IPV4_SADDR, srcAddr);
  write32(out, o + IPV4_DADDR, read32s(orig, origOff + IPV4_SADDR));
  write16(out, o + IPV4_CSUM, ipv4HeaderChecksum(out, o));
  const ic = o + IP_HDR;
  out[ic + TYPE] = type;
  out[ic + CODE] = code;
  write32(out, ic + REST, rest);
  // A byte loop, not set(subarray): subarray would allocate a view per packet.
  const q = ic + ICMP_HEADER_LEN;
  for (let i = 0; i < quote; i++) out[q + i] = orig[origOff + i];
  icmpFillCsum(out, ic, q + quote);
  return total;
}

/**
 * Write the IPv4 echo reply to the echo request at req[ipOff, end) (ICMP header at l4Off) into
 * `out` at `outOff`, as a host answers a ping to one of its own addresses: a fresh 20-byte IPv4
 * header (the request's TOS, id 0, DF clear, the given TTL; IP options are not echoed), source
 * the address that was pinged, destination the pinger; ICMP type 0 with the request's code,
 * identifier, sequence and data; both checksums filled. Returns the bytes written, or 0 when
 * `outCap` cannot hold it. `out` and `req` must not overlap.
 */
export function icmpBuildEchoReply(
  out: Uint8Array,
  outOff: number,
  outCap: number,
  req: Uint8Array,
  ipOff: number,
  l4Off: number,
  end: number,
  ttl: number,
): number {
  const icmpLen = end - l4Off;
  const total = IP_HDR + icmpLen;
  if (outOff < 0 || icmpLen < ICMP_HEADER_LEN || total > Math.min(outCap, out.length - outOff))
    return 0;
  const o = outOff;
  out[o] = 0x45;
  out[o + IPV4_TOS] = req[ipOff + IPV4_TOS];
  write16(out, o + IPV4_TOTLEN, total);
  write32(out, o + IPV4_ID, 0);
  out[o + IPV4_TTL] = ttl;
  out[o + IPV4_PROTO] = IPPROTO_ICMP;
  write32(out, o + IPV4_SADDR, read32s(req, ipOff + IPV4_DADDR));
  write32(out, o + IPV4_DADDR, read32s(req, ipOff + IPV4_SADDR));
  write16(out, o + IPV4_CSUM, ipv4HeaderChecksum(out, o));
  const ic = o + IP_HDR;
  // A byte loop, not set(subarray): subarray would allocate a view per packet.
  for (let i = 0; i < icmpLen; i++) out[ic + i] = req[l4Off + i];
  out[ic + TYPE] = ICMP_ECHO_REPLY;
  icmpFillCsum(out, ic, ic + icmpLen);
  return total;
}

/** Destination unreachable (type 3) with `code`; see icmpBuildError. */
export function icmpBuildDestUnreach(
  out: Uint8Array,
  outOff: number,
  outCap: number,
  orig: Uint8Array,
  origOff: number,
  origLen: number,
  code: number,
  srcAddr: number,
  ttl: number,
): number {
  const t = ICMP_DEST_UNREACH;
  return icmpBuildError(out, outOff, outCap, orig, origOff, origLen, t, code, 0, srcAddr, ttl);
}

/** Fragmentation needed and DF set (type 3 code 4) announcing `mtu` (RFC 1191). */
export function icmpBuildFragNeeded(
  out: Uint8Array,
  outOff: number,
  outCap: number,
  orig: Uint8Array,
  origOff: number,
  origLen: number,
  mtu: number,
  srcAddr: number,
  ttl: number,
): number {
  const t = ICMP_DEST_UNREACH;
  const c = ICMP_FRAG_NEEDED;
  return icmpBuildError(out, outOff, outCap, orig, origOff, origLen, t, c, mtu & 0xffff, srcAddr, ttl);
}

/** Time exceeded (type 11) with `code` (ICMP_EXC_TTL, ICMP_EXC_FRAGTIME). */
export function icmpBuildTimeExceeded(
  out: Uint8Array,
  outOff: number,
  outCap: number,
  orig: Uint8Array,
  origOff: number,
  origLen: number,
  code: number,
  srcAddr: number,
  ttl: number,
): number {
  const t = ICMP_TIME_EXCEEDED;
  return icmpBuildError(out, outOff, outCap, orig, origOff, origLen, t, code, 0, srcAddr, ttl);
}

// ---- slow world ----------------------------------------------------------------------------

export interface IcmpRepr {
  type: number;
  code: number;
  /** bytes 4..8 as one u32: (id << 16 | seq) for echo, the next-hop MTU for frag-needed, else 0 */
  rest: number;
  /** echo payload, or the quoted datagram of an error */
  data: Uint8Array;
}

/** Decode the message at `off` up to `end` (the IP packet end); throws on a check failure. */
export function icmpParse(buf: Uint8Array, off: number, end: number): IcmpRepr {
  const rc = icmpCheck(buf, off, end);
  if (rc !== ICMP_OK) throw new Error(`icmp: ${ICMP_ERR_NAMES[rc]}`);
  return {
    type: icmpType(buf, off),
    code: icmpCode(buf, off),
    rest: icmpRest(buf, off),
    data: buf.slice(off + ICMP_HEADER_LEN, end),
  };
}

/** Write the message at `off` with its checksum (ICMP needs no pseudo-header); returns length. */
export function icmpEmit(repr: IcmpRepr, buf: Uint8Array, off: number): number {
  buf[off + TYPE] = repr.type;
  buf[off + CODE] = repr.code;
  icmpSetRest(buf, off, repr.rest);
  buf.set(repr.data, off + ICMP_HEADER_LEN);
  const end = off + ICMP_HEADER_LEN + repr.data.length;
  icmpFillCsum(buf, off, end);
  return end - off;
}

// ICMPv6 (RFC 4443, section 2.1): type, code, checksum, then a type-dependent body.
//
//     0                   1                   2                   3
//     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |     Type      |     Code      |          Checksum             |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |  Identifier / MTU / Pointer / unused (4 bytes, by type)       |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |  echo data, or for an error "as much of invoking packet as    |
//    |  possible without the ICMPv6 packet exceeding the minimum      |
//    |  IPv6 MTU" (1280 bytes)                                        |
//
// RFC 4443 2.1: error messages have types 0..127 (the high bit clear), informational ones
// 128..255. The checksum covers the IPv6 pseudo-header (checksum6.ts), unlike ICMP over IPv4.
// Packet Too Big (type 2) carries the next-hop MTU — over IPv6 the only way a path MTU is ever
// learnt, as routers never fragment (RFC 8201).
//
// Validation contract: icmpv6Check(buf, off, end) — `off` the L4 offset, `end` the IPv6 packet
// end — returns ICMPV6_OK when the 8-byte header lies within [off, end) and, for an error, at
// least a fixed IPv6 header (40 bytes) of the invoking packet follows it. The checksum is
// verified separately (l4v6ChecksumValid); the quoted packet starts at icmpv6QuoteOff and may
// be cut short (check it with ipv6CheckQuoted).

import { read16, read32s, write16, write32 } from './bytes.ts';
import { l4v6FillCsum } from './checksum6.ts';
import {
  IPV6_HEADER_LEN,
  ipv6Check,
  ipv6End,
  ipv6FragHdrOff,
  ipv6FragOffset,
  ipv6L4Off,
  ipv6L4Proto,
  IPV6_OK,
} from './ipv6.ts';
import { IPPROTO_ICMPV6 } from './proto.ts';

export const ICMPV6_DEST_UNREACH = 1;
export const ICMPV6_PACKET_TOO_BIG = 2;
export const ICMPV6_TIME_EXCEEDED = 3;
export const ICMPV6_PARAM_PROBLEM = 4;
export const ICMPV6_ECHO_REQUEST = 128;
export const ICMPV6_ECHO_REPLY = 129;
/** Destination Unreachable code 4 */
export const ICMPV6_PORT_UNREACH = 4;
/** Time Exceeded code 0: hop limit exceeded in transit */
export const ICMPV6_EXC_HOPLIMIT = 0;
// Multicast Listener Discovery (RFC 2710, RFC 3810) and Neighbor Discovery (RFC 4861): link-local
// control traffic of the node itself, never a service's.
export const ICMPV6_MLD_QUERY = 130;
export const ICMPV6_MLD_REPORT = 131;
export const ICMPV6_MLD_DONE = 132;
export const ICMPV6_ROUTER_SOLICIT = 133;
export const ICMPV6_ROUTER_ADVERT = 134;
export const ICMPV6_NEIGHBOR_SOLICIT = 135;
export const ICMPV6_NEIGHBOR_ADVERT = 136;
export const ICMPV6_REDIRECT = 137;
export const ICMPV6_MLD2_REPORT = 143;
/** RFC 4443 2.4(c): an error carries as much of the invoking packet as fits in 1280 bytes */
export const ICMPV6_ERROR_MAX_PACKET = 1280;

export const ICMPV6_OK = 0;
/** fewer than 8 bytes */
export const ICMPV6_ERR_TRUNCATED = 1;
/** an error message quoting less than a fixed IPv6 header */
export const ICMPV6_ERR_QUOTE = 2;
export const ICMPV6_ERR_NAMES: readonly string[] = ['ok', 'truncated', 'quote'];

export const ICMPV6_HEADER_LEN = 8;

/** Validate the ICMPv6 header at `off`; see the contract. Never throws. */
export function icmpv6Check(buf: Uint8Array, off: number, end: number): number {
  if (end > buf.length) end = buf.length;
  if (off < 0 || end - off < ICMPV6_HEADER_LEN) return ICMPV6_ERR_TRUNCATED;
  if (icmpv6IsError(buf[off]) && end - off < ICMPV6_HEADER_LEN + IPV6_HEADER_LEN) {
    return ICMPV6_ERR_QUOTE;
  }
  return ICMPV6_OK;
}

/** Error messages are types 0..127 (RFC 4443 2.1). */
export function icmpv6IsError(type: number): boolean {
  return type < 128;
}
export function icmpv6Type(buf: Uint8Array, off: number): number {
  return buf[off];
}
export function icmpv6Code(buf: Uint8Array, off: number): number {
  return buf[off + 1];
}
export function icmpv6Csum(buf: Uint8Array, off: number): number {
  return read16(buf, off + 2);
}
/** Echo request / reply identifier. */
export function icmpv6EchoId(buf: Uint8Array, off: number): number {
  return read16(buf, off + 4);
}
export function icmpv6EchoSeq(buf: Uint8Array, off: number): number {
  return read16(buf, off + 6);
}
/** Packet Too Big: the MTU of the next-hop link, unsigned. */
export function icmpv6Mtu(buf: Uint8Array, off: number): number {
  return read32s(buf, off + 4) >>> 0;
}
/** Parameter Problem: offset of the offending byte in the invoking packet. */
export function icmpv6Pointer(buf: Uint8Array, off: number): number {
  return read32s(buf, off + 4) >>> 0;
}
/** Where the invoking packet quoted by an error message starts. */
export function icmpv6QuoteOff(off: number): number {
  return off + ICMPV6_HEADER_LEN;
}

/** Neighbor Discovery (133-137) or MLD (130-132, 143): the node's own link traffic. */
export function icmpv6IsNdOrMld(type: number): boolean {
  return (type >= ICMPV6_MLD_QUERY && type <= ICMPV6_REDIRECT) || type === ICMPV6_MLD2_REPORT;
}

// ---- building errors (fast path: no allocation, no throw) ---------------------------------

/**
 * May an ICMPv6 error (Destination Unreachable, Time Exceeded) be sent about this packet? RFC
 * 4443 2.4(e): "An ICMPv6 error message MUST NOT be originated as a result of receiving ... an
 * ICMPv6 error message, ... an ICMPv6 redirect message, ... a packet destined to an IPv6
 * multicast address, ... a packet whose source address does not uniquely identify a single
 * node -- e.g., the IPv6 Unspecified Address, an IPv6 multicast address". Also refused here, as
 * Linux's icmp6_send does: a packet that is not a whole valid IPv6 header chain, and a later
 * fragment (no upper-layer header to judge it by).
 */
export function icmpv6ErrorAllowed(orig: Uint8Array, origOff: number, origLen: number): boolean {
  if (origOff < 0 || origOff + origLen > orig.length) return false;
  if (ipv6Check(orig, origOff, origOff + origLen) !== IPV6_OK) return false;
  if (orig[origOff + 24] === 0xff || orig[origOff + 8] === 0xff) return false; // multicast
  let any = 0;
  for (let i = 8; i < 24; i++) any |= orig[origOff + i];
  if (any === 0) return false; // unspecified source
  const fh = ipv6FragHdrOff(orig, origOff);
  if (fh >= 0 && ipv6FragOffset(orig, fh) !== 0) return false;
  if (ipv6L4Proto(orig, origOff) === IPPROTO_ICMPV6) {
    const l4 = ipv6L4Off(orig, origOff);
    if (l4 >= ipv6End(orig, origOff)) return false;
    const t = orig[l4];
    if (icmpv6IsError(t) || t === ICMPV6_REDIRECT) return false;
  }
  return true;
}

/**
 * Write a complete IPv6 + ICMPv6 error into `out` at `outOff` (at most `outCap` bytes) about
 * the packet `orig[origOff, origOff + origLen)`, as Linux's icmp6_send builds it: traffic
 * class 0, flow label 0 (the kernel picks a hashed one; tests compare without it), the given
 * hop limit, Next Header 58, source src[srcAt..srcAt+4) (four int32 words), destination the
 * original source; ICMPv6 `type`/`code`, bytes 4..8 = `rest` (the MTU of Packet Too Big, the
 * pointer of Parameter Problem, else 0), then the original packet from its IPv6 header, cut so
 * the whole error is at most 1280 bytes (RFC 4443 2.4(c)) and fits `outCap`. Checksum filled
 * (over the pseudo-header). Returns bytes written, or 0 when icmpv6ErrorAllowed says no or the
 * room cannot hold a fixed header of the original. `out` and `orig` must not overlap.
 */
export function icmpv6BuildError(
  out: Uint8Array,
  outOff: number,
  outCap: number,
  orig: Uint8Array,
  origOff: number,
  origLen: number,
  type: number,
  code: number,
  rest: number,
  src: Int32Array,
  srcAt: number,
  hopLimit: number,
): number {
  if (outOff < 0 || !icmpv6ErrorAllowed(orig, origOff, origLen)) return 0;
  // quote the packet, not bytes after its payload (Ethernet padding)
  let quote = Math.min(origLen, ipv6End(orig, origOff) - origOff);
  const max = ICMPV6_ERROR_MAX_PACKET - IPV6_HEADER_LEN - ICMPV6_HEADER_LEN;
  if (quote > max) quote = max;
  const room = Math.min(outCap, out.length - outOff) - IPV6_HEADER_LEN - ICMPV6_HEADER_LEN;
  if (room < quote) {
    if (room < IPV6_HEADER_LEN) return 0;
    quote = room;
  }
  const o = outOff;
  const plen = ICMPV6_HEADER_LEN + quote;
  write32(out, o, 6 << 28);
  write16(out, o + 4, plen);
  out[o + 6] = IPPROTO_ICMPV6;
  out[o + 7] = hopLimit;
  for (let k = 0; k < 4; k++) write32(out, o + 8 + 4 * k, src[srcAt + k]);
  // A byte loop, not set(subarray): subarray would allocate a view per packet.
  for (let i = 0; i < 16; i++) out[o + 24 + i] = orig[origOff + 8 + i];
  const ic = o + IPV6_HEADER_LEN;
  out[ic] = type;
  out[ic + 1] = code;
  write16(out, ic + 2, 0);
  write32(out, ic + 4, rest);
  const q = ic + ICMPV6_HEADER_LEN;
  for (let i = 0; i < quote; i++) out[q + i] = orig[origOff + i];
  l4v6FillCsum(out, o, ic, q + quote, IPPROTO_ICMPV6);
  return IPV6_HEADER_LEN + plen;
}

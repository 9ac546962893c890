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

import { read16, read32s } from './bytes.ts';
import { IPV6_HEADER_LEN } from './ipv6.ts';

export const ICMPV6_DEST_UNREACH = 1;
export const ICMPV6_PACKET_TOO_BIG = 2;
export const ICMPV6_TIME_EXCEEDED = 3;
export const ICMPV6_PARAM_PROBLEM = 4;
export const ICMPV6_ECHO_REQUEST = 128;
export const ICMPV6_ECHO_REPLY = 129;
/** Destination Unreachable code 4 */
export const ICMPV6_PORT_UNREACH = 4;

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

// virtio_net_hdr: the 10-byte header a TUN opened with IFF_VNET_HDR puts before every packet
// it hands us, and expects before every packet we write (include/uapi/linux/virtio_net.h).
//
//     0               1               2               3
//    +---------------+---------------+-------------------------------+
//    |     flags     |   gso_type    |     hdr_len (le16)            |
//    +---------------+---------------+-------------------------------+
//    |     gso_size (le16)           |     csum_start (le16)         |
//    +-------------------------------+-------------------------------+
//    |     csum_offset (le16)        |   ...the IP packet
//    +-------------------------------+
//
// The fields are "host-endian" for a legacy TUN; the addon sets TUNSETVNETLE, so they are
// little-endian on every host and this file reads them so.
//
//   flags      NEEDS_CSUM (1): the L4 checksum is not computed; the field at csum_start +
//              csum_offset holds the folded, non-complemented pseudo-header sum, and whoever
//              finishes the packet sums from csum_start to the end into it. DATA_VALID (2): the
//              checksum was verified (informational on a write).
//   gso_type   NONE 0, TCPV4 1, UDP 3 (UFO, never negotiated), TCPV6 4, UDP_L4 5; bit 0x80 (ECN)
//              may be or-ed into a TCP type (the segments carry CWR on the first one only).
//   hdr_len    length of the headers of every segment — a hint: tun.c raises it to
//              csum_start + csum_offset + 2 and refuses one longer than the packet.
//   gso_size   the MSS (TCP) or datagram payload size (UDP_L4) of every segment but the last.
//   csum_start / csum_offset  where the checksum sum starts (the transport header: the IPv4
//              header length on a TUN) and where, from there, the field sits (16 TCP, 6 UDP).
//
// Validation contract: vnetCheck(buf, off, end) returns VNET_OK or one specific error for the
// read [off, end) — header and IP packet. It checks what the kernel's virtio_net_hdr_to_skb and
// tun.c would refuse on a write, so that a packet that passes can be written back with its header
// unchanged: a known gso_type that fits the IP protocol, gso_size > 0 with GSO, hdr_len within
// the packet, NEEDS_CSUM with csum_start at the transport header and csum_offset 16/6 for
// TCP/UDP (mandatory for GSO, kernel commit 89add40066f9), never GSO without NEEDS_CSUM. After
// VNET_OK the accessors below read only the 10 header bytes; vnetSegments reads the IPv4 and
// TCP header lengths, bounds-checked. An IPv6 packet has its own check (vnetCheck6: the same
// rules after a 40-byte header, GSO as UDP_L4 only) and segment count. Never throws, never
// allocates.

import { IPV6_HEADER_LEN, ipv6NextHeader } from './ipv6.ts';
import { IPPROTO_TCP, IPPROTO_UDP } from './proto.ts';
import { IPV4_PROTO as IP_PROTO, TCP_CSUM, UDP_CSUM } from './layout.ts';
import { UDP_HEADER_LEN as UDP_HDR_LEN } from './udp.ts';

export const VNET_HDR_LEN = 10;

export const VNET_F_NEEDS_CSUM = 1;
export const VNET_F_DATA_VALID = 2;

export const VNET_GSO_NONE = 0;
export const VNET_GSO_TCPV4 = 1;
export const VNET_GSO_UDP = 3;
export const VNET_GSO_TCPV6 = 4;
export const VNET_GSO_UDP_L4 = 5;
export const VNET_GSO_ECN = 0x80;

/** UDP_L4: the kernel refuses more segments than this (UDP_MAX_SEGMENTS). */
export const VNET_UDP_MAX_SEGMENTS = 64;

export const VNET_OK = 0;
/** fewer than 10 bytes: no header at all */
export const VNET_ERR_TRUNCATED = 1;
/** unknown gso_type, ECN without a TCP type, IPv6/UFO types, or a type the IP protocol denies */
export const VNET_ERR_GSO_TYPE = 2;
/** a GSO type with gso_size 0, or UDP_L4 with more than 64 segments */
export const VNET_ERR_GSO_SIZE = 3;
/** hdr_len longer than the packet */
export const VNET_ERR_HDR_LEN = 4;
/** NEEDS_CSUM pointing past the packet or not at the transport checksum; GSO without it */
export const VNET_ERR_CSUM = 5;

export const VNET_ERR_NAMES: readonly string[] = [
  'ok',
  'truncated',
  'gso_type',
  'gso_size',
  'hdr_len',
  'csum',
];

const FLAGS = 0;
const GSO_TYPE = 1;
const HDR_LEN = 2;
const GSO_SIZE = 4;
const CSUM_START = 6;
const CSUM_OFFSET = 8;

function le16(buf: Uint8Array, at: number): number {
  return buf[at] | (buf[at + 1] << 8);
}

function putLe16(buf: Uint8Array, at: number, v: number): void {
  buf[at] = v;
  buf[at + 1] = v >>> 8;
}

export function vnetFlags(buf: Uint8Array, off: number): number {
  return buf[off + FLAGS];
}
export function vnetGsoType(buf: Uint8Array, off: number): number {
  return buf[off + GSO_TYPE];
}
export function vnetHdrLen(buf: Uint8Array, off: number): number {
  return le16(buf, off + HDR_LEN);
}
export function vnetGsoSize(buf: Uint8Array, off: number): number {
  return le16(buf, off + GSO_SIZE);
}
export function vnetCsumStart(buf: Uint8Array, off: number): number {
  return le16(buf, off + CSUM_START);
}
export function vnetCsumOffset(buf: Uint8Array, off: number): number {
  return le16(buf, off + CSUM_OFFSET);
}
/** Whether the packet's L4 checksum field holds a partial (pseudo-header) sum. */
export function vnetNeedsCsum(buf: Uint8Array, off: number): boolean {
  return (buf[off + FLAGS] & VNET_F_NEEDS_CSUM) !== 0;
}
/** Whether the packet is a GSO super-packet (the kernel segments it). */
export function vnetIsGso(buf: Uint8Array, off: number): boolean {
  return buf[off + GSO_TYPE] !== VNET_GSO_NONE;
}

/** The zero header: a plain, fully checksummed packet (what generated packets carry). */
export function vnetZero(buf: Uint8Array, off: number): void {
  for (let i = 0; i < VNET_HDR_LEN; i++) buf[off + i] = 0;
}

/** Emit every field (the slow world and tests; the fast path writes back what it read). */
export function vnetWrite(
  buf: Uint8Array,
  off: number,
  flags: number,
  gsoType: number,
  hdrLen: number,
  gsoSize: number,
  csumStart: number,
  csumOffset: number,
): void {
  buf[off + FLAGS] = flags;
  buf[off + GSO_TYPE] = gsoType;
  putLe16(buf, off + HDR_LEN, hdrLen);
  putLe16(buf, off + GSO_SIZE, gsoSize);
  putLe16(buf, off + CSUM_START, csumStart);
  putLe16(buf, off + CSUM_OFFSET, csumOffset);
}

/** Validate the header of the read [off, end) against its IPv4 packet (see the contract). */
export function vnetCheck(buf: Uint8Array, off: number, end: number): number {
  if (end - off < VNET_HDR_LEN) return VNET_ERR_TRUNCATED;
  const len = end - off - VNET_HDR_LEN; // the IP packet
  const ip = off + VNET_HDR_LEN;
  const type = buf[off + GSO_TYPE];
  const gso = type & ~VNET_GSO_ECN;
  // The IP protocol, when there is a header to read it from (a shorter packet: parse drops it).
  const proto = len >= 20 ? buf[ip + IP_PROTO] : -1;
  if (type !== VNET_GSO_NONE) {
    if (gso === VNET_GSO_TCPV4) {
      if (proto !== IPPROTO_TCP) return VNET_ERR_GSO_TYPE;
    } else if (gso === VNET_GSO_UDP_L4 && type === gso) {
      if (proto !== IPPROTO_UDP) return VNET_ERR_GSO_TYPE;
    } else {
      return VNET_ERR_GSO_TYPE;
    }
    if (le16(buf, off + GSO_SIZE) === 0) return VNET_ERR_GSO_SIZE;
    if ((buf[off + FLAGS] & VNET_F_NEEDS_CSUM) === 0) return VNET_ERR_CSUM;
  }
  if (le16(buf, off + HDR_LEN) > len) return VNET_ERR_HDR_LEN;
  if ((buf[off + FLAGS] & VNET_F_NEEDS_CSUM) !== 0) {
    const start = le16(buf, off + CSUM_START);
    const at = le16(buf, off + CSUM_OFFSET);
    if (start + at + 2 > len) return VNET_ERR_CSUM;
    if (proto === IPPROTO_TCP || proto === IPPROTO_UDP) {
      if (start !== (buf[ip] & 0x0f) << 2) return VNET_ERR_CSUM;
      if (at !== (proto === IPPROTO_TCP ? TCP_CSUM : UDP_CSUM)) return VNET_ERR_CSUM;
    }
  }
  if (gso === VNET_GSO_UDP_L4 && vnetSegments(buf, off, end) > VNET_UDP_MAX_SEGMENTS) {
    return VNET_ERR_GSO_SIZE;
  }
  return VNET_OK;
}

/**
 * vnetCheck for an IPv6 packet (version 6: the packet loop tells the two apart). The same rules
 * with the transport header after the 40-byte IPv6 header; NEEDS_CSUM past extension headers is
 * accepted (csum_start beyond 40, only bounds checked), GSO only as UDP_L4 of a bare header:
 * tun.ts never offers TSO6, and USO6 comes with USO4 (the pair tun.c accepts).
 */
export function vnetCheck6(buf: Uint8Array, off: number, end: number): number {
  if (end - off < VNET_HDR_LEN) return VNET_ERR_TRUNCATED;
  const len = end - off - VNET_HDR_LEN;
  const ip = off + VNET_HDR_LEN;
  const type = buf[off + GSO_TYPE];
  const next = len >= IPV6_HEADER_LEN ? ipv6NextHeader(buf, ip) : -1;
  if (type !== VNET_GSO_NONE) {
    if (type !== VNET_GSO_UDP_L4 || next !== IPPROTO_UDP) return VNET_ERR_GSO_TYPE;
    if (le16(buf, off + GSO_SIZE) === 0) return VNET_ERR_GSO_SIZE;
    if ((buf[off + FLAGS] & VNET_F_NEEDS_CSUM) === 0) return VNET_ERR_CSUM;
  }
  if (le16(buf, off + HDR_LEN) > len) return VNET_ERR_HDR_LEN;
  if ((buf[off + FLAGS] & VNET_F_NEEDS_CSUM) !== 0) {
    const start = le16(buf, off + CSUM_START);
    const at = le16(buf, off + CSUM_OFFSET);
    if (start < IPV6_HEADER_LEN || start + at + 2 > len) return VNET_ERR_CSUM;
    if (next === IPPROTO_TCP || next === IPPROTO_UDP) {
      if (start !== IPV6_HEADER_LEN) return VNET_ERR_CSUM;
      if (at !== (next === IPPROTO_TCP ? TCP_CSUM : UDP_CSUM)) return VNET_ERR_CSUM;
    }
  }
  if (type === VNET_GSO_UDP_L4 && vnetSegments6(buf, off, end) > VNET_UDP_MAX_SEGMENTS) {
    return VNET_ERR_GSO_SIZE;
  }
  return VNET_OK;
}

/** vnetSegments of an IPv6 packet (after vnetCheck6: GSO is UDP_L4 behind 40 + 8 bytes). */
export function vnetSegments6(buf: Uint8Array, off: number, end: number): number {
  if (buf[off + GSO_TYPE] === VNET_GSO_NONE) return 1;
  const size = le16(buf, off + GSO_SIZE);
  const payload = end - off - VNET_HDR_LEN - IPV6_HEADER_LEN - UDP_HDR_LEN;
  if (size === 0 || payload <= size) return 1;
  return Math.ceil(payload / size);
}

/** vnetExtraBytes of an IPv6 packet (after vnetCheck6). */
export function vnetExtraBytes6(buf: Uint8Array, off: number, end: number): number {
  const segs = vnetSegments6(buf, off, end);
  return segs === 1 ? 0 : (segs - 1) * (IPV6_HEADER_LEN + UDP_HDR_LEN);
}

/** Bytes of IPv4 + L4 headers every segment repeats; 0 when they do not fit in [ip, end). */
function segHeaderLen(buf: Uint8Array, ip: number, end: number, tcp: boolean): number {
  if (end - ip < 20) return 0;
  const ihl = (buf[ip] & 0x0f) << 2;
  if (!tcp) return ip + ihl + UDP_HDR_LEN <= end ? ihl + UDP_HDR_LEN : 0;
  if (ip + ihl + 13 > end) return 0;
  const h = ihl + ((buf[ip + ihl + 12] >>> 4) << 2);
  return ip + h <= end ? h : 0;
}

/**
 * Segments the wire will carry for the packet of the read [off, end): 1 for a plain packet (or
 * one whose payload fits in gso_size: the kernel does not treat it as GSO). Read after VNET_OK.
 */
export function vnetSegments(buf: Uint8Array, off: number, end: number): number {
  const gso = buf[off + GSO_TYPE] & ~VNET_GSO_ECN;
  if (gso === VNET_GSO_NONE) return 1;
  const ip = off + VNET_HDR_LEN;
  const h = segHeaderLen(buf, ip, end, gso === VNET_GSO_TCPV4);
  const size = le16(buf, off + GSO_SIZE);
  const payload = end - ip - h;
  if (h === 0 || size === 0 || payload <= size) return 1;
  return Math.ceil(payload / size);
}

/**
 * Bytes the wire will carry beyond the super-packet itself: every segment after the first
 * repeats the IPv4 and L4 headers. 0 for a plain packet. Read after VNET_OK.
 */
export function vnetExtraBytes(buf: Uint8Array, off: number, end: number): number {
  const segs = vnetSegments(buf, off, end);
  if (segs === 1) return 0;
  const gso = buf[off + GSO_TYPE] & ~VNET_GSO_ECN;
  return (segs - 1) * segHeaderLen(buf, off + VNET_HDR_LEN, end, gso === VNET_GSO_TCPV4);
}

/** Offset (from the IP header) of the L4 checksum field a NEEDS_CSUM header points at. */
export function vnetCsumFieldOff(buf: Uint8Array, off: number): number {
  return le16(buf, off + CSUM_START) + le16(buf, off + CSUM_OFFSET);
}

// ---- slow world -------------------------------------------------------------------------------

export interface VnetHdrRepr {
  flags: number;
  gsoType: number;
  hdrLen: number;
  gsoSize: number;
  csumStart: number;
  csumOffset: number;
}

export function vnetParse(buf: Uint8Array, off: number): VnetHdrRepr {
  return {
    flags: vnetFlags(buf, off),
    gsoType: vnetGsoType(buf, off),
    hdrLen: vnetHdrLen(buf, off),
    gsoSize: vnetGsoSize(buf, off),
    csumStart: vnetCsumStart(buf, off),
    csumOffset: vnetCsumOffset(buf, off),
  };
}

export function vnetEmit(r: VnetHdrRepr, buf: Uint8Array, off: number): void {
  vnetWrite(buf, off, r.flags, r.gsoType, r.hdrLen, r.gsoSize, r.csumStart, r.csumOffset);
}

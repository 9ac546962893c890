// Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//
// The checksum is the 16-bit one's complement of the one's complement sum of the data taken as
// big-endian 16-bit words (an odd tail is padded with a zero byte). Sums are kept unfolded in a
// JS number (exact up to 2^53, far beyond any packet) and folded once at the end.
//
// RFC 1624, section 3, eqn 3 — the update used for NAT rewrites:
//
//     HC' = ~(~HC + ~m + m')
//
//   "HC  - old checksum in header, HC' - new checksum in header,
//    m   - old value of a 16-bit field, m' - new value of a 16-bit field"
//
// Eqn 3 never produces 0xFFFF from a correct checksum of non-zero data, so the result is bit for
// bit what a full recompute gives (the differential test in test/wire/ proves it). One trap
// remains (RFC 1624 erratum 4782 discusses the m == m' case): when nothing changes, eqn 3 turns a
// stored 0xFFFF into 0x0000, which for UDP means "no checksum". The replace functions therefore
// return the checksum untouched when the value does not change.
//
// UDP over IPv4 (RFC 768): "If the computed checksum is zero, it is transmitted as all ones
// (the equivalent in one's complement arithmetic). An all zero transmitted checksum value means
// that the transmitter generated no checksum". l4ChecksumFull applies that rule for UDP; the
// rewrite helpers in rewrite.ts leave a zero UDP checksum at zero.

import {
  ICMP_CSUM,
  IPV4_CSUM as IP_CSUM,
  IPV4_PROTO as IP_PROTO,
  IPV4_SADDR as IP_SADDR,
  IPV4_TOTLEN as IP_TOTLEN,
  IPV4_VER_IHL as IP_VER_IHL,
  TCP_CSUM,
  UDP_CSUM,
  UDP_LEN,
} from './layout.ts';
import { IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP } from './proto.ts';

/** Running one's complement sum of `len` bytes at `off` as BE 16-bit words (odd tail padded). */
export function csumAdd(buf: Uint8Array, off: number, len: number, sum = 0): number {
  const last = off + (len & ~1);
  for (let i = off; i < last; i += 2) sum += (buf[i] << 8) | buf[i + 1];
  if (len & 1) sum += buf[last] << 8;
  return sum;
}

/** Fold a running sum to 16 bits (end-around carry); not complemented. */
export function csumFold(sum: number): number {
  // `& 0xffff` keeps the low 16 bits even above 2^32 (ToInt32 is modulo 2^32).
  while (sum > 0xffff) {
    const lo = sum & 0xffff;
    sum = lo + (sum - lo) / 65536;
  }
  return sum;
}

/** The value to store in a checksum field: the complement of the folded sum. */
export function csumFinish(sum: number): number {
  return ~csumFold(sum) & 0xffff;
}

/** RFC 1624 eqn 3 for one 16-bit field: `check` is the stored checksum field value. */
export function csumReplace16(check: number, old16: number, new16: number): number {
  if (old16 === new16) return check;
  return ~csumFold((~check & 0xffff) + (~old16 & 0xffff) + new16) & 0xffff;
}

/** RFC 1624 eqn 3 for a 32-bit field (an IPv4 address): two 16-bit replacements in one fold. */
export function csumReplace32(check: number, old32: number, new32: number): number {
  if (old32 === new32) return check;
  const sum =
    (~check & 0xffff) +
    (~(old32 >>> 16) & 0xffff) +
    (~old32 & 0xffff) +
    (new32 >>> 16) +
    (new32 & 0xffff);
  return ~csumFold(sum) & 0xffff;
}

/**
 * Update a partial checksum seed (virtio NEEDS_CSUM: the field holds the folded, NOT complemented
 * pseudo-header sum) for an address change: seed' = fold(seed + ~m + m'). No outer complements,
 * and never the UDP zero rule: the device finishes the checksum.
 */
export function csumPartialReplace32(seed: number, old32: number, new32: number): number {
  if (old32 === new32) return seed;
  const sum =
    seed + (~(old32 >>> 16) & 0xffff) + (~old32 & 0xffff) + (new32 >>> 16) + (new32 & 0xffff);
  return csumFold(sum);
}

/**
 * The same update for a change of pseudo-header words given as folded sums (an IPv6 packet's
 * 32 address bytes: checksum6.ts ipv6AddrSum before and after): seed' = fold(seed + ~old + new).
 */
export function csumPartialReplaceSum(seed: number, oldSum: number, newSum: number): number {
  if (oldSum === newSum) return seed;
  return csumFold(seed + (~oldSum & 0xffff) + newSum);
}

/** Full IPv4 header checksum over IHL*4 bytes, the checksum field counted as zero. */
export function ipv4HeaderChecksum(buf: Uint8Array, ipOff: number): number {
  const hlen = (buf[ipOff + IP_VER_IHL] & 0x0f) << 2;
  let sum = csumAdd(buf, ipOff, IP_CSUM);
  sum = csumAdd(buf, ipOff + IP_CSUM + 2, hlen - IP_CSUM - 2, sum);
  return csumFinish(sum);
}

/** Sum of the TCP/UDP pseudo-header (RFC 793 / RFC 768): src, dst, zero, protocol, length. */
export function pseudoHeaderSum(buf: Uint8Array, ipOff: number, proto: number, l4Len: number): number {
  return csumAdd(buf, ipOff + IP_SADDR, 8, proto + l4Len);
}

/**
 * The checksum the L4 header of the packet at `ipOff` should carry, computed from scratch over
 * the whole segment: TCP and UDP with the pseudo-header, ICMP without. For UDP a computed 0 is
 * returned as 0xffff (RFC 768). The span is the IPv4 total length (for UDP, the UDP length when
 * shorter); returns -1 for other protocols. Meaningful only on unfragmented packets, and only
 * after ipv4Check (and the L4 check) passed: it reads up to ipOff + total length.
 */
export function l4ChecksumFull(buf: Uint8Array, ipOff: number): number {
  const hlen = (buf[ipOff + IP_VER_IHL] & 0x0f) << 2;
  const l4 = ipOff + hlen;
  let len = ((buf[ipOff + IP_TOTLEN] << 8) | buf[ipOff + IP_TOTLEN + 1]) - hlen;
  const proto = buf[ipOff + IP_PROTO];
  let csumAt: number;
  let sum = 0;
  if (proto === IPPROTO_TCP) {
    csumAt = TCP_CSUM;
    sum = pseudoHeaderSum(buf, ipOff, proto, len);
  } else if (proto === IPPROTO_UDP) {
    const ulen = (buf[l4 + UDP_LEN] << 8) | buf[l4 + UDP_LEN + 1];
    if (ulen < len) len = ulen;
    csumAt = UDP_CSUM;
    sum = pseudoHeaderSum(buf, ipOff, proto, len);
  } else if (proto === IPPROTO_ICMP) {
    csumAt = ICMP_CSUM;
  } else {
    return -1;
  }
  sum = csumAdd(buf, l4, csumAt, sum);
  sum = csumAdd(buf, l4 + csumAt + 2, len - csumAt - 2, sum);
  const c = csumFinish(sum);
  return proto === IPPROTO_UDP && c === 0 ? 0xffff : c;
}

/** Compute and store the L4 checksum (TCP, UDP, ICMP) of the packet at `ipOff`. */
export function l4FillCsum(buf: Uint8Array, ipOff: number): void {
  const c = l4ChecksumFull(buf, ipOff);
  if (c < 0) return;
  const proto = buf[ipOff + IP_PROTO];
  const at =
    ipOff +
    ((buf[ipOff] & 0x0f) << 2) +
    (proto === IPPROTO_TCP ? TCP_CSUM : proto === IPPROTO_UDP ? UDP_CSUM : ICMP_CSUM);
  buf[at] = c >>> 8;
  buf[at + 1] = c & 0xff;
}

/**
 * Whether the stored L4 checksum verifies: the one's complement sum over pseudo-header and
 * segment, checksum field included, must be 0xffff. A UDP checksum of 0 ("none") verifies.
 * Same preconditions as l4ChecksumFull.
 */
export function l4ChecksumValid(buf: Uint8Array, ipOff: number): boolean {
  const proto = buf[ipOff + IP_PROTO];
  const at =
    ipOff +
    ((buf[ipOff] & 0x0f) << 2) +
    (proto === IPPROTO_TCP ? TCP_CSUM : proto === IPPROTO_UDP ? UDP_CSUM : ICMP_CSUM);
  const stored = (buf[at] << 8) | buf[at + 1];
  if (proto === IPPROTO_UDP && stored === 0) return true;
  const c = l4ChecksumFull(buf, ipOff);
  if (c < 0) return false;
  // 0x0000 and 0xffff are the same number in one's complement: a sender may store either
  // (except UDP, where 0 is reserved and l4ChecksumFull already returns 0xffff).
  return c === stored || (c === 0 && stored === 0xffff) || (c === 0xffff && stored === 0);
}

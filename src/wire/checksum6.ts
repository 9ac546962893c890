// Upper-layer checksums over IPv6 (RFC 8200, section 8.1): TCP, UDP and ICMPv6 all cover a
// pseudo-header of source address, destination address, the upper-layer packet length (32 bits),
// three zero bytes and the upper-layer Next Header value:
//
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                    Source Address (16 bytes)                  |
//    |                 Destination Address (16 bytes)                |
//    |                   Upper-Layer Packet Length                   |
//    |                      zero                     |  Next Header  |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Unlike ICMP over IPv4, ICMPv6 includes it (RFC 4443 2.3). The length is the upper layer's
// own (the UDP Length field for UDP) — extension headers before it do not count.
//
// RFC 8200 8.1 on UDP: "Unlike IPv4, the default behavior when UDP packets are originated by an
// IPv6 node is that the UDP checksum is not optional. ... IPv6 receivers must discard UDP
// packets containing a zero checksum". So l4v6ChecksumValid calls a stored 0 invalid, and a sum
// that computes to 0 is stored as 0xFFFF. Same RFC 1071 arithmetic as checksum.ts.

import { csumAdd, csumFinish, csumFold } from './checksum.ts';
import { ICMP_CSUM, TCP_CSUM, UDP_CSUM, UDP_LEN } from './layout.ts';
import { IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP } from './proto.ts';

const SADDR = 8;
/** the source and destination addresses: bytes 8-39 */
const ADDRS_END = 40;

/**
 * The folded sum of the packet's source and destination addresses: a partial checksum's seed
 * follows an address change by the difference of two of these (checksum.ts
 * csumPartialReplaceSum; the packet loop, offloads on). Never allocates.
 */
export function ipv6AddrSum(buf: Uint8Array, ipOff: number): number {
  let s = 0;
  for (let i = ipOff + SADDR; i < ipOff + ADDRS_END; i += 2) s += (buf[i] << 8) | buf[i + 1];
  return csumFold(s);
}

/** Running sum of the IPv6 pseudo-header of the packet at ipOff. */
export function ipv6PseudoHeaderSum(
  buf: Uint8Array,
  ipOff: number,
  proto: number,
  len: number,
): number {
  return csumAdd(buf, ipOff + SADDR, 32, proto + (len >>> 16) + (len & 0xffff));
}

/** Offset of the checksum field in a TCP / UDP / ICMPv6 header, or -1. */
export function l4v6CsumField(proto: number): number {
  if (proto === IPPROTO_TCP) return TCP_CSUM;
  if (proto === IPPROTO_UDP) return UDP_CSUM;
  return proto === IPPROTO_ICMPV6 ? ICMP_CSUM : -1;
}

/**
 * The checksum the TCP / UDP / ICMPv6 header at `l4` of the IPv6 packet at `ipOff` (ending at
 * `end`) should carry, from scratch; -1 for other protocols. UDP spans its Length field (when
 * shorter than the payload) and a computed 0 becomes 0xFFFF. Preconditions: ipv6Check passed,
 * the L4 header lies within [l4, end), and the packet is not a fragment.
 */
export function l4v6ChecksumFull(
  buf: Uint8Array,
  ipOff: number,
  l4: number,
  end: number,
  proto: number,
): number {
  const at = l4v6CsumField(proto);
  if (at < 0) return -1;
  let len = end - l4;
  if (proto === IPPROTO_UDP) {
    const ulen = (buf[l4 + UDP_LEN] << 8) | buf[l4 + UDP_LEN + 1];
    if (ulen < len) len = ulen;
  }
  let sum = ipv6PseudoHeaderSum(buf, ipOff, proto, len);
  sum = csumAdd(buf, l4, at, sum);
  sum = csumAdd(buf, l4 + at + 2, len - at - 2, sum);
  const c = csumFinish(sum);
  return proto === IPPROTO_UDP && c === 0 ? 0xffff : c;
}

/** Whether the stored checksum verifies; a UDP checksum of 0 never does over IPv6. */
export function l4v6ChecksumValid(
  buf: Uint8Array,
  ipOff: number,
  l4: number,
  end: number,
  proto: number,
): boolean {
  const at = l4v6CsumField(proto);
  if (at < 0) return false;
  const stored = (buf[l4 + at] << 8) | buf[l4 + at + 1];
  if (proto === IPPROTO_UDP && stored === 0) return false;
  const c = l4v6ChecksumFull(buf, ipOff, l4, end, proto);
  // 0x0000 and 0xffff are the same one's complement number: a TCP/ICMPv6 sender may store either
  return (
    stored === c || (proto !== IPPROTO_UDP && (stored ^ c) === 0xffff && (c === 0 || c === 0xffff))
  );
}

/** Compute and store the checksum of the TCP / UDP / ICMPv6 header at `l4`. */
export function l4v6FillCsum(
  buf: Uint8Array,
  ipOff: number,
  l4: number,
  end: number,
  proto: number,
): void {
  const c = l4v6ChecksumFull(buf, ipOff, l4, end, proto);
  if (c < 0) return;
  const at = l4 + l4v6CsumField(proto);
  buf[at] = c >>> 8;
  buf[at + 1] = c & 0xff;
}

// NAT rewrites with RFC 1624 incremental checksum updates (eqn 3, see checksum.ts).
//
//   field changed          IPv4 header csum   TCP csum   UDP csum (if not 0)   ICMP csum
//   IPv4 source/dest       yes                yes (pseudo-header)  yes         no
//   TCP/UDP port           no                 yes        yes                   -
//   ICMP echo identifier   no                 -          -                     yes
//
// SCTP (RFC 9260) has no pseudo-header: an address change leaves its CRC32c alone, a port change
// recomputes it over the whole SCTP packet (to the IP packet's end), as the kernel's
// sctp_manip_pkt does. Extra precondition for SCTP: the packet is not a fragment.
//
// Preconditions (the fast path checks once, then rewrites without bounds checks): the packet
// at `ipOff` passed ipv4Check, and if it is a first fragment (offset 0) its TCP/UDP/ICMP header
// passed tcpCheck/udpCheck/icmpCheck. The L4 header is found at ipOff + IHL*4 and is only
// touched when the fragment offset is 0 — later fragments carry no L4 header, while the first
// fragment's checksum covers the whole datagram and takes the same delta.
//
// UDP (RFC 768): a stored 0 means "no checksum" and stays 0; an update that yields 0 is stored
// as 0xFFFF, exactly what a full recompute would store. Never throws, never allocates.

import { read16, read32s, write16, write32 } from './bytes.ts';
import { csumPartialReplace32, csumReplace16, csumReplace32 } from './checksum.ts';
import {
  ICMP_CSUM,
  ICMP_ECHO_ID,
  IPV4_CSUM as IP_CSUM,
  IPV4_DADDR as IP_DADDR,
  IPV4_FLAGS_FRAG as IP_FLAGS_FRAG,
  IPV4_PROTO as IP_PROTO,
  IPV4_SADDR as IP_SADDR,
  TCP_CSUM,
  TCP_DPORT as DPORT,
  TCP_SPORT as SPORT,
  UDP_CSUM,
} from './layout.ts';
import { IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from './proto.ts';
import { sctpFillCsum } from './sctp.ts';
import { ICMP_EMBEDDED_OFF as ICMP_EMBEDDED } from './icmp.ts';


/** L4 offset of a first fragment / whole packet, or -1 when the packet carries no L4 header. */
function l4OffOf(buf: Uint8Array, ipOff: number): number {
  if ((read16(buf, ipOff + IP_FLAGS_FRAG) & 0x1fff) !== 0) return -1;
  return ipOff + ((buf[ipOff] & 0x0f) << 2);
}

/** Patch the TCP or UDP checksum of the segment at `l4` for a 32-bit change. */
function l4Patch32(buf: Uint8Array, proto: number, l4: number, old: number, val: number): void {
  if (proto === IPPROTO_TCP) {
    write16(buf, l4 + TCP_CSUM, csumReplace32(read16(buf, l4 + TCP_CSUM), old, val));
  } else if (proto === IPPROTO_UDP) {
    const c = read16(buf, l4 + UDP_CSUM);
    if (c === 0) return;
    const n = csumReplace32(c, old, val);
    write16(buf, l4 + UDP_CSUM, n === 0 ? 0xffff : n);
  }
}

/** Patch the TCP or UDP checksum of the segment at `l4` for a 16-bit change. */
function l4Patch16(buf: Uint8Array, proto: number, l4: number, old: number, val: number): void {
  if (proto === IPPROTO_TCP) {
    write16(buf, l4 + TCP_CSUM, csumReplace16(read16(buf, l4 + TCP_CSUM), old, val));
  } else if (proto === IPPROTO_UDP) {
    const c = read16(buf, l4 + UDP_CSUM);
    if (c === 0) return;
    const n = csumReplace16(c, old, val);
    write16(buf, l4 + UDP_CSUM, n === 0 ? 0xffff : n);
  }
}

function rewriteAddr(buf: Uint8Array, ipOff: number, field: number, addr: number): void {
  addr |= 0;
  const old = read32s(buf, ipOff + field);
  if (old === addr) return;
  write32(buf, ipOff + field, addr);
  write16(buf, ipOff + IP_CSUM, csumReplace32(read16(buf, ipOff + IP_CSUM), old, addr));
  const l4 = l4OffOf(buf, ipOff);
  if (l4 >= 0) l4Patch32(buf, buf[ipOff + IP_PROTO], l4, old, addr);
}

function rewritePort(buf: Uint8Array, ipOff: number, field: number, port: number): void {
  const proto = buf[ipOff + IP_PROTO];
  if (proto === IPPROTO_SCTP) {
    sctpRewritePort(buf, ipOff, field, port);
    return;
  }
  if (proto !== 6 && proto !== 17) return;
  const l4 = l4OffOf(buf, ipOff);
  if (l4 < 0) return;
  port &= 0xffff;
  const old = read16(buf, l4 + field);
  if (old === port) return;
  write16(buf, l4 + field, port);
  l4Patch16(buf, proto, l4, old, port);
}

function sctpRewritePort(buf: Uint8Array, ipOff: number, field: number, port: number): void {
  const l4 = l4OffOf(buf, ipOff);
  if (l4 < 0) return;
  port &= 0xffff;
  if (read16(buf, l4 + field) === port) return;
  write16(buf, l4 + field, port);
  sctpFillCsum(buf, l4, ipOff + read16(buf, ipOff + 2));
}

/** Set the IPv4 source; patch the header checksum and the TCP/UDP pseudo-header checksum. */
export function ipv4RewriteSrc(buf: Uint8Array, ipOff: number, addr: number): void {
  rewriteAddr(buf, ipOff, IP_SADDR, addr);
}

/** Set the IPv4 destination; patch the header checksum and the TCP/UDP checksum. */
export function ipv4RewriteDst(buf: Uint8Array, ipOff: number, addr: number): void {
  rewriteAddr(buf, ipOff, IP_DADDR, addr);
}

/** Set the TCP/UDP/SCTP source port and fix the L4 checksum (no-op for other protocols). */
export function l4RewriteSrcPort(buf: Uint8Array, ipOff: number, port: number): void {
  rewritePort(buf, ipOff, SPORT, port);
}

/** Set the TCP/UDP/SCTP destination port and fix the L4 checksum (no-op for other protocols). */
export function l4RewriteDstPort(buf: Uint8Array, ipOff: number, port: number): void {
  rewritePort(buf, ipOff, DPORT, port);
}

/** Set the identifier of an ICMP echo / echo reply and patch the ICMP checksum. */
export function icmpRewriteEchoId(buf: Uint8Array, ipOff: number, id: number): void {
  if (buf[ipOff + IP_PROTO] !== 1) return;
  const l4 = l4OffOf(buf, ipOff);
  if (l4 < 0) return;
  id &= 0xffff;
  const old = read16(buf, l4 + ICMP_ECHO_ID);
  if (old === id) return;
  write16(buf, l4 + ICMP_ECHO_ID, id);
  write16(buf, l4 + ICMP_CSUM, csumReplace16(read16(buf, l4 + ICMP_CSUM), old, id));
}

// ---- the datagram quoted in an ICMP error --------------------------------------------------
//
// Reverse-translating an ICMP error about a NATed flow means rewriting the quoted header too
// (the kernel's nf_nat_icmp_reply_translation does; Cilium does not, which breaks PMTU
// discovery through services). Every 16-bit word changed inside the quote is also folded into
// the outer ICMP checksum. Extra precondition: the outer ICMP header passed icmpCheck, its type
// is an error, and the quoted header passed ipv4CheckQuoted(buf, icmpOff + 8, packet end).
// The quoted TCP/UDP checksum is patched only when the quote reaches it (8 bytes of TCP carry
// only ports and sequence number), like Linux.

/** Offset of the ICMP header of the packet at ipOff. */
function icmpOffOf(buf: Uint8Array, ipOff: number): number {
  return ipOff + ((buf[ipOff] & 0x0f) << 2);
}

/** Write a 16-bit word inside the ICMP message at `icmp`, folding the change into its checksum. */
function icmpPut16(buf: Uint8Array, icmp: number, at: number, val: number): void {
  const old = read16(buf, at);
  if (old === val) return;
  write16(buf, at, val);
  write16(buf, icmp + ICMP_CSUM, csumReplace16(read16(buf, icmp + ICMP_CSUM), old, val));
}

function icmpPut32(buf: Uint8Array, icmp: number, at: number, val: number): void {
  icmpPut16(buf, icmp, at, val >>> 16);
  icmpPut16(buf, icmp, at + 2, val & 0xffff);
}

/** End of the quoted bytes: the outer packet's end. */
function quoteEnd(buf: Uint8Array, ipOff: number): number {
  return ipOff + read16(buf, ipOff + 2);
}

/** Quoted L4 checksum offset if the quote holds it (first fragment, TCP/UDP), else -1. */
function innerL4CsumAt(buf: Uint8Array, ipOff: number, inner: number): number {
  const l4 = l4OffOf(buf, inner);
  if (l4 < 0) return -1;
  const proto = buf[inner + IP_PROTO];
  const at = proto === IPPROTO_TCP ? l4 + TCP_CSUM : proto === IPPROTO_UDP ? l4 + UDP_CSUM : -1;
  return at >= 0 && at + 2 <= quoteEnd(buf, ipOff) ? at : -1;
}

function innerRewriteAddr(buf: Uint8Array, ipOff: number, field: number, addr: number): void {
  addr |= 0;
  const icmp = icmpOffOf(buf, ipOff);
  const inner = icmp + ICMP_EMBEDDED;
  const old = read32s(buf, inner + field);
  if (old === addr) return;
  icmpPut32(buf, icmp, inner + field, addr);
  const ic = read16(buf, inner + IP_CSUM);
  icmpPut16(buf, icmp, inner + IP_CSUM, csumReplace32(ic, old, addr));
  const at = innerL4CsumAt(buf, ipOff, inner);
  if (at < 0) return;
  const c = read16(buf, at);
  if (c === 0 && buf[inner + IP_PROTO] === 17) return;
  const n = csumReplace32(c, old, addr);
  icmpPut16(buf, icmp, at, n === 0 && buf[inner + IP_PROTO] === 17 ? 0xffff : n);
}

function innerRewritePort(buf: Uint8Array, ipOff: number, field: number, port: number): void {
  const icmp = icmpOffOf(buf, ipOff);
  const inner = icmp + ICMP_EMBEDDED;
  const proto = buf[inner + IP_PROTO];
  if (proto !== 6 && proto !== 17) return;
  const l4 = l4OffOf(buf, inner);
  if (l4 < 0 || l4 + 4 > quoteEnd(buf, ipOff)) return;
  port &= 0xffff;
  const old = read16(buf, l4 + field);
  if (old === port) return;
  icmpPut16(buf, icmp, l4 + field, port);
  const at = innerL4CsumAt(buf, ipOff, inner);
  if (at < 0) return;
  const c = read16(buf, at);
  if (c === 0 && proto === IPPROTO_UDP) return;
  const n = csumReplace16(c, old, port);
  icmpPut16(buf, icmp, at, n === 0 && proto === IPPROTO_UDP ? 0xffff : n);
}

/** Rewrite the source address of the datagram quoted in the ICMP error at ipOff. */
export function icmpErrRewriteInnerSrc(buf: Uint8Array, ipOff: number, addr: number): void {
  innerRewriteAddr(buf, ipOff, IP_SADDR, addr);
}
/** Rewrite the destination address of the quoted datagram. */
export function icmpErrRewriteInnerDst(buf: Uint8Array, ipOff: number, addr: number): void {
  innerRewriteAddr(buf, ipOff, IP_DADDR, addr);
}
/** Rewrite the TCP/UDP source port of the quoted datagram. */
export function icmpErrRewriteInnerSrcPort(buf: Uint8Array, ipOff: number, port: number): void {
  innerRewritePort(buf, ipOff, SPORT, port);
}
/** Rewrite the TCP/UDP destination port of the quoted datagram. */
export function icmpErrRewriteInnerDstPort(buf: Uint8Array, ipOff: number, port: number): void {
  innerRewritePort(buf, ipOff, DPORT, port);
}

/** Rewrite the echo identifier of a quoted ICMP echo (errors about SNATed pings). */
export function icmpErrRewriteInnerEchoId(buf: Uint8Array, ipOff: number, id: number): void {
  const icmp = icmpOffOf(buf, ipOff);
  const inner = icmp + ICMP_EMBEDDED;
  if (buf[inner + IP_PROTO] !== 1) return;
  const l4 = l4OffOf(buf, inner);
  if (l4 < 0 || l4 + 8 > quoteEnd(buf, ipOff)) return;
  id &= 0xffff;
  const old = read16(buf, l4 + ICMP_ECHO_ID);
  if (old === id) return;
  icmpPut16(buf, icmp, l4 + ICMP_ECHO_ID, id);
  icmpPut16(buf, icmp, l4 + ICMP_CSUM, csumReplace16(read16(buf, l4 + ICMP_CSUM), old, id));
}

// ---- partial checksums (virtio NEEDS_CSUM) ---------------------------------------------------
//
// A packet read from a TUN with offloads may carry a partial L4 checksum: the field holds the
// folded, NOT complemented sum of the pseudo-header only; the kernel (or the NIC) adds the
// segment and complements when it finishes the packet — per segment, for a GSO super-packet.
// So for a NAT rewrite of such a packet:
//   - an address change enters the pseudo-header: seed' = fold(seed + ~m + m') — eqn 3 without
//     the outer complements (csumPartialReplace32), and never the UDP zero rule;
//   - a port change needs nothing: ports are in the segment, which the seed does not cover.
// The rewrites above assume a full checksum, so the caller keeps the seed and the addresses the
// packet came with and, after the program's rewrites, stores the seed derived here: one
// correction for whatever combination of DNAT / SNAT / reverse NAT the program applied.

/**
 * Store into the checksum field at `csumAt` the partial sum `seed` the packet at `ipOff` came
 * with, updated for its source and destination now differing from `oldSrc` / `oldDst`.
 */
export function l4PartialCsumAfterNat(
  buf: Uint8Array,
  ipOff: number,
  csumAt: number,
  seed: number,
  oldSrc: number,
  oldDst: number,
): void {
  let s = csumPartialReplace32(seed, oldSrc | 0, read32s(buf, ipOff + IP_SADDR));
  s = csumPartialReplace32(s, oldDst | 0, read32s(buf, ipOff + IP_DADDR));
  write16(buf, csumAt, s);
}

// NAT66 rewrites with RFC 1624 incremental checksum updates (eqn 3, checksum.ts): the IPv6 twin
// of rewrite.ts. IPv6 has no header checksum, so an address change touches only the upper
// layer's checksum — TCP, UDP and ICMPv6 all cover the pseudo-header (checksum6.ts) — as eight
// 16-bit replacements; a port change patches TCP/UDP like IPv4 and recomputes SCTP's CRC32c.
//
//   field changed          TCP csum   UDP csum   ICMPv6 csum   SCTP CRC32c
//   IPv6 source/dest       yes        yes        yes           no (no pseudo-header)
//   TCP/UDP/SCTP port      yes        yes        -             recomputed
//
// Preconditions: the packet at ipOff passed ipv6Check, and unless it carries a Fragment header
// with a non-zero offset its L4 header passed its check. A non-first fragment has no L4 header
// and is left at the address change; a first fragment's checksum covers the whole datagram and
// takes the same delta (SCTP fragments are not rewritten at all: the CRC needs reassembly).
// Addresses are four int32 words, most significant first. Never throws, never allocates.
//
// A UDP checksum of 0 is invalid over IPv6 (RFC 8200 8.1): it is never produced here — an update
// that yields 0 is stored as 0xFFFF, what a full recompute stores.

import { read16, read32s, write16, write32 } from './bytes.ts';
import { csumReplace16, csumReplace32 } from './checksum.ts';
import { l4v6CsumField } from './checksum6.ts';
import {
  ipv6End,
  ipv6FragHdrOff,
  ipv6FragOffset,
  ipv6L4Off,
  ipv6L4Proto,
  ipv6QuotedFragHdrOff,
  ipv6QuotedL4Off,
  ipv6QuotedL4Proto,
} from './ipv6.ts';
import { IPPROTO_ICMPV6, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from './proto.ts';
import { sctpFillCsum } from './sctp.ts';

const SADDR = 8;
const DADDR = 24;

/** L4 offset when the packet carries an L4 header (not a later fragment), else -1. */
function l4Of(buf: Uint8Array, ipOff: number): number {
  const fh = ipv6FragHdrOff(buf, ipOff);
  if (fh >= 0 && ipv6FragOffset(buf, fh) !== 0) return -1;
  return ipv6L4Off(buf, ipOff);
}

function patch(
  buf: Uint8Array,
  at: number,
  udp: boolean,
  old: number,
  val: number,
  w16: boolean,
): void {
  const c = read16(buf, at);
  const n = w16 ? csumReplace16(c, old, val) : csumReplace32(c, old, val);
  write16(buf, at, udp && n === 0 ? 0xffff : n);
}

function rewriteAddr(
  buf: Uint8Array,
  ipOff: number,
  field: number,
  a: number,
  b: number,
  c: number,
  d: number,
): void {
  const l4 = l4Of(buf, ipOff);
  const proto = l4 >= 0 ? ipv6L4Proto(buf, ipOff) : -1;
  const csAt = proto >= 0 ? l4v6CsumField(proto) : -1;
  for (let k = 0; k < 4; k++) {
    const w = (k === 0 ? a : k === 1 ? b : k === 2 ? c : d) | 0;
    const at = ipOff + field + 4 * k;
    const old = read32s(buf, at);
    if (old === w) continue;
    write32(buf, at, w);
    if (csAt >= 0) patch(buf, l4 + csAt, proto === IPPROTO_UDP, old, w, false);
  }
}

/** Set the IPv6 source (four words) and patch the TCP/UDP/ICMPv6 checksum. */
export function ipv6RewriteSrc(
  buf: Uint8Array,
  ipOff: number,
  a: number,
  b: number,
  c: number,
  d: number,
): void {
  rewriteAddr(buf, ipOff, SADDR, a, b, c, d);
}

/** Set the IPv6 destination (four words) and patch the TCP/UDP/ICMPv6 checksum. */
export function ipv6RewriteDst(
  buf: Uint8Array,
  ipOff: number,
  a: number,
  b: number,
  c: number,
  d: number,
): void {
  rewriteAddr(buf, ipOff, DADDR, a, b, c, d);
}

function rewritePort(buf: Uint8Array, ipOff: number, field: number, port: number): void {
  const l4 = l4Of(buf, ipOff);
  if (l4 < 0) return;
  const proto = ipv6L4Proto(buf, ipOff);
  port &= 0xffff;
  const old = read16(buf, l4 + field);
  if (old === port) return;
  if (proto === IPPROTO_SCTP) {
    if (ipv6FragHdrOff(buf, ipOff) >= 0) return;
    write16(buf, l4 + field, port);
    sctpFillCsum(buf, l4, ipv6End(buf, ipOff));
    return;
  }
  const csAt = l4v6CsumField(proto);
  if (csAt < 0 || proto === IPPROTO_ICMPV6) return; // ICMPv6 has no ports
  write16(buf, l4 + field, port);
  patch(buf, l4 + csAt, proto === IPPROTO_UDP, old, port, true);
}

/** Set the TCP/UDP/SCTP source port of the IPv6 packet and fix its checksum. */
export function l6RewriteSrcPort(buf: Uint8Array, ipOff: number, port: number): void {
  rewritePort(buf, ipOff, 0, port);
}

/** Set the TCP/UDP/SCTP destination port of the IPv6 packet and fix its checksum. */
export function l6RewriteDstPort(buf: Uint8Array, ipOff: number, port: number): void {
  rewritePort(buf, ipOff, 2, port);
}

// ---- the packet quoted in an ICMPv6 error --------------------------------------------------
//
// Translating an ICMPv6 error about a NATed flow means rewriting the quoted packet too (the
// kernel's nf_nat_icmpv6_reply_translation), so its sender recognises it: over IPv6 a Packet Too
// Big is the only way a path MTU is learnt (routers never fragment), and it reaches the socket
// only when the quote names the sender's own flow. Every 16-bit word changed inside the quote is
// folded into the ICMPv6 checksum (which covers the message, the quote included); the quoted
// TCP/UDP checksum is patched too when the quote holds it (it covers the quoted addresses through
// the pseudo-header). Preconditions: the packet at ipOff passed ipv6Check, its L4 header is an
// ICMPv6 error that passed icmpv6Check, and the quote passed ipv6CheckQuoted. The outer
// addresses are rewritten with ipv6RewriteSrc/Dst (the ICMPv6 checksum covers them through the
// pseudo-header). Never throws, never allocates.

const ICMPV6_CSUM = 2;
const QUOTE = 8;

/** Write a 16-bit word inside the ICMPv6 message at `icmp`, folding the change into its checksum. */
function icmp6Put16(buf: Uint8Array, icmp: number, at: number, val: number): void {
  const old = read16(buf, at);
  if (old === val) return;
  write16(buf, at, val);
  write16(buf, icmp + ICMPV6_CSUM, csumReplace16(read16(buf, icmp + ICMPV6_CSUM), old, val));
}

/** Quoted L4 checksum offset if the quote holds it (TCP/UDP, not a later fragment), else -1. */
function innerCsumAt(buf: Uint8Array, inner: number, end: number): number {
  const l4 = ipv6QuotedL4Off(buf, inner, end);
  const fh = ipv6QuotedFragHdrOff(buf, inner, end);
  if (fh >= 0 && ipv6FragOffset(buf, fh) !== 0) return -1;
  const proto = ipv6QuotedL4Proto(buf, inner, end);
  if (proto !== IPPROTO_TCP && proto !== IPPROTO_UDP) return -1;
  const at = l4 + l4v6CsumField(proto);
  return at + 2 <= end ? at : -1;
}

function patchInner(
  buf: Uint8Array,
  icmp: number,
  csAt: number,
  udp: boolean,
  old: number,
  val: number,
): void {
  const c = read16(buf, csAt);
  if (udp && c === 0) return;
  const n = csumReplace16(c, old, val);
  icmp6Put16(buf, icmp, csAt, udp && n === 0 ? 0xffff : n);
}

function innerRewriteAddr(
  buf: Uint8Array,
  ipOff: number,
  field: number,
  a: number,
  b: number,
  c: number,
  d: number,
): void {
  const icmp = ipv6L4Off(buf, ipOff);
  const end = ipv6End(buf, ipOff);
  const inner = icmp + QUOTE;
  const csAt = innerCsumAt(buf, inner, end);
  const udp = csAt >= 0 && ipv6QuotedL4Proto(buf, inner, end) === IPPROTO_UDP;
  for (let k = 0; k < 4; k++) {
    const w = (k === 0 ? a : k === 1 ? b : k === 2 ? c : d) | 0;
    const at = inner + field + 4 * k;
    for (let h = 0; h < 4; h += 2) {
      const old = read16(buf, at + h);
      const val = (h === 0 ? w >>> 16 : w) & 0xffff;
      if (old === val) continue;
      icmp6Put16(buf, icmp, at + h, val);
      if (csAt >= 0) patchInner(buf, icmp, csAt, udp, old, val);
    }
  }
}

function innerRewritePort(buf: Uint8Array, ipOff: number, field: number, port: number): void {
  const icmp = ipv6L4Off(buf, ipOff);
  const end = ipv6End(buf, ipOff);
  const inner = icmp + QUOTE;
  const proto = ipv6QuotedL4Proto(buf, inner, end);
  if (proto !== IPPROTO_TCP && proto !== IPPROTO_UDP) return;
  const l4 = ipv6QuotedL4Off(buf, inner, end);
  const fh = ipv6QuotedFragHdrOff(buf, inner, end);
  if ((fh >= 0 && ipv6FragOffset(buf, fh) !== 0) || l4 + 4 > end) return;
  port &= 0xffff;
  const old = read16(buf, l4 + field);
  if (old === port) return;
  icmp6Put16(buf, icmp, l4 + field, port);
  const csAt = innerCsumAt(buf, inner, end);
  if (csAt >= 0) patchInner(buf, icmp, csAt, proto === IPPROTO_UDP, old, port);
}

/** Rewrite the source address (four words) of the packet quoted in the ICMPv6 error at ipOff. */
export function icmpv6ErrRewriteInnerSrc(
  buf: Uint8Array,
  ipOff: number,
  a: number,
  b: number,
  c: number,
  d: number,
): void {
  innerRewriteAddr(buf, ipOff, SADDR, a, b, c, d);
}
/** Rewrite the destination address (four words) of the quoted packet. */
export function icmpv6ErrRewriteInnerDst(
  buf: Uint8Array,
  ipOff: number,
  a: number,
  b: number,
  c: number,
  d: number,
): void {
  innerRewriteAddr(buf, ipOff, DADDR, a, b, c, d);
}
/** Rewrite the TCP/UDP source port of the quoted packet. */
export function icmpv6ErrRewriteInnerSrcPort(buf: Uint8Array, ipOff: number, port: number): void {
  innerRewritePort(buf, ipOff, 0, port);
}
/** Rewrite the TCP/UDP destination port of the quoted packet. */
export function icmpv6ErrRewriteInnerDstPort(buf: Uint8Array, ipOff: number, port: number): void {
  innerRewritePort(buf, ipOff, 2, port);
}

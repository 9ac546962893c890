// Rejecting a packet the way kube-proxy's `-j REJECT` does: an ICMP port unreachable back to
// the client, quoting the offending packet, sent from the address the client tried (the VIP)
// unless DatapathConfig.icmpErrorSrc says otherwise. Like the kernel's icmp_send, it is never
// sent where RFC 1122 3.2.2 forbids it (icmpErrorAllowed: non-unicast source, multicast
// destination, non-first fragment, an ICMP error), and it is rate-limited by a token bucket
// (net.ipv4.icmp_msgs_per_sec / icmp_msgs_burst). A TTL that runs out toward a service is
// answered the same way with time exceeded (lb4TtlExceeded). IPv6 rejects (lb6Reject,
// lb6TimeExceeded) are ICMPv6 errors built the way icmp6_send builds them, under the same
// token bucket, suppressed where RFC 4443 2.4(e) forbids them.

import {
  ICMP_DEST_UNREACH,
  ICMP_EXC_TTL,
  ICMP_PORT_UNREACH,
  ICMP_TIME_EXCEEDED,
  icmpBuildError,
  icmpErrorAllowed,
} from '../../wire/icmp.ts';
import {
  ICMPV6_DEST_UNREACH,
  ICMPV6_EXC_HOPLIMIT,
  ICMPV6_PORT_UNREACH,
  ICMPV6_TIME_EXCEEDED,
  icmpv6BuildError,
  icmpv6ErrorAllowed,
} from '../../wire/icmpv6.ts';
import { A6_DST, type Datapath } from '../state/datapath.ts';
import {
  DROP_ICMP_RATELIMIT,
  DROP_REJECT_FAILED,
  DROP_REJECT_SUPPRESSED,
  REPLY_TTL_EXCEEDED,
} from '../state/reasons.ts';

/** Answer the packet at dp.ipOff with ICMP port unreachable; `reason` names why. */
export function lb4Reject(dp: Datapath, buf: Uint8Array, reason: number): number {
  return icmpAnswer(dp, buf, reason, ICMP_DEST_UNREACH, ICMP_PORT_UNREACH);
}

/**
 * TTL <= 1 toward a service: the kernel's ip_forward sends time exceeded after its DNAT, and
 * its NAT translates the quote back, so the client sees its own packet to the VIP quoted — the
 * packet here is untranslated, so quoting it as it is gives the same bytes.
 */
export function lb4TtlExceeded(dp: Datapath, buf: Uint8Array): number {
  return icmpAnswer(dp, buf, REPLY_TTL_EXCEEDED, ICMP_TIME_EXCEEDED, ICMP_EXC_TTL);
}

/**
 * IPv6: ICMPv6 destination unreachable, port unreachable (code 4), quoting the packet, from
 * the address the client tried (the VIP; icmpErrorSrc is IPv4's); RFC 4443 2.4(e) suppression.
 */
export function lb6Reject(dp: Datapath, buf: Uint8Array, reason: number): number {
  return icmpAnswer(dp, buf, reason, ICMPV6_DEST_UNREACH, ICMPV6_PORT_UNREACH);
}

/** IPv6: hop limit <= 1 toward a service: ICMPv6 time exceeded (code 0), as lb4TtlExceeded. */
export function lb6TimeExceeded(dp: Datapath, buf: Uint8Array): number {
  return icmpAnswer(dp, buf, REPLY_TTL_EXCEEDED, ICMPV6_TIME_EXCEEDED, ICMPV6_EXC_HOPLIMIT);
}

/**
 * The generated error, either family (dp.ipv6): suppressed where the RFC forbids it, under the
 * token bucket, built into dp.out (ICMP or ICMPv6 `type`/`code`).
 */
function icmpAnswer(
  dp: Datapath,
  buf: Uint8Array,
  reason: number,
  type: number,
  code: number,
): number {
  const len = dp.ipEnd - dp.ipOff;
  const v6 = dp.ipv6 === 1;
  const allowed = v6
    ? icmpv6ErrorAllowed(buf, dp.ipOff, len)
    : icmpErrorAllowed(buf, dp.ipOff, len);
  if (!allowed) return DROP_REJECT_SUPPRESSED;
  if (!icmpTakeToken(dp)) return DROP_ICMP_RATELIMIT;
  const out = dp.out;
  const ttl = dp.cfg.icmpTtl;
  const n = v6
    ? icmpv6BuildError(out, 0, out.length, buf, dp.ipOff, len, type, code, 0, dp.a6, A6_DST, ttl)
    : icmpBuildError(out, 0, out.length, buf, dp.ipOff, len, type, code, 0, icmp4Src(dp), ttl);
  if (n === 0) return DROP_REJECT_FAILED;
  dp.outLen = n;
  return reason;
}

/** The source of an IPv4 error: the configured one, else the address the client tried. */
function icmp4Src(dp: Datapath): number {
  return dp.cfg.icmpErrorSrc !== 0 ? dp.cfg.icmpErrorSrc | 0 : dp.daddr;
}

/**
 * Token bucket refilled from the packet clock; a rate of 0 disables the limit. One bucket for
 * both families (Linux keeps icmp_msgs_per_sec global too; its per-destination IPv6 limit,
 * icmpv6_time, is not modelled).
 */
function icmpTakeToken(dp: Datapath): boolean {
  const rate = dp.cfg.icmpRatePerSec;
  if (rate === 0) return true;
  const elapsed = dp.nowMs - dp.icmpLastMs;
  if (elapsed > 0) {
    const t = dp.icmpTokens + (elapsed * rate) / 1000;
    dp.icmpTokens = Math.min(t, dp.cfg.icmpBurst);
    dp.icmpLastMs = dp.nowMs;
  }
  if (dp.icmpTokens < 1) return false;
  dp.icmpTokens -= 1;
  return true;
}

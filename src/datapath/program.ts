// The ClusterIP program: one IP packet in, one numeric verdict out (plus, for V_TX, the packet
// rewritten in place, and for V_REPLY a generated packet in dp.out). Pure function of the
// packet bytes, the maps and the injected clock: it runs the same on a TUN, on a pcap, in a test.
// The version nibble picks the family: IPv6 goes to dp6Run (program6.ts, its own diagram),
// everything else through the IPv4 stages below (which drop a bad version).
//
//   dp4Parse ─▶ TCP/UDP/SCTP ct4LookupOrig ──hit──▶ ctUpdate ─▶ lb4Dnat ─────────▶ TX_DNAT
//      │                        │ miss
//      │                   ct4LookupReply ──hit──▶ ctUpdate ─▶ lb4RevNat ───────▶ TX_REVNAT
//      │                        │ miss
//      │                   lb4LookupService ─miss─▶ VIP? ─yes─▶ reject ──▶ REJECT_UNKNOWN_PORT
//      │                        │ hit                  └─no──▶ PASS_NOT_SERVICE
//      │                   count 0 ─▶ reject ──────────────────────────▶ REJECT_NO_ENDPOINTS
//      │                              (internalTrafficPolicy Local: DROP_NO_LOCAL_ENDPOINTS)
//      │                   lb4SelectBackend ─▶ ct4Create (full: DROP_CT_FULL) ─▶ TX_DNAT_NEW
//      ├──▶ ICMP to a VIP: echo ─▶ DROP_ECHO_TO_VIP (--vip-echo: REPLY_ECHO_FROM_VIP),
//      │                   other ─▶ DROP_ICMP_TO_VIP
//      └──▶ other protocol to a VIP ─▶ reject ─▶ REJECT_UNKNOWN_PROTO; not a VIP ─▶ PASS

import { ICMP_ECHO, ICMP_OK, icmpCheck, icmpIsError, icmpType } from '../wire/icmp.ts';
import { IPPROTO_ICMP, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from '../wire/proto.ts';
import { ct4LookupOrig, ct4LookupReply, ctInvalid } from './stages/ct.ts';
import { CT_DIR_ORIG, CT_DIR_REPLY } from './state/ct-state.ts';
import type { Datapath } from './state/datapath.ts';
import { frag4Later, frag4Remember } from './stages/frag.ts';
import { icmp4RelatedError } from './stages/icmp-error.ts';
import {
  lb4CtCreate,
  lbCtCreateFailed,
  lbNewFlowGate,
  lb4Dnat,
  lb4IsVip,
  lb4LookupService,
  lb4NewFlowTx,
  lb4RevNat,
  lb4SelectBackend,
  lbTrack,
} from './stages/lb.ts';
import { nat4Frontend, nat4Masq, nat4Orig, nat4Reply, nat4RestoreTtl } from './stages/nat.ts';
import { obsAfter, obsBefore } from './stages/observe.ts';
import { dp4Parse } from './stages/parse.ts';
import {
  DROP_BAD_L4_CSUM,
  DROP_ECHO_TO_VIP,
  DROP_ICMP_TO_VIP,
  DROP_NO_BACKEND,
  DROP_TRUNCATED_L4,
  PASS_NOT_SERVICE,
  R_CONTINUE,
  REASON_VERDICT,
  REPLY_REJECT_NO_ENDPOINTS,
  REPLY_REJECT_UNKNOWN_PORT,
  REPLY_REJECT_UNKNOWN_PROTO,
  TX_DNAT,
  TX_REVNAT,
} from './state/reasons.ts';
import { lb4Reject, lb4TtlExceeded } from './stages/reject.ts';
import { lb4MartianSource } from './stages/martian.ts';
import { l4ChecksumValid } from '../wire/checksum.ts';
import { ipv4Ttl } from '../wire/ipv4.ts';
import { V_TX } from './state/verdict.ts';
import { lb4EchoReply } from './stages/vip-echo.ts';
import { dp6Run } from './program6.ts';

/**
 * Process the IP packet at buf[off..off+len) at time nowMs; returns V_PASS/TX/REPLY/DROP.
 * The single exit: every stage returns a reason, counted once and turned into the verdict by
 * the reason table (reasons.ts) — here, or at the end of dpObserved while the ring is on. A GSO
 * super-packet (offloads, src/node/loop.ts) is processed once, as a whole: `segs` is how many
 * packets the wire will carry for it and `extraBytes` the headers its later segments repeat, so
 * that conntrack counts what the wire sees. `csumTrusted` 1: the L4 checksum is partial or
 * already verified (virtio NEEDS_CSUM / DATA_VALID), so a new flow's first packet is not
 * verified again (the kernel skips CHECKSUM_PARTIAL/UNNECESSARY too).
 */
export function dpProcess(
  dp: Datapath,
  buf: Uint8Array,
  off: number,
  len: number,
  nowMs: number,
  segs = 1,
  extraBytes = 0,
  csumTrusted = 0,
): number {
  dp.csumTrusted = csumTrusted;
  dp.segs = segs;
  dp.segExtraBytes = extraBytes;
  dp.outLen = 0;
  dp.lastCtIdx = -1;
  dp.lastCtNew = 0;
  dp.ttlRestored = 0;
  dp.lastBackendId = 0;
  dp.nowMs = nowMs;
  dp.nowSec = Math.floor(nowMs / 1000) >>> 0;
  dp.ipv6 = 0;
  // The one branch of observability: events only while someone listens (stages/observe.ts).
  // The family check, parse and dispatch sit here, not in a function of their own that both
  // paths call: with that extra level V8 compiled it alone, half-inlined, before the packet loop
  // (its inlining budget charges a callee's existing optimized code), and the loop then called
  // it instead of inlining the program — 11% more instructions per established packet at 1000
  // services than before the ring (bench:datapath --count instructions, README "Benchmarks").
  // dpObserved mirrors this block (the version test written out in both: a function for it
  // moved the counts by -0.6% to +0.3%, and README's figures are of this shape).
  if (dp.events.on !== 0) return dpObserved(dp, buf, off, len);
  let r: number;
  if (len > 0 && off >= 0 && off < buf.length && buf[off] >>> 4 === 6) {
    r = dp6Run(dp, buf, off, len);
  } else {
    const v = dp4Parse(dp, buf, off, len);
    r = v !== R_CONTINUE ? v : dp4Stages(dp, buf);
  }
  dp.counters[r]++;
  dp.lastReason = r;
  return REASON_VERDICT[r];
}

/** The rest of dpProcess, described in one ring event (monitor, tap); counts as dpProcess does. */
function dpObserved(dp: Datapath, buf: Uint8Array, off: number, len: number): number {
  const cap = obsBefore(dp.events, dp, buf, off, len);
  let r: number;
  if (len > 0 && off >= 0 && off < buf.length && buf[off] >>> 4 === 6) {
    r = dp6Run(dp, buf, off, len);
  } else {
    const v = dp4Parse(dp, buf, off, len);
    r = v !== R_CONTINUE ? v : dp4Stages(dp, buf);
  }
  obsAfter(dp.events, dp, buf, off, len, r, cap);
  dp.counters[r]++;
  dp.lastReason = r;
  return REASON_VERDICT[r];
}

/** The stages after a clean parse, in order; returns the packet's reason (never R_CONTINUE). */
function dp4Stages(dp: Datapath, buf: Uint8Array): number {
  if (dp.frag === 2) return frag4Later(dp, buf);
  const proto = dp.proto;
  if (proto === IPPROTO_TCP || proto === IPPROTO_UDP || proto === IPPROTO_SCTP) {
    const r = lb4Flow(dp, buf);
    // a translated first fragment: its later fragments get the same addresses (frag.ts)
    if (dp.frag === 1 && REASON_VERDICT[r] === V_TX) frag4Remember(dp, buf);
    return r;
  }
  if (proto === IPPROTO_ICMP) return lb4Icmp(dp, buf);
  if (lb4IsVip(dp, dp.daddr)) return lb4Reject(dp, buf, REPLY_REJECT_UNKNOWN_PROTO);
  return PASS_NOT_SERVICE;
}

/** TCP/UDP/SCTP: tracked flows first (both directions), then the service table. */
function lb4Flow(dp: Datapath, buf: Uint8Array): number {
  const ct = dp.ct;
  const bytes = dp.ipEnd - dp.ipOff + dp.segExtraBytes; // as the wire will carry them
  const { proto, saddr, daddr, sport, dport, nowSec } = dp;
  let i = ct4LookupOrig(ct, proto, saddr, daddr, sport, dport, dp.tcpFlags, nowSec);
  if (i >= 0) {
    if (lb4TtlRunsOut(dp, buf)) return lb4TtlExceeded(dp, buf);
    const t = lbTrack(dp, ct, i, CT_DIR_ORIG, bytes);
    if (t !== R_CONTINUE) return t;
    lb4Dnat(dp, buf, ct.baddr(i), ct.bport(i));
    nat4Orig(dp, buf, i); // masqueraded flow: source too (nat.ts)
    return TX_DNAT;
  }
  i = ct4LookupReply(ct, proto, saddr, daddr, sport, dport, dp.tcpFlags, nowSec);
  if (i >= 0) {
    const t = lbTrack(dp, ct, i, CT_DIR_REPLY, bytes);
    if (t !== R_CONTINUE) return t;
    // The entry's own original destination is the VIP:port the client used: exact for this
    // flow and it cannot go stale, unlike a revNat id whose service may since have been deleted.
    lb4RevNat(dp, buf, ct.daddr(i), ct.dport(i));
    nat4RestoreTtl(dp, buf); // routed into the TUN (steer-replies.ts)
    return TX_REVNAT;
  }
  const r = nat4Reply(dp, buf, bytes); // a reply to a masqueraded flow (nat.ts)
  if (r !== R_CONTINUE) return r;
  return lb4NewFlow(dp, buf, bytes);
}

function lb4NewFlow(dp: Datapath, buf: Uint8Array, bytes: number): number {
  const m = lb4LookupService(dp);
  if (m < 0 && !lb4IsVip(dp, dp.daddr)) return PASS_NOT_SERVICE;
  // toward a service: what the kernel would refuse to track or route is never translated
  const bad = lb4MartianSource(dp);
  if (bad !== R_CONTINUE) return bad;
  if (dp.csumTrusted === 0 && dp.frag === 0 && dp.proto !== IPPROTO_SCTP) {
    if (!l4ChecksumValid(buf, dp.ipOff)) {
      ctInvalid(dp, false); // INVALID whatever ctDropInvalid says: nothing to translate it to
      return DROP_BAD_L4_CSUM;
    }
  }
  if (lb4TtlRunsOut(dp, buf)) return lb4TtlExceeded(dp, buf);
  if (m < 0) return lb4Reject(dp, buf, REPLY_REJECT_UNKNOWN_PORT);
  const x = nat4Frontend(dp, buf, m, bytes); // source ranges, externalTrafficPolicy: Local
  if (x !== R_CONTINUE) return x;
  const g = lbNewFlowGate(dp, dp.svc, m); // no endpoints, no SYN, no SCTP opener
  if (g === REPLY_REJECT_NO_ENDPOINTS) return lb4Reject(dp, buf, g);
  if (g !== R_CONTINUE) return g;
  const b = lb4SelectBackend(dp, m);
  if (b < 0) return DROP_NO_BACKEND;
  const baddr = dp.be.addr(b);
  const bport = dp.be.port(b);
  const i = lb4CtCreate(dp, m, dp.selBackendId, baddr, bport);
  if (i < 0) return lbCtCreateFailed(i);
  const x2 = nat4Masq(dp, buf, i, m, baddr, bport);
  if (x2 !== R_CONTINUE) return x2;
  return lb4NewFlowTx(dp, buf, i, bytes);
}

/**
 * The packet would be forwarded by the kernel after our DNAT with a TTL of 1 or 0: it expires
 * at this node. Node-originated packets are exempt (the kernel never decrements those).
 */
function lb4TtlRunsOut(dp: Datapath, buf: Uint8Array): boolean {
  if (ipv4Ttl(buf, dp.ipOff) > 1) return false;
  return dp.saddr !== dp.nat.nodeIp && dp.saddr !== dp.nat.podGateway;
}

/** ICMP: only traffic to a VIP is ours (iptables mode: echo neither translated nor answered). */
function lb4Icmp(dp: Datapath, buf: Uint8Array): number {
  const whole = icmpCheck(buf, dp.l4Off, dp.ipEnd) === ICMP_OK;
  const type = whole ? icmpType(buf, dp.l4Off) : -1;
  // errors about a service flow first: they come from backends/routers, not only to VIPs
  if (whole && icmpIsError(type)) {
    const r = icmp4RelatedError(dp, buf);
    if (r !== R_CONTINUE) return r;
  }
  if (!lb4IsVip(dp, dp.daddr)) return PASS_NOT_SERVICE;
  if (!whole) return DROP_TRUNCATED_L4;
  if (type === ICMP_ECHO) return dp.cfg.vipEcho ? lb4EchoReply(dp, buf) : DROP_ECHO_TO_VIP;
  return DROP_ICMP_TO_VIP;
}

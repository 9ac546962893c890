// The IPv6 half of the ClusterIP program: dpProcess (program.ts) sends a packet here when its
// version nibble is 6. The same stages and reasons as IPv4 over the IPv6 maps (dp.svc6, be6,
// revnat6, ct6, aff6, nat.snat6, frags6); the rules that are not about addresses — conntrack
// states and lifetimes, the new-flow gate, schedulers, affinity, when to masquerade, SNAT port
// choice, the ICMP token bucket — are the IPv4 stages' own functions, called from here.
//
//   dp6Parse ─▶ later fragment (Fragment header) ─▶ frag6Later
//      │
//      ├─▶ TCP/UDP/SCTP ct6LookupOrig ──hit──▶ ctUpdate ─▶ lb6Dnat ─▶ nat6Orig ──────▶ TX_DNAT
//      │                    │ miss
//      │               ct6LookupReply ──hit──▶ ctUpdate ─▶ lb6RevNat ────────────────▶ TX_REVNAT
//      │                    │ miss
//      │               nat6Reply ──hit──▶ (masqueraded flow's reply) ───────────────▶ TX_REVSNAT
//      │                    │ miss
//      │               lb6LookupService ─miss─▶ VIP? ─yes─▶ ICMPv6 reject ─▶ REJECT_UNKNOWN_PORT
//      │                    │ hit                  └─no──▶ PASS_NOT_SERVICE
//      │               martian source, bad checksum, hop limit <= 1 (time exceeded)
//      │               nat6Frontend (source ranges, ETP Local) ─▶ lbNewFlowGate (no
//      │               endpoints: ICMPv6 reject / ITP Local drop; no SYN; no SCTP opener)
//      │               lb6SelectBackend ─▶ ct6Create ─▶ nat6Masq ─▶ lb6NewFlowTx ─▶ TX_DNAT_NEW
//      ├─▶ ICMPv6: Neighbor Discovery / MLD ─▶ PASS_ND_MLD; an error about a tracked flow ─▶
//      │           icmp6RelatedError; to a VIP: echo ─▶ DROP_ECHO_TO_VIP, other ─▶ DROP_ICMP_TO_VIP
//      └─▶ other protocol to a VIP ─▶ ICMPv6 reject ─▶ REJECT_UNKNOWN_PROTO; else PASS

import {
  ICMPV6_ECHO_REQUEST,
  ICMPV6_OK,
  icmpv6Check,
  icmpv6IsError,
  icmpv6IsNdOrMld,
} from '../wire/icmpv6.ts';
import { l4v6ChecksumValid } from '../wire/checksum6.ts';
import { ipv6HopLimit } from '../wire/ipv6.ts';
import { IPPROTO_ICMPV6, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from '../wire/proto.ts';
import { ct6Create, ct6LookupOrig, ct6LookupReply, ctInvalid } from './stages/ct.ts';
import { frag6Later, frag6Remember } from './stages/frag6.ts';
import { icmp6RelatedError } from './stages/icmp6-error.ts';
import { lbCtCreateFailed, lbNewFlowGate, lbTrack } from './stages/lb.ts';
import {
  lb6Dnat,
  lb6IsVip,
  lb6LookupService,
  lb6NewFlowTx,
  lb6RevNat,
  lb6SelectBackend,
} from './stages/lb6.ts';
import { lb6MartianSource } from './stages/martian.ts';
import { nat6Frontend, nat6Masq, nat6Orig, nat6Reply, nat6RestoreHopLimit } from './stages/nat6.ts';
import { dp6Parse } from './stages/parse6.ts';
import { lb6Reject, lb6TimeExceeded } from './stages/reject.ts';
import { CT_DIR_ORIG, CT_DIR_REPLY } from './state/ct-state.ts';
import { A6_DST, A6_SRC, type Datapath } from './state/datapath.ts';
import {
  DROP_BAD_L4_CSUM,
  DROP_ECHO_TO_VIP,
  DROP_ICMP_TO_VIP,
  DROP_NO_BACKEND,
  DROP_TRUNCATED_L4,
  PASS_ND_MLD,
  PASS_NOT_SERVICE,
  R_CONTINUE,
  REASON_VERDICT,
  REPLY_REJECT_NO_ENDPOINTS,
  REPLY_REJECT_UNKNOWN_PORT,
  REPLY_REJECT_UNKNOWN_PROTO,
  TX_DNAT,
  TX_REVNAT,
} from './state/reasons.ts';
import { V_TX } from './state/verdict.ts';

/** The IPv6 stages in order; returns the packet's reason (never R_CONTINUE). */
export function dp6Run(dp: Datapath, buf: Uint8Array, off: number, len: number): number {
  const v = dp6Parse(dp, buf, off, len);
  if (v !== R_CONTINUE) return v;
  if (dp.frag === 2) return frag6Later(dp, buf);
  const proto = dp.proto;
  if (proto === IPPROTO_TCP || proto === IPPROTO_UDP || proto === IPPROTO_SCTP) {
    const r = lb6Flow(dp, buf);
    // a translated first fragment: its later fragments get the same addresses (frag6.ts)
    if (dp.frag === 1 && REASON_VERDICT[r] === V_TX) frag6Remember(dp, buf);
    return r;
  }
  if (proto === IPPROTO_ICMPV6) return lb6Icmp(dp, buf);
  if (lb6IsVip(dp, dp.a6, A6_DST)) return lb6Reject(dp, buf, REPLY_REJECT_UNKNOWN_PROTO);
  return PASS_NOT_SERVICE;
}

/** TCP/UDP/SCTP: tracked flows first (both directions), then the service table. */
function lb6Flow(dp: Datapath, buf: Uint8Array): number {
  const ct = dp.ct6;
  const bytes = dp.ipEnd - dp.ipOff + dp.segExtraBytes;
  let i = ct6LookupOrig(dp);
  if (i >= 0) {
    if (lb6HopLimitRunsOut(dp, buf)) return lb6TimeExceeded(dp, buf);
    const t = lbTrack(dp, ct, i, CT_DIR_ORIG, bytes);
    if (t !== R_CONTINUE) return t;
    lb6Dnat(dp, buf, i);
    nat6Orig(dp, buf, i); // masqueraded flow: source too (nat6.ts)
    return TX_DNAT;
  }
  i = ct6LookupReply(dp);
  if (i >= 0) {
    const t = lbTrack(dp, ct, i, CT_DIR_REPLY, bytes);
    if (t !== R_CONTINUE) return t;
    lb6RevNat(dp, buf, i); // the entry's own VIP:port, as IPv4 (program.ts)
    nat6RestoreHopLimit(dp, buf); // routed into the TUN (steer-replies.ts)
    return TX_REVNAT;
  }
  const r = nat6Reply(dp, buf, bytes);
  if (r !== R_CONTINUE) return r;
  return lb6NewFlow(dp, buf, bytes);
}

function lb6NewFlow(dp: Datapath, buf: Uint8Array, bytes: number): number {
  const m = lb6LookupService(dp);
  if (m < 0 && !lb6IsVip(dp, dp.a6, A6_DST)) return PASS_NOT_SERVICE;
  const bad = lb6MartianSource(dp);
  if (bad !== R_CONTINUE) return bad;
  if (dp.csumTrusted === 0 && dp.frag === 0 && dp.proto !== IPPROTO_SCTP) {
    if (!l4v6ChecksumValid(buf, dp.ipOff, dp.l4Off, dp.ipEnd, dp.proto)) {
      ctInvalid(dp, false);
      return DROP_BAD_L4_CSUM;
    }
  }
  if (lb6HopLimitRunsOut(dp, buf)) return lb6TimeExceeded(dp, buf);
  if (m < 0) return lb6Reject(dp, buf, REPLY_REJECT_UNKNOWN_PORT);
  const x = nat6Frontend(dp, buf, m, bytes);
  if (x !== R_CONTINUE) return x;
  const g = lbNewFlowGate(dp, dp.svc6, m);
  if (g === REPLY_REJECT_NO_ENDPOINTS) return lb6Reject(dp, buf, g);
  if (g !== R_CONTINUE) return g;
  const b = lb6SelectBackend(dp, m); // its address now at dp.a6[A6_BE]
  if (b < 0) return DROP_NO_BACKEND;
  const bport = dp.be6.port(b);
  const i = ct6Create(dp, dp.selBackendId, bport, dp.svc6.revNat(m));
  if (i < 0) return lbCtCreateFailed(i);
  const x2 = nat6Masq(dp, buf, i, m, bport);
  if (x2 !== R_CONTINUE) return x2;
  return lb6NewFlowTx(dp, buf, i, bytes);
}

/**
 * The kernel would forward the packet after our DNAT with a hop limit of 1 or 0: it expires at
 * this node (ip6_forward). Node-originated packets are exempt, as for IPv4.
 */
function lb6HopLimitRunsOut(dp: Datapath, buf: Uint8Array): boolean {
  if (ipv6HopLimit(buf, dp.ipOff) > 1) return false;
  const nat = dp.nat;
  if (nat.hasNode6 === 0) return true;
  const a = dp.a6;
  const n = nat.nodeIp6;
  const g = nat.podGateway6;
  const s = A6_SRC;
  const isNode = a[s] === n[0] && a[s + 1] === n[1] && a[s + 2] === n[2] && a[s + 3] === n[3];
  const isGw = a[s] === g[0] && a[s + 1] === g[1] && a[s + 2] === g[2] && a[s + 3] === g[3];
  return !isNode && !isGw;
}

/**
 * ICMPv6: Neighbor Discovery and MLD are the node's own link traffic and pass untouched;
 * errors about service flows are translated; to a VIP, nothing is answered or forwarded.
 */
function lb6Icmp(dp: Datapath, buf: Uint8Array): number {
  const whole = icmpv6Check(buf, dp.l4Off, dp.ipEnd) === ICMPV6_OK;
  const type = whole ? buf[dp.l4Off] : -1;
  if (whole && icmpv6IsNdOrMld(type)) return PASS_ND_MLD;
  if (whole && icmpv6IsError(type)) {
    const r = icmp6RelatedError(dp, buf);
    if (r !== R_CONTINUE) return r;
  }
  if (!lb6IsVip(dp, dp.a6, A6_DST)) return PASS_NOT_SERVICE;
  if (!whole) return DROP_TRUNCATED_L4;
  return type === ICMPV6_ECHO_REQUEST ? DROP_ECHO_TO_VIP : DROP_ICMP_TO_VIP;
}

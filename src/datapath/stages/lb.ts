// Load-balancing stages of the ClusterIP program, Cilium's split (bpf/lib/lb.h): find the
// service master entry, pick a backend slot, and rewrite the packet (DNAT on the way in,
// reverse NAT on the way out) with incremental checksum updates.

import type { AffinityMap } from '../../maps/affinity.ts';
import type { BackendMap } from '../../maps/backends.ts';
import { type ConntrackMap, CT_CLASH } from '../../maps/conntrack.ts';
import {
  SVC_F_AFFINITY,
  SVC_F_ITP_LOCAL,
  SVC_F_WILDCARD,
  type ServiceMap,
} from '../../maps/services.ts';
import { TCP_RST, tcpFlagsValid } from '../../wire/tcp.ts';
import { ctSctpMayStart } from './ct-sctp.ts';
import { SCHED_LC, SCHED_NQ, SCHED_RANDOM } from '../../sched/kinds.ts';
import { IPPROTO_SCTP, IPPROTO_TCP } from '../../wire/proto.ts';
import {
  ipv4RewriteDst,
  ipv4RewriteSrc,
  l4RewriteDstPort,
  l4RewriteSrcPort,
} from '../../wire/rewrite.ts';
import { ct4Create, ctInvalid, ctTcpMayStart, ctUpdate } from './ct.ts';
import {
  CT_DIR_ORIG,
  CT_SCTP_ESTABLISHED,
  CT_TCP_ESTABLISHED,
  ctTcpState,
} from '../state/ct-state.ts';
import type { Datapath } from '../state/datapath.ts';
import {
  DROP_CT_CLASH,
  DROP_CT_FULL,
  DROP_CT_INVALID,
  DROP_NO_LOCAL_ENDPOINTS,
  R_CONTINUE,
  REPLY_REJECT_NO_ENDPOINTS,
  TX_DNAT_NEW,
} from '../state/reasons.ts';

/** Master entry of (daddr, dport, proto), or -1. */
export function lb4LookupService(dp: Datapath): number {
  return dp.svc.lookup(dp.daddr, dp.dport, dp.proto, 0);
}

/** Whether daddr is a known VIP (a wildcard master: port 0, proto 0). */
export function lb4IsVip(dp: Datapath, addr: number): boolean {
  const w = dp.svc.lookup(addr, 0, 0, 0);
  return w >= 0 && (dp.svc.flags(w) & SVC_F_WILDCARD) !== 0;
}

/**
 * Pick a backend for a new flow. Session affinity first: a client with a fresh entry for this
 * service keeps its backend while that backend is still a candidate (kube-proxy's `recent`
 * match, checked before the probability rules). Otherwise the service's scheduler: `random`
 * (iptables `statistic --mode random`) draws a slot; the others ask dp.sched. The control
 * plane puts only eligible endpoints in the slots and the scheduler table. Returns the backend
 * map index, or -1 (no candidate, or maps inconsistent). The backend id is left in
 * dp.selBackendId; a new or refreshed affinity entry is recorded.
 */
export function lb4SelectBackend(dp: Datapath, master: number): number {
  const svc = dp.svc;
  const revNat = svc.revNat(master);
  const affinity = (svc.flags(master) & SVC_F_AFFINITY) !== 0;
  if (affinity) {
    const a = dp.aff.lookupFresh(dp.saddr, revNat, dp.nowSec, svc.affinityTimeout(master));
    const b = a < 0 ? -1 : lbAffinityBackend(dp, svc, master, dp.aff, dp.be, a);
    if (b >= 0) return b;
  }
  let id = 0;
  if (svc.scheduler(master) === SCHED_RANDOM) {
    const slot = 1 + dp.rng.below(svc.count(master));
    const s = svc.lookup(dp.daddr, dp.dport, dp.proto, slot);
    if (s < 0) return -1;
    id = svc.backendId(s);
  } else {
    id = dp.sched.pickId(revNat, dp.saddr, dp.daddr, dp.sport, dp.dport, dp.proto, dp.rng);
    if (id === 0) return -1;
  }
  dp.selBackendId = id;
  if (affinity) dp.aff.upsert(dp.saddr, revNat, id, dp.nowSec);
  return dp.be.lookup(id);
}

/**
 * The backend of a fresh affinity entry `a` of master m, both families: its index in `be`, or
 * -1 when it may no longer be used. The control plane drops entries whose backend left the
 * service (or got weight 0); non-random schedulers check again here, so a weight change takes
 * effect at once. A used entry is refreshed and its backend id left in dp.selBackendId.
 */
export function lbAffinityBackend(
  dp: Datapath,
  svc: ServiceMap,
  m: number,
  aff: AffinityMap,
  be: BackendMap,
  a: number,
): number {
  const revNat = svc.revNat(m);
  const id = aff.backendId(a);
  const random = svc.scheduler(m) === SCHED_RANDOM;
  const k = random ? 0 : dp.sched.indexOf(revNat, id);
  if (!random && (k < 0 || dp.sched.weight(revNat, k) <= 0)) return -1;
  const b = be.lookup(id);
  if (b < 0) return -1;
  aff.touch(a, dp.nowSec);
  dp.selBackendId = id;
  return b;
}

/**
 * The checks between "master m of `svc` takes this new flow" and backend selection, both
 * families: no endpoint (REPLY_REJECT_NO_ENDPOINTS — the caller answers with its family's
 * ICMP — or DROP_NO_LOCAL_ENDPOINTS for internalTrafficPolicy Local), a TCP first packet
 * without a lone SYN, an SCTP packet that cannot open an association. R_CONTINUE when the flow
 * may be created.
 */
export function lbNewFlowGate(dp: Datapath, svc: ServiceMap, m: number): number {
  if (svc.count(m) === 0) {
    if ((svc.flags(m) & SVC_F_ITP_LOCAL) !== 0) return DROP_NO_LOCAL_ENDPOINTS;
    return REPLY_REJECT_NO_ENDPOINTS;
  }
  // nothing legitimate starts a TCP connection without a SYN (conntrack: INVALID); a flag
  // combination conntrack refuses outright (SYN|FIN, no flag, ...) is never tracked, so there
  // is nothing to translate it to: dropped whatever ctDropInvalid says
  if (dp.proto === IPPROTO_TCP && !ctTcpMayStart(dp.tcpFlags)) {
    const never = (dp.tcpFlags & TCP_RST) !== 0 || !tcpFlagsValid(dp.tcpFlags);
    if (ctInvalid(dp, never)) return DROP_CT_INVALID;
  }
  // nor an SCTP association without INIT (or another opener): the kernel tracks no such flow,
  // and untranslated it would go to the VIP, which no host owns — always dropped
  if (dp.proto === IPPROTO_SCTP && !ctSctpMayStart(dp.sctpChunks)) {
    ctInvalid(dp, false);
    return DROP_CT_INVALID;
  }
  return R_CONTINUE;
}

// ---- connection counts for lc / wlc / sed / nq (IPVS's activeconns / inactconns) ----------
//
// A flow counts as inactive from its creation and as active while its TCP state is ESTABLISHED
// (IPVS: IP_VS_TCP_S_ESTABLISHED; UDP stays inactive). The program
// reports creation and flag changes; whoever deletes an entry calls lbConnRelease first
// (the agent's GC does; dpConnRecount in load.ts repairs counts of entries deleted elsewhere).

/** 1 if a flow with these conntrack flags counts as active (TCP/SCTP ESTABLISHED), else 0. */
export function lbConnActive(proto: number, ctFlags: number): number {
  if (proto === IPPROTO_TCP) return ctTcpState(ctFlags) === CT_TCP_ESTABLISHED ? 1 : 0;
  return proto === IPPROTO_SCTP && ctTcpState(ctFlags) === CT_SCTP_ESTABLISHED ? 1 : 0;
}

/** What advances the flow's state: TCP flags, or the SCTP chunk summary. */
export function ctEvent(dp: Datapath): number {
  return dp.proto === IPPROTO_SCTP ? dp.sctpChunks : dp.tcpFlags;
}

function countsConns(dp: Datapath, revNat: number): boolean {
  const k = dp.sched.kind(revNat);
  return k >= SCHED_LC && k <= SCHED_NQ;
}

/** A flow was created (entry i of `ct`, either family's conntrack). */
export function lbConnOpen(dp: Datapath, ct: ConntrackMap, i: number): void {
  const revNat = ct.revNat(i);
  if (!countsConns(dp, revNat)) return;
  const a = lbConnActive(ct.proto(i), ct.flags(i));
  dp.sched.connAdjust(revNat, ct.backendId(i), a, 1 - a);
}

/** Entry i's flags changed from oldFlags: move it between inactive and active if needed. */
export function lbConnFlags(dp: Datapath, ct: ConntrackMap, i: number, oldFlags: number): void {
  const proto = ct.proto(i);
  const d = lbConnActive(proto, ct.flags(i)) - lbConnActive(proto, oldFlags);
  if (d === 0) return;
  const revNat = ct.revNat(i);
  if (!countsConns(dp, revNat)) return;
  dp.sched.connAdjust(revNat, ct.backendId(i), d, -d);
}

/** Entry i of `ct` is about to be deleted (expiry, flush): its connection no longer counts. */
export function lbConnRelease(dp: Datapath, ct: ConntrackMap, i: number): void {
  const revNat = ct.revNat(i);
  if (!countsConns(dp, revNat)) return;
  const a = lbConnActive(ct.proto(i), ct.flags(i));
  dp.sched.connAdjust(revNat, ct.backendId(i), -a, a - 1);
}

// ---- the conntrack side of a packet, shared by every path that tracks flows ---------------
// (ClusterIP, masquerade, externalTrafficPolicy: Local, both families): one place, so that
// each path counts connections and drops INVALID packets the same way.

/**
 * A packet of `bytes` in direction `dir` of tracked flow i of `ct` (dp.ct or dp.ct6): state,
 * lifetime and counters, connection counts, trace. R_CONTINUE, or DROP_CT_INVALID for an
 * INVALID packet when cfg.ctDropInvalid says so.
 */
export function lbTrack(
  dp: Datapath,
  ct: ConntrackMap,
  i: number,
  dir: number,
  bytes: number,
): number {
  const f0 = ct.flags(i);
  const tmo = dp.ctTimeouts;
  const ok = ctUpdate(ct, i, dir, dp.proto, ctEvent(dp), bytes, dp.nowSec, tmo, dp.segs);
  if (ok === 0 && ctInvalid(dp, false)) return DROP_CT_INVALID;
  if (ct.flags(i) !== f0) lbConnFlags(dp, ct, i, f0);
  dp.lastCtIdx = i;
  dp.lastBackendId = ct.backendId(i);
  return R_CONTINUE;
}

/**
 * The conntrack entry of a new flow of master m to backend `backendId` at baddr:bport, or
 * CT_FULL / CT_CLASH (< 0) when none can be had; lbCtCreateFailed names the drop.
 */
export function lb4CtCreate(
  dp: Datapath,
  m: number,
  backendId: number,
  baddr: number,
  bport: number,
): number {
  return ct4Create(dp, backendId, baddr, bport, dp.svc.revNat(m));
}

/** The reason a failed lb4CtCreate drops the packet: another flow owns the reply tuple, or full. */
export function lbCtCreateFailed(code: number): number {
  return code === CT_CLASH ? DROP_CT_CLASH : DROP_CT_FULL;
}

/** The first packet of new flow i (source already masqueraded if it must be): DNAT it. */
export function lb4NewFlowTx(dp: Datapath, buf: Uint8Array, i: number, bytes: number): number {
  const ct = dp.ct;
  lbNewFlowTrack(dp, ct, i, bytes);
  lb4Dnat(dp, buf, ct.baddr(i), ct.bport(i));
  return TX_DNAT_NEW;
}

/** The conntrack side of a new flow's first packet (entry i of `ct`), both families. */
export function lbNewFlowTrack(dp: Datapath, ct: ConntrackMap, i: number, bytes: number): void {
  ctUpdate(ct, i, CT_DIR_ORIG, dp.proto, ctEvent(dp), bytes, dp.nowSec, dp.ctTimeouts, dp.segs);
  lbConnOpen(dp, ct, i);
  dp.lastCtIdx = i;
  dp.lastCtNew = 1;
  dp.lastBackendId = ct.backendId(i);
}

/** Client -> VIP becomes client -> backend: destination address and port. */
export function lb4Dnat(dp: Datapath, buf: Uint8Array, baddr: number, bport: number): void {
  ipv4RewriteDst(buf, dp.ipOff, baddr);
  if (bport !== dp.dport) l4RewriteDstPort(buf, dp.ipOff, bport);
}

/** Backend -> client becomes VIP -> client: source address and port. */
export function lb4RevNat(dp: Datapath, buf: Uint8Array, vip: number, vport: number): void {
  ipv4RewriteSrc(buf, dp.ipOff, vip);
  if (vport !== dp.sport) l4RewriteSrcPort(buf, dp.ipOff, vport);
}

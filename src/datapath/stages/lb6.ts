// Load-balancing stages of the IPv6 program (Cilium's lb6_* in bpf/lib/lb.h): the IPv6 service
// map lookup, backend selection and the NAT66 rewrites. What is not about addresses is the
// IPv4 stages' (lb.ts): connection counts and conntrack bookkeeping (lbTrack, lbNewFlowTrack),
// the affinity rule (lbAffinityBackend), the new-flow gate (lbNewFlowGate), the schedulers.
// Addresses are four int32 words in dp.a6 (A6_* offsets of state/datapath.ts).

import { SVC_F_AFFINITY, SVC_F_WILDCARD } from '../../maps/services.ts';
import { SCHED_RANDOM } from '../../sched/kinds.ts';
import {
  ipv6RewriteDst,
  ipv6RewriteSrc,
  l6RewriteDstPort,
  l6RewriteSrcPort,
} from '../../wire/rewrite6.ts';
import { A6_BE, A6_DST, A6_SRC, type Datapath } from '../state/datapath.ts';
import { TX_DNAT_NEW } from '../state/reasons.ts';
import { lbAffinityBackend, lbNewFlowTrack } from './lb.ts';

/** IPv6 master entry of (destination, dport, proto), or -1. */
export function lb6LookupService(dp: Datapath): number {
  return dp.svc6.lookup6(dp.a6, A6_DST, dp.dport, dp.proto, 0);
}

/** Whether the IPv6 address at a[at] is a known VIP (a wildcard master: port 0, proto 0). */
export function lb6IsVip(dp: Datapath, a: Int32Array, at: number): boolean {
  const w = dp.svc6.lookup6(a, at, 0, 0, 0);
  return w >= 0 && (dp.svc6.flags(w) & SVC_F_WILDCARD) !== 0;
}

/**
 * lb4SelectBackend for IPv6: affinity first (the client's four words), then the service's
 * scheduler. Returns the index in dp.be6, or -1; the backend id is left in dp.selBackendId and
 * its address copied to dp.a6[A6_BE].
 */
export function lb6SelectBackend(dp: Datapath, master: number): number {
  const b = lb6Pick(dp, master);
  if (b >= 0) lb6BackendAddr(dp, b);
  return b;
}

function lb6Pick(dp: Datapath, master: number): number {
  const svc = dp.svc6;
  const a6 = dp.a6;
  const revNat = svc.revNat(master);
  const affinity = (svc.flags(master) & SVC_F_AFFINITY) !== 0;
  if (affinity) {
    const t = svc.affinityTimeout(master);
    const a = dp.aff6.lookupFresh6(a6, A6_SRC, revNat, dp.nowSec, t);
    const b = a < 0 ? -1 : lbAffinityBackend(dp, svc, master, dp.aff6, dp.be6, a);
    if (b >= 0) return b;
  }
  let id = 0;
  if (svc.scheduler(master) === SCHED_RANDOM) {
    const slot = 1 + dp.rng.below(svc.count(master));
    const s = svc.lookup6(a6, A6_DST, dp.dport, dp.proto, slot);
    if (s < 0) return -1;
    id = svc.backendId(s);
  } else {
    const { sport, dport, proto, rng } = dp;
    id = dp.sched.pickId6(revNat, a6, A6_SRC, A6_DST, sport, dport, proto, rng);
    if (id === 0) return -1;
  }
  dp.selBackendId = id;
  if (affinity) dp.aff6.upsert6(a6, A6_SRC, revNat, id, dp.nowSec);
  return dp.be6.lookup(id);
}

/** Copy backend b of dp.be6 to dp.a6[A6_BE] (paths that pick a backend themselves). */
export function lb6BackendAddr(dp: Datapath, b: number): void {
  for (let k = 0; k < 4; k++) dp.a6[A6_BE + k] = dp.be6.addrWord(b, k);
}

/** The first packet of new IPv6 flow i (source already masqueraded if it must be): DNAT it. */
export function lb6NewFlowTx(dp: Datapath, buf: Uint8Array, i: number, bytes: number): number {
  lbNewFlowTrack(dp, dp.ct6, i, bytes);
  lb6Dnat(dp, buf, i);
  return TX_DNAT_NEW;
}

/** Client -> VIP becomes client -> backend: the address and port conntrack entry i holds. */
export function lb6Dnat(dp: Datapath, buf: Uint8Array, i: number): void {
  const ct = dp.ct6;
  const w0 = ct.baddrWord(i, 0);
  const w1 = ct.baddrWord(i, 1);
  ipv6RewriteDst(buf, dp.ipOff, w0, w1, ct.baddrWord(i, 2), ct.baddrWord(i, 3));
  const bport = ct.bport(i);
  if (bport !== dp.dport) l6RewriteDstPort(buf, dp.ipOff, bport);
}

/** Backend -> client becomes VIP -> client: entry i's original destination (VIP:port). */
export function lb6RevNat(dp: Datapath, buf: Uint8Array, i: number): void {
  const ct = dp.ct6;
  const w0 = ct.daddrWord(i, 0);
  const w1 = ct.daddrWord(i, 1);
  ipv6RewriteSrc(buf, dp.ipOff, w0, w1, ct.daddrWord(i, 2), ct.daddrWord(i, 3));
  const vport = ct.dport(i);
  if (vport !== dp.sport) l6RewriteSrcPort(buf, dp.ipOff, vport);
}

/** Whether the four words at a[x] and a[y] are one address. */
export function addr6Same(a: Int32Array, x: number, y: number): boolean {
  return a[x] === a[y] && a[x + 1] === a[y + 1] && a[x + 2] === a[y + 2] && a[x + 3] === a[y + 3];
}

// Adopting the maps a dead run left (pin.ts), in two steps of a takeover (agent.ts):
//
//   at attach, before the packet loop reads a packet — schedulersFromMaps: the per-service
//     scheduler state (dp.sched: rr cursor, lc counts, Maglev tables) lives in the agent's heap,
//     not in the pinned file, so a restarted agent starts with none, and rr/wrr/lc/../maglev
//     services would answer DROP_NO_BACKEND until the first sync. It is rebuilt from the pinned
//     service map (the candidates, in slot order; the scheduler kind in the master) and the
//     backends map (Maglev's names), connection counts recounted from the pinned conntrack.
//     Weights (kubetun.io/weights) are not in the maps: every candidate gets weight 1 until the
//     first sync sets the real ones (a Maglev table of weighted backends differs meanwhile).
//
//   after the first sync — sweepStale: while no agent ran, Services and endpoints may have gone
//     away. The first load of a fresh loader writes what exists now but cannot delete what it
//     never wrote, so the dead run's entries for them would stay for good (a deleted Service's
//     VIP still answering). The same ports are loaded into a throwaway heap datapath — ids are
//     deterministic (load.ts), so it holds exactly the keys the live load wrote — and every
//     pinned service entry, backend and reverse-NAT id it lacks is deleted; UDP flows to a
//     backend or service swept are deleted too, as kube-proxy's UDP reconciler does (TCP flows
//     are kept: TCP notices a dead peer itself).
import { createDatapath, type Datapath } from '../datapath/state/datapath.ts';
import { dpConnRecount } from '../housekeeping/housekeeping.ts';
import { type DpLoadOptions, DpLoader } from '../loader/load.ts';
import type { ResolvedServicePort } from '../model.ts';
import { SCHED_MAGLEV, SCHED_RANDOM } from '../sched/kinds.ts';
import type { SchedBackend } from '../sched/table.ts';
import { IPPROTO_SCTP, IPPROTO_UDP } from '../wire/proto.ts';

/** Rebuilds dp.sched from the pinned maps; returns how many services got a scheduler. */
export function schedulersFromMaps(dp: Datapath, nowSec: number): number {
  const svc = dp.svc;
  let n = 0;
  for (let m = svc.next(0); m >= 0; m = svc.next(m + 1)) {
    const kind = svc.scheduler(m);
    if (svc.slotOf(m) !== 0 || kind === SCHED_RANDOM) continue;
    const vip = svc.vipOf(m);
    const port = svc.portOf(m);
    const proto = svc.protoOf(m);
    const backends: SchedBackend[] = [];
    for (let slot = 1; slot <= svc.count(m); slot++) {
      const s = svc.lookup(vip, port, proto, slot);
      const b = s < 0 ? -1 : dp.be.lookup(svc.backendId(s));
      if (b < 0) continue; // a hole the dead run left mid-write: not a candidate
      const id = svc.backendId(s);
      backends.push(
        kind === SCHED_MAGLEV
          ? { id, addr: dp.be.addr(b), port: dp.be.port(b), proto: dp.be.proto(b) }
          : { id },
      );
    }
    try {
      dp.sched.set(svc.revNat(m), kind, backends);
      n++;
    } catch {
      // a master the dead run left half-written: the first sync sets it
    }
  }
  dpConnRecount(dp, nowSec);
  return n;
}

export interface SweepReport {
  /** service map entries (masters and slots) of frontends that no longer exist */
  services: number;
  backends: number;
  revNats: number;
  /** UDP/SCTP flows to a swept backend or service */
  flows: number;
}

/**
 * Deletes what the dead run wrote that the first load of `ports` did not (see the header).
 * Run right after that load, before any other write.
 */
export function sweepStale(
  dp: Datapath,
  ports: readonly ResolvedServicePort[],
  opts: DpLoadOptions,
): SweepReport {
  const ref = createDatapath({ ...dp.cfg, ctCapacity: 16, affinityCapacity: 16, shared: false });
  new DpLoader(ref).load(ports, opts);
  const r: SweepReport = { services: 0, backends: 0, revNats: 0, flows: 0 };
  const stale: [number, number, number, number][] = [];
  for (let i = dp.svc.next(0); i >= 0; i = dp.svc.next(i + 1)) {
    const key = [dp.svc.vipOf(i), dp.svc.portOf(i), dp.svc.protoOf(i), dp.svc.slotOf(i)] as const;
    if (ref.svc.lookup(...key) < 0) stale.push([...key]);
  }
  for (const k of stale) if (dp.svc.delete(...k)) r.services++;
  const goneBe = new Set<number>();
  for (let i = dp.be.next(0); i >= 0; i = dp.be.next(i + 1)) {
    if (ref.be.lookup(dp.be.idOf(i)) < 0) goneBe.add(dp.be.idOf(i));
  }
  for (const id of goneBe) if (dp.be.delete(id)) r.backends++;
  const goneRn = new Set<number>();
  for (let id = dp.revnat.next(1); id >= 0; id = dp.revnat.next(id + 1)) {
    if (ref.revnat.lookup(id) < 0) goneRn.add(id);
  }
  for (const id of goneRn) {
    dp.revnat.delete(id);
    dp.sched.delete(id);
    r.revNats++;
  }
  const ct = dp.ct;
  for (let i = ct.next(0); i >= 0; i = ct.next(i + 1)) {
    const p = ct.proto(i);
    if (p !== IPPROTO_UDP && p !== IPPROTO_SCTP) continue;
    if (!goneBe.has(ct.backendId(i)) && !goneRn.has(ct.revNat(i))) continue;
    ct.delete(i);
    r.flows++;
  }
  return r;
}

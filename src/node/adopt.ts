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
//   inside the first full sync, after its writes — sweepStale: while no agent ran, Services and
//     endpoints may have gone away. The first load of a fresh loader writes what exists now but
//     cannot delete what it never wrote, so the dead run's entries for them would stay for good
//     (a deleted Service's VIP still answering). The same ports are loaded into a throwaway heap
//     datapath — ids are deterministic (load.ts), so it holds exactly the keys the live load
//     wrote — and every pinned service entry, backend and reverse-NAT id it lacks is deleted;
//     UDP flows to a backend or service swept are deleted too, as kube-proxy's UDP reconciler
//     does (TCP flows are kept: TCP notices a dead peer itself). All of it in steps, the packet
//     loop turning between two (10k Services: ~0.25 s of work, ~0.5 s in one go in the agent).
import { createDatapath, type Datapath } from '../datapath/state/datapath.ts';
import { dpConnRecount } from '../housekeeping/housekeeping.ts';
import { SYNC_SLICE } from '../control/datapath-sync.ts';
import { inSteps, nextTurn } from '../control/turns.ts';
import { type DpLoadOptions, DpLoader, inWriteOrder } from '../loader/load.ts';
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
 * Map entries a sweep examines or deletes per turn of the event loop: a scan of 4,096 is
 * well under 1 ms idle. The reference load goes SYNC_SLICE service ports a turn, as a sync
 * writes them.
 */
export const SWEEP_STEP = 4096;

/**
 * Deletes what the dead run wrote that the first load of `ports` did not (see the header), in
 * steps: the packet loop runs on this thread (a takeover forwards before its first sync), and
 * at 10k Services the reference load and the scans held it ~0.5 s in one go. Run right after
 * that load, and before any other write to the service maps — inside the first sync (agent.ts),
 * so the runner starts no other while the sweep runs. The packet loop may add and delete flows
 * meanwhile: entries never move (hashtab.ts), so a scan across turns visits each entry that
 * stays once; a UDP flow made to a swept backend behind the conntrack scan is left to time out.
 */
export async function sweepStale(
  dp: Datapath,
  ports: readonly ResolvedServicePort[],
  opts: DpLoadOptions,
): Promise<SweepReport> {
  const ref = createDatapath({ ...dp.cfg, ctCapacity: 16, affinityCapacity: 16, shared: false });
  const loader = new DpLoader(ref);
  // in write order, a slice at a time: ids are the live load's however it is split (load.ts)
  const sorted = inWriteOrder(ports);
  for (let i = 0; i < sorted.length; i += SYNC_SLICE) {
    if (i > 0) await nextTurn();
    loader.update(sorted.slice(i, i + SYNC_SLICE), [], opts);
  }
  const r: SweepReport = { services: 0, backends: 0, revNats: 0, flows: 0 };
  const stale: [number, number, number, number][] = [];
  await eachLive(dp.svc, (i) => {
    const key = [dp.svc.vipOf(i), dp.svc.portOf(i), dp.svc.protoOf(i), dp.svc.slotOf(i)] as const;
    if (ref.svc.lookup(...key) < 0) stale.push([...key]);
  });
  await inSteps(stale, SWEEP_STEP, (k) => {
    if (dp.svc.delete(...k)) r.services++;
  });
  const goneBe = new Set<number>();
  await eachLive(dp.be, (i) => {
    if (ref.be.lookup(dp.be.idOf(i)) < 0) goneBe.add(dp.be.idOf(i));
  });
  await inSteps([...goneBe], SWEEP_STEP, (id) => {
    if (dp.be.delete(id)) r.backends++;
  });
  const goneRn = new Set<number>();
  for (let id = dp.revnat.next(1); id >= 0; id = dp.revnat.next(id + 1)) {
    if (ref.revnat.lookup(id) < 0) goneRn.add(id);
  }
  await inSteps([...goneRn], SWEEP_STEP, (id) => {
    dp.revnat.delete(id);
    dp.sched.delete(id);
    r.revNats++;
  });
  const ct = dp.ct;
  await eachLive(ct, (i) => {
    const p = ct.proto(i);
    if (p !== IPPROTO_UDP && p !== IPPROTO_SCTP) return;
    if (!goneBe.has(ct.backendId(i)) && !goneRn.has(ct.revNat(i))) return;
    ct.delete(i);
    r.flows++;
  });
  return r;
}

/** fn(i) for each live entry of a map, SWEEP_STEP entries a turn (fn may delete entry i). */
async function eachLive(
  map: { next(from: number): number },
  fn: (i: number) => void,
): Promise<void> {
  let n = 0;
  for (let i = map.next(0); i >= 0; i = map.next(i + 1)) {
    fn(i);
    if (++n % SWEEP_STEP === 0) await nextTurn();
  }
}

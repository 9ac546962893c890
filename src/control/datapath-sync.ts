// The Proxier's data-plane half for kubetun's own maps: program = DpLoader.update for a partial
// sync (only the service ports the tracker reports changed or deleted; cost follows the change)
// and the same for a full one (everything, leftovers removed); UDP cleanup = the conntrack
// reconciler; and the metrics hook reading the datapath's counters and map fill.
//
// The maps are written on the packet loop's thread, so a sync never writes them in one go:
// more than `slice` service ports are written `slice` at a time (deletions first), the event
// loop turning between two slices (setImmediate: after the TUN's poll phase), and the sync is
// then a Promise the runner waits for. Each slice is one DpLoader.update, validated before it
// writes, so a reader sees every service port either before or after its change. Up to `slice`
// ports the sync stays synchronous (the fake-clock tests, and nearly every real change).
//
// A write the loader refuses (one bad service port: an unknown kubetun.io/scheduler, a frontend
// another port holds, a full map) is retried port by port, in the order one write sorts them:
// every other port is written, the refused one keeps what the maps held before (or stays out),
// and the sync then fails naming it, so the runner retries it as a full sync (kube-proxy's
// model) until it is fixed. A failed sync thus leaves each service port at its new version or,
// refused, at its last good one — the state a fresh full load of those versions makes
// (test/control/datapath-sync.test.ts) — never the first slices of a sync without the rest.

import type { Datapath } from '../datapath/state/datapath.ts';
import { type DpLoadOptions, DpLoader, inWriteOrder } from '../loader/load.ts';
import { countersToRecord } from '../datapath/state/reasons.ts';
import type { ResolvedServicePort } from '../model.ts';
import { reconcileUdpConntrack, reconcileUdpConntrack6 } from './conntrack-reconcile.ts';
import type { DatapathStats } from './metrics.ts';
import type { ProxierOptions } from './proxier.ts';
import { nextTurn } from './turns.ts';

export interface DatapathSync {
  program: ProxierOptions['program'];
  cleanupConntrack: NonNullable<ProxierOptions['cleanupConntrack']>;
  stats: () => DatapathStats;
  /** the Datapath's one map writer (housekeeping reads its affinity timeouts) */
  loader: DpLoader;
  /** what the last program call did (logs, tests, benchmarks) */
  last: { full: boolean; written: number; deleted: number; refused: string[] };
}

/**
 * Service ports written per slice, between two turns of the event loop: ~2 ms of DpLoader work
 * on this machine idle (bench:sync, 10k ports in ~360 ms), which a load of 10+ on two cores
 * stretches by up to ~20x; the 100 ms a ping through the agent may wait (test/node/stall.test.ts)
 * was not kept with 256 (~9 ms: replies 100-290 ms late at load ~10) and barely with 128.
 */
export const SYNC_SLICE = 64;

export function datapathSync(
  dp: Datapath,
  opts: DpLoadOptions = {},
  loader = new DpLoader(dp),
  slice = SYNC_SLICE,
): DatapathSync {
  const last = { full: false, written: 0, deleted: 0, refused: [] as string[] };
  const write = (changed: ResolvedServicePort[], deleted: string[]) => {
    last.written = changed.length;
    last.deleted = deleted.length;
    last.refused = [];
    if (changed.length + deleted.length <= slice) {
      if (changed.length > 0 || deleted.length > 0)
        writeSlice(loader, changed, deleted, opts, last.refused);
      return refusedFails(last.refused);
    }
    return writeSliced(loader, changed, deleted, opts, slice, last.refused);
  };
  return {
    loader,
    last,
    program: ({ full, changes, tracker }) => {
      last.full = full;
      if (full) {
        const all = tracker.resolveAll();
        const names = new Set(all.map((p) => p.servicePortName));
        return write(
          all,
          loader.loaded().filter((spn) => !names.has(spn)),
        );
      }
      const changed: ResolvedServicePort[] = [];
      const deleted = new Set(changes.deletedServicePorts);
      for (const spn of changes.changedServicePorts) {
        const rsp = tracker.resolve(spn);
        if (rsp) changed.push(rsp);
        else deleted.add(spn);
      }
      return write(changed, [...deleted]);
    },
    cleanupConntrack: (changes, tracker) =>
      reconcileUdpConntrack(dp.ct, tracker, changes) +
      reconcileUdpConntrack6(dp.ct6, tracker, changes),
    stats: () => ({
      packets: countersToRecord(dp.counters),
      conntrackEntries: dp.ct.size,
      mapFill: {
        services: dp.svc.size / dp.svc.capacity,
        backends: dp.be.size / dp.be.capacity,
        revnat: dp.revnat.size / dp.revnat.capacity,
        conntrack: dp.ct.size / dp.ct.capacity,
      },
    }),
  };
}

async function writeSliced(
  loader: DpLoader,
  changed: ResolvedServicePort[],
  deleted: string[],
  opts: DpLoadOptions,
  slice: number,
  refused: string[],
): Promise<boolean> {
  for (let i = 0; i < deleted.length; i += slice) {
    loader.update([], deleted.slice(i, i + slice), opts);
    await nextTurn();
  }
  const sorted = inWriteOrder(changed);
  for (let i = 0; i < sorted.length; i += slice) {
    writeSlice(loader, sorted.slice(i, i + slice), [], opts, refused);
    await nextTurn();
  }
  return refusedFails(refused);
}

/** One validated write; refused as a whole, it is retried port by port (see the header). */
function writeSlice(
  loader: DpLoader,
  changed: ResolvedServicePort[],
  deleted: string[],
  opts: DpLoadOptions,
  refused: string[],
): void {
  try {
    loader.update(changed, deleted, opts);
    return;
  } catch {
    // nothing of it was written (the loader plans and checks before it writes)
  }
  if (deleted.length > 0) loader.update([], deleted, opts);
  for (const rsp of inWriteOrder(changed)) {
    try {
      loader.update([rsp], [], opts);
    } catch (err) {
      refused.push(`${rsp.servicePortName}: ${(err as Error).message}`);
    }
  }
}

/** true, or the sync's failure naming the refused service ports (the runner retries it full). */
function refusedFails(refused: string[]): true {
  if (refused.length === 0) return true;
  const more = refused.length > 3 ? ` (and ${refused.length - 3} more)` : '';
  throw new Error(
    `${refused.length} service port(s) refused, the rest written: ${refused.slice(0, 3).join('; ')}${more}`,
  );
}

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

import type { Datapath } from '../datapath/state/datapath.ts';
import { type DpLoadOptions, DpLoader } from '../loader/load.ts';
import { countersToRecord } from '../datapath/state/reasons.ts';
import type { ResolvedServicePort } from '../model.ts';
import { reconcileUdpConntrack, reconcileUdpConntrack6 } from './conntrack-reconcile.ts';
import type { DatapathStats } from './metrics.ts';
import type { ProxierOptions } from './proxier.ts';

export interface DatapathSync {
  program: ProxierOptions['program'];
  cleanupConntrack: NonNullable<ProxierOptions['cleanupConntrack']>;
  stats: () => DatapathStats;
  /** the Datapath's one map writer (housekeeping reads its affinity timeouts) */
  loader: DpLoader;
  /** what the last program call did (logs, tests, benchmarks) */
  last: { full: boolean; written: number; deleted: number };
}

/** Service ports written per slice, between two turns of the event loop. */
export const SYNC_SLICE = 256;

export function datapathSync(
  dp: Datapath,
  opts: DpLoadOptions = {},
  loader = new DpLoader(dp),
  slice = SYNC_SLICE,
): DatapathSync {
  const last = { full: false, written: 0, deleted: 0 };
  const write = (changed: ResolvedServicePort[], deleted: string[]) => {
    last.written = changed.length;
    last.deleted = deleted.length;
    if (changed.length + deleted.length <= slice) {
      if (changed.length > 0 || deleted.length > 0) loader.update(changed, deleted, opts);
      return true;
    }
    return writeSliced(loader, changed, deleted, opts, slice);
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
): Promise<boolean> {
  for (let i = 0; i < deleted.length; i += slice) {
    loader.update([], deleted.slice(i, i + slice), opts);
    await nextTurn();
  }
  // in the order one DpLoader.update sorts them, so ids chosen after a hash collision are the
  // same as a single write would choose (a restarted agent finds the same ids)
  const key = (p: ResolvedServicePort) => `${p.servicePortName}:${p.port.protocol}`;
  const sorted = [...changed].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  for (let i = 0; i < sorted.length; i += slice) {
    loader.update(sorted.slice(i, i + slice), [], opts);
    await nextTurn();
  }
  return true;
}

function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

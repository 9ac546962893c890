// The Proxier's data-plane half for kubetun's own maps: program = DpLoader.update for a partial
// sync (only the service ports the tracker reports changed or deleted; cost follows the change)
// and DpLoader.load for a full one (everything, leftovers removed); UDP cleanup = the conntrack
// reconciler; and the metrics hook reading the datapath's counters and map fill.

import type { Datapath } from '../datapath/state/datapath.ts';
import { type DpLoadOptions, DpLoader } from '../loader/load.ts';
import { countersToRecord } from '../datapath/state/reasons.ts';
import type { ResolvedServicePort } from '../model.ts';
import { reconcileUdpConntrack } from './conntrack-reconcile.ts';
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

export function datapathSync(
  dp: Datapath,
  opts: DpLoadOptions = {},
  loader = new DpLoader(dp),
): DatapathSync {
  const last = { full: false, written: 0, deleted: 0 };
  return {
    loader,
    last,
    program: ({ full, changes, tracker }) => {
      last.full = full;
      if (full) {
        const st = loader.load(tracker.resolveAll(), opts);
        last.written = st.written;
        last.deleted = st.removed;
        return true;
      }
      const changed: ResolvedServicePort[] = [];
      const deleted = new Set(changes.deletedServicePorts);
      for (const spn of changes.changedServicePorts) {
        const rsp = tracker.resolve(spn);
        if (rsp) changed.push(rsp);
        else deleted.add(spn);
      }
      last.written = changed.length;
      last.deleted = deleted.size;
      if (changed.length > 0 || deleted.size > 0) loader.update(changed, [...deleted], opts);
      return true;
    },
    cleanupConntrack: (changes, tracker) => reconcileUdpConntrack(dp.ct, tracker, changes),
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

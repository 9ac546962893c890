// The Proxier's data-plane half for kubetun's own maps: program = dpLoadServices (a full loader
// that diffs against what it wrote before, so it runs only when something changed or a full
// sync is due), UDP cleanup = the conntrack reconciler, and the metrics hook reading the
// datapath's counters and map fill.

import type { Datapath } from '../datapath/datapath.ts';
import { dpLoadServices } from '../datapath/load.ts';
import { countersToRecord } from '../datapath/reasons.ts';
import { reconcileUdpConntrack } from './conntrack-reconcile.ts';
import type { DatapathStats } from './metrics.ts';
import type { ProxierOptions } from './proxier.ts';

export interface DatapathSync {
  program: ProxierOptions['program'];
  cleanupConntrack: NonNullable<ProxierOptions['cleanupConntrack']>;
  stats: () => DatapathStats;
}

export function datapathSync(dp: Datapath, opts: { nodeName?: string } = {}): DatapathSync {
  return {
    program: ({ full, changes, tracker }) => {
      if (!full && changes.changedServicePorts.length === 0) return true;
      dpLoadServices(dp, tracker.resolveAll(), { nodeName: opts.nodeName });
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

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
// A full sync writes every service port the maps do not already hold as it is: a port last
// written as the very object the tracker resolves it to now (resolve() keeps one object per
// port until the port changes) is skipped, so a full sync after a prefill (proxier.ts: the
// agent's fresh start programs the first load while it still parses), a retry after one
// refused port, or the hourly one costs what changed, not 10k ports. Nothing else writes the
// maps, so nothing else can make them differ from what this wrote; a new DpLoader (a takeover's,
// over adopted maps) has written nothing, and its first full sync writes everything.
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
  // each service port the maps hold, as the object it was written from (see the header)
  const wrote = new Map<string, ResolvedServicePort>();
  const write = (changed: ResolvedServicePort[], deleted: string[]) => {
    last.written = changed.length;
    last.deleted = deleted.length;
    last.refused = [];
    const w: Written = { wrote, refused: last.refused };
    if (changed.length + deleted.length <= slice) {
      if (changed.length > 0 || deleted.length > 0) writeSlice(loader, changed, deleted, opts, w);
      return refusedFails(last.refused);
    }
    return writeSliced(loader, changed, deleted, opts, slice, w);
  };
  return {
    loader,
    last,
    program: ({ full, changes, tracker }) => {
      last.full = full;
      if (full) {
        const all = tracker.resolveAll();
        const names = new Set(all.map((p) => p.servicePortName));
        for (const spn of wrote.keys()) if (!names.has(spn)) wrote.delete(spn);
        return write(
          all.filter((p) => wrote.get(p.servicePortName) !== p),
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

/** What the writes record: each port written as its object, each refusal as a line. */
interface Written {
  wrote: Map<string, ResolvedServicePort>;
  refused: string[];
}

async function writeSliced(
  loader: DpLoader,
  changed: ResolvedServicePort[],
  deleted: string[],
  opts: DpLoadOptions,
  slice: number,
  w: Written,
): Promise<boolean> {
  for (let i = 0; i < deleted.length; i += slice) {
    writeSlice(loader, [], deleted.slice(i, i + slice), opts, w);
    await nextTurn();
  }
  const sorted = inWriteOrder(changed);
  for (let i = 0; i < sorted.length; i += slice) {
    writeSlice(loader, sorted.slice(i, i + slice), [], opts, w);
    await nextTurn();
  }
  return refusedFails(w.refused);
}

/** One validated write; refused as a whole, it is retried port by port (see the header). */
function writeSlice(
  loader: DpLoader,
  changed: ResolvedServicePort[],
  deleted: string[],
  opts: DpLoadOptions,
  w: Written,
): void {
  try {
    loader.update(changed, deleted, opts);
    for (const spn of deleted) w.wrote.delete(spn);
    for (const rsp of changed) w.wrote.set(rsp.servicePortName, rsp);
    return;
  } catch {
    // nothing of it was written (the loader plans and checks before it writes)
  }
  if (deleted.length > 0) {
    loader.update([], deleted, opts);
    for (const spn of deleted) w.wrote.delete(spn);
  }
  for (const rsp of inWriteOrder(changed)) {
    try {
      loader.update([rsp], [], opts);
      w.wrote.set(rsp.servicePortName, rsp);
    } catch (err) {
      w.refused.push(`${rsp.servicePortName}: ${(err as Error).message}`);
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

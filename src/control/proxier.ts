// The control loop: sources → change trackers → bounded-frequency runner → program the data
// plane, with kube-proxy's metrics and health bookkeeping around each sync. The data plane
// itself is injected (`program`, `cleanupConntrack`), so this file knows nothing of maps.
//
// kube-proxy's order within a sync: check out the pending changes, program, and only after a
// successful program clean up stale UDP conntrack entries (deleting them earlier would let the
// old rules re-create them). A failed program keeps the UDP work for the next (full) sync.
//
// Prefill (the agent's fresh start, `prefill`): the runner syncs nothing before both sources
// have delivered their initial state, but a 10k-Service directory streams in for most of a
// second (dir-state.ts), and the first full sync then wrote every port after the last one came
// (issue 18: ~0.5 s of the start's 1.4 s). With prefill, what has arrived is checked out and
// programmed as partial syncs (PREFILL_BATCH objects at least) while the rest is read; the first sync waits for the one in
// flight, takes their changes with its own, and is full as ever: it deletes what no source
// delivered and writes every port the prefills did not write as it is now (datapath-sync.ts).
// Only for a data plane nothing reads yet (the agent's own new maps, before any traffic is
// steered to it): a refused start (strictStart) then leaves nothing anyone sees. No metrics,
// health or UDP cleanup follow a prefill: they follow the first sync, which carries its changes.

import { type Clock, systemClock } from './clock.ts';
import type { ProxyHealth } from './health.ts';
import { NoLocalCount, noLocalEndpointsOf, type ProxyMetrics } from './metrics.ts';
import { type RunnerOptions, type SyncRequest, SyncRunner } from './runner.ts';
import { ChangeTracker, type SyncChanges } from './tracker.ts';
import { CHECKOUT_STEP, inSteps, nextTurn } from './turns.ts';

export interface ProgramRequest {
  full: boolean;
  changes: SyncChanges;
  tracker: ChangeTracker;
}

export interface ProxierOptions {
  /** writes the data plane; throwing or returning false fails the sync */
  program: (req: ProgramRequest) => boolean | undefined | Promise<boolean | undefined>;
  /** deletes stale UDP flows after a successful program; returns how many */
  cleanupConntrack?: (changes: SyncChanges, tracker: ChangeTracker) => number;
  nodeName?: string;
  clock?: Clock;
  runner?: Omit<RunnerOptions, 'clock' | 'onError'>;
  metrics?: ProxyMetrics;
  health?: ProxyHealth;
  onError?: (err: unknown) => void;
  /**
   * program what the sources delivered before they report their initial state, whenever at
   * least this many objects are pending (see the header; PREFILL_BATCH): only for a data plane
   * that nothing reads until the first sync. 0 or none: no prefill.
   */
  prefill?: number;
  /** after each sync, for logs */
  onSync?: (info: { full: boolean; ok: boolean; changes: SyncChanges; seconds: number }) => void;
}

/**
 * Objects (Services and EndpointSlices) pending before a prefill programs them: the agent's.
 * Each partial sync costs a checkout's and a loader update's fixed work, so small ones cost
 * more than they save: at 10k Services (bench:sync's directory, alternated five times each on
 * this 2-core machine) a prefill at every slice of 64 was ~170 ms CPU more than none and no
 * faster; at 1,000 or 2,000 objects the first full sync came 270-330 ms (median) sooner than
 * with none, for no more CPU. What is left under it when the sources sync (at most this many
 * objects) the first sync writes.
 */
export const PREFILL_BATCH = 2000;

export class Proxier {
  readonly tracker: ChangeTracker;
  readonly runner: SyncRunner;
  private readonly o: ProxierOptions;
  private readonly clock: Clock;
  /** UDP cleanup owed by syncs whose program failed */
  private owed: SyncChanges | undefined;
  /** the no_local_endpoints gauge, per service port (recounted for the ports a sync changed) */
  private readonly noLocal = new NoLocalCount();
  /** the prefill running (see the header); the first sync waits for it */
  private prefilling: Promise<void> | undefined;
  /** what the prefills checked out and programmed, for the first sync's changes */
  private prefilled: SyncChanges[] = [];
  private stopped = false;

  constructor(opts: ProxierOptions) {
    this.o = opts;
    this.clock = opts.clock ?? systemClock;
    this.tracker = new ChangeTracker({ nodeName: opts.nodeName, now: () => this.clock.now() });
    this.runner = new SyncRunner((req) => this.sync(req), {
      ...opts.runner,
      clock: this.clock,
      onError: opts.onError,
    });
    opts.metrics?.trackChanges(this.tracker);
  }

  onServiceUpdate(
    prev: Parameters<ChangeTracker['updateService']>[0],
    cur: Parameters<ChangeTracker['updateService']>[1],
  ): void {
    if (this.tracker.updateService(prev, cur)) this.queue();
  }

  onEndpointSliceUpdate(
    prev: Parameters<ChangeTracker['updateEndpointSlice']>[0],
    cur: Parameters<ChangeTracker['updateEndpointSlice']>[1],
  ): void {
    if (this.tracker.updateEndpointSlice(prev, cur)) this.queue();
  }

  onServicesSynced(): void {
    this.runner.setInitialized('services');
  }

  onEndpointSlicesSynced(): void {
    this.runner.setInitialized('endpointslices');
  }

  /** kube-proxy's Sync(): mark the update queued (health, metric) and ask the runner. */
  queue(): void {
    if (!this.runner.initialized) {
      this.delivered();
      return;
    }
    this.o.health?.queuedUpdate();
    this.o.metrics?.markQueued(this.clock.now());
    this.runner.run();
  }

  stop(): void {
    this.stopped = true;
    this.runner.stop();
  }

  /**
   * A source delivered part of its initial state (a slice of the manifest worker's stream):
   * with `prefill`, and before the first sync, a prefill programs it unless one runs (which
   * takes whatever is pending when it looks). Otherwise nothing.
   */
  delivered(): void {
    const batch = this.o.prefill ?? 0;
    if (batch <= 0 || this.runner.initialized || this.stopped) return;
    if (this.prefilling === undefined && this.tracker.pendingChanges() < batch) return;
    this.prefilling ??= this.prefill().finally(() => {
      this.prefilling = undefined;
    });
  }

  /** Partial syncs of what is pending, until nothing is or the sources have synced. */
  private async prefill(): Promise<void> {
    await nextTurn(); // the rest of the slice that asked first
    const batch = this.o.prefill ?? 0;
    while (!this.runner.initialized && !this.stopped && this.tracker.pendingChanges() >= batch) {
      const changes = await this.tracker.checkoutSliced(CHECKOUT_STEP, nextTurn);
      this.prefilled.push(changes);
      try {
        await this.o.program({ full: false, changes, tracker: this.tracker });
      } catch {
        // the first sync, full, writes again what was refused here, and reports it
      }
    }
  }

  /**
   * Synchronous when `program` is and the checkout is small, so fake-clock tests need no
   * microtask flushing; a checkout of more than CHECKOUT_STEP objects runs in steps (turns.ts).
   */
  private sync(req: SyncRequest): boolean | Promise<boolean> {
    if (this.prefilling) return this.prefilling.then(() => this.sync(req));
    const t0 = performance.now();
    if (this.tracker.pendingChanges() > CHECKOUT_STEP) {
      return this.tracker
        .checkoutSliced(CHECKOUT_STEP, nextTurn)
        .then((changes) => this.program(req, changes, t0));
    }
    return this.program(req, this.tracker.checkout(), t0);
  }

  private program(
    req: SyncRequest,
    checkedOut: SyncChanges,
    t0: number,
  ): boolean | Promise<boolean> {
    const changes =
      this.prefilled.length > 0 ? mergeChanges([...this.prefilled, checkedOut]) : checkedOut;
    this.prefilled = [];
    const done = (ok: boolean): boolean | Promise<boolean> => {
      const counted = this.afterProgram(ok, req.full, changes, (performance.now() - t0) / 1000);
      return counted ? counted.then(() => ok) : ok;
    };
    let r: ReturnType<ProxierOptions['program']>;
    try {
      r = this.o.program({ full: req.full, changes, tracker: this.tracker });
    } catch (err) {
      done(false);
      throw err;
    }
    if (!(r instanceof Promise)) return done(r !== false);
    return r.then(
      (v) => done(v !== false),
      (err: unknown) => {
        done(false);
        throw err;
      },
    );
  }

  /** kube-proxy's bookkeeping after a sync; a Promise while the metrics' steps still run. */
  private afterProgram(
    ok: boolean,
    full: boolean,
    changes: SyncChanges,
    seconds: number,
  ): undefined | Promise<void> {
    const m = this.o.metrics;
    const now = this.clock.now();
    const work = this.owed ? mergeUdpWork(this.owed, changes) : changes;
    let counted: undefined | Promise<void>;
    if (!ok) {
      this.owed = work;
    } else {
      this.owed = undefined;
      if (work.udpConntrackCleanup && this.o.cleanupConntrack) {
        m?.addConntrackDeleted(this.o.cleanupConntrack(work, this.tracker));
      }
      if (m) counted = this.countAfterSync(m, now, full, changes);
      this.o.health?.updated();
    }
    m?.observeSync(seconds, full, ok ? now : undefined);
    this.o.onSync?.({ full, ok, changes, seconds });
    return counted;
  }

  /**
   * The metrics that follow a sync's size: each change's programming latency, and the
   * no_local_endpoints recount of the ports it changed (every port after a full one) — in steps
   * of CHECKOUT_STEP with the event loop turning between two (a 5,000-Service change held the
   * packet loop 50-110 ms in one go at load 5-8, test/node/stall.test.ts).
   */
  private countAfterSync(
    m: ProxyMetrics,
    now: number,
    full: boolean,
    changes: SyncChanges,
  ): undefined | Promise<void> {
    const observed = inSteps(changes.changeTimes, CHECKOUT_STEP, (t) =>
      m.observeNetworkProgramming(now, [t]),
    );
    const node = this.o.nodeName;
    if (node === undefined) return observed;
    const ports = full
      ? this.tracker.resolveAll().map((p) => p.servicePortName)
      : [...changes.changedServicePorts, ...changes.deletedServicePorts];
    const recount = () => {
      const t = this.tracker;
      const counted = inSteps(ports, CHECKOUT_STEP, (spn) => {
        const p = t.resolve(spn);
        this.noLocal.set(spn, p ? noLocalEndpointsOf(p, node) : 0);
      });
      const publish = () => {
        if (full) this.noLocal.retain(new Set(ports));
        m.setNoLocalEndpoints(this.noLocal.counts());
      };
      if (counted) return counted.then(publish);
      publish();
      return undefined;
    };
    return observed ? observed.then(recount) : recount();
  }
}

/**
 * Checkouts as one, in order: every list of each (service port names once each, sorted), the
 * counts added. A port deleted by one and added again by a later one is in both of its lists;
 * the one caller, the first sync after prefills, is full and reads neither.
 */
export function mergeChanges(all: readonly SyncChanges[]): SyncChanges {
  const names = (pick: (c: SyncChanges) => string[]) => [...new Set(all.flatMap(pick))].sort();
  return {
    ...udpWork(all),
    changedServicePorts: names((c) => c.changedServicePorts),
    deletedServicePorts: names((c) => c.deletedServicePorts),
    changedServices: names((c) => c.changedServices),
    serviceChanges: all.reduce((n, c) => n + c.serviceChanges, 0),
    endpointChanges: all.reduce((n, c) => n + c.endpointChanges, 0),
    changeTimes: all.flatMap((c) => c.changeTimes),
  };
}

/** UDP cleanup lists of two checkouts together (the later one's other fields win). */
export function mergeUdpWork(a: SyncChanges, b: SyncChanges): SyncChanges {
  return { ...b, ...udpWork([a, b]) };
}

/** The UDP cleanup of checkouts, in order. */
function udpWork(all: readonly SyncChanges[]) {
  return {
    udpStaleEndpoints: all.flatMap((c) => c.udpStaleEndpoints),
    udpStaleServiceAddrs: all.flatMap((c) => c.udpStaleServiceAddrs),
    udpStaleNodePorts: all.flatMap((c) => c.udpStaleNodePorts),
    udpNewlyActive: all.flatMap((c) => c.udpNewlyActive),
    udpConntrackCleanup: all.some((c) => c.udpConntrackCleanup),
  };
}

// The control loop: sources → change trackers → bounded-frequency runner → program the data
// plane, with kube-proxy's metrics and health bookkeeping around each sync. The data plane
// itself is injected (`program`, `cleanupConntrack`), so this file knows nothing of maps.
//
// kube-proxy's order within a sync: check out the pending changes, program, and only after a
// successful program clean up stale UDP conntrack entries (deleting them earlier would let the
// old rules re-create them). A failed program keeps the UDP work for the next (full) sync.

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
  /** after each sync, for logs */
  onSync?: (info: { full: boolean; ok: boolean; changes: SyncChanges; seconds: number }) => void;
}

export class Proxier {
  readonly tracker: ChangeTracker;
  readonly runner: SyncRunner;
  private readonly o: ProxierOptions;
  private readonly clock: Clock;
  /** UDP cleanup owed by syncs whose program failed */
  private owed: SyncChanges | undefined;
  /** the no_local_endpoints gauge, per service port (recounted for the ports a sync changed) */
  private readonly noLocal = new NoLocalCount();

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
    if (!this.runner.initialized) return;
    this.o.health?.queuedUpdate();
    this.o.metrics?.markQueued(this.clock.now());
    this.runner.run();
  }

  stop(): void {
    this.runner.stop();
  }

  /**
   * Synchronous when `program` is and the checkout is small, so fake-clock tests need no
   * microtask flushing; a checkout of more than CHECKOUT_STEP objects runs in steps (turns.ts).
   */
  private sync(req: SyncRequest): boolean | Promise<boolean> {
    const t0 = performance.now();
    if (this.tracker.pendingChanges() > CHECKOUT_STEP) {
      return this.tracker
        .checkoutSliced(CHECKOUT_STEP, nextTurn)
        .then((changes) => this.program(req, changes, t0));
    }
    return this.program(req, this.tracker.checkout(), t0);
  }

  private program(req: SyncRequest, changes: SyncChanges, t0: number): boolean | Promise<boolean> {
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

/** UDP cleanup lists of two checkouts together (the later one's other fields win). */
export function mergeUdpWork(a: SyncChanges, b: SyncChanges): SyncChanges {
  const out: SyncChanges = {
    ...b,
    udpStaleEndpoints: [...a.udpStaleEndpoints, ...b.udpStaleEndpoints],
    udpStaleServiceAddrs: [...a.udpStaleServiceAddrs, ...b.udpStaleServiceAddrs],
    udpStaleNodePorts: [...a.udpStaleNodePorts, ...b.udpStaleNodePorts],
    udpNewlyActive: [...a.udpNewlyActive, ...b.udpNewlyActive],
  };
  out.udpConntrackCleanup = a.udpConntrackCleanup || b.udpConntrackCleanup;
  return out;
}

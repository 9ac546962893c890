// The control loop: sources → change trackers → bounded-frequency runner → program the data
// plane, with kube-proxy's metrics and health bookkeeping around each sync. The data plane
// itself is injected (`program`, `cleanupConntrack`), so this file knows nothing of maps.
//
// kube-proxy's order within a sync: check out the pending changes, program, and only after a
// successful program clean up stale UDP conntrack entries (deleting them earlier would let the
// old rules re-create them). A failed program keeps the UDP work for the next (full) sync.

import { type Clock, systemClock } from './clock.ts';
import type { ProxyHealth } from './health.ts';
import { countNoLocalEndpoints, type ProxyMetrics } from './metrics.ts';
import { type RunnerOptions, type SyncRequest, SyncRunner } from './runner.ts';
import { ChangeTracker, type SyncChanges } from './tracker.ts';
import { CHECKOUT_STEP, nextTurn } from './turns.ts';

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
    const done = (ok: boolean): boolean => {
      this.afterProgram(ok, req.full, changes, (performance.now() - t0) / 1000);
      return ok;
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

  private afterProgram(ok: boolean, full: boolean, changes: SyncChanges, seconds: number): void {
    const m = this.o.metrics;
    const now = this.clock.now();
    const work = this.owed ? mergeUdpWork(this.owed, changes) : changes;
    if (!ok) {
      this.owed = work;
    } else {
      this.owed = undefined;
      if (work.udpConntrackCleanup && this.o.cleanupConntrack) {
        m?.addConntrackDeleted(this.o.cleanupConntrack(work, this.tracker));
      }
      m?.observeNetworkProgramming(now, changes.changeTimes);
      if (m && this.o.nodeName !== undefined && (full || changes.changedServicePorts.length > 0)) {
        m.setNoLocalEndpoints(countNoLocalEndpoints(this.tracker.resolveAll(), this.o.nodeName));
      }
      this.o.health?.updated();
    }
    m?.observeSync(seconds, full, ok ? now : undefined);
    this.o.onSync?.({ full, ok, changes, seconds });
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

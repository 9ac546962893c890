// The bounded-frequency sync runner, after kube-proxy's pkg/util/async.BoundedFrequencyRunner.
//
//   run() ──┐ (any number of calls coalesce into one pending request; never blocks, never
//           ▼  calls the sync function from inside run())
//   token bucket: `burst` syncs back to back, then one per minInterval
//           ▼
//   fn({full, reason}) ── ok ──▶ next periodic sync maxInterval later
//           └── throws / false ─▶ retry retryInterval later (sooner if run() is called), and
//                                 the next sync is full
//
// Nothing runs until both sources (services, endpointslices) have reported their initial
// sync: a sync before that would program a partial view of the cluster (and delete the rest).
// Full syncs happen on the first run, after a failure, on request, and when the last full sync
// is older than fullSyncInterval (kube-proxy: about an hour); other syncs may be partial.

import { type Clock, systemClock, type TimerHandle } from './clock.ts';

export type SyncReason = 'requested' | 'periodic' | 'retry';

export interface SyncRequest {
  full: boolean;
  reason: SyncReason;
}

/** A sync; throwing, rejecting or returning false counts as failure. */
export type SyncFn = (req: SyncRequest) => boolean | undefined | Promise<boolean | undefined>;

export type SourceName = 'services' | 'endpointslices';

export interface RunnerOptions {
  clock?: Clock;
  /** kube-proxy minSyncPeriod: 1 s */
  minIntervalMs?: number;
  /** kube-proxy syncPeriod: 30 s; a sync runs at least this often (0 or Infinity: never) */
  maxIntervalMs?: number;
  /** syncs allowed back to back before minInterval applies: 2 */
  burst?: number;
  /** delay before retrying a failed sync; kube-proxy uses syncPeriod */
  retryIntervalMs?: number;
  /** a sync is full when the last full one is older than this: 1 h */
  fullSyncIntervalMs?: number;
  /** called with what a failed sync threw (or an Error for `false`) */
  onError?: (err: unknown) => void;
}

export const DEFAULT_MIN_INTERVAL_MS = 1000;
export const DEFAULT_MAX_INTERVAL_MS = 30_000;
export const DEFAULT_BURST = 2;
export const DEFAULT_FULL_SYNC_INTERVAL_MS = 3_600_000;

export class SyncRunner {
  /** completed syncs, failed ones included */
  syncs = 0;
  failures = 0;
  /** clock time (ms) the last successful sync finished; undefined before the first */
  lastSuccessAt: number | undefined;
  lastFullSyncAt: number | undefined;

  private readonly fn: SyncFn;
  private readonly clock: Clock;
  private readonly minInterval: number;
  private readonly maxInterval: number;
  private readonly burst: number;
  private readonly retryInterval: number;
  private readonly fullSyncInterval: number;
  private readonly onError: (err: unknown) => void;

  private readonly synced = new Set<SourceName>();
  private credit: number;
  private creditAt: number;
  private pending = false;
  private forceFull = true;
  private retryAt: number | undefined;
  private lastRunAt: number | undefined;
  private running = false;
  private stopped = false;
  private timer: TimerHandle | undefined;
  private timerAt = 0;

  constructor(fn: SyncFn, opts: RunnerOptions = {}) {
    this.fn = fn;
    this.clock = opts.clock ?? systemClock;
    this.minInterval = Math.max(0, Math.round(opts.minIntervalMs ?? DEFAULT_MIN_INTERVAL_MS));
    this.maxInterval = opts.maxIntervalMs ?? DEFAULT_MAX_INTERVAL_MS;
    this.burst = Math.max(1, opts.burst ?? DEFAULT_BURST);
    this.retryInterval = opts.retryIntervalMs ?? this.maxInterval;
    this.fullSyncInterval = opts.fullSyncIntervalMs ?? DEFAULT_FULL_SYNC_INTERVAL_MS;
    this.onError = opts.onError ?? (() => {});
    this.credit = this.burst * this.minInterval;
    this.creditAt = this.clock.now();
  }

  /** Both sources have delivered their initial state. */
  get initialized(): boolean {
    return this.synced.has('services') && this.synced.has('endpointslices');
  }

  /** A source has delivered its initial state; the first sync follows once both have. */
  setInitialized(source: SourceName): void {
    const was = this.initialized;
    this.synced.add(source);
    if (!was && this.initialized) this.run();
  }

  /** Asks for a sync soon. Returns at once; calls before the sync starts coalesce. */
  run(): void {
    if (this.stopped) return;
    this.pending = true;
    // Deferred even when a token is available, so a burst of events from one source callback
    // becomes one sync and the caller never runs the sync function re-entrantly.
    this.arm(this.clock.now());
  }

  /** Makes the next sync a full one (and asks for it). */
  requestFullSync(): void {
    this.forceFull = true;
    this.run();
  }

  /** A sync is requested or due and has not started yet. */
  get isPending(): boolean {
    return this.pending || (this.retryAt !== undefined && this.retryAt <= this.clock.now());
  }

  get isRunning(): boolean {
    return this.running;
  }

  /** Cancels timers; a sync in flight completes but nothing further runs. */
  stop(): void {
    this.stopped = true;
    this.disarm();
  }

  private disarm(): void {
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Arms the single timer for `at` unless it is already armed at or before then. */
  private arm(at: number): void {
    if (this.stopped) return;
    if (this.timer !== undefined && this.timerAt <= at) return;
    this.disarm();
    this.timerAt = at;
    this.timer = this.clock.setTimeout(() => this.onTimer(), Math.max(0, at - this.clock.now()));
  }

  private onTimer(): void {
    this.timer = undefined;
    if (this.stopped || this.running || !this.initialized) return;
    const now = this.clock.now();
    const reason = this.dueReason(now);
    if (reason === undefined) {
      this.scheduleNext();
      return;
    }
    this.refill(now);
    if (this.credit < this.minInterval) {
      this.arm(now + (this.minInterval - this.credit));
      return;
    }
    this.credit -= this.minInterval;
    this.execute(reason);
  }

  private dueReason(now: number): SyncReason | undefined {
    if (this.pending) return 'requested';
    if (this.retryAt !== undefined && now >= this.retryAt) return 'retry';
    if (
      this.lastRunAt !== undefined &&
      this.maxInterval > 0 &&
      now >= this.lastRunAt + this.maxInterval
    ) {
      return 'periodic';
    }
    return undefined;
  }

  /**
   * The token bucket in integer milliseconds of credit (one sync costs minInterval, the bucket
   * holds burst of them), so refills are exact and a token is never 1e-16 short.
   */
  private refill(now: number): void {
    this.credit = Math.min(this.burst * this.minInterval, this.credit + (now - this.creditAt));
    this.creditAt = now;
  }

  /** Runs the sync; a synchronous fn completes synchronously (fake-clock tests rely on it). */
  private execute(reason: SyncReason): void {
    const start = this.clock.now();
    const full =
      this.forceFull ||
      this.lastFullSyncAt === undefined ||
      start - this.lastFullSyncAt >= this.fullSyncInterval;
    this.pending = false;
    this.running = true;
    let r: ReturnType<SyncFn>;
    try {
      r = this.fn({ full, reason });
    } catch (err) {
      this.complete(false, full, err);
      return;
    }
    if (r instanceof Promise) {
      r.then(
        (v) => this.complete(v !== false, full, undefined),
        (err: unknown) => this.complete(false, full, err),
      );
    } else {
      this.complete(r !== false, full, undefined);
    }
  }

  private complete(ok: boolean, full: boolean, err: unknown): void {
    this.running = false;
    try {
      if (!ok) this.onError(err ?? new Error('sync reported failure'));
    } finally {
      this.finish(ok, full);
    }
  }

  private finish(ok: boolean, full: boolean): void {
    const now = this.clock.now();
    this.syncs++;
    this.lastRunAt = now;
    if (ok) {
      this.retryAt = undefined;
      this.lastSuccessAt = now;
      if (full) {
        this.lastFullSyncAt = now;
        this.forceFull = false;
      }
    } else {
      this.failures++;
      this.forceFull = true;
      this.retryAt = now + this.retryInterval;
    }
    this.scheduleNext();
  }

  /** Arms the timer for whatever comes first: a pending request, a retry, the periodic sync. */
  private scheduleNext(): void {
    if (this.stopped || !this.initialized) return;
    const now = this.clock.now();
    if (this.pending) {
      this.arm(now);
      return;
    }
    const periodic =
      this.lastRunAt !== undefined && this.maxInterval > 0 && Number.isFinite(this.maxInterval)
        ? this.lastRunAt + this.maxInterval
        : Number.POSITIVE_INFINITY;
    const at = Math.min(periodic, this.retryAt ?? Number.POSITIVE_INFINITY);
    if (Number.isFinite(at)) this.arm(at);
  }
}

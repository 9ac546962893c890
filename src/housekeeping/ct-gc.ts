// Conntrack housekeeping for the agent (slow world, called between packet batches, never per
// packet): incremental expiry GC, and kube-proxy's stale-UDP cleanup. Run by housekeeping.ts.
//
// kube-proxy deletes UDP conntrack entries after a sync in which a UDP service's endpoints
// changed, for flows whose backend is no longer serving the service: without it a connected UDP
// socket (DNS clients) keeps sending to a dead pod until its entry times out (kubernetes
// #59368). TCP is never flushed: a removed backend's connections fail or drain on their own.
//
// Expiry GC is Cilium's adaptive scheme (pkg/maps/ctmap/gc) on the agent's timer: a *pass*
// visits every entry position, at most `batch` positions per tick so no tick stalls the packet
// loop (both run on one thread); passes start `interval` apart. After a pass, interval adapts
// to the share of the table it reclaimed: > 25% -> interval x (1 - share), < 5% -> x 1.5,
// clamped to [min, max]. A create that found the table full (dp.ctGc.insertFailures grew)
// starts a pass at the next tick. The datapath's own inline step (ct4Create) still runs first.

import type { CtGcState } from '../datapath/state/ct-state.ts';
import type { Datapath } from '../datapath/state/datapath.ts';
import { DROP_CT_FULL } from '../datapath/state/reasons.ts';

/**
 * One incremental GC step: examine up to `max` entry positions from where the last step
 * stopped, delete expired flows. Returns how many were deleted; the cursor wraps to 0 after a
 * full pass. Shares its cursor with the datapath's inline GC.
 */
export function dpCtGc(dp: Datapath, nowMs: number, max: number): number {
  const before = dp.ct.size;
  dp.ctGc.cursor = dp.ct.scan(dp.ctGc.cursor, max, Math.floor(nowMs / 1000) >>> 0);
  return before - dp.ct.size;
}

/** GC schedule, seconds except the per-tick bounds. */
export interface CtGcConfig {
  /** first interval between passes (Cilium: 5 min) */
  intervalSec: number;
  minIntervalSec: number;
  maxIntervalSec: number;
  /** entry positions examined per tick (bounds one tick's work) */
  batch: number;
  /** timer period */
  tickMs: number;
}

export const DEFAULT_CT_GC: Readonly<CtGcConfig> = {
  intervalSec: 300,
  minIntervalSec: 10,
  maxIntervalSec: 43200,
  batch: 16384,
  tickMs: 100,
};

/** What the agent's GC did (inspect, tests, logs). */
export interface CtGcStats {
  passes: number;
  deleted: number;
  /** reclaimed by the last finished pass */
  lastPassDeleted: number;
  /** the interval now in force, seconds */
  intervalSec: number;
  running: boolean;
}

/** Adaptive incremental conntrack GC, driven by tick(nowMs) from the agent's timer. */
export class CtGcScheduler {
  readonly cfg: CtGcConfig;
  readonly stats: CtGcStats;
  private cursor = 0;
  private passDeleted = 0;
  private nextRunMs: number;
  private seenFailures: number;
  private readonly onExpired: ((i: number) => void) | undefined;

  private readonly ct: Datapath['ct'];
  private readonly inline: CtGcState;

  /** `ipv6`: collect dp.ct6 (its own schedule and cursor) instead of dp.ct. */
  constructor(
    dp: Datapath,
    cfg: Partial<CtGcConfig> = {},
    nowMs = 0,
    onExpired?: (i: number) => void,
    ipv6 = false,
  ) {
    this.ct = ipv6 ? dp.ct6 : dp.ct;
    this.inline = ipv6 ? dp.ct6Gc : dp.ctGc;
    this.cfg = { ...DEFAULT_CT_GC, ...cfg };
    this.onExpired = onExpired;
    this.nextRunMs = nowMs + this.cfg.intervalSec * 1000;
    this.seenFailures = this.inline.insertFailures;
    this.stats = {
      passes: 0,
      deleted: 0,
      lastPassDeleted: 0,
      intervalSec: this.cfg.intervalSec,
      running: false,
    };
  }

  /** One tick: start a pass if due (or the table was found full), run one bounded step. */
  tick(nowMs: number): number {
    const failed = this.inline.insertFailures !== this.seenFailures;
    this.seenFailures = this.inline.insertFailures;
    if (!this.stats.running) {
      if (nowMs < this.nextRunMs && !failed) return 0;
      this.stats.running = true;
      this.cursor = 0;
      this.passDeleted = 0;
    }
    const ct = this.ct;
    const before = ct.size;
    this.cursor = ct.scan(this.cursor, this.cfg.batch, Math.floor(nowMs / 1000), this.onExpired);
    const deleted = before - ct.size;
    this.passDeleted += deleted;
    this.stats.deleted += deleted;
    if (this.cursor === 0) this.finishPass(nowMs);
    return deleted;
  }

  private finishPass(nowMs: number): void {
    const s = this.stats;
    s.running = false;
    s.passes++;
    s.lastPassDeleted = this.passDeleted;
    s.intervalSec = ctGcNextInterval(s.intervalSec, this.passDeleted / this.ct.capacity, this.cfg);
    this.nextRunMs = nowMs + s.intervalSec * 1000;
  }
}

/** Cilium's adaptation: a pass that reclaimed `share` of the capacity sets the next interval. */
export function ctGcNextInterval(intervalSec: number, share: number, cfg: CtGcConfig): number {
  let next = intervalSec;
  if (share > 0.25) next = intervalSec * (1 - share);
  else if (share < 0.05) next = intervalSec * 1.5;
  return Math.min(cfg.maxIntervalSec, Math.max(cfg.minIntervalSec, next));
}

/**
 * The kernel's "nf_conntrack: table full, dropping packet", rate limited: check() returns the
 * number of DROP_CT_FULL packets since the last line when a line is due (at most one per
 * `everyMs`), else 0.
 */
export class CtFullLog {
  static readonly MESSAGE = 'kubetun conntrack: table full, dropping packet';
  private lastCount: number;
  private lastLogMs = -Infinity;

  constructor(
    private readonly dp: Datapath,
    private readonly everyMs = 5000,
  ) {
    this.lastCount = dp.counters[DROP_CT_FULL];
  }

  check(nowMs: number): number {
    const n = this.dp.counters[DROP_CT_FULL] - this.lastCount;
    if (n === 0 || nowMs - this.lastLogMs < this.everyMs) return 0;
    this.lastCount = this.dp.counters[DROP_CT_FULL];
    this.lastLogMs = nowMs;
    return n;
  }
}

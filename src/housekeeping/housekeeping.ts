// Housekeeping: every periodic task on the datapath's maps, behind one entry point the agent
// calls from one timer (slow world, between packet batches on the packet loop's thread, so each
// task is bounded per tick):
//
//   every tick (100 ms)   conntrack expiry, adaptive and bounded (ct-gc.ts, Cilium's scheme),
//                         IPv4 and IPv6 tables each on its own schedule;
//                         deleted flows release their lc/wlc/sed/nq connection counts first;
//                         the rate-limited "table full" line
//   every second          session-affinity entries idle past their service's timeout;
//                         SNAT entries of flows conntrack no longer has (natGcStep)
//   every 10 s            lc/wlc/sed/nq connection counts rebuilt from conntrack (repairs
//                         counts of flows deleted by anyone who did not release them)
//
// The periods are fixed here; the conntrack GC's schedule comes from the --ct-gc-* flags.

import { lbConnActive, lbConnRelease } from '../datapath/stages/lb.ts';
import { ctExpired } from '../datapath/stages/ct.ts';
import { natGcStep } from '../datapath/stages/nat-gc.ts';
import type { Datapath } from '../datapath/state/datapath.ts';
import type { DpLoader } from '../loader/load.ts';
import { CtFullLog, type CtGcConfig, CtGcScheduler } from './ct-gc.ts';

/** Affinity and SNAT GC period, ms. */
export const HK_AFFINITY_SNAT_MS = 1000;
/** SNAT entries examined per affinity/SNAT run (bounded work per tick). */
export const HK_SNAT_BATCH = 65536;
/** lc/wlc/sed/nq connection counts rebuilt from conntrack this often (repairs missed events). */
export const HK_CONN_RECOUNT_MS = 10_000;

/** Minimal logger housekeeping needs (pino fits). */
export interface HousekeepingLog {
  warn(obj: object, msg: string): void;
  debug(obj: object, msg: string): void;
}

const quiet: HousekeepingLog = { warn() {}, debug() {} };

export class Housekeeping {
  readonly ctGc: CtGcScheduler;
  /** the IPv6 conntrack's GC (dp.ct6): the same schedule, its own cursor and interval */
  readonly ct6Gc: CtGcScheduler;
  private readonly full: CtFullLog;
  private nextAffinityMs: number;
  private nextRecountMs: number;

  constructor(
    private readonly dp: Datapath,
    private readonly loader: DpLoader,
    gc: Partial<CtGcConfig> = {},
    nowMs = 0,
    private readonly log: HousekeepingLog = quiet,
  ) {
    this.ctGc = new CtGcScheduler(dp, gc, nowMs, (i) => lbConnRelease(dp, dp.ct, i));
    this.ct6Gc = new CtGcScheduler(dp, gc, nowMs, (i) => lbConnRelease(dp, dp.ct6, i), true);
    this.full = new CtFullLog(dp);
    this.nextAffinityMs = nowMs + HK_AFFINITY_SNAT_MS;
    this.nextRecountMs = nowMs + HK_CONN_RECOUNT_MS;
  }

  /** How often the caller should call tick(). */
  get tickMs(): number {
    return this.ctGc.cfg.tickMs;
  }

  /** Run whatever is due at nowMs. */
  tick(nowMs: number): void {
    const dp = this.dp;
    const passes = this.ctGc.stats.passes;
    this.ctGc.tick(nowMs);
    if (this.ctGc.stats.passes !== passes)
      this.log.debug({ ...this.ctGc.stats }, 'conntrack GC pass');
    const passes6 = this.ct6Gc.stats.passes;
    this.ct6Gc.tick(nowMs);
    if (this.ct6Gc.stats.passes !== passes6)
      this.log.debug({ ...this.ct6Gc.stats, family: 'IPv6' }, 'conntrack GC pass');
    const dropped = this.full.check(nowMs);
    if (dropped > 0) {
      this.log.warn({ table: 'conntrack', max: dp.ct.capacity, dropped }, CtFullLog.MESSAGE);
    }
    const nowSec = Math.floor(nowMs / 1000);
    if (nowMs >= this.nextAffinityMs) {
      this.nextAffinityMs = nowMs + HK_AFFINITY_SNAT_MS;
      dpAffinityGc(dp, this.loader, nowSec);
      natGcStep(dp, HK_SNAT_BATCH, nowSec);
    }
    if (nowMs >= this.nextRecountMs) {
      this.nextRecountMs = nowMs + HK_CONN_RECOUNT_MS;
      dpConnRecount(dp, nowSec);
    }
  }
}

/** Remove affinity entries (both families) idle longer than their service's timeout. */
export function dpAffinityGc(dp: Datapath, loader: DpLoader, nowSec: number): number {
  const timeout = (rn: number) => loader.affinityTimeout(rn);
  return dp.aff.expire(nowSec, timeout) + dp.aff6.expire(nowSec, timeout);
}

/**
 * Recount lc/wlc/sed/nq connection counts from conntrack (live, unexpired flows): repairs
 * counts of flows deleted without lbConnRelease. O(flows). Returns the flows counted.
 */
export function dpConnRecount(dp: Datapath, nowSec: number): number {
  dp.sched.resetCounts();
  let n = 0;
  for (const ct of [dp.ct, dp.ct6]) {
    for (let i = ct.next(0); i >= 0; i = ct.next(i + 1)) {
      if (ctExpired(ct, i, nowSec)) continue;
      const a = lbConnActive(ct.proto(i), ct.flags(i));
      if (dp.sched.connAdjust(ct.revNat(i), ct.backendId(i), a, 1 - a)) n++;
    }
  }
  return n;
}

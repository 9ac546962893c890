// SNAT housekeeping for both families (the agent's timer, never per packet): entries whose
// conntrack flow is gone are deleted (nat4Dead / nat6Dead say so), a bounded number per tick.
import type { SnatMap } from '../../maps/snat.ts';
import type { Datapath } from '../state/datapath.ts';
import { nat4Dead } from './nat.ts';
import { nat6Dead } from './nat6.ts';

/**
 * GC step (agent timer, not the hot path): examine up to `max` SNAT entries of each family
 * from its cursor, delete those whose conntrack flow is gone. Returns the number deleted.
 */
export function natGcStep(dp: Datapath, max: number, nowSec: number): number {
  const nat = dp.nat;
  dp.nowSec = nowSec >>> 0;
  const v4 = snatGcStep(nat.snat, nat.gcCursor, max, (e) => nat4Dead(dp, e));
  nat.gcCursor = v4.cursor;
  const v6 = snatGcStep(nat.snat6, nat.gcCursor6, max, (e) => nat6Dead(dp, e));
  nat.gcCursor6 = v6.cursor;
  return v4.deleted + v6.deleted;
}

function snatGcStep(
  snat: SnatMap,
  cursor: number,
  max: number,
  dead: (e: number) => boolean,
): { deleted: number; cursor: number } {
  const end = Math.min(snat.used, cursor + max);
  let deleted = 0;
  for (let e = snat.next(cursor); e >= 0 && e < end; e = snat.next(e + 1)) {
    if (!dead(e)) continue;
    snat.delete(e);
    deleted++;
  }
  return { deleted, cursor: end >= snat.used ? 0 : end };
}

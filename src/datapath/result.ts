// The one exit of every stage that decides: count the reason, record it in the trace, return
// the verdict.

import type { Datapath } from './datapath.ts';

export function dpVerdict(dp: Datapath, verdict: number, reason: number): number {
  dp.counters[reason]++;
  dp.lastReason = reason;
  return verdict;
}

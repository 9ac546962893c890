// Conntrack housekeeping for the agent (slow world, called between packet batches, never per
// packet): incremental expiry GC, and kube-proxy's stale-UDP cleanup.
//
// kube-proxy deletes UDP conntrack entries after a sync in which a UDP service's endpoints
// changed, for flows whose backend is no longer serving the service: without it a connected UDP
// socket (DNS clients) keeps sending to a dead pod until its entry times out (kubernetes
// #59368). TCP is never flushed: a removed backend's connections fail or drain on their own.

import type { Datapath } from './datapath.ts';

const IPPROTO_UDP = 17;

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

/**
 * Delete UDP flows whose backend no longer serves their service: the service port (the flow's
 * original destination) is gone, or none of its slots holds the flow's backend id. Returns the
 * number deleted. O(flows + slots of the services involved).
 */
export function dpCtFlushStaleUdp(dp: Datapath): number {
  const { ct, svc } = dp;
  const serving = new Map<number, Set<number>>(); // master entry -> backend ids in its slots
  let deleted = 0;
  for (let i = ct.next(0); i >= 0; i = ct.next(i + 1)) {
    if (ct.proto(i) !== IPPROTO_UDP) continue;
    const vip = ct.daddr(i);
    const port = ct.dport(i);
    const m = svc.lookup(vip, port, IPPROTO_UDP, 0);
    let ids = m >= 0 ? serving.get(m) : undefined;
    if (m >= 0 && !ids) {
      ids = new Set();
      for (let s = 1; s <= svc.count(m); s++) {
        const e = svc.lookup(vip, port, IPPROTO_UDP, s);
        if (e >= 0) ids.add(svc.backendId(e));
      }
      serving.set(m, ids);
    }
    if (ids?.has(ct.backendId(i))) continue;
    ct.delete(i);
    deleted++;
  }
  return deleted;
}

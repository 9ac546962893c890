// The least-connection family of IPVS schedulers, each as its kernel file computes it:
//
//   lc   ip_vs_lc.c   min overhead = active*256 + inactive, weight 0 skipped
//   wlc  ip_vs_wlc.c  min overhead/weight, compared as loh*w_d > doh*w_least (no division)
//   sed  ip_vs_sed.c  min (active+1)/weight, same cross-multiplication
//   nq   ip_vs_nq.c   the first idle candidate (weight > 0, active 0), else as sed
//
// Ties: the first candidate in list order wins (every comparison is strict). The overhead is
// ip_vs_dest_conn_overhead() (include/net/ip_vs.h): active connections weigh 256 inactive ones.
// Counts come from the caller (the datapath's per-backend flow counts). Doubles are exact up to
// 2^53, so the kernel's s64 products (< 2^31 * 2^31) are computed without loss.
//
// Per pick: O(n), no allocation. Returns a candidate index or -1.

/** ip_vs_dest_conn_overhead */
export function connOverhead(active: number, inactive: number): number {
  return active * 256 + inactive;
}

export function lcPick(
  weights: Int32Array,
  active: Int32Array,
  inactive: Int32Array,
  n: number,
): number {
  let least = -1;
  let loh = 0;
  for (let i = 0; i < n; i++) {
    if (weights[i] === 0) continue;
    const doh = connOverhead(active[i], inactive[i]);
    if (least < 0 || doh < loh) {
      least = i;
      loh = doh;
    }
  }
  return least;
}

/** Weighted minimum of `overhead(i)/weight(i)`, kernel order of evaluation (wlc and sed). */
function weightedLeast(
  weights: Int32Array,
  active: Int32Array,
  inactive: Int32Array,
  n: number,
  sed: boolean,
): number {
  let least = 0;
  while (least < n && !(weights[least] > 0)) least++;
  if (least >= n) return -1;
  let loh = sed ? active[least] + 1 : connOverhead(active[least], inactive[least]);
  // Later weight-0 candidates are not skipped by the kernel, but loh*0 > doh*w never holds.
  for (let i = least + 1; i < n; i++) {
    const doh = sed ? active[i] + 1 : connOverhead(active[i], inactive[i]);
    if (loh * weights[i] > doh * weights[least]) {
      least = i;
      loh = doh;
    }
  }
  return least;
}

export function wlcPick(
  weights: Int32Array,
  active: Int32Array,
  inactive: Int32Array,
  n: number,
): number {
  return weightedLeast(weights, active, inactive, n, false);
}

export function sedPick(weights: Int32Array, active: Int32Array, n: number): number {
  return weightedLeast(weights, active, active, n, true);
}

export function nqPick(weights: Int32Array, active: Int32Array, n: number): number {
  let least = -1;
  let loh = 0;
  for (let i = 0; i < n; i++) {
    const w = weights[i];
    if (w === 0) continue;
    if (active[i] === 0) return i; // idle: never queue behind a busy one
    const doh = active[i] + 1;
    if (least < 0 || loh * w > doh * weights[least]) {
      least = i;
      loh = doh;
    }
  }
  return least;
}

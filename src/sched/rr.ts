// random (kube-proxy iptables mode) and rr (net/netfilter/ipvs/ip_vs_rr.c).
//
// Both skip candidates of weight 0: IPVS's "quiesced" destinations, which keep their existing
// connections but get no new ones. Weights are otherwise ignored here.
//
// Per pick: no allocation. random is O(1) over a list of eligible indices built with the
// service; rr is O(1) unless it has to step over weight-0 candidates (the kernel scans too).

import type { SchedRng } from './kinds.ts';

/** Indices of the candidates with weight > 0, in order (control plane). */
export function randomBuild(weights: Int32Array, n: number): Uint16Array {
  let k = 0;
  for (let i = 0; i < n; i++) if (weights[i] > 0) k++;
  const elig = new Uint16Array(k);
  k = 0;
  for (let i = 0; i < n; i++) if (weights[i] > 0) elig[k++] = i;
  return elig;
}

/** Uniform over the eligible candidates; -1 when there is none. */
export function randomPick(elig: Uint16Array, rng: SchedRng): number {
  const k = elig.length;
  return k === 0 ? -1 : elig[rng.below(k)];
}

/**
 * ip_vs_rr_schedule: the first candidate with weight > 0 after `cursor` (the last one picked,
 * -1 = the list head), wrapping around once and giving up after re-checking `cursor` itself.
 * Returns the pick (the caller stores it as the next cursor) or -1.
 */
export function rrPick(weights: Int32Array, n: number, cursor: number): number {
  let i = cursor;
  for (let k = 0; k < n; k++) {
    i++;
    if (i >= n) i = 0;
    if (weights[i] > 0) return i;
  }
  return -1;
}

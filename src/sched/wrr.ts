// wrr: net/netfilter/ipvs/ip_vs_wrr.c, step for step.
//
// State ("mark") per service: cl = last picked (-1 = list head), cw = current weight,
// mw = max weight - (gcd - 1), di = gcd of the positive weights. A pick scans forward from cl
// for a candidate with weight >= cw; at the end of the list cw drops by di and the scan starts
// over from the head; below 1 it wraps to mw. Weights 4,3,2 give A A B A B C A B C, repeating.
//
// The kernel lowers mw by (di - 1) so that the last pass runs with cw = 1 and still finds a
// candidate whose weight was lowered below di concurrently; we keep it for identical output.

export const WRR_CL = 0;
export const WRR_CW = 1;
export const WRR_MW = 2;
export const WRR_DI = 3;
/** Int32 words of wrr state per service. */
export const WRR_WORDS = 4;

function gcd(a: number, b: number): number {
  while (b !== 0) {
    const t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/** ip_vs_wrr_gcd_weight: gcd of the positive weights, 1 if none. */
export function wrrGcd(weights: Int32Array, n: number): number {
  let g = 0;
  for (let i = 0; i < n; i++) {
    const w = weights[i];
    if (w > 0) g = g > 0 ? gcd(w, g) : w;
  }
  return g > 0 ? g : 1;
}

function maxWeight(weights: Int32Array, n: number): number {
  let m = 0;
  for (let i = 0; i < n; i++) if (weights[i] > m) m = weights[i];
  return m;
}

/** ip_vs_wrr_init_svc: a fresh mark (control plane). */
export function wrrInit(weights: Int32Array, n: number, st: Int32Array): void {
  st[WRR_CL] = -1;
  st[WRR_DI] = wrrGcd(weights, n);
  st[WRR_MW] = maxWeight(weights, n) - (st[WRR_DI] - 1);
  st[WRR_CW] = st[WRR_MW];
}

/**
 * ip_vs_wrr_dest_changed: after a destination was added, removed or re-weighted. The scan
 * restarts from the head but the current weight is kept (rounded to the new step), so a
 * backend set change does not restart the whole interleaving.
 */
export function wrrUpdate(weights: Int32Array, n: number, st: Int32Array): void {
  st[WRR_CL] = -1;
  const di = wrrGcd(weights, n);
  const mw = maxWeight(weights, n) - (di - 1);
  st[WRR_DI] = di;
  st[WRR_MW] = mw;
  const cw = st[WRR_CW];
  if (cw > mw || cw === 0) st[WRR_CW] = mw;
  else if (di > 1) st[WRR_CW] = Math.trunc(cw / di) * di + 1;
}

/** ip_vs_wrr_schedule (overload flags aside): the pick, or -1. Updates `st`. */
export function wrrPick(weights: Int32Array, n: number, st: Int32Array): number {
  if (st[WRR_MW] === 0) return -1; // no destination with a positive weight
  const last = st[WRR_CL];
  const di = st[WRR_DI];
  let cw = st[WRR_CW];
  let from = last;
  let stop = -2; // none
  let lastPass = false;
  let restarted = false;
  for (;;) {
    for (let i = from + 1; i < n; i++) {
      if (weights[i] >= cw) {
        st[WRR_CL] = i;
        st[WRR_CW] = cw;
        return i;
      }
      if (i === stop) return wrrFail(st, i, cw);
    }
    from = -1;
    cw -= di;
    if (cw <= 0) {
      cw = st[WRR_MW];
      // Every candidate has been checked against weight >= 1: nothing is available.
      if (lastPass || last === -1) return wrrFail(st, -1, cw);
      restarted = true;
    }
    lastPass = cw <= di;
    if (lastPass && restarted && last !== -1) stop = last;
  }
}

function wrrFail(st: Int32Array, cl: number, cw: number): number {
  st[WRR_CL] = cl;
  st[WRR_CW] = cw;
  return -1;
}

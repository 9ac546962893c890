// Seeded deterministic PRNG for the property tests (mulberry32): a failure reproduces exactly.
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** Integer in [0, n). */
export function below(rnd: () => number, n: number): number {
  return rnd() % n;
}

// Shared bits for the scheduler tests.

export const w32 = (xs: number[]): Int32Array => Int32Array.from(xs);

/** Chi-square statistic of observed counts against expected counts. */
export function chiSquare(observed: ArrayLike<number>, expected: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < observed.length; i++) s += (observed[i] - expected[i]) ** 2 / expected[i];
  return s;
}

/** A small seeded PRNG for test inputs (mulberry32), independent of the one under test. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (t ^ (t >>> 14)) >>> 0;
  };
}

export function ip(s: string): number {
  const [a, b, c, d] = s.split('.').map(Number);
  return ((a << 24) | (b << 16) | (c << 8) | d) >>> 0;
}

export const letters = (seq: number[]): string =>
  seq.map((i) => (i < 0 ? '-' : 'ABCDEFGH'[i])).join('');

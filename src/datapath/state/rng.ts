// A seeded, allocation-free PRNG for backend selection. splitmix32 (a 32-bit variant of
// Steele/Lea/Flood's SplitMix): one add and two multiplies per draw, passes the usual
// uniformity tests far beyond what "pick 1 of n slots" needs, and a seed makes every test and
// every replay deterministic. Not cryptographic: a client cannot steer its backend any more
// than with iptables' `statistic --mode random`, which is also predictable.

export class Rng {
  /** int32 state; advanced by the golden-ratio increment each draw */
  private s: number;

  constructor(seed: number) {
    this.s = seed | 0;
  }

  /** A generator that draws what this one would draw next (the trace's dry run). */
  copy(): Rng {
    const r = new Rng(0);
    r.s = this.s;
    return r;
  }

  reseed(seed: number): void {
    this.s = seed | 0;
  }

  /** Next uniformly distributed u32. */
  nextU32(): number {
    this.s = (this.s + 0x9e3779b9) | 0;
    let z = this.s;
    z = Math.imul(z ^ (z >>> 16), 0x21f0aaad);
    z = Math.imul(z ^ (z >>> 15), 0x735a2d97);
    return (z ^ (z >>> 15)) >>> 0;
  }

  /**
   * Uniform integer in [0, n) for 1 <= n <= 65536, by multiply-high (Lemire) instead of `%`:
   * no division, and the bias (< n / 2^32) is far below anything measurable.
   */
  below(n: number): number {
    return Math.floor((this.nextU32() * n) / 4294967296);
  }
}

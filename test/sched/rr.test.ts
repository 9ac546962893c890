import { describe, expect, it } from 'vitest';
import { Rng } from '../../src/datapath/state/rng.ts';
import { randomBuild, randomPick, rrPick } from '../../src/sched/rr.ts';
import { chiSquare, letters, w32 } from './helpers.ts';

describe('random (iptables statistic --mode random)', () => {
  it('is uniform over the eligible candidates (chi-square, 4 dof, p = 0.001)', () => {
    const weights = w32([1, 5, 0, 1, 1, 1]); // weight is eligibility only, not a share
    const elig = randomBuild(weights, 6);
    expect(Array.from(elig)).toEqual([0, 1, 3, 4, 5]);
    const rng = new Rng(7);
    const hits = new Array(6).fill(0);
    const N = 50_000;
    for (let k = 0; k < N; k++) hits[randomPick(elig, rng)]++;
    expect(hits[2]).toBe(0);
    const obs = [hits[0], hits[1], hits[3], hits[4], hits[5]];
    expect(chiSquare(obs, new Array(5).fill(N / 5))).toBeLessThan(18.467);
  });

  it('draws from the given RNG: same seed, same picks; another seed, other picks', () => {
    const elig = randomBuild(w32([1, 1, 1, 1, 1, 1, 1, 1]), 8);
    const seq = (seed: number) => {
      const rng = new Rng(seed);
      return Array.from({ length: 40 }, () => randomPick(elig, rng)).join(',');
    };
    expect(seq(1)).toBe(seq(1));
    expect(seq(1)).not.toBe(seq(2));
  });

  it('returns -1 when no candidate has a positive weight', () => {
    expect(randomPick(randomBuild(w32([0, 0]), 2), new Rng(1))).toBe(-1);
    expect(randomPick(randomBuild(w32([]), 0), new Rng(1))).toBe(-1);
  });
});

/** Drive rrPick as the table does: the pick becomes the cursor. */
function rrSeq(weights: number[], picks: number, cursor = -1): string {
  const w = w32(weights);
  const out: number[] = [];
  for (let k = 0; k < picks; k++) {
    const i = rrPick(w, w.length, cursor);
    if (i >= 0) cursor = i;
    out.push(i);
  }
  return letters(out);
}

describe('rr (ip_vs_rr.c)', () => {
  it('rotates strictly through the candidates in list order, ignoring weights', () => {
    expect(rrSeq([1, 1, 1], 7)).toBe('ABCABCA');
    expect(rrSeq([5, 1, 3, 1], 8)).toBe('ABCDABCD');
  });

  it('continues after the cursor, wrapping around', () => {
    expect(rrSeq([1, 1, 1, 1], 5, 2)).toBe('DABCD');
  });

  it('skips quiesced (weight 0) candidates', () => {
    expect(rrSeq([1, 0, 1, 0], 5)).toBe('ACACA');
  });

  it('with one candidate left, keeps picking it; with none, -1', () => {
    expect(rrSeq([0, 1, 0], 3, 1)).toBe('BBB');
    expect(rrSeq([0, 0, 0], 2)).toBe('--');
    expect(rrSeq([], 1)).toBe('-');
  });
});

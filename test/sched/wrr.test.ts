import { describe, expect, it } from 'vitest';
import {
  WRR_CL,
  WRR_CW,
  WRR_DI,
  WRR_MW,
  WRR_WORDS,
  wrrGcd,
  wrrInit,
  wrrPick,
  wrrUpdate,
} from '../../src/sched/wrr.ts';
import { letters, prng, w32 } from './helpers.ts';

function seq(weights: number[], picks: number): string {
  const w = w32(weights);
  const st = new Int32Array(WRR_WORDS);
  wrrInit(w, w.length, st);
  return letters(Array.from({ length: picks }, () => wrrPick(w, w.length, st)));
}

/**
 * The textbook LVS weighted round-robin (linuxvirtualserver.org/docs/scheduling.html): a
 * reference written from its description, not from the kernel's loop structure.
 */
function lvsReference(weights: number[], picks: number): string {
  const n = weights.length;
  const max = Math.max(...weights);
  let g = 0;
  for (const x of weights) if (x > 0) g = g === 0 ? x : gcdRef(g, x);
  let i = -1;
  let cw = 0;
  const out: number[] = [];
  while (out.length < picks) {
    i = (i + 1) % n;
    if (i === 0) {
      cw -= g;
      if (cw <= 0) cw = max;
    }
    if (weights[i] >= cw && weights[i] > 0) out.push(i);
  }
  return letters(out);
}

function gcdRef(a: number, b: number): number {
  return b === 0 ? a : gcdRef(b, a % b);
}

describe('wrr (ip_vs_wrr.c)', () => {
  it('interleaves weights 4,3,2 as the kernel does: A A B A B C A B C, repeating', () => {
    expect(seq([4, 3, 2], 18)).toBe('AABABCABC'.repeat(2));
  });

  it('steps the current weight by the gcd of the weights (4,2 -> A A B)', () => {
    const w = w32([4, 2]);
    expect(wrrGcd(w, 2)).toBe(2);
    const st = new Int32Array(WRR_WORDS);
    wrrInit(w, 2, st);
    expect([st[WRR_CL], st[WRR_CW], st[WRR_MW], st[WRR_DI]]).toEqual([-1, 3, 3, 2]);
    expect(seq([4, 2], 9)).toBe('AAB'.repeat(3));
  });

  it('matches the textbook LVS algorithm on 300 random weight sets', () => {
    const r = prng(3);
    for (let t = 0; t < 300; t++) {
      const n = 1 + (r() % 6);
      const weights: number[] = Array.from({ length: n }, () =>
        r() % 4 === 0 ? 0 : 1 + (r() % 12),
      );
      if (!weights.some((x) => x > 0)) weights[0] = 1;
      const total = weights.reduce((a, b) => a + b, 0);
      expect(seq(weights, 3 * total), weights.join(',')).toBe(lvsReference(weights, 3 * total));
    }
  });

  it('gives each candidate its weight per cycle and never picks weight 0', () => {
    const s = seq([5, 0, 2, 1], 8 * 4);
    expect([...s].filter((c) => c === 'A').length).toBe(20);
    expect([...s].filter((c) => c === 'B').length).toBe(0);
    expect([...s].filter((c) => c === 'C').length).toBe(8);
    expect([...s].filter((c) => c === 'D').length).toBe(4);
  });

  it('returns -1 when every weight is 0 (mw = 0), and for no candidates', () => {
    expect(seq([0, 0], 2)).toBe('--');
    expect(seq([], 1)).toBe('-');
  });

  it('keeps the current weight across a backend change (ip_vs_wrr_dest_changed)', () => {
    const w = w32([4, 3, 2]);
    const st = new Int32Array(WRR_WORDS);
    wrrInit(w, 3, st);
    const first = [wrrPick(w, 3, st), wrrPick(w, 3, st), wrrPick(w, 3, st)]; // A A B, cw = 3
    expect(letters(first)).toBe('AAB');
    expect(st[WRR_CW]).toBe(3);
    const w2 = w32([4, 3, 2, 3]); // D added
    wrrUpdate(w2, 4, st);
    expect(st[WRR_CL]).toBe(-1); // scan restarts from the head ...
    expect(st[WRR_CW]).toBe(3); // ... at the same current weight
    expect(letters([wrrPick(w2, 4, st), wrrPick(w2, 4, st), wrrPick(w2, 4, st)])).toBe('ABD');
  });

  it('rounds the kept weight to the new step and caps it at the new maximum', () => {
    const st = new Int32Array(WRR_WORDS);
    st[WRR_CW] = 7;
    wrrUpdate(w32([6, 4]), 2, st); // di = 2, mw = 5: cw 7 > 5 -> 5
    expect(st[WRR_CW]).toBe(5);
    st[WRR_CW] = 4;
    wrrUpdate(w32([8, 4]), 2, st); // di = 4, mw = 5: cw = (4/4)*4 + 1
    expect(st[WRR_CW]).toBe(5);
    st[WRR_CW] = 0;
    wrrUpdate(w32([3, 1]), 2, st);
    expect(st[WRR_CW]).toBe(3);
  });
});

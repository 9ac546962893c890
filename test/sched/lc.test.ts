import { describe, expect, it } from 'vitest';
import { connOverhead, lcPick, nqPick, sedPick, wlcPick } from '../../src/sched/lc.ts';
import { prng, w32 } from './helpers.ts';

// Reference: the first index whose load is minimal, the load compared as exact fractions
// (num_i/den_i < num_j/den_j  <=>  num_i*den_j < num_j*den_i, all positive), over the
// candidates the kernel considers. Written as "minimum, then first index reaching it" rather
// than the kernel's running comparison.
function firstMin(num: number[], den: number[], ok: boolean[]): number {
  let best = -1;
  for (let i = 0; i < num.length; i++) {
    if (!ok[i]) continue;
    if (best < 0 || num[i] * den[best] < num[best] * den[i]) best = i;
  }
  if (best < 0) return -1;
  for (let i = 0; i < num.length; i++) {
    if (ok[i] && num[i] * den[best] === num[best] * den[i]) return i;
  }
  return best;
}

describe('lc (ip_vs_lc.c)', () => {
  it('minimises active*256 + inactive', () => {
    expect(connOverhead(2, 3)).toBe(515);
    // overheads 512+0, 256+300, 256+10
    expect(lcPick(w32([1, 1, 1]), w32([2, 1, 1]), w32([0, 300, 10]), 3)).toBe(2);
    // one active outweighs 255 inactive: 256 vs 255
    expect(lcPick(w32([1, 1]), w32([1, 0]), w32([0, 255]), 2)).toBe(1);
    expect(lcPick(w32([1, 1]), w32([1, 0]), w32([0, 257]), 2)).toBe(0);
  });

  it('ignores weights except 0, and the first of equal overheads wins', () => {
    expect(lcPick(w32([1, 100, 1]), w32([3, 3, 3]), w32([0, 0, 0]), 3)).toBe(0);
    expect(lcPick(w32([0, 100, 1]), w32([0, 3, 3]), w32([0, 0, 0]), 3)).toBe(1);
    expect(lcPick(w32([0, 0]), w32([0, 0]), w32([0, 0]), 2)).toBe(-1);
  });
});

describe('wlc (ip_vs_wlc.c)', () => {
  it('minimises overhead/weight by cross-multiplication', () => {
    // loads 256/1, 512/3 = 170.7, 768/2 = 384
    expect(wlcPick(w32([1, 3, 2]), w32([1, 2, 3]), w32([0, 0, 0]), 3)).toBe(1);
    // inactive conns count 1/256 of an active one: (256+10)/1 vs (256+0)/1
    expect(wlcPick(w32([1, 1]), w32([1, 1]), w32([10, 0]), 2)).toBe(1);
  });

  it('breaks ties by list order and never picks weight 0 (even with no connections)', () => {
    // 256/1 = 512/2 = 768/3: the first wins
    expect(wlcPick(w32([1, 2, 3]), w32([1, 2, 3]), w32([0, 0, 0]), 3)).toBe(0);
    expect(wlcPick(w32([0, 2, 3]), w32([0, 2, 3]), w32([0, 0, 0]), 3)).toBe(1);
    expect(wlcPick(w32([3, 0]), w32([5, 0]), w32([0, 0]), 2)).toBe(0);
    expect(wlcPick(w32([0, 0]), w32([0, 0]), w32([0, 0]), 2)).toBe(-1);
  });
});

describe('sed (ip_vs_sed.c)', () => {
  it('minimises (active+1)/weight, ignoring inactive connections', () => {
    // wlc and sed disagree here: wlc 256/1 < 1024/3, sed 2/1 > 5/3
    const w = w32([1, 3]);
    const act = w32([1, 4]);
    expect(wlcPick(w, act, w32([0, 0]), 2)).toBe(0);
    expect(sedPick(w, act, 2)).toBe(1);
    expect(sedPick(w32([1, 1]), w32([1, 1]), 2)).toBe(0); // tie
    expect(sedPick(w32([0, 2]), w32([0, 5]), 2)).toBe(1); // weight 0 skipped
    expect(sedPick(w32([0]), w32([0]), 1)).toBe(-1);
  });
});

describe('nq (ip_vs_nq.c)', () => {
  it('takes the first idle candidate with weight > 0, however light the others', () => {
    expect(nqPick(w32([100, 1, 1]), w32([1, 0, 0]), 3)).toBe(1);
    expect(nqPick(w32([0, 1, 1]), w32([0, 3, 0]), 3)).toBe(2); // idle but quiesced: skipped
  });

  it('otherwise picks as sed', () => {
    expect(nqPick(w32([1, 3]), w32([1, 4]), 2)).toBe(1);
    expect(nqPick(w32([2, 2]), w32([3, 3]), 2)).toBe(0);
    expect(nqPick(w32([0, 0]), w32([0, 0]), 2)).toBe(-1);
  });
});

describe('least-connection family against a fraction reference (2000 random cases)', () => {
  it('agrees on every case, ties and zero weights included', () => {
    const r = prng(11);
    for (let t = 0; t < 2000; t++) {
      const n = 1 + (r() % 7);
      const weights = Array.from({ length: n }, () => (r() % 5 === 0 ? 0 : 1 + (r() % 4)));
      const active = Array.from({ length: n }, () => r() % 4);
      const inactive = Array.from({ length: n }, () => (r() % 3 === 0 ? 256 : r() % 3));
      const [w, a, ia] = [w32(weights), w32(active), w32(inactive)];
      const pos = weights.map((x) => x > 0);
      const oh = active.map((x, i) => connOverhead(x, inactive[i]));
      const ones = weights.map(() => 1);
      const ctx = JSON.stringify({ weights, active, inactive });
      expect(lcPick(w, a, ia, n), ctx).toBe(firstMin(oh, ones, pos));
      expect(wlcPick(w, a, ia, n), ctx).toBe(firstMin(oh, weights, pos));
      const sedNum = active.map((x) => x + 1);
      expect(sedPick(w, a, n), ctx).toBe(firstMin(sedNum, weights, pos));
      const idle = active.findIndex((x, i) => x === 0 && weights[i] > 0);
      expect(nqPick(w, a, n), ctx).toBe(idle >= 0 ? idle : firstMin(sedNum, weights, pos));
    }
  });
});

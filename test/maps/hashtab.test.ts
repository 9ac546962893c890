import { describe, expect, it } from 'vitest';
import {
  Carver,
  EntryPool,
  H_WORDS,
  HashIndex,
  hash1,
  hash4,
  mix32,
  roundCapacity,
} from '../../src/maps/hashtab.ts';
import { below, mulberry32 } from './prng.ts';

// An index whose entries have hashes we choose, so collisions and wrap-around are exact.
function harness(slots: number) {
  const hashes = new Uint32Array(slots);
  const index = new HashIndex(new Uint32Array(slots), { entryHash: (e) => hashes[e] });
  const find = (e: number) => index.slotOf(e);
  return { hashes, index, find };
}

describe('HashIndex (linear probing, backward-shift deletion)', () => {
  it('wraps a chain that starts at the last slot around past slot 0', () => {
    const { hashes, index, find } = harness(8);
    for (let e = 0; e < 3; e++) {
      hashes[e] = 7;
      index.insert(7, e);
    }
    expect([find(0), find(1), find(2)]).toEqual([7, 0, 1]);
    index.remove(0);
    // both survivors shift back across the wrap, leaving no hole in the chain
    expect([find(1), find(2)]).toEqual([7, 0]);
    expect(index.slots[1]).toBe(0);
  });

  it('keeps later chain members findable after deleting from the middle', () => {
    const { hashes, index, find } = harness(16);
    // chain at home 3: e0 e1 e2 ; e3 has home 4 and sits behind them; e4 home 6
    const homes = [3, 3, 3, 4, 6];
    homes.forEach((h, e) => {
      hashes[e] = h;
      index.insert(h, e);
    });
    expect(homes.map((_, e) => find(e))).toEqual([3, 4, 5, 6, 7]);
    index.remove(1);
    expect([find(0), find(2), find(3), find(4)]).toEqual([3, 4, 5, 6]);
    index.remove(0);
    expect([find(2), find(3), find(4)]).toEqual([3, 4, 6]);
  });

  it('does not move an entry in front of its home slot', () => {
    const { hashes, index, find } = harness(8);
    hashes[0] = 2;
    hashes[1] = 3;
    index.insert(2, 0);
    index.insert(3, 1);
    index.remove(0);
    expect(find(1)).toBe(3);
    expect(index.slots[2]).toBe(0);
  });

  it('matches a reference set under random inserts and deletes with few home slots', () => {
    const rnd = mulberry32(7);
    const slots = 64;
    const { hashes, index, find } = harness(slots);
    const present = new Set<number>();
    for (let op = 0; op < 20000; op++) {
      const e = below(rnd, slots / 2);
      if (present.has(e)) {
        expect(index.remove(e)).toBe(true);
        present.delete(e);
      } else {
        // homes clustered near the end of the table so chains keep wrapping
        hashes[e] = slots - 1 - below(rnd, 4);
        index.insert(hashes[e], e);
        present.add(e);
      }
      if (op % 50 === 0) {
        for (let x = 0; x < slots / 2; x++) expect(find(x) >= 0).toBe(present.has(x));
      }
    }
  });
});

describe('EntryPool', () => {
  function pool(cap: number) {
    const c = new Carver(new ArrayBuffer(4096));
    const hdr = c.u32(H_WORDS);
    const live = c.u32((cap + 31) >>> 5);
    const link = c.u32(cap);
    return new EntryPool(hdr, live, link, cap);
  }

  it('hands out every entry once, refuses when full, and reuses freed entries', () => {
    const p = pool(40);
    const got = new Set<number>();
    for (let i = 0; i < 40; i++) got.add(p.alloc());
    expect(got.size).toBe(40);
    expect(p.alloc()).toBe(-1);
    p.release(17);
    p.release(33);
    expect(p.size).toBe(38);
    expect(new Set([p.alloc(), p.alloc()])).toEqual(new Set([17, 33]));
    expect(p.alloc()).toBe(-1);
  });

  it('iterates live entries across bitmap words', () => {
    const p = pool(100);
    for (let i = 0; i < 100; i++) p.alloc();
    for (let i = 0; i < 100; i++) if (![0, 31, 32, 63, 64, 99].includes(i)) p.release(i);
    const seen: number[] = [];
    for (let e = p.nextLive(0); e >= 0; e = p.nextLive(e + 1)) seen.push(e);
    expect(seen).toEqual([0, 31, 32, 63, 64, 99]);
    expect(p.isLive(31)).toBe(true);
    expect(p.isLive(30)).toBe(false);
    expect(p.isLive(-1)).toBe(false);
    expect(p.isLive(100)).toBe(false);
  });
});

describe('hashing and capacity', () => {
  it('rounds capacity up to a power of two and rejects nonsense', () => {
    expect(roundCapacity(1, 'x')).toBe(1);
    expect(roundCapacity(1000, 'x')).toBe(1024);
    expect(roundCapacity(1024, 'x')).toBe(1024);
    expect(() => roundCapacity(0, 'x')).toThrow(RangeError);
    expect(() => roundCapacity(1.5, 'x')).toThrow(/capacity/);
  });

  it('spreads sequential keys evenly over the low bits', () => {
    const buckets = new Uint32Array(256);
    for (let i = 0; i < 256 * 64; i++) buckets[hash1(1, i) & 255]++;
    // a bad mix (identity, or a weak multiply) puts sequential keys in few buckets
    expect(Math.max(...buckets)).toBeLessThan(64 * 2);
    expect(Math.min(...buckets)).toBeGreaterThan(64 / 2);
    const b2 = new Uint32Array(256);
    for (let p = 0; p < 256 * 64; p++)
      b2[hash4(1, 0x0a000001, 0x0a600001, (p << 16) | 80, 6) & 255]++;
    expect(Math.max(...b2)).toBeLessThan(64 * 2);
    expect(mix32(0)).toBe(0);
    expect(hash1(1, 5)).not.toBe(hash1(2, 5));
  });
});

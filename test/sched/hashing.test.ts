import { describe, expect, it } from 'vitest';
import {
  dhBuild,
  dhHashKey,
  dhPick,
  SH_F_FALLBACK,
  SH_F_LEGACY_HASH,
  SH_F_PORT,
  SH_TAB_SIZE,
  shBuild,
  shHashKey,
  shPick,
} from '../../src/sched/hashing.ts';
import { chiSquare, ip, letters, prng, w32 } from './helpers.ts';

const TCP = 6;
const ICMP = 1;

// Reference arithmetic in BigInt, straight from the kernel expressions.
const hash32Ref = (v: number) => Number(((BigInt(v >>> 0) * 0x61c88647n) % 2n ** 32n) >> 24n);
const legacyRef = (v: number) => Number((BigInt(v >>> 0) * 2654435761n) & 255n);

describe('sh/dh bucket of an address', () => {
  it('is hash_32(addr + port, 8): the top 8 bits of the golden-ratio product', () => {
    const r = prng(5);
    for (let k = 0; k < 1000; k++) {
      const a = r();
      const p = r() & 0xffff;
      expect(shHashKey(a, 0, 0, 0)).toBe(hash32Ref(a));
      expect(shHashKey(a, p, 0, 0)).toBe(hash32Ref((a + p) % 2 ** 32));
      expect(dhHashKey(a, 0)).toBe(hash32Ref(a));
    }
  });

  it('with SH_F_LEGACY_HASH is (addr + port) * 2654435761 & 255, a function of the last octet', () => {
    const r = prng(6);
    for (let k = 0; k < 1000; k++) {
      const a = r();
      expect(shHashKey(a, 0, 0, SH_F_LEGACY_HASH)).toBe(legacyRef(a));
      expect(dhHashKey(a, SH_F_LEGACY_HASH)).toBe(legacyRef(a));
    }
    const sameLastOctet = Array.from({ length: 256 }, (_, k) => ip(`10.${k}.${(k * 7) & 255}.5`));
    expect(new Set(sameLastOctet.map((a) => shHashKey(a, 0, 0, SH_F_LEGACY_HASH))).size).toBe(1);
    expect(new Set(sameLastOctet.map((a) => shHashKey(a, 0, 0, 0))).size).toBeGreaterThan(100);
  });
});

describe('sh (ip_vs_sh.c)', () => {
  it('fills the 256 buckets in list order, `weight` consecutive buckets per candidate', () => {
    const t = shBuild(w32([2, 1, 3]), 3);
    expect(t.length).toBe(SH_TAB_SIZE);
    expect(letters(Array.from(t.subarray(0, 12)))).toBe('AABCCCAABCCC');
    const counts = [0, 0, 0];
    for (const c of t) counts[c]++;
    expect(counts).toEqual([86, 43, 127]); // 42 full cycles of 6, then A A B C
  });

  it('gives a weight-0 candidate one bucket per cycle, and that bucket finds no one', () => {
    const weights = w32([1, 0, 1]);
    const t = shBuild(weights, 3);
    expect(letters(Array.from(t.subarray(0, 6)))).toBe('ABCABC');
    const r = prng(8);
    let misses = 0;
    for (let k = 0; k < 3000; k++) {
      const a = r();
      const got = shPick(t, weights, a, 0, TCP, 0);
      expect(got).toBe(t[shHashKey(a, 0, 0, 0)] === 1 ? -1 : t[shHashKey(a, 0, 0, 0)]);
      if (got < 0) misses++;
    }
    expect(misses).toBeGreaterThan(800); // about a third of the clients
  });

  it('keeps a client on one backend whatever its source port, unless SH_F_PORT', () => {
    const weights = w32([1, 1, 1, 1, 1]);
    const t = shBuild(weights, 5);
    const client = ip('10.244.7.19');
    const byPort = (flags: number) =>
      new Set(
        Array.from({ length: 200 }, (_, k) => shPick(t, weights, client, 1024 + k, TCP, flags)),
      );
    expect(byPort(0).size).toBe(1);
    expect(byPort(SH_F_PORT).size).toBe(5);
    // the port is only hashed for TCP/UDP/SCTP, as ip_vs_sh_get_port
    const icmp = new Set(
      Array.from({ length: 50 }, (_, k) => shPick(t, weights, client, k, ICMP, SH_F_PORT)),
    );
    expect(icmp.size).toBe(1);
  });

  it('spreads clients in proportion to bucket shares (chi-square, 2 dof, p = 0.001)', () => {
    const weights = w32([2, 1, 3]);
    const t = shBuild(weights, 3);
    const r = prng(9);
    const N = 60_000;
    const hits = [0, 0, 0];
    for (let k = 0; k < N; k++) hits[shPick(t, weights, r(), 0, TCP, 0)]++;
    const share = [86, 43, 127].map((b) => (N * b) / 256);
    expect(chiSquare(hits, share)).toBeLessThan(13.816);
  });

  it("with SH_F_FALLBACK walks the kernel's probe order to the first candidate with weight > 0", () => {
    const weights = w32([0, 0, 1, 0]); // only C can take flows
    const t = shBuild(weights, 4);
    const r = prng(10);
    for (let k = 0; k < 500; k++) {
      const a = r();
      const ihash = shHashKey(a, 0, 0, 0);
      let want = -1;
      for (let off = 0; off < 256 && want < 0; off++) {
        const c = t[(2 * ihash + off) & 255]; // hashkey(addr, port, (off + ihash) & 255)
        if (weights[c] > 0) want = c;
      }
      expect(shPick(t, weights, a, 0, TCP, SH_F_FALLBACK)).toBe(want);
      expect(want).toBe(2);
    }
    expect(shPick(t, w32([0, 0, 0, 0]), 1, 0, TCP, SH_F_FALLBACK)).toBe(-1);
  });

  it('has no candidate for an empty service', () => {
    expect(shPick(shBuild(w32([]), 0), w32([]), 1, 2, TCP, SH_F_FALLBACK)).toBe(-1);
  });
});

describe('dh (ip_vs_dh.c)', () => {
  it('fills one bucket per candidate in turn, ignoring weights', () => {
    const t = dhBuild(3);
    expect(letters(Array.from(t.subarray(0, 7)))).toBe('ABCABCA');
  });

  it('picks by destination address: stable per address, blind to the source', () => {
    const weights = w32([5, 1, 1]);
    const t = dhBuild(3);
    const dst = ip('192.0.2.44');
    expect(dhPick(t, weights, dst, 0)).toBe(t[hash32Ref(dst)]);
    const r = prng(12);
    const seen = new Set<number>();
    for (let k = 0; k < 300; k++) seen.add(dhPick(t, weights, r(), 0));
    expect(seen).toEqual(new Set([0, 1, 2]));
  });

  it("returns -1 when the bucket's candidate is quiesced", () => {
    const t = dhBuild(2);
    const dst = [ip('10.0.0.1'), ip('10.0.0.2'), ip('10.0.0.3'), ip('10.0.0.9')].find(
      (a) => t[dhHashKey(a, 0)] === 1,
    );
    expect(dst).toBeDefined();
    expect(dhPick(t, w32([1, 0]), dst!, 0)).toBe(-1);
    expect(dhPick(t, w32([1, 1]), dst!, 0)).toBe(1);
  });
});

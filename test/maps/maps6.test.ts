// The IPv6 maps (`{ ipv6: true }`): every key word takes part in the match, a randomized run
// against a reference Map agrees entry for entry (inserts, updates, deletes with backward-shift
// deletion under collisions), an IPv6 map refuses IPv4 keys and the other family's buffer, and
// the bytes per IPv6 flow are what src/maps/conntrack.ts's header and src/datapath/README.md say.
//
// Addresses come from a small universe whose members differ in ONE word each (word 0, 1, 2 or
// 3), so a lookup that compared fewer than four words would return another key's entry.

import { describe, expect, it } from 'vitest';
import { AffinityMap } from '../../src/maps/affinity.ts';
import { BackendMap } from '../../src/maps/backends.ts';
import { CT_CLASH, CT_EXISTS, CT_FULL, ConntrackMap } from '../../src/maps/conntrack.ts';
import { FragMap } from '../../src/maps/frag.ts';
import { RevNatMap } from '../../src/maps/revnat.ts';
import { ServiceMap } from '../../src/maps/services.ts';
import { SnatMap } from '../../src/maps/snat.ts';
import { below, mulberry32 } from './prng.ts';

const TCP = 6;
const UDP = 17;

/** 2001:db8::/32 based addresses; `w` picks which word varies, `v` its value. */
function addr(w: number, v: number): Int32Array {
  const a = Int32Array.of(0x20010db8, 0, 0, 1);
  a[w] = w === 0 ? 0x20010db8 + v : v | (w === 3 ? 0x80000000 : 0);
  return a;
}

/** 16 addresses: 4 per word position, each pair differing in exactly one word. */
const UNIVERSE: Int32Array[] = [];
for (let w = 0; w < 4; w++) for (let v = 1; v <= 4; v++) UNIVERSE.push(addr(w, v));

/** Addresses at offsets 0, 4, 8 ... of one scratch array (the datapath's way). */
function scratch(...as: Int32Array[]): Int32Array {
  const s = new Int32Array(4 * as.length + 3);
  // offset 3: a lookup ignoring `at` reads the wrong words
  for (const [k, a] of as.entries()) s.set(a, 3 + 4 * k);
  return s;
}
const AT = (k: number) => 3 + 4 * k;

describe('ServiceMap { ipv6 }', () => {
  it('matches on all four VIP words, port, proto and slot', () => {
    const m = new ServiceMap(64, { ipv6: true, seed: 7 });
    UNIVERSE.forEach((a, k) => {
      expect(m.upsertMaster(a, 80, TCP, 2, k + 1, 0, 0, 0)).toBe(true);
      expect(m.upsertSlot(a, 80, TCP, 1, 100 + k)).toBe(true);
    });
    UNIVERSE.forEach((a, k) => {
      const s = scratch(a);
      const e = m.lookup6(s, AT(0), 80, TCP, 0);
      expect(e).toBeGreaterThanOrEqual(0);
      expect(m.revNat(e)).toBe(k + 1);
      expect([0, 1, 2, 3].map((w) => m.vipWord(e, w))).toEqual([...a]);
      expect(m.backendId(m.lookup6(s, AT(0), 80, TCP, 1))).toBe(100 + k);
      expect(m.lookup6(s, AT(0), 81, TCP, 0)).toBe(-1);
      expect(m.lookup6(s, AT(0), 80, UDP, 0)).toBe(-1);
      expect(m.lookup6(s, AT(0), 80, TCP, 2)).toBe(-1);
    });
    expect(m.delete(UNIVERSE[5], 80, TCP, 1)).toBe(true);
    expect(m.lookup6(scratch(UNIVERSE[5]), AT(0), 80, TCP, 1)).toBe(-1);
    expect(m.lookup6(scratch(UNIVERSE[6]), AT(0), 80, TCP, 1)).toBeGreaterThanOrEqual(0);
  });

  it('agrees with a reference under random inserts, updates and deletes (colliding table)', () => {
    const m = new ServiceMap(32, { ipv6: true, seed: 3 });
    const ref = new Map<string, number>();
    const rnd = mulberry32(6);
    for (let step = 0; step < 20_000; step++) {
      const a = UNIVERSE[below(rnd, UNIVERSE.length)];
      const port = below(rnd, 2) * 443;
      const slot = 1 + below(rnd, 2);
      const k = `${a.join()}/${port}/${slot}`;
      if (below(rnd, 3) === 0) {
        expect(m.delete(a, port, UDP, slot)).toBe(ref.delete(k));
      } else if (ref.size < 32 || ref.has(k)) {
        const id = 1 + below(rnd, 1000);
        expect(m.upsertSlot(a, port, UDP, slot, id)).toBe(true);
        ref.set(k, id);
      }
      const e = m.lookup6(scratch(a), AT(0), port, UDP, slot);
      expect(e >= 0 ? m.backendId(e) : undefined).toBe(ref.get(k));
    }
    expect(m.size).toBe(ref.size);
  });

  it('takes only IPv6 keys, and attaches only to an IPv6 buffer', () => {
    const m = new ServiceMap(8, { ipv6: true });
    expect(() => m.upsertMaster(0x0a600001, 80, TCP, 0, 1, 0, 0, 0)).toThrow(/IPv6/);
    expect(() => new ServiceMap(8, { buffer: m.buffer })).toThrow();
    const v4 = new ServiceMap(8);
    expect(() => v4.upsertSlot(UNIVERSE[0], 80, TCP, 1, 1)).toThrow(/IPv4/);
  });
});

describe('BackendMap and RevNatMap { ipv6 }', () => {
  it('store four address words per entry', () => {
    const be = new BackendMap(16, { ipv6: true });
    const rn = new RevNatMap(100, { ipv6: true });
    UNIVERSE.forEach((a, k) => {
      be.upsert(k + 1, a, 8080 + k, TCP, 0, 0);
      rn.upsert(k + 1, a, 80 + k);
    });
    UNIVERSE.forEach((a, k) => {
      const b = be.lookup(k + 1);
      expect([0, 1, 2, 3].map((w) => be.addrWord(b, w))).toEqual([...a]);
      expect(be.port(b)).toBe(8080 + k);
      const r = rn.lookup(k + 1);
      expect([0, 1, 2, 3].map((w) => rn.vipWord(r, w))).toEqual([...a]);
      expect(rn.port(r)).toBe(80 + k);
    });
    expect(() => be.upsert(99, 0x0af40001, 80, TCP, 0, 0)).toThrow(/IPv6/);
    expect(() => new RevNatMap(100, { buffer: rn.buffer })).toThrow();
  });
});

describe('ConntrackMap { ipv6 }', () => {
  //   client [a]:40000 ──▶ VIP [v]:80        (original, lookupOrig6)
  //   client [a]:40000 ◀── backend [b]:8080  (reply, lookupReply6)
  it('finds a flow by both tuples, every word counting', () => {
    const ct = new ConntrackMap(64, { ipv6: true, seed: 5 });
    const vip = addr(1, 9);
    const be = addr(2, 9);
    for (const [k, c] of UNIVERSE.entries()) {
      const s = scratch(c, vip, be);
      const i = ct.create6(TCP, s, AT(0), AT(1), 40000, 80, AT(2), 8080 + k, 7, 3, 100);
      expect(i).toBeGreaterThanOrEqual(0);
      expect([0, 1, 2, 3].map((w) => ct.saddrWord(i, w))).toEqual([...c]);
      expect([0, 1, 2, 3].map((w) => ct.daddrWord(i, w))).toEqual([...vip]);
      expect([0, 1, 2, 3].map((w) => ct.baddrWord(i, w))).toEqual([...be]);
      expect(ct.bport(i)).toBe(8080 + k);
    }
    for (const [k, c] of UNIVERSE.entries()) {
      const s = scratch(c, vip, be);
      const i = ct.lookupOrig6(TCP, s, AT(0), AT(1), 40000, 80);
      expect(i).toBeGreaterThanOrEqual(0);
      expect(ct.bport(i)).toBe(8080 + k);
      expect(ct.lookupReply6(TCP, s, AT(2), AT(0), 8080 + k, 40000)).toBe(i);
      expect(ct.lookupOrig6(UDP, s, AT(0), AT(1), 40000, 80)).toBe(-1);
      expect(ct.lookupOrig6(TCP, s, AT(0), AT(1), 40001, 80)).toBe(-1);
      expect(ct.lookupOrig6(TCP, s, AT(1), AT(0), 40000, 80)).toBe(-1);
    }
    const s = scratch(UNIVERSE[3], vip, be);
    expect(ct.create6(TCP, s, AT(0), AT(1), 40000, 80, AT(2), 1, 7, 3, 100)).toBe(CT_EXISTS);
    // another VIP, same client port and backend port: the reply tuple is taken
    const s2 = scratch(UNIVERSE[3], addr(1, 10), be);
    expect(ct.create6(TCP, s2, AT(0), AT(1), 40000, 80, AT(2), 8083, 7, 3, 100)).toBe(CT_CLASH);
  });

  it('agrees with a reference under random creates, deletes and expiry scans', () => {
    const ct = new ConntrackMap(32, { ipv6: true, seed: 11 });
    const ref = new Map<string, number>(); // orig key -> entry
    const rnd = mulberry32(42);
    const vip = addr(0, 7);
    for (let step = 0; step < 20_000; step++) {
      const c = UNIVERSE[below(rnd, UNIVERSE.length)];
      const be = UNIVERSE[below(rnd, UNIVERSE.length)];
      const sport = 1000 + below(rnd, 4);
      const bport = 2000 + below(rnd, 4);
      const s = scratch(c, vip, be);
      const k = `${c.join()}/${sport}`;
      const op = below(rnd, 4);
      if (op === 0 && ref.has(k)) {
        ct.delete(ref.get(k)!);
        ref.delete(k);
      } else if (op === 1) {
        const i = ct.create6(UDP, s, AT(0), AT(1), sport, 53, AT(2), bport, 1, 1, 50);
        if (ref.has(k)) expect(i).toBe(CT_EXISTS);
        else if (i >= 0) ref.set(k, i);
        else expect([CT_CLASH, CT_FULL]).toContain(i);
      }
      const got = ct.lookupOrig6(UDP, s, AT(0), AT(1), sport, 53);
      expect(got).toBe(ref.get(k) ?? -1);
      if (got >= 0) {
        const r = scratch(c, vip, vip);
        r.set(
          [0, 1, 2, 3].map((w) => ct.baddrWord(got, w)),
          AT(2),
        );
        expect(ct.lookupReply6(UDP, r, AT(2), AT(0), ct.bport(got), sport)).toBe(got);
      }
    }
    expect(ct.size).toBe(ref.size);
    ct.scan(0, 64, 50); // every entry expires at 50
    expect(ct.size).toBe(0);
  });

  it('costs 99.125 B of typed arrays per IPv6 flow, 36 more than an IPv4 one', () => {
    const cap = 1 << 20;
    const v6 = new ConntrackMap(cap, { ipv6: true }).bytesPerFlow();
    const v4 = new ConntrackMap(cap).bytesPerFlow();
    expect(v6).toBeCloseTo(99.125, 2);
    expect(v6 - v4).toBeCloseTo(36, 2);
  });
});

describe('SnatMap { ipv6 }', () => {
  it('finds a masqueraded flow forward and reverse', () => {
    const m = new SnatMap(16, { ipv6: true, seed: 1 });
    const nat = addr(3, 1);
    const be = addr(2, 9);
    UNIVERSE.forEach((c, k) => {
      const s = scratch(c, be, nat);
      expect(m.insert6(TCP, s, AT(0), 40000, AT(1), 8080, AT(2), 61440 + k, k)).toBe(k);
    });
    UNIVERSE.forEach((c, k) => {
      const s = scratch(c, be, nat);
      const e = m.lookupFwd6(TCP, s, AT(0), 40000, AT(1), 8080);
      expect(e).toBe(k);
      expect(m.natPort(e)).toBe(61440 + k);
      expect(m.lookupRev6(TCP, s, AT(1), 8080, AT(2), 61440 + k)).toBe(k);
      expect([0, 1, 2, 3].map((w) => m.saddrWord(e, w))).toEqual([...c]);
      expect([0, 1, 2, 3].map((w) => m.natAddrWord(e, w))).toEqual([...nat]);
    });
    const s = scratch(UNIVERSE[0], be, addr(3, 2));
    expect(m.lookupRev6(TCP, s, AT(1), 8080, AT(2), 61440)).toBe(-1);
    m.delete(4);
    expect(m.lookupFwd6(TCP, scratch(UNIVERSE[4], be), AT(0), 40000, AT(1), 8080)).toBe(-1);
    expect(m.lookupFwd6(TCP, scratch(UNIVERSE[5], be), AT(0), 40000, AT(1), 8080)).toBe(5);
  });
});

describe('AffinityMap { ipv6 }', () => {
  it('keys on the four client words and the revNat id', () => {
    const m = new AffinityMap(16, { ipv6: true, seed: 2 });
    UNIVERSE.forEach((c, k) => {
      expect(m.upsert6(scratch(c), AT(0), 7, 100 + k, 1000)).toBe(true);
    });
    UNIVERSE.forEach((c, k) => {
      const e = m.lookupFresh6(scratch(c), AT(0), 7, 1005, 10);
      expect(m.backendId(e)).toBe(100 + k);
      expect([0, 1, 2, 3].map((w) => m.clientWord(e, w))).toEqual([...c]);
      expect(m.lookup6(scratch(c), AT(0), 8)).toBe(-1);
      expect(m.lookupFresh6(scratch(c), AT(0), 7, 1010, 10)).toBe(-1); // idle for the timeout
    });
    expect(m.expire(1010, () => 10)).toBe(16);
  });
});

describe('FragMap (IPv6)', () => {
  it('remembers a datagram by source, destination and 32-bit identification', () => {
    const m = new FragMap(64, true);
    const dst = addr(1, 5);
    const ns = addr(3, 7);
    const nd = addr(2, 7);
    UNIVERSE.forEach((c, k) => {
      const s = scratch(c, dst, ns, nd);
      m.insert6(s, AT(0), AT(1), 0x80000000 + k, AT(2), AT(3), 130, 100);
    });
    UNIVERSE.forEach((c, k) => {
      const s = scratch(c, dst);
      const f = m.lookup6(s, AT(0), AT(1), 0x80000000 + k, 120);
      expect(f).toBeGreaterThanOrEqual(0);
      expect([0, 1, 2, 3].map((w) => m.newSrcWord(f, w))).toEqual([...ns]);
      expect([0, 1, 2, 3].map((w) => m.newDstWord(f, w))).toEqual([...nd]);
      expect(m.lookup6(s, AT(0), AT(1), k, 120)).toBe(-1); // the identification's high bits count
      expect(m.lookup6(s, AT(0), AT(1), 0x80000000 + k, 130)).toBe(-1); // expired
    });
  });
});

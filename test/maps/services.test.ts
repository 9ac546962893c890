import { describe, expect, it } from 'vitest';
import {
  SVC_F_AFFINITY,
  SVC_F_NODEPORT,
  SVC_F_WILDCARD,
  ServiceMap,
} from '../../src/maps/services.ts';
import { below, mulberry32 } from './prng.ts';

const VIP = 0x0a600001; // 10.96.0.1
const TCP = 6;
const UDP = 17;

interface Ref {
  master: boolean;
  a: number; // count or backendId
  b: number; // revNat
  c: number; // flags
  d: number; // scheduler
  t: number; // affinityTimeout
}

const key = (vip: number, port: number, proto: number, slot: number) =>
  `${vip}/${port}/${proto}/${slot}`;

/** Random keys from a small universe so inserts, updates and deletes all hit existing keys. */
function randomKey(rnd: () => number): [number, number, number, number] {
  return [
    (0x0a600000 + below(rnd, 8)) >>> 0,
    below(rnd, 4) * 1000,
    below(rnd, 2) ? TCP : UDP,
    below(rnd, 6),
  ];
}

/** First difference between the map and the reference for key k, or null. */
function diff(
  m: ServiceMap,
  ref: Map<string, Ref>,
  v: number,
  p: number,
  pr: number,
  sl: number,
): string | null {
  const i = m.lookup(v, p, pr, sl);
  const r = ref.get(key(v, p, pr, sl));
  const k = key(v, p, pr, sl);
  if (i >= 0 !== (r !== undefined)) return `${k}: map ${i}, reference ${r ? 'present' : 'absent'}`;
  if (!r) return null;
  const got = r.master
    ? [m.count(i), m.revNat(i), m.flags(i), m.scheduler(i), m.affinityTimeout(i)]
    : [m.backendId(i)];
  const want = r.master ? [r.a, r.b, r.c, r.d, r.t] : [r.a];
  if (got.join() !== want.join()) return `${k}: value ${got} want ${want}`;
  if (m.vipOf(i) !== v || m.portOf(i) !== p || m.protoOf(i) !== pr || m.slotOf(i) !== sl) {
    return `${k}: key fields differ`;
  }
  return null;
}

function diffAll(m: ServiceMap, ref: Map<string, Ref>): string | null {
  if (m.size !== ref.size) return `size ${m.size} want ${ref.size}`;
  for (let v = 0; v < 8; v++)
    for (let p = 0; p < 4; p++)
      for (const pr of [TCP, UDP])
        for (let sl = 0; sl < 6; sl++) {
          const d = diff(m, ref, 0x0a600000 + v, p * 1000, pr, sl);
          if (d) return d;
        }
  return null;
}

describe('ServiceMap', () => {
  it('stores a master, its slots and a wildcard, and finds each by its full key', () => {
    const m = new ServiceMap(16);
    expect(m.upsertMaster(VIP, 443, TCP, 2, 9, SVC_F_AFFINITY | SVC_F_NODEPORT, 1, 10800)).toBe(
      true,
    );
    expect(m.upsertSlot(VIP, 443, TCP, 1, 100)).toBe(true);
    expect(m.upsertSlot(VIP, 443, TCP, 2, 0xfffffffe)).toBe(true);
    expect(m.upsertMaster(VIP, 0, 0, 0, 0, SVC_F_WILDCARD, 0, 0)).toBe(true);
    const i = m.lookup(VIP, 443, TCP, 0);
    expect([m.count(i), m.revNat(i), m.flags(i), m.scheduler(i), m.affinityTimeout(i)]).toEqual([
      2,
      9,
      SVC_F_AFFINITY | SVC_F_NODEPORT,
      1,
      10800,
    ]);
    expect(m.backendId(m.lookup(VIP, 443, TCP, 1))).toBe(100);
    expect(m.backendId(m.lookup(VIP, 443, TCP, 2))).toBe(0xfffffffe);
    expect(m.lookup(VIP, 443, UDP, 0)).toBe(-1);
    expect(m.lookup(VIP, 80, TCP, 0)).toBe(-1);
    expect(m.flags(m.lookup(VIP, 0, 0, 0))).toBe(SVC_F_WILDCARD);
    expect(m.size).toBe(4);
  });

  it('a VIP >= 2^31 and a port >= 32768: found from the u32 and the int32 form alike', () => {
    const m = new ServiceMap(16);
    const lb = 0xc000020a; // 192.0.2.10
    expect(m.upsertMaster(lb, 40000, TCP, 1, 5, 0, 0, 0)).toBe(true);
    expect(m.upsertSlot(lb, 40000, TCP, 1, 77)).toBe(true);
    const i = m.lookup(lb, 40000, TCP, 0);
    expect(i).toBeGreaterThanOrEqual(0);
    expect(m.lookup(lb | 0, 40000, TCP, 0)).toBe(i);
    expect(m.backendId(m.lookup(lb | 0, 40000, TCP, 1))).toBe(77);
    expect(m.hashKey(lb, 40000, TCP, 1)).toBe(m.hashKey(lb | 0, 40000, TCP, 1));
    expect(m.lookup(lb | 0, 40001, TCP, 0)).toBe(-1);
    expect(m.delete(lb | 0, 40000, TCP, 1)).toBe(true);
    expect(m.size).toBe(1);
  });

  it('updates in place without growing, and deletes', () => {
    const m = new ServiceMap(4);
    m.upsertMaster(VIP, 80, TCP, 1, 1, 0, 0, 0);
    const i = m.lookup(VIP, 80, TCP, 0);
    m.upsertMaster(VIP, 80, TCP, 3, 1, 0, 0, 0);
    expect(m.lookup(VIP, 80, TCP, 0)).toBe(i);
    expect(m.count(i)).toBe(3);
    expect(m.size).toBe(1);
    expect(m.delete(VIP, 80, TCP, 0)).toBe(true);
    expect(m.delete(VIP, 80, TCP, 0)).toBe(false);
    expect(m.lookup(VIP, 80, TCP, 0)).toBe(-1);
    expect(m.size).toBe(0);
  });

  it('matches a reference Map over 40000 random upserts, deletes and lookups', () => {
    const rnd = mulberry32(12345);
    const m = new ServiceMap(64, { seed: 99 });
    const ref = new Map<string, Ref>();
    for (let op = 0; op < 40000; op++) {
      const [v, p, pr, s] = randomKey(rnd);
      const k = key(v, p, pr, s);
      // alternate filling phases (table mostly full) with draining phases (sparse, churn)
      const insertShare = (op / 4000) & 1 ? 3 : 7;
      if (below(rnd, 10) < insertShare) {
        const full = ref.size >= m.capacity && !ref.has(k);
        let ok: boolean;
        let r: Ref;
        if (s === 0) {
          r = {
            master: true,
            a: below(rnd, 65536),
            b: below(rnd, 65536),
            c: below(rnd, 256),
            d: below(rnd, 2),
            t: rnd(),
          };
          ok = m.upsertMaster(v, p, pr, r.a, r.b, r.c, r.d, r.t);
        } else {
          r = { master: false, a: rnd(), b: 0, c: 0, d: 0, t: 0 };
          ok = m.upsertSlot(v, p, pr, s, r.a);
        }
        expect(ok).toBe(!full);
        if (ok) ref.set(k, r);
      } else {
        expect(m.delete(v, p, pr, s)).toBe(ref.delete(k));
      }
      let d = diff(m, ref, v, p, pr, s);
      if (!d && op % 97 === 0) d = diffAll(m, ref);
      if (d) expect.fail(`op ${op}: ${d}`);
    }
    expect(diffAll(m, ref)).toBeNull();
  });

  it('refuses inserts into a full table and still finds every entry', () => {
    const m = new ServiceMap(32);
    for (let s = 0; s < 32; s++) expect(m.upsertSlot(VIP, 80, TCP, s + 1, 1000 + s)).toBe(true);
    expect(m.upsertSlot(VIP, 80, TCP, 33, 1)).toBe(false);
    expect(m.upsertMaster(VIP, 80, TCP, 32, 1, 0, 0, 0)).toBe(false);
    // updating an existing key needs no new entry
    expect(m.upsertSlot(VIP, 80, TCP, 5, 7)).toBe(true);
    for (let s = 0; s < 32; s++)
      expect(m.backendId(m.lookup(VIP, 80, TCP, s + 1))).toBe(s === 4 ? 7 : 1000 + s);
    expect(m.lookup(VIP, 80, TCP, 33)).toBe(-1);
    m.delete(VIP, 80, TCP, 1);
    expect(m.upsertSlot(VIP, 80, TCP, 33, 1)).toBe(true);
  });

  it('finds keys whose chain wraps from the last slot past slot 0, also after a delete', () => {
    const m = new ServiceMap(16, { seed: 3 });
    const last = m.index.mask;
    const keys: number[] = [];
    for (let port = 1; keys.length < 4; port++) {
      if ((m.hashKey(VIP, port, TCP, 0) & m.index.mask) === last) keys.push(port);
    }
    for (const p of keys) m.upsertMaster(VIP, p, TCP, p, 0, 0, 0, 0);
    const where = keys.map((p) => m.index.slotOf(m.lookup(VIP, p, TCP, 0)));
    expect(where).toEqual([last, 0, 1, 2]);
    m.delete(VIP, keys[1], TCP, 0);
    for (const p of [keys[0], keys[2], keys[3]]) expect(m.count(m.lookup(VIP, p, TCP, 0))).toBe(p);
    expect(m.lookup(VIP, keys[1], TCP, 0)).toBe(-1);
  });

  it('rejects out-of-range control-plane values with a message naming the field', () => {
    const m = new ServiceMap(4);
    expect(() => m.upsertMaster(VIP, 70000, TCP, 0, 0, 0, 0, 0)).toThrow(/port/);
    expect(() => m.upsertMaster(VIP, 80, TCP, 65536, 0, 0, 0, 0)).toThrow(/count/);
    expect(() => m.upsertSlot(VIP, 80, TCP, 0, 1)).toThrow(/slot/);
    expect(m.size).toBe(0);
  });

  it('shares its state with a second view attached to the same SharedArrayBuffer', () => {
    const a = new ServiceMap(8, { shared: true });
    expect(a.buffer).toBeInstanceOf(SharedArrayBuffer);
    a.upsertSlot(VIP, 53, UDP, 1, 77);
    const b = new ServiceMap(8, { buffer: a.buffer });
    expect(b.backendId(b.lookup(VIP, 53, UDP, 1))).toBe(77);
    b.upsertSlot(VIP, 53, UDP, 2, 78);
    expect(a.backendId(a.lookup(VIP, 53, UDP, 2))).toBe(78);
    expect(a.size).toBe(2);
    expect(() => new ServiceMap(16, { buffer: a.buffer })).toThrow(RangeError);
  });

  it('clear() empties the table and makes every entry reusable', () => {
    const m = new ServiceMap(4);
    for (let s = 1; s <= 4; s++) m.upsertSlot(VIP, 80, TCP, s, s);
    m.clear();
    expect(m.size).toBe(0);
    expect(m.lookup(VIP, 80, TCP, 1)).toBe(-1);
    for (let s = 5; s <= 8; s++) expect(m.upsertSlot(VIP, 80, TCP, s, s)).toBe(true);
  });
});

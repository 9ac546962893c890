// BackendTable (src/loader/backend-table.ts) against a slow reference: a Map keyed by the key
// text the loader's ids hash ("ip:port:proto"), under a seeded random run of adds, removals and
// rolled-back transactions — the open-addressing index's backward-shift deletion, the growth,
// the id probing and the hash of the key text made without the text.
import { describe, expect, it } from 'vitest';
import { BackendTable } from '../../src/loader/backend-table.ts';
import { fnv1a } from '../../src/loader/ids.ts';
import { ipv4ToU32 } from '../../src/wire/addr.ts';
import { mulberry32 as rng } from '../wire/helpers.ts';

describe('BackendTable', () => {
  it('finds, adds and removes IPv4 backends as a Map of their key texts does (seeded, 20k steps)', () => {
    const r = rng(18);
    const max = 5000; // small: ids collide and are probed
    const t = new BackendTable(max);
    const ref = new Map<string, number>(); // key text -> id
    const ids = new Set<number>();
    const pick = () => {
      const ip = `10.${Math.floor(r() * 4)}.${Math.floor(r() * 256)}.${Math.floor(r() * 256)}`;
      const port = [80, 8080, 53, 65535, 0][Math.floor(r() * 5)]!;
      const proto = [6, 17, 132][Math.floor(r() * 3)]!;
      return { ip, port, proto, key: `${ip}:${port}:${proto}` };
    };
    for (let step = 0; step < 20_000; step++) {
      const b = pick();
      if (r() < 0.6 && ref.size < max - 1) {
        const row = t.row4(ipv4ToU32(b.ip), b.ip, b.port, b.proto);
        const had = ref.get(b.key);
        if (had !== undefined) expect(t.id[row]).toBe(had);
        else {
          // the id the key text hashes to, or the next free one after it
          let want = (fnv1a(b.key) % max) + 1;
          while (ids.has(want)) want = want === max ? 1 : want + 1;
          expect(t.id[row]).toBe(want);
          ref.set(b.key, want);
          ids.add(want);
        }
        t.commit();
      } else if (ref.has(b.key)) {
        t.remove(t.row4(ipv4ToU32(b.ip), b.ip, b.port, b.proto));
        ids.delete(ref.get(b.key)!);
        ref.delete(b.key);
      }
    }
    expect(t.size).toBe(ref.size);
    for (const [key, id] of ref) {
      const [ip, port, proto] = key.split(':');
      const mark = t.mark();
      expect(t.id[t.row4(ipv4ToU32(ip!), ip!, Number(port), Number(proto))]).toBe(id);
      expect(t.mark()).toBe(mark); // found, not made
    }
  });

  it('rollback forgets the rows a transaction made, and only those', () => {
    const t = new BackendTable(0x7fffffff);
    const a = t.row4(ipv4ToU32('10.0.0.1'), '10.0.0.1', 80, 6);
    t.commit();
    const mark = t.mark();
    const b = t.row4(ipv4ToU32('10.0.0.2'), '10.0.0.2', 80, 6);
    const c = t.row6(new Int32Array(4), 'fd00::1', 80, 6);
    expect(t.size).toBe(3);
    t.rollback(mark);
    expect(t.size).toBe(1);
    expect(t.row4(ipv4ToU32('10.0.0.1'), '10.0.0.1', 80, 6)).toBe(a);
    expect(t.mark()).toBe(mark);
    // made again: the same ids as the first time (nothing of them was kept)
    const b2 = t.row4(ipv4ToU32('10.0.0.2'), '10.0.0.2', 80, 6);
    expect(t.id[b2]).toBe((fnv1a('10.0.0.2:80:6') % 0x7fffffff) + 1);
    expect([b, c]).toContain(b2); // a freed row is reused
  });
});

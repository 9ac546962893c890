import { describe, expect, it } from 'vitest';
import { BackendMap, BE_ACTIVE, BE_F_LOCAL, BE_TERMINATING } from '../../src/maps/backends.ts';
import { below, mulberry32 } from './prng.ts';

const ADDR = 0x0af40207;

describe('BackendMap', () => {
  it('stores and updates a backend by id', () => {
    const m = new BackendMap(8);
    expect(m.upsert(42, ADDR, 8080, 6, BE_ACTIVE, BE_F_LOCAL)).toBe(true);
    const i = m.lookup(42);
    expect([m.idOf(i), m.addr(i), m.port(i), m.proto(i), m.state(i), m.flags(i)]).toEqual([
      42,
      ADDR,
      8080,
      6,
      BE_ACTIVE,
      BE_F_LOCAL,
    ]);
    expect(m.upsert(42, ADDR, 8080, 6, BE_TERMINATING, 0)).toBe(true);
    expect(m.lookup(42)).toBe(i);
    expect(m.state(i)).toBe(BE_TERMINATING);
    expect(m.size).toBe(1);
    expect(m.lookup(43)).toBe(-1);
  });

  it('never finds id 0 and refuses to store it', () => {
    const m = new BackendMap(8);
    expect(m.lookup(0)).toBe(-1);
    expect(() => m.upsert(0, ADDR, 80, 6, 0, 0)).toThrow(/id/);
  });

  it('matches a reference Map over 30000 random upserts and deletes, full table included', () => {
    const rnd = mulberry32(77);
    const m = new BackendMap(32, { seed: 1 });
    const ref = new Map<number, number>();
    for (let op = 0; op < 30000; op++) {
      // ids spread over the whole u32 range, drawn from a pool of 100 so they repeat
      const id = Math.imul(1 + below(rnd, 100), 0x9e3779b1) >>> 0 || 1;
      let err: string | null = null;
      if (below(rnd, 10) < ((op / 3000) & 1 ? 3 : 7)) {
        const port = below(rnd, 65536);
        const full = ref.size >= m.capacity && !ref.has(id);
        const ok = m.upsert(id, ADDR, port, 6, 0, 0);
        if (ok === full) err = `upsert ${id}: ${ok}, full ${full}`;
        if (ok) ref.set(id, port);
      } else if (m.delete(id) !== ref.delete(id)) {
        err = `delete ${id}`;
      }
      if (!err && m.size !== ref.size) err = `size ${m.size} want ${ref.size}`;
      if (!err && op % 53 === 0) {
        for (const [k, port] of ref) {
          const i = m.lookup(k);
          if (i < 0 || m.port(i) !== port || m.idOf(i) !== k) err = `lookup ${k}: ${i}`;
        }
      }
      if (!err && !ref.has(id) && m.lookup(id) !== -1) err = `stale ${id}`;
      if (err) expect.fail(`op ${op}: ${err}`);
    }
  });

  it('finds ids whose chain wraps past slot 0 after one in the middle is deleted', () => {
    const m = new BackendMap(8, { seed: 4 });
    const last = m.index.mask;
    const ids: number[] = [];
    for (let id = 1; ids.length < 3; id++) if ((m.hashKey(id) & last) === last) ids.push(id);
    for (const id of ids) m.upsert(id, ADDR, id, 6, 0, 0);
    expect(ids.map((id) => m.index.slotOf(m.lookup(id)))).toEqual([last, 0, 1]);
    m.delete(ids[0]);
    expect(m.port(m.lookup(ids[1]))).toBe(ids[1]);
    expect(m.port(m.lookup(ids[2]))).toBe(ids[2]);
  });
});

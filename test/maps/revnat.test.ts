import { describe, expect, it } from 'vitest';
import { RevNatMap } from '../../src/maps/revnat.ts';

const VIP = 0x0a60000a;

describe('RevNatMap', () => {
  it('maps a u16 id to its (vip, port) and forgets it on delete', () => {
    const m = new RevNatMap();
    expect(m.capacity).toBe(65535);
    expect(m.upsert(65535, VIP, 443)).toBe(true);
    expect(m.upsert(1, VIP + 1, 53)).toBe(true);
    const i = m.lookup(65535);
    expect([m.vip(i), m.port(i)]).toEqual([VIP, 443]);
    expect(m.vip(m.lookup(1))).toBe(VIP + 1);
    expect(m.size).toBe(2);
    expect(m.delete(65535)).toBe(true);
    expect(m.delete(65535)).toBe(false);
    expect(m.lookup(65535)).toBe(-1);
    expect(m.size).toBe(1);
  });

  it('never finds id 0 or ids beyond capacity, without throwing', () => {
    const m = new RevNatMap(100);
    expect(m.lookup(0)).toBe(-1);
    expect(m.lookup(101)).toBe(-1);
    expect(m.lookup(-1)).toBe(-1);
    expect(() => m.upsert(101, VIP, 1)).toThrow(/id/);
    expect(() => m.upsert(0, VIP, 1)).toThrow(/id/);
  });

  it('lists ids in order with next(), clears, and shares a SharedArrayBuffer', () => {
    const a = new RevNatMap(1000, { shared: true });
    for (const id of [7, 3, 999]) a.upsert(id, VIP, id);
    const b = new RevNatMap(1000, { buffer: a.buffer });
    const ids: number[] = [];
    for (let id = b.next(0); id >= 0; id = b.next(id + 1)) ids.push(id);
    expect(ids).toEqual([3, 7, 999]);
    b.clear();
    expect(a.lookup(7)).toBe(-1);
    expect(a.size).toBe(0);
  });
});

// The SNAT table (src/maps/snat.ts): one entry per masqueraded flow, found from the forward
// tuple (client -> backend, after DNAT) and from the reply tuple (backend -> nat address:port).
import { describe, expect, it } from 'vitest';
import { SnatMap } from '../../src/maps/snat.ts';
import { ip } from './harness.ts';

const C = ip('172.30.0.100');
const B = ip('10.244.2.2');
const N = ip('172.30.0.11');

describe('SnatMap', () => {
  it('finds an entry from both directions and forgets it on delete', () => {
    const m = new SnatMap(16, { seed: 1 });
    const e = m.insert(6, C, 50000, B, 8080, N, 61500, 7);
    expect(e).toBeGreaterThanOrEqual(0);
    expect(m.lookupFwd(6, C, 50000, B, 8080)).toBe(e);
    expect(m.lookupRev(6, B, 8080, N, 61500)).toBe(e);
    // addresses come back as int32 (the fast path's form): >>> 0 for the u32 ip() gives
    expect([m.natAddr(e) >>> 0, m.natPort(e), m.saddr(e) >>> 0, m.sport(e), m.ctIdx(e)]).toEqual([
      N,
      61500,
      C,
      50000,
      7,
    ]);
    // another protocol, port or address is another key
    expect(m.lookupRev(17, B, 8080, N, 61500)).toBe(-1);
    expect(m.lookupRev(6, B, 8080, N, 61501)).toBe(-1);
    expect(m.lookupFwd(6, C, 50001, B, 8080)).toBe(-1);
    m.delete(e);
    expect([m.lookupFwd(6, C, 50000, B, 8080), m.lookupRev(6, B, 8080, N, 61500), m.size]).toEqual([
      -1, -1, 0,
    ]);
  });

  it('lets one nat port serve flows to different backends (full reply-tuple uniqueness)', () => {
    const m = new SnatMap(16, { seed: 2 });
    const a = m.insert(6, C, 50000, B, 8080, N, 61500, 1);
    const b = m.insert(6, C, 50001, ip('10.244.2.3'), 8080, N, 61500, 2);
    expect(m.lookupRev(6, B, 8080, N, 61500)).toBe(a);
    expect(m.lookupRev(6, ip('10.244.2.3'), 8080, N, 61500)).toBe(b);
  });

  it('refuses an insert when full and keeps every lookup working through deletes (backward shift)', () => {
    const m = new SnatMap(8, { seed: 3 });
    const es: number[] = [];
    for (let k = 0; k < 8; k++) es.push(m.insert(17, C, 40000 + k, B, 53, N, 61440 + k, k));
    expect(m.insert(17, C, 49999, B, 53, N, 61449, 9)).toBe(-1);
    for (let k = 0; k < 8; k += 2) m.delete(es[k]!);
    for (let k = 1; k < 8; k += 2) {
      expect(m.lookupRev(17, B, 53, N, 61440 + k)).toBe(es[k]);
      expect(m.lookupFwd(17, C, 40000 + k, B, 53)).toBe(es[k]);
    }
    expect(m.size).toBe(4);
  });
});

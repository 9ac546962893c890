// SchedulerTable: per-service state keyed by reverse-NAT id, built in the control plane and
// read per packet. Each kind must pick exactly as its standalone function does, and a rebuild
// must keep what the kernel keeps across destination changes.

import { describe, expect, it } from 'vitest';
import { Rng } from '../../src/datapath/state/rng.ts';
import { SH_F_PORT, shBuild, shPick } from '../../src/sched/hashing.ts';
import {
  SCHED_DH,
  SCHED_LC,
  SCHED_MAGLEV,
  SCHED_NQ,
  SCHED_RANDOM,
  SCHED_RR,
  SCHED_SED,
  SCHED_SH,
  SCHED_WLC,
  SCHED_WRR,
} from '../../src/sched/kinds.ts';
import { maglevBackendName, maglevBuild, maglevPick, maglevSeed } from '../../src/sched/maglev.ts';
import { type SchedBackend, SchedulerTable } from '../../src/sched/table.ts';
import { ip, letters, prng } from './helpers.ts';

const TCP = 6;
const rng = new Rng(1);
const CLIENT = ip('10.244.0.9');
const VIP = ip('10.96.0.10');

const be = (id: number, weight = 1): SchedBackend => ({
  id,
  weight,
  addr: ip(`10.244.1.${id}`),
  port: 8080,
  proto: TCP,
});

function picks(t: SchedulerTable, rev: number, k: number, sport = 40000): number[] {
  return Array.from({ length: k }, () => t.pick(rev, CLIENT, VIP, sport, 80, TCP, rng));
}

describe('SchedulerTable', () => {
  const table = new SchedulerTable({ capacity: 1024, maglevTableSize: 1021 });

  it('rr and wrr keep their position between picks, per service', () => {
    table.set(1, SCHED_RR, [be(11), be(12), be(13)]);
    table.set(2, SCHED_WRR, [be(21, 4), be(22, 3), be(23, 2)]);
    expect(letters(picks(table, 1, 2))).toBe('AB');
    expect(letters(picks(table, 2, 9))).toBe('AABABCABC');
    expect(letters(picks(table, 1, 4))).toBe('CABC');
    expect(table.kind(1)).toBe(SCHED_RR);
    expect(table.count(2)).toBe(3);
    expect(table.backendId(2, 2)).toBe(23);
    expect(table.weight(2, 0)).toBe(4);
  });

  it('lc/wlc/sed/nq read the counts given through connAdjust', () => {
    const bes = [be(31, 1), be(32, 3)];
    for (const [rev, kind] of [
      [3, SCHED_LC],
      [4, SCHED_WLC],
      [5, SCHED_SED],
      [6, SCHED_NQ],
    ]) {
      table.set(rev, kind, bes);
      expect(table.connAdjust(rev, 31, 1, 0)).toBe(true);
      expect(table.connAdjust(rev, 32, 4, 0)).toBe(true);
    }
    // active 1 vs 4, weights 1 vs 3: lc 256 < 1024; wlc 256 < 341; sed 2 > 5/3; nq as sed
    expect(picks(table, 3, 1)).toEqual([0]);
    expect(picks(table, 4, 1)).toEqual([0]);
    expect(picks(table, 5, 1)).toEqual([1]);
    expect(picks(table, 6, 1)).toEqual([1]);
    table.connAdjust(6, 31, -1, 0); // 31 idle again: nq takes it at once
    expect(picks(table, 6, 1)).toEqual([0]);
    expect(table.active(6, 0)).toBe(0);
    table.connAdjust(3, 31, -5, 2); // never below 0
    expect([table.active(3, 0), table.inactive(3, 0)]).toEqual([0, 2]);
    expect(table.connAdjust(3, 99, 1, 0)).toBe(false);
    expect(table.connAdjust(77, 31, 1, 0)).toBe(false);
  });

  it("sh hashes the source, dh the destination, with the service's flags", () => {
    const bes = [be(41), be(42), be(43)];
    table.set(7, SCHED_SH, bes, SH_F_PORT);
    table.set(8, SCHED_DH, bes);
    const w = Int32Array.from([1, 1, 1]);
    const t = shBuild(w, 3);
    const r = prng(2);
    for (let k = 0; k < 200; k++) {
      const [s, d, sp] = [r(), r(), r() & 0xffff];
      expect(table.pick(7, s, d, sp, 80, TCP, rng)).toBe(shPick(t, w, s, sp, TCP, SH_F_PORT));
      const viaDst = table.pick(8, s, d, sp, 80, TCP, rng);
      expect(table.pick(8, r(), d, r() & 0xffff, 80, TCP, rng)).toBe(viaDst);
    }
    expect(table.flags(7)).toBe(SH_F_PORT);
  });

  it("maglev builds Cilium's table from addr/port/proto (or a name) and looks flows up in it", () => {
    const bes = [be(51), be(52), { id: 53, name: 'custom' }];
    table.set(9, SCHED_MAGLEV, bes);
    const names = [
      maglevBackendName(ip('10.244.1.51'), 8080, TCP),
      maglevBackendName(ip('10.244.1.52'), 8080, TCP),
      'custom',
    ];
    const seed = maglevSeed('JLfvgnHc2kaSUFaI');
    const lut = maglevBuild(names, Int32Array.from([1, 1, 1]), 3, 1021, seed);
    const r = prng(3);
    for (let k = 0; k < 200; k++) {
      const [s, sp] = [r(), r() & 0xffff];
      expect(table.pick(9, s, VIP, sp, 80, TCP, rng)).toBe(
        maglevPick(lut, s, sp, 80, TCP, seed.jhash0),
      );
    }
  });

  it("random draws from the caller's RNG over the weight > 0 candidates", () => {
    table.set(10, SCHED_RANDOM, [be(61), be(62, 0), be(63)]);
    const seen = new Set(picks(table, 10, 200));
    expect(seen).toEqual(new Set([0, 2]));
    expect(table.pickId(10, CLIENT, VIP, 1, 80, TCP, rng)).not.toBe(62);
  });

  it('answers -1 (id 0) for unknown, deleted and out-of-range services, without throwing', () => {
    table.set(11, SCHED_RR, [be(71)]);
    expect(table.pickId(11, CLIENT, VIP, 1, 80, TCP, rng)).toBe(71);
    expect(table.delete(11)).toBe(true);
    expect(table.delete(11)).toBe(false);
    for (const rev of [11, 0, -1, 1024, 70000, 1.5, Number.NaN]) {
      expect(table.pick(rev, CLIENT, VIP, 1, 80, TCP, rng)).toBe(-1);
      expect(table.pickId(rev, CLIENT, VIP, 1, 80, TCP, rng)).toBe(0);
      expect(table.kind(rev)).toBe(-1);
      expect(table.count(rev)).toBe(0);
    }
    table.set(12, SCHED_WRR, []);
    expect(table.pick(12, CLIENT, VIP, 1, 80, TCP, rng)).toBe(-1);
  });
});

describe('SchedulerTable rebuilds', () => {
  it('carry connection counts over by backend id', () => {
    const t = new SchedulerTable({ capacity: 16 });
    t.set(1, SCHED_LC, [be(1), be(2), be(3)]);
    t.connAdjust(1, 2, 5, 7);
    t.set(1, SCHED_LC, [be(4), be(2)]);
    expect([t.active(1, 1), t.inactive(1, 1)]).toEqual([5, 7]);
    expect(t.active(1, 0)).toBe(0);
  });

  it('keep the rr cursor on the last picked backend, wherever it now sits', () => {
    const t = new SchedulerTable({ capacity: 16 });
    t.set(1, SCHED_RR, [be(1), be(2), be(3)]);
    expect(letters(picks(t, 1, 2))).toBe('AB'); // cursor on id 2
    t.set(1, SCHED_RR, [be(2), be(3), be(4), be(1)]);
    expect(picks(t, 1, 4).map((i) => t.backendId(1, i))).toEqual([3, 4, 1, 2]);
    t.set(1, SCHED_RR, [be(5), be(6)]); // cursor's backend gone: start from the head
    expect(picks(t, 1, 1).map((i) => t.backendId(1, i))).toEqual([5]);
  });

  it('keep the wrr current weight (ip_vs_wrr_dest_changed), restarting the scan', () => {
    const t = new SchedulerTable({ capacity: 16 });
    t.set(1, SCHED_WRR, [be(1, 4), be(2, 3), be(3, 2)]);
    expect(letters(picks(t, 1, 3))).toBe('AAB'); // cw now 3
    t.set(1, SCHED_WRR, [be(1, 4), be(2, 3), be(3, 2), be(4, 3)]);
    expect(letters(picks(t, 1, 3))).toBe('ABD');
    t.set(1, SCHED_RR, [be(1)]);
    t.set(1, SCHED_WRR, [be(1, 4), be(2, 3), be(3, 2)]); // from another kind: a fresh mark
    expect(letters(picks(t, 1, 3))).toBe('AAB');
  });
  it('leave an unchanged service alone (a periodic full sync must not reset positions)', () => {
    const t = new SchedulerTable({ capacity: 16, maglevTableSize: 251 });
    expect(t.set(1, SCHED_WRR, [be(1, 4), be(2, 3), be(3, 2)])).toBe(true);
    expect(letters(picks(t, 1, 4))).toBe('AABA');
    expect(t.set(1, SCHED_WRR, [be(1, 4), be(2, 3), be(3, 2)])).toBe(false);
    expect(letters(picks(t, 1, 5))).toBe('BCABC'); // the interleaving goes on
    expect(t.set(1, SCHED_WRR, [be(1, 4), be(2, 3), be(3, 1)])).toBe(true); // a weight changed
    expect(t.set(1, SCHED_SH, [be(1, 4), be(2, 3), be(3, 1)])).toBe(true); // the kind changed
    expect(t.set(1, SCHED_SH, [be(1, 4), be(2, 3), be(3, 1)], SH_F_PORT)).toBe(true); // flags
    expect(t.set(2, SCHED_MAGLEV, [{ id: 1, name: 'a' }])).toBe(true);
    expect(t.set(2, SCHED_MAGLEV, [{ id: 1, name: 'a' }])).toBe(false);
    expect(t.set(2, SCHED_MAGLEV, [{ id: 1, name: 'b' }])).toBe(true); // same id, new name
  });
});

describe('SchedulerTable validation (control plane)', () => {
  const t = new SchedulerTable({ capacity: 16, maglevTableSize: 251 });

  it('rejects bad input naming the service and field, leaving the old state', () => {
    t.set(3, SCHED_RR, [be(1)]);
    const bad: [() => void, RegExp][] = [
      [() => t.set(0, SCHED_RR, []), /revNat 0\).*1\.\.15/],
      [() => t.set(16, SCHED_RR, []), /revNat must be an integer 1\.\.15/],
      [() => t.set(3, 10, []), /revNat 3\): unknown scheduler kind 10/],
      [() => t.set(3, SCHED_RR, [{ id: 0 }]), /backends\[0\]\.id must be 1\.\.4294967295/],
      [() => t.set(3, SCHED_RR, [be(1, -1)]), /backends\[0\]\.weight must be 0\.\.65535, got -1/],
      [() => t.set(3, SCHED_RR, [be(1, 1.5)]), /weight must be 0\.\.65535/],
      [() => t.set(3, SCHED_RR, [be(1), be(1)]), /backends\[1\]\.id 1 repeated/],
      [() => t.set(3, SCHED_RR, [be(1)], SH_F_PORT), /flags 1 not valid for rr/],
      [() => t.set(3, SCHED_SH, [be(1)], 64), /flags 64 not valid for sh/],
      [() => t.set(3, SCHED_DH, [be(1)], SH_F_PORT), /flags 1 not valid for dh/],
      [() => t.set(3, SCHED_MAGLEV, [{ id: 1 }]), /backends\[0\]: maglev needs a name/],
      [
        () =>
          t.set(3, SCHED_MAGLEV, [
            { id: 1, name: 'x' },
            { id: 2, name: 'x' },
          ]),
        /revNat 3\).*twice/,
      ],
    ];
    for (const [f, re] of bad) expect(f).toThrow(re);
    expect(t.kind(3)).toBe(SCHED_RR);
    expect(t.backendId(3, 0)).toBe(1);
  });

  it('rejects a bad table size, Maglev M or seed at construction', () => {
    expect(() => new SchedulerTable({ capacity: 1 })).toThrow(/capacity must be 2\.\.65536/);
    expect(() => new SchedulerTable({ maglevTableSize: 1000 })).toThrow(/1000: must be a prime/);
    expect(() => new SchedulerTable({ maglevSeed: 'nope' })).toThrow(/base64 of 12 bytes/);
  });
});

import { describe, expect, it } from 'vitest';
import {
  SCHED_DH,
  SCHED_LC,
  SCHED_MAGLEV,
  SCHED_NAMES,
  SCHED_NQ,
  SCHED_RANDOM,
  SCHED_RR,
  SCHED_SED,
  SCHED_SH,
  SCHED_WLC,
  SCHED_WRR,
  schedulerFromName,
  schedulerName,
} from '../../src/sched/kinds.ts';

describe('scheduler names (kubetun.io/scheduler annotation)', () => {
  it('maps every ipvsadm name, random and maglev to its kind', () => {
    const want: Record<string, number> = {
      random: SCHED_RANDOM,
      rr: SCHED_RR,
      wrr: SCHED_WRR,
      lc: SCHED_LC,
      wlc: SCHED_WLC,
      sed: SCHED_SED,
      nq: SCHED_NQ,
      sh: SCHED_SH,
      dh: SCHED_DH,
      maglev: SCHED_MAGLEV,
    };
    for (const [name, kind] of Object.entries(want)) {
      expect(schedulerFromName(name)).toBe(kind);
      expect(schedulerName(kind)).toBe(name);
    }
    expect(new Set(Object.values(want)).size).toBe(SCHED_NAMES.length);
  });

  it("accepts IPVS's name for Maglev, mh", () => {
    expect(schedulerFromName('mh')).toBe(SCHED_MAGLEV);
  });

  it('throws on unknown names, naming the value and the choices', () => {
    for (const bad of ['', 'RR', 'lblc', 'round-robin', ' rr']) {
      expect(() => schedulerFromName(bad)).toThrow(
        /unknown scheduler .*expected one of random, rr/,
      );
    }
    expect(() => schedulerName(10)).toThrow(/unknown scheduler kind 10/);
  });
});

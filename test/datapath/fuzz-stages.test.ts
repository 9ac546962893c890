// "Never throws", over every stage: the mixed-traffic stream (NodePort and LoadBalancer with
// SNAT and externalTrafficPolicy: Local, source ranges, ClientIP affinity, rr / lc / maglev /
// random schedulers, rejects, ICMP errors about service flows, fragments) with seeded random
// damage — bytes overwritten, the length cut or stretched, the IPv4 checksum sometimes
// repaired so the damage reaches the later stages. Every packet must come back with a verdict,
// a named reason whose counter moved, and (for V_REPLY) a generated packet that fits dp.out.
// malformed.test.ts fuzzes a plain ClusterIP setup; this one the stages added since.

import { describe, expect, it } from 'vitest';
import type { Datapath } from '../../src/datapath/state/datapath.ts';
import { dpProcess } from '../../src/datapath/program.ts';
import { REASON_COUNT, reasonIsDrop } from '../../src/datapath/state/reasons.ts';
import { V_DROP, V_REPLY, V_TX } from '../../src/datapath/state/verdict.ts';
import { ipv4FillCsum } from '../../src/wire/ipv4.ts';
import { checksumsVerify } from './harness.ts';
import { clockMs, HIGH_ADDRS, MixedTraffic, mixedDatapath, OFF } from './mixed-traffic.ts';

/** Seeded LCG: the same damage on every run. */
function lcg(seed: number): (n: number) => number {
  let s = seed >>> 0;
  return (n: number) => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return Math.floor((s / 2 ** 32) * n);
  };
}

/** Damage packet k in place; returns the length to hand to dpProcess. */
function damage(buf: Uint8Array, len: number, rnd: (n: number) => number): number {
  for (let m = rnd(4); m >= 0; m--) buf[OFF + rnd(len)] = rnd(256);
  // keep the header checksum right half the time, so parse lets the damage through
  if (rnd(2) === 0 && (buf[OFF] & 0xf0) === 0x40 && (buf[OFF] & 15) >= 5) ipv4FillCsum(buf, OFF);
  const cut = rnd(8);
  if (cut === 0) return rnd(len + 1); // truncated
  if (cut === 1) return Math.min(len + rnd(64), buf.length - OFF); // trailing bytes
  return len;
}

function runFuzz(dp: Datapath, seed: number, n: number): void {
  const t = new MixedTraffic(HIGH_ADDRS);
  const rnd = lcg(seed);
  for (let k = 0; k < n; k++) {
    let len = t.next(k);
    // one packet in three intact, so that flows get established and later stages see damage
    const intact = rnd(3) === 0;
    if (!intact) len = damage(t.buf, len, rnd);
    dp.lastReason = -1;
    const before = dp.counters.reduce((a, b) => a + b, 0);
    const v = dpProcess(dp, t.buf, OFF, len, clockMs(k));
    t.after(v);
    expect(v >= 0 && v <= 3).toBe(true);
    expect(dp.lastReason >= 0 && dp.lastReason < REASON_COUNT).toBe(true);
    if (v === V_DROP) expect(reasonIsDrop(dp.lastReason)).toBe(true);
    if (v === V_REPLY) expect(dp.outLen > 20 && dp.outLen <= dp.out.length).toBe(true);
    else expect(dp.outLen).toBe(0);
    // an intact, unfragmented packet leaves translated with checksums a full recompute agrees with
    const frag = (t.buf[OFF + 6] & 0x3f) !== 0 || t.buf[OFF + 7] !== 0;
    if (intact && v === V_TX && !frag)
      expect(checksumsVerify(t.buf.slice(OFF, OFF + len))).toBe(true);
    // exactly one counter moved, by one
    expect(dp.counters.reduce((a, b) => a + b, 0)).toBe(before + 1);
  }
  expect(dp.counters.reduce((a, b) => a + b, 0)).toBe(n);
}

describe('fuzz: damaged mixed traffic through every stage', () => {
  it('never throws, always names a reason (seed 1, 50k packets)', () => {
    runFuzz(mixedDatapath(1, 2048, HIGH_ADDRS), 1, 50_000);
  });

  it('never throws with a nearly full conntrack table (seed 2, 50k packets)', () => {
    runFuzz(mixedDatapath(2, 128, HIGH_ADDRS), 2, 50_000);
  });
});

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
import { checksumsVerify } from './harness.ts';
import { l6CsumVerifies } from './harness6.ts';
import { dualDatapath, MixedTraffic6 } from './mixed-traffic6.ts';
import {
  clockMs,
  damage,
  HIGH_ADDRS,
  lcg,
  MixedTraffic,
  mixedDatapath,
  OFF,
} from './mixed-traffic.ts';

/** A mixed-traffic stream (mixed-traffic.ts, mixed-traffic6.ts). */
interface Stream {
  readonly buf: Uint8Array;
  next(k: number): number;
  after(verdict: number): void;
}

/**
 * n packets of `t`, one in three intact. `translatedOk` says whether an intact packet the
 * program translated carries checksums a full recompute agrees with (fragments aside);
 * `maxReply` bounds a generated packet.
 */
function runFuzz(
  dp: Datapath,
  t: Stream,
  seed: number,
  n: number,
  translatedOk: (p: Uint8Array) => boolean,
  maxReply: number,
): void {
  const rnd = lcg(seed);
  let exceptions = 0;
  for (let k = 0; k < n; k++) {
    let len = t.next(k);
    // one packet in three intact, so that flows get established and later stages see damage
    const intact = rnd(3) === 0;
    if (!intact) len = damage(t.buf, len, rnd);
    dp.lastReason = -1;
    const before = dp.counters.reduce((a, b) => a + b, 0);
    let v = -1;
    try {
      v = dpProcess(dp, t.buf, OFF, len, clockMs(k));
    } catch {
      exceptions++;
      continue;
    }
    t.after(v);
    expect(v >= 0 && v <= 3).toBe(true);
    expect(dp.lastReason >= 0 && dp.lastReason < REASON_COUNT).toBe(true);
    if (v === V_DROP) expect(reasonIsDrop(dp.lastReason)).toBe(true);
    if (v === V_REPLY) expect(dp.outLen > 20 && dp.outLen <= maxReply).toBe(true);
    else expect(dp.outLen).toBe(0);
    if (intact && v === V_TX) expect(translatedOk(t.buf.slice(OFF, OFF + len))).toBe(true);
    // exactly one counter moved, by one
    expect(dp.counters.reduce((a, b) => a + b, 0)).toBe(before + 1);
  }
  expect(exceptions).toBe(0);
  expect(dp.counters.reduce((a, b) => a + b, 0)).toBe(n);
}

/** IPv4: checksums verify unless the packet is a fragment. */
function ok4(p: Uint8Array): boolean {
  const frag = (p[6] & 0x3f) !== 0 || p[7] !== 0;
  return frag || checksumsVerify(p);
}

/** IPv6 (damage() leaves an IPv6 header's bytes to chance): unless it carries a Fragment header. */
function ok6(p: Uint8Array): boolean {
  return p[0] >>> 4 !== 6 || p[6] === 44 || l6CsumVerifies(p);
}

const v4 = (dp: Datapath, seed: number, n: number) =>
  runFuzz(dp, new MixedTraffic(HIGH_ADDRS), seed, n, ok4, dp.out.length);
const v6 = (dp: Datapath, seed: number, n: number) =>
  runFuzz(dp, new MixedTraffic6(), seed, n, ok6, 1280); // RFC 4443 2.4(c)

describe('fuzz: damaged IPv6 traffic through every stage', () => {
  it('never throws, always names a reason (seed 3, 50k IPv6 packets)', () => {
    v6(dualDatapath(3, 2048), 3, 50_000);
  });

  it('never throws with a nearly full IPv6 conntrack table (seed 4, 50k packets)', () => {
    v6(dualDatapath(4, 128), 4, 50_000);
  });
});

describe('fuzz: damaged mixed traffic through every stage', () => {
  it('never throws, always names a reason (seed 1, 50k packets)', () => {
    v4(mixedDatapath(1, 2048, HIGH_ADDRS), 1, 50_000);
  });

  it('never throws with a nearly full conntrack table (seed 2, 50k packets)', () => {
    v4(mixedDatapath(2, 128, HIGH_ADDRS), 2, 50_000);
  });
});

// Housekeeping is the one periodic entry point: ticks driven by a fake clock run conntrack
// expiry every tick, affinity and SNAT GC every second and the connection recount every 10 s.
//
//   client 10.244.0.7 ──SYN──▶ 10.96.0.10:80 (ClientIP affinity 10 s) ──▶ one backend
//   ticks at +0.1 s … : conntrack entry (SYN_SENT, 120 s) expires at +120 s, affinity at +10 s

import { describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { Housekeeping } from '../../src/housekeeping/housekeeping.ts';
import { DpLoader } from '../../src/loader/load.ts';
import { buildTcp, endpoint, run, SYN, service, servicePort } from '../datapath/harness.ts';

const VIP = '10.96.0.10';
const T0 = 5_000_000;

function setup() {
  const dp = createDatapath({ seed: 1 });
  const loader = new DpLoader(dp);
  const svc = service('web', VIP, { sessionAffinity: 'ClientIP', affinityTimeoutSeconds: 10 });
  const annotations = { 'kubetun.io/scheduler': 'lc' };
  const eps = ['10.244.1.5:8080', '10.244.2.5:8080'].map((e) => endpoint(e));
  loader.load([servicePort({ ...svc, annotations }, 80, 'TCP', eps)]);
  const syn = buildTcp({ src: '10.244.0.7', dst: VIP, sport: 40000, dport: 80, flags: SYN });
  expect(run(dp, syn, T0).reason).toBe('TX_DNAT_NEW');
  return { dp, loader };
}

/** Inactive connections over both candidates of the service (lc counts them). */
function inactive(dp: Datapath, revNat: number): number {
  return dp.sched.inactive(revNat, 0) + dp.sched.inactive(revNat, 1);
}

describe('Housekeeping.tick', () => {
  it('expires affinity once idle past its timeout, at its 1 s period', () => {
    const { dp, loader } = setup();
    const hk = new Housekeeping(dp, loader, { intervalSec: 3600 }, T0);
    expect(dp.aff.size).toBe(1);
    hk.tick(T0 + 9_000);
    expect(dp.aff.size).toBe(1);
    hk.tick(T0 + 10_000);
    expect(dp.aff.size).toBe(0);
  });

  it('collects expired flows and releases their connection counts', () => {
    const { dp, loader } = setup();
    const hk = new Housekeeping(dp, loader, { intervalSec: 60, minIntervalSec: 1 }, T0);
    const rn = dp.svc.revNat(dp.svc.lookup(0x0a60000a, 80, 6, 0));
    const counted = () => inactive(dp, rn);
    expect(counted()).toBe(1);
    hk.tick(T0 + 61_000); // a pass starts and, one batch, finishes: the flow lives 120 s
    expect(dp.ct.size).toBe(1);
    hk.tick(T0 + 200_000);
    expect(dp.ct.size).toBe(0);
    expect(counted()).toBe(0);
  });

  it('rebuilds connection counts from conntrack every 10 s', () => {
    const { dp, loader } = setup();
    const hk = new Housekeeping(dp, loader, { intervalSec: 3600 }, T0);
    const rn = dp.svc.revNat(dp.svc.lookup(0x0a60000a, 80, 6, 0));
    dp.sched.resetCounts(); // counts lost, e.g. a flow deleted without release
    hk.tick(T0 + 9_900);
    expect(inactive(dp, rn)).toBe(0);
    hk.tick(T0 + 10_000);
    expect(inactive(dp, rn)).toBe(1);
  });
});

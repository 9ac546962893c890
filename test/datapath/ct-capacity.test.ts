// Conntrack capacity and the agent's GC: a full table drops new flows (DROP_CT_FULL, counted,
// a rate-limited log line) while every tracked flow keeps working; the adaptive GC does bounded
// work per tick, adapts its interval like Cilium, and starts at once after a failed insert;
// the `kubetun run` conntrack flags.

import { describe, expect, it } from 'vitest';
import { ctMaxDefault } from '../../src/datapath/state/config.ts';
import {
  CtFullLog,
  CtGcScheduler,
  ctGcNextInterval,
  DEFAULT_CT_GC,
} from '../../src/housekeeping/ct-gc.ts';
import { runConfig } from '../fixtures/run-flags.ts';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { DROP_CT_FULL } from '../../src/datapath/state/reasons.ts';
import { buildUdp, endpoint, run, service, servicePort, loaderOf } from './harness.ts';

const VIP = '10.96.0.53';
const T0 = 9_000_000;

function setup(ctCapacity: number, ctGcBatch = 0): Datapath {
  const dp = createDatapath({ seed: 5, ctCapacity, ctGcBatch });
  const dns = service('dns', VIP);
  loaderOf(dp).load([servicePort(dns, 53, 'UDP', [endpoint('10.244.2.5:53')], 'dns')]);
  return dp;
}
const q = (sport: number) =>
  buildUdp({ src: '10.244.1.10', dst: VIP, sport, dport: 53, data: 'q' });
const a = (sport: number) =>
  buildUdp({ src: '10.244.2.5', dst: '10.244.1.10', sport: 53, dport: sport, data: 'a' });

describe('conntrack table full', () => {
  it('drops flow N+1 with DROP_CT_FULL while flows 1..N keep working both ways', () => {
    const N = 64;
    const dp = setup(N);
    for (let p = 1; p <= N; p++) expect(run(dp, q(1000 + p), T0).reason).toBe('TX_DNAT_NEW');
    expect(dp.ct.size).toBe(N);
    const r = run(dp, q(5000), T0);
    expect(r.reason).toBe('DROP_CT_FULL');
    expect(dp.counters[DROP_CT_FULL]).toBe(1);
    expect(dp.ctGc.insertFailures).toBe(1);
    for (let p = 1; p <= N; p++) {
      expect(run(dp, q(1000 + p), T0 + 1000).reason).toBe('TX_DNAT');
      expect(run(dp, a(1000 + p), T0 + 1000).reason).toBe('TX_REVNAT');
    }
    expect(run(dp, q(5001), T0 + 1000).reason).toBe('DROP_CT_FULL');
  });

  it('admits new flows again once GC reclaimed expired ones', () => {
    const dp = setup(16);
    for (let p = 0; p < 16; p++) run(dp, q(2000 + p), T0);
    const gc = new CtGcScheduler(dp, { intervalSec: 3600, batch: 4 }, T0);
    expect(run(dp, q(6000), T0 + 31_000).reason).toBe('DROP_CT_FULL');
    // the failed insert starts a pass at the next tick, long before the interval
    let deleted = 0;
    for (let t = 0; t < 4; t++) deleted += gc.tick(T0 + 31_000 + t);
    expect(deleted).toBe(16);
    expect(gc.stats.passes).toBe(1);
    expect(run(dp, q(6000), T0 + 31_010).reason).toBe('TX_DNAT_NEW');
  });

  it('logs the kernel-style line at most once per period, with the drops since the last one', () => {
    const dp = setup(4);
    const log = new CtFullLog(dp, 5000);
    for (let p = 0; p < 4; p++) run(dp, q(3000 + p), T0);
    expect(log.check(T0)).toBe(0);
    for (let p = 0; p < 3; p++) run(dp, q(4000 + p), T0);
    expect(log.check(T0)).toBe(3);
    run(dp, q(4100), T0);
    expect(log.check(T0 + 4999)).toBe(0);
    run(dp, q(4101), T0);
    expect(log.check(T0 + 5000)).toBe(2);
    expect(CtFullLog.MESSAGE).toBe('kubetun conntrack: table full, dropping packet');
  });
});

describe('adaptive incremental GC', () => {
  it('examines at most `batch` positions per tick, so packets run between steps', () => {
    const dp = setup(4096);
    for (let p = 0; p < 4000; p++) run(dp, q(10000 + p), T0);
    const gc = new CtGcScheduler(dp, { intervalSec: 10, batch: 256 }, T0);
    expect(gc.tick(T0 + 5_000)).toBe(0); // not due yet
    const later = T0 + 60_000; // all expired (UDP 30 s)
    const perTick: number[] = [];
    while (dp.ct.size > 0) {
      perTick.push(gc.tick(later));
      // the packet loop keeps going between ticks: a new flow is admitted
      expect(run(dp, q(60000), later).reason).toMatch(/TX_DNAT/);
      dp.ct.delete(dp.ct.lookupOrig(17, 0x0af4010a, 0x0a60_0035, 60000, 53));
    }
    expect(Math.max(...perTick)).toBeLessThanOrEqual(256);
    expect(perTick.length).toBeGreaterThanOrEqual(Math.ceil(4000 / 256));
    expect(gc.stats.deleted).toBe(4000);
  });

  it('adapts: > 25% reclaimed shortens by that share, < 5% lengthens x1.5, within bounds', () => {
    const cfg = { ...DEFAULT_CT_GC, minIntervalSec: 10, maxIntervalSec: 1000 };
    expect(ctGcNextInterval(300, 0.5, cfg)).toBe(150);
    expect(ctGcNextInterval(300, 0.1, cfg)).toBe(300);
    expect(ctGcNextInterval(300, 0.01, cfg)).toBe(450);
    expect(ctGcNextInterval(900, 0, cfg)).toBe(1000);
    expect(ctGcNextInterval(12, 0.9, cfg)).toBe(10);
  });

  it('sets the next pass from what the last one reclaimed', () => {
    const dp = setup(1024);
    for (let p = 0; p < 600; p++) run(dp, q(20000 + p), T0);
    const gc = new CtGcScheduler(dp, { intervalSec: 100, batch: 100_000 }, T0);
    gc.tick(T0 + 100_000); // 600 of 1024 reclaimed: 58%
    expect(gc.stats.intervalSec).toBeCloseTo(100 * (1 - 600 / 1024), 6);
    gc.tick(T0 + 100_000 + gc.stats.intervalSec * 1000); // nothing left: x1.5
    expect(gc.stats.passes).toBe(2);
    expect(gc.stats.intervalSec).toBeCloseTo(1.5 * 100 * (1 - 600 / 1024), 6);
  });
});

describe('kubetun run conntrack flags', () => {
  it("defaults --ct-max to kube-proxy's max(32768 x cores, 131072)", () => {
    expect(ctMaxDefault(2)).toBe(131072);
    expect(ctMaxDefault(8)).toBe(262144);
    expect(runConfig({}, 16).datapath.ctCapacity).toBe(524288);
    expect(runConfig({ ctMax: '8' }, 16).datapath.ctCapacity).toBe(8);
  });

  it('parses timeouts, drop-invalid and GC intervals; names the flag on bad input', () => {
    const o = runConfig({
      ctTimeout: 'tcp-established=432000,tcp-close-wait=60',
      ctDropInvalid: true,
      ctGcInterval: '30',
    });
    expect(o.datapath).toMatchObject({
      ctTcpEstablished: 432000,
      ctTcpCloseWait: 60,
      ctDropInvalid: true,
    });
    expect(o.gc.intervalSec).toBe(30);
    expect(() => runConfig({ ctMax: '0' })).toThrow(/^--ct-max:/);
    expect(() => runConfig({ ctTimeout: 'tcp-bogus=3' })).toThrow(/^--ct-timeout:/);
    expect(() => runConfig({ ctTimeout: 'udp=x' })).toThrow(/^--ct-timeout:/);
    expect(() => runConfig({ ctGcMinInterval: '50', ctGcMaxInterval: '20' })).toThrow(
      /--ct-gc-min-interval/,
    );
  });
});

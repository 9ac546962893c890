// Adopting a dead run's pinned maps (src/node/adopt.ts): the scheduler state rebuilt before the
// first packet, so rr/lc/maglev services do not answer DROP_NO_BACKEND until the first sync;
// after the first sync, entries of Services and endpoints that went away while no agent ran
// are swept (a fresh loader never wrote them, so it would never delete them).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import type { ResolvedServicePort } from '../../src/model.ts';
import { schedulersFromMaps, sweepStale } from '../../src/node/adopt.ts';
import { attachPinned, createPinned } from '../../src/node/pin.ts';
import { whileTurning } from '../fixtures/turns.ts';
import {
  buildTcp,
  buildUdp,
  endpoint,
  get32,
  ip,
  loaderOf,
  run,
  SYN,
  service,
  servicePort,
} from '../datapath/harness.ts';

const dir = mkdtempSync(join(tmpdir(), 'kt-adopt-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const small = {
  ctCapacity: 1024,
  svcCapacity: 256,
  beCapacity: 256,
  affinityCapacity: 64,
  snatCapacity: 256,
};
const NOW = 1_000_000;
const EPS = ['10.244.1.5:8080', '10.244.2.5:8080', '10.244.3.5:8080'];

function port(name: string, vip: string, sched: string, eps = EPS, proto: 'TCP' | 'UDP' = 'TCP') {
  const ann: Record<string, string> = sched === 'random' ? {} : { 'kubetun.io/scheduler': sched };
  return servicePort(
    service(name, vip, { annotations: ann }),
    80,
    proto,
    eps.map((e) => endpoint(e)),
  );
}

const syn = (vip: string, n: number) =>
  buildTcp({ src: `10.244.0.${1 + n}`, dst: vip, sport: 30000 + n, dport: 80, flags: SYN });

/** A datapath on a new pinned file loaded with `ports`, and a second one attached to the file. */
function restart(
  name: string,
  ports: ResolvedServicePort[],
  cfg = small,
): { a: Datapath; b: Datapath } {
  const path = join(dir, `${name}.maps`);
  const a = createPinned(path, cfg).dp;
  loaderOf(a).load(ports);
  return { a, b: attachPinned(path, cfg).dp };
}

describe('adopting pinned maps after a restart', () => {
  const kinds = ['rr', 'lc', 'maglev', 'wrr', 'sh'];
  const ports = kinds.map((k, i) => port(k, `10.96.0.${10 + i}`, k));

  it('without the rebuild, an attached rr/lc/maglev service has no scheduler (the gap it closes)', () => {
    const { b } = restart('gap', ports);
    expect(run(b, syn('10.96.0.10', 1), NOW).reason).toBe('DROP_NO_BACKEND');
  });

  it('rebuilds every non-random scheduler from the maps: new flows are DNATed before any sync', () => {
    const { a, b } = restart('sched', ports);
    expect(schedulersFromMaps(b, NOW / 1000)).toBe(kinds.length);
    for (const [i, k] of kinds.entries()) {
      const vip = `10.96.0.${10 + i}`;
      const r = run(b, syn(vip, i), NOW);
      expect(r.reason, k).toBe('TX_DNAT_NEW');
      expect(EPS.map((e) => e.split(':')[0])).toContain(
        [24, 16, 8, 0].map((s) => (get32(r.pkt, 16) >>> s) & 255).join('.'),
      );
    }
    // Maglev's table is a function of the backends' names: the same client lands where the dead
    // run would have sent it
    const c = buildTcp({
      src: '10.244.0.77',
      dst: '10.96.0.12',
      sport: 41000,
      dport: 80,
      flags: SYN,
    });
    expect(get32(run(b, c.slice(), NOW).pkt, 16)).toBe(get32(run(a, c.slice(), NOW).pkt, 16));
  });

  it('lc counts the flows the dead run left (recounted from the pinned conntrack)', () => {
    const { a, b } = restart('lc', [port('lc', '10.96.0.20', 'lc')]);
    for (let n = 1; n <= 5; n++)
      expect(run(a, syn('10.96.0.20', n), NOW).reason).toBe('TX_DNAT_NEW');
    const rn = a.svc.revNat(a.svc.lookup(ip('10.96.0.20'), 80, 6, 0));
    const counts = (dp: Datapath) => [0, 1, 2].map((i) => dp.sched.inactive(rn, i));
    expect(counts(a).reduce((x, y) => x + y)).toBe(5);
    schedulersFromMaps(b, NOW / 1000);
    expect(counts(b)).toEqual(counts(a));
  });

  it('sweeps what went away while no agent ran; what stayed is untouched', async () => {
    const kept = port('kept', '10.96.0.30', 'random');
    const gone = port('gone', '10.96.0.31', 'rr');
    const dns = port('dns', '10.96.0.32', 'random', EPS.slice(0, 2), 'UDP');
    const { b } = restart('sweep', [kept, gone, dns]);
    // flows of the dead run: UDP to the endpoint that will leave, TCP to the Service that will go
    const t = buildTcp({
      src: '10.244.0.9',
      dst: '10.96.0.31',
      sport: 5000,
      dport: 80,
      flags: SYN,
    });
    schedulersFromMaps(b, NOW / 1000);
    let udpTo = 0;
    for (let n = 0; n < 50 && udpTo !== ip('10.244.2.5'); n++) {
      const p = buildUdp({ src: '10.244.0.9', dst: '10.96.0.32', sport: 5353 + n, dport: 80 });
      const r = run(b, p, NOW);
      udpTo = get32(r.pkt, 16);
      if (udpTo !== ip('10.244.2.5')) b.ct.delete(b.lastCtIdx);
    }
    expect(run(b, t, NOW).reason).toBe('TX_DNAT_NEW');
    const before = { svc: b.svc.size, be: b.be.size, rn: b.revnat.size, ct: b.ct.size };
    expect(before.ct).toBe(2);

    // the directory now: 'gone' deleted, dns lost its second endpoint
    const now = [kept, port('dns', '10.96.0.32', 'random', EPS.slice(0, 1), 'UDP')];
    const live = loaderOf(b);
    live.load(now); // the new run's first sync: writes what exists, deletes nothing it never wrote
    expect(b.svc.lookup(ip('10.96.0.31'), 80, 6, 0)).toBeGreaterThanOrEqual(0); // the leak
    const r = await sweepStale(b, now, {});
    expect(b.svc.lookup(ip('10.96.0.31'), 80, 6, 0)).toBe(-1);
    expect(b.svc.lookup(ip('10.96.0.31'), 0, 0, 0)).toBe(-1); // its wildcard master too
    expect(b.svc.lookup(ip('10.96.0.32'), 80, 17, 2)).toBe(-1); // dns's second slot
    expect(r.services).toBe(before.svc - b.svc.size);
    expect(r.revNats).toBe(1);
    expect(r.flows).toBe(1); // the UDP flow to the endpoint that left; the TCP one is kept
    expect(b.ct.size).toBe(1);
    expect(b.ct.proto(b.ct.next(0))).toBe(6);
    // what stayed still serves, and a second sweep finds nothing
    expect(
      run(
        b,
        buildTcp({ src: '10.244.0.8', dst: '10.96.0.30', sport: 7000, dport: 80, flags: SYN }),
        NOW,
      ).reason,
    ).toBe('TX_DNAT_NEW');
    expect(
      run(b, buildUdp({ src: '10.244.0.8', dst: '10.96.0.32', sport: 7001, dport: 80 }), NOW)
        .reason,
    ).toBe('TX_DNAT_NEW');
    expect(await sweepStale(b, now, {})).toEqual({
      services: 0,
      backends: 0,
      revNats: 0,
      flows: 0,
    });
  });

  it('sweeps in steps: the event loop turns between them, and the result is what a fresh load makes', async () => {
    // 300 Services of one endpoint each; 100 went away while no agent ran
    const all = Array.from({ length: 300 }, (_, i) => {
      const at = `${1 + (i >> 8)}.${i & 255}`;
      return port(`s${String(i).padStart(3, '0')}`, `10.96.${at}`, 'random', [`10.244.${at}:8080`]);
    });
    const cfg = { ...small, svcCapacity: 4096, beCapacity: 1024 };
    const { b } = restart('steps', all, cfg);
    const kept = all.slice(0, 200);
    loaderOf(b).load(kept);
    const { value: r, turns } = await whileTurning(() => sweepStale(b, kept, {}));
    // 200 ports are 4 reference slices of SYNC_SLICE (64): a turn between two at least
    expect(turns).toBeGreaterThanOrEqual(3);
    expect(r.revNats).toBe(100);
    expect(r.backends).toBe(100);
    const fresh = createDatapath(cfg);
    loaderOf(fresh).load(kept);
    expect([b.svc.size, b.be.size, b.revnat.size]).toEqual([
      fresh.svc.size,
      fresh.be.size,
      fresh.revnat.size,
    ]);
    expect(run(b, syn('10.96.1.199', 1), NOW).reason).toBe('TX_DNAT_NEW');
    expect(run(b, syn('10.96.1.200', 2), NOW).reason).not.toBe('TX_DNAT_NEW');
  });
});

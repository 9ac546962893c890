import { describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../src/control/clock.ts';
import { ProxyHealth } from '../../src/control/health.ts';
import { ProxyMetrics } from '../../src/control/metrics.ts';
import { type ProgramRequest, Proxier } from '../../src/control/proxier.ts';
import type { SyncChanges } from '../../src/control/tracker.ts';
import { datapathSync } from '../../src/control/datapath-sync.ts';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import { DpLoader } from '../../src/loader/load.ts';
import { ipv4ToU32 } from '../../src/wire/addr.ts';
import { ep, slice, svc } from './fixtures.ts';

interface Seen {
  full: boolean;
  changed: string[];
  ports: number;
}

function setup(fail: (n: number) => boolean = () => false) {
  const clock = new FakeClock(1_000_000);
  const seen: Seen[] = [];
  const cleanups: SyncChanges[] = [];
  const metrics = new ProxyMetrics();
  const health = new ProxyHealth({ clock, healthTimeoutMs: 60_000 });
  const p = new Proxier({
    clock,
    nodeName: 'n1',
    metrics,
    health,
    runner: { minIntervalMs: 1000, maxIntervalMs: 30_000, burst: 2 },
    program: (req: ProgramRequest) => {
      seen.push({
        full: req.full,
        changed: req.changes.changedServicePorts,
        ports: req.tracker.resolveAll().length,
      });
      return !fail(seen.length);
    },
    cleanupConntrack: (ch) => {
      cleanups.push(ch);
      return ch.udpStaleEndpoints.length;
    },
    onError: () => {},
  });
  return { clock, seen, cleanups, metrics, health, p };
}

const twoEps = slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7')]);
const oneEp = slice('dns-a', 'dns', [ep('10.244.1.5')]);

describe('Proxier', () => {
  it('programs nothing before both sources synced, then a full sync with everything', () => {
    const { clock, seen, p } = setup();
    p.onServiceUpdate(null, svc('dns'));
    p.onEndpointSliceUpdate(null, twoEps);
    p.onServicesSynced();
    clock.advance(60_000);
    expect(seen).toEqual([]);
    p.onEndpointSlicesSynced();
    clock.advance(0);
    expect(seen).toEqual([{ full: true, changed: ['default/dns:dns'], ports: 1 }]);
  });

  it('an endpoint change gives a partial sync, UDP cleanup after it, and metrics', async () => {
    const { clock, seen, cleanups, metrics, p } = setup();
    p.onServiceUpdate(null, svc('dns'));
    p.onEndpointSliceUpdate(null, twoEps);
    p.onServicesSynced();
    p.onEndpointSlicesSynced();
    clock.advance(5000);
    p.onEndpointSliceUpdate(twoEps, oneEp);
    clock.advance(0);
    expect(seen.at(-1)).toEqual({ full: false, changed: ['default/dns:dns'], ports: 1 });
    expect(cleanups.at(-1)?.udpStaleEndpoints).toEqual([
      { servicePortName: 'default/dns:dns', endpoint: '10.244.2.7:5353' },
    ]);
    const text = await metrics.metrics();
    expect(text).toContain(
      'kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1',
    );
    expect(text).toContain(
      'kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1',
    );
    expect(text).toContain(
      'kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"} 1',
    );
    expect(text).toContain(
      'kubeproxy_network_programming_duration_seconds_count{ip_family="IPv4"} 2',
    );
    expect(text).toContain(
      `kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} ${clock.now() / 1000}`,
    );
    expect(text).toContain('kubeproxy_sync_proxy_rules_endpoint_changes_total 2');
  });

  it('a failed program keeps the UDP cleanup for the retry, which is full', () => {
    const { clock, seen, cleanups, p } = setup((n) => n === 2);
    p.onServiceUpdate(null, svc('dns'));
    p.onEndpointSliceUpdate(null, twoEps);
    p.onServicesSynced();
    p.onEndpointSlicesSynced();
    clock.advance(5000);
    const before = cleanups.length;
    p.onEndpointSliceUpdate(twoEps, oneEp);
    clock.advance(0);
    expect(seen).toHaveLength(2);
    expect(cleanups.length).toBe(before); // no cleanup after a failed program
    clock.advance(30_000);
    expect(seen[2]).toEqual({ full: true, changed: [], ports: 1 });
    expect(cleanups.at(-1)?.udpStaleEndpoints).toEqual([
      { servicePortName: 'default/dns:dns', endpoint: '10.244.2.7:5353' },
    ]);
  });

  it('health turns 503 when a queued update stays unprogrammed for 2 × syncPeriod', () => {
    const { clock, health, p } = setup((n) => n >= 2);
    p.onServiceUpdate(null, svc('dns'));
    p.onServicesSynced();
    p.onEndpointSlicesSynced();
    clock.advance(0);
    expect(health.isHealthy()).toBe(true);
    p.onEndpointSliceUpdate(null, oneEp);
    clock.advance(59_999);
    expect(health.isHealthy()).toBe(true);
    clock.advance(1);
    expect(health.isHealthy()).toBe(false);
    expect(health.report(true).status).toBe(503);
  });
});

// Issue 18: the no_local_endpoints recount follows the sync's changes (it counted every port
// after every sync: 50-110 ms at 5,000 ports on a loaded node, test/node/stall.test.ts).
describe('Proxier: no_local_endpoints, recounted per changed service port', () => {
  const gauge = async (m: ProxyMetrics, policy: string) => {
    const text = await m.metrics();
    const line = `kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="${policy}"} `;
    return Number(
      text
        .split('\n')
        .find((l) => l.startsWith(line))
        ?.slice(line.length),
    );
  };
  const local = (name: string, ip: string) =>
    svc(name, { clusterIPs: [ip], internalTrafficPolicy: 'Local' });
  const elsewhere = (name: string) =>
    slice(`${name}-a`, name, [ep('10.244.2.7', { nodeName: 'n2' })]);
  const mine = (name: string) => slice(`${name}-a`, name, [ep('10.244.1.5', { nodeName: 'n1' })]);

  it('follows endpoints coming and going and a deleted Service', async () => {
    const { clock, metrics, p } = setup();
    p.onServiceUpdate(null, local('a', '10.96.0.10'));
    p.onEndpointSliceUpdate(null, elsewhere('a'));
    p.onServiceUpdate(null, local('b', '10.96.0.11'));
    p.onEndpointSliceUpdate(null, elsewhere('b'));
    p.onServicesSynced();
    p.onEndpointSlicesSynced();
    clock.advance(0);
    expect(await gauge(metrics, 'internal')).toBe(2);
    clock.advance(5000);
    p.onEndpointSliceUpdate(elsewhere('a'), mine('a'));
    clock.advance(0);
    expect(await gauge(metrics, 'internal')).toBe(1);
    clock.advance(5000);
    // a sync of deletions only: no port changed, one went away
    p.onEndpointSliceUpdate(elsewhere('b'), null);
    p.onServiceUpdate(local('b', '10.96.0.11'), null);
    clock.advance(0);
    expect(await gauge(metrics, 'internal')).toBe(0);
  });

  it('a partial sync recounts the ports it changed, not every port', async () => {
    const metrics = new ProxyMetrics();
    const clock = new FakeClock(1_000_000);
    const p = new Proxier({ clock, nodeName: 'n1', metrics, program: () => true });
    for (let k = 0; k < 300; k++) {
      p.onServiceUpdate(null, local(`s${k}`, `10.96.1.${k & 255}`));
      p.onEndpointSliceUpdate(null, elsewhere(`s${k}`));
    }
    p.onServicesSynced();
    p.onEndpointSlicesSynced();
    clock.advance(0);
    // the full sync's count runs in steps, a turn of the event loop between two: until it is
    // done (a fixed 50 ms was not always enough on a loaded machine)
    for (let i = 0; i < 200 && (await gauge(metrics, 'internal')) !== 300; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(await gauge(metrics, 'internal')).toBe(300);
    const all = vi.spyOn(p.tracker, 'resolveAll');
    const one = vi.spyOn(p.tracker, 'resolve');
    clock.advance(5000);
    p.onEndpointSliceUpdate(elsewhere('s7'), mine('s7'));
    clock.advance(0);
    expect(all).not.toHaveBeenCalled();
    expect(one.mock.calls.map(([spn]) => spn)).toEqual(['default/s7:dns']);
    expect(await gauge(metrics, 'internal')).toBe(299);
  });
});

// Issue 18: the agent's fresh start wrote every port of a 10k-Service directory after the last
// slice came in (~0.5 s of 1.4 s); with `prefill` what has arrived is programmed meanwhile.
describe('Proxier: prefill before the sources have synced', () => {
  const vip = (k: number) => `10.96.${k >> 8}.${(k & 255) + 1}`;
  const deliver = (p: Proxier, from: number, to: number) => {
    for (let k = from; k < to; k++) {
      p.onServiceUpdate(null, svc(`s${k}`, { clusterIPs: [vip(k)] }));
      p.onEndpointSliceUpdate(null, slice(`s${k}-a`, `s${k}`, [ep(`10.244.1.${k + 1}`)]));
    }
  };
  const turns = async (n: number) => {
    for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
  };

  it('programs what arrived as partial syncs; the first sync waits for the one in flight and is full, with every change', async () => {
    const clock = new FakeClock(1_000_000);
    const seen: { full: boolean; changed: string[] }[] = [];
    let release: (() => void) | undefined;
    const p = new Proxier({
      clock,
      prefill: 1,
      program: (req) => {
        seen.push({ full: req.full, changed: req.changes.changedServicePorts });
        if (req.full || seen.length > 1) return true;
        return new Promise<boolean>((r) => {
          release = () => r(true);
        });
      },
    });
    deliver(p, 0, 2);
    await turns(5);
    expect(seen).toEqual([{ full: false, changed: ['default/s0:dns', 'default/s1:dns'] }]);
    // the first prefill's write is still in flight when the rest comes and the sources sync
    deliver(p, 2, 3);
    p.onServicesSynced();
    p.onEndpointSlicesSynced();
    clock.advance(0);
    await turns(5);
    expect(seen).toHaveLength(1);
    release?.();
    await turns(10);
    // once the sources have synced no prefill starts: the waiting sync takes s2 with the rest
    expect(seen).toHaveLength(2);
    expect(seen[1]).toEqual({
      full: true,
      changed: ['default/s0:dns', 'default/s1:dns', 'default/s2:dns'],
    });
  });

  it('waits until a batch is pending: fewer objects stay for the first sync', async () => {
    const clock = new FakeClock(1_000_000);
    const seen: number[] = [];
    const p = new Proxier({
      clock,
      prefill: 4,
      program: (req) => {
        seen.push(req.changes.changedServicePorts.length);
        return true;
      },
    });
    deliver(p, 0, 1); // a Service and its slice: 2 objects
    await turns(5);
    expect(seen).toEqual([]);
    deliver(p, 1, 2);
    await turns(10);
    expect(seen).toEqual([2]);
  });

  it('without prefill nothing is programmed before the sources have synced', async () => {
    const clock = new FakeClock(1_000_000);
    const program = vi.fn(() => true);
    const p = new Proxier({ clock, program });
    deliver(p, 0, 3);
    await turns(10);
    expect(program).not.toHaveBeenCalled();
  });

  it('into the maps: the first full sync after the prefills writes only what came after them, and the maps equal a fresh load', async () => {
    const clock = new FakeClock(1_000_000);
    const dp = createDatapath();
    const sync = datapathSync(dp, {}, undefined, 16);
    const written: number[] = [];
    const p = new Proxier({
      clock,
      prefill: 1,
      program: async (req) => {
        const ok = await sync.program(req);
        written.push(req.full ? -sync.last.written : sync.last.written);
        return ok;
      },
    });
    deliver(p, 0, 40);
    await turns(40);
    deliver(p, 40, 50);
    p.onServicesSynced();
    p.onEndpointSlicesSynced();
    clock.advance(0);
    await turns(40);
    // partial writes of the first 40 ports, then a full sync that writes the last 10 alone
    expect(written.slice(0, -1).reduce((a, b) => a + b, 0)).toBe(40);
    expect(written.at(-1)).toBe(-10);
    expect(dp.svc.lookup(ipv4ToU32(vip(49)), 53, 17, 0)).toBeGreaterThanOrEqual(0);
    const fresh = createDatapath();
    new DpLoader(fresh).load(p.tracker.resolveAll());
    const keys = (d: typeof dp) => {
      const out: string[] = [];
      for (let i = d.svc.next(0); i >= 0; i = d.svc.next(i + 1))
        out.push(`${d.svc.vipOf(i)}:${d.svc.portOf(i)}#${d.svc.slotOf(i)}=${d.svc.count(i)}`);
      return out.sort();
    };
    expect(keys(dp)).toEqual(keys(fresh));
  });
});

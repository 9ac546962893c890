import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/control/clock.ts';
import { ProxyHealth } from '../../src/control/health.ts';
import { ProxyMetrics } from '../../src/control/metrics.ts';
import { type ProgramRequest, Proxier } from '../../src/control/proxier.ts';
import type { SyncChanges } from '../../src/control/tracker.ts';
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

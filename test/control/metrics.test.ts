import { afterEach, describe, expect, it } from 'vitest';
import {
  countNoLocalEndpoints,
  NETWORK_PROGRAMMING_BUCKETS,
  ProxyMetrics,
  type ServerHandle,
  startMetricsServer,
} from '../../src/control/metrics.ts';
import { ChangeTracker } from '../../src/control/tracker.ts';
import type { ResolvedServicePort } from '../../src/model.ts';
import { ep, port, slice, svc } from './fixtures.ts';

let handle: ServerHandle | undefined;
afterEach(async () => {
  await handle?.close();
  handle = undefined;
});

async function scrape(m: ProxyMetrics): Promise<string> {
  handle = await startMetricsServer(m, { host: '127.0.0.1', port: 0 });
  const res = await fetch(`http://127.0.0.1:${handle.port}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toContain('text/plain');
  return res.text();
}

/** The value of one sample line, e.g. value(text, 'x_total{a="b"}'). */
function value(text: string, sample: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${sample} `));
  return line === undefined ? undefined : Number(line.slice(sample.length + 1));
}

describe('ProxyMetrics over HTTP', () => {
  it('serves kube-proxy metric names with the sync observations', async () => {
    const m = new ProxyMetrics();
    m.observeSync(0.003, true, 1_700_000_000_000);
    m.observeSync(0.0005, false, 1_700_000_001_500);
    m.observeNetworkProgramming(1_700_000_002_000, [1_700_000_000_000]);
    m.markQueued(1_700_000_000_250);
    m.addConntrackDeleted(3);
    m.setNoLocalEndpoints({ internal: 1, external: 2 });
    const text = await scrape(m);
    const f = 'ip_family="IPv4"';
    expect(value(text, `kubeproxy_sync_proxy_rules_duration_seconds_count{${f}}`)).toBe(2);
    expect(value(text, `kubeproxy_sync_full_proxy_rules_duration_seconds_count{${f}}`)).toBe(1);
    expect(value(text, `kubeproxy_sync_partial_proxy_rules_duration_seconds_count{${f}}`)).toBe(1);
    expect(value(text, `kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.004",${f}}`)).toBe(
      2,
    );
    expect(value(text, `kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.002",${f}}`)).toBe(
      1,
    );
    expect(value(text, `kubeproxy_sync_proxy_rules_last_timestamp_seconds{${f}}`)).toBe(
      1_700_000_001.5,
    );
    expect(value(text, `kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{${f}}`)).toBe(
      1_700_000_000.25,
    );
    expect(value(text, `kubeproxy_network_programming_duration_seconds_bucket{le="2",${f}}`)).toBe(
      1,
    );
    expect(value(text, `kubeproxy_network_programming_duration_seconds_bucket{le="1",${f}}`)).toBe(
      0,
    );
    expect(value(text, `kubeproxy_conntrack_reconciler_deleted_entries_total{${f}}`)).toBe(3);
    expect(
      value(
        text,
        `kubeproxy_sync_proxy_rules_no_local_endpoints_total{${f},traffic_policy="internal"}`,
      ),
    ).toBe(1);
    expect(
      value(
        text,
        `kubeproxy_sync_proxy_rules_no_local_endpoints_total{${f},traffic_policy="external"}`,
      ),
    ).toBe(2);
  });

  it('exports the tracker change counts, no-ops included in the totals', async () => {
    const m = new ProxyMetrics();
    const t = new ChangeTracker();
    m.trackChanges(t);
    t.services.update(null, svc('dns'));
    t.services.update(svc('dns'), svc('dns', { labels: { x: 'y' } }));
    t.endpointSlices.update(null, slice('dns-a', 'dns', [ep('10.244.1.5')]));
    let text = await scrape(m);
    expect(value(text, 'kubeproxy_sync_proxy_rules_service_changes_total')).toBe(2);
    expect(value(text, 'kubeproxy_sync_proxy_rules_service_changes_pending')).toBe(1);
    expect(value(text, 'kubeproxy_sync_proxy_rules_endpoint_changes_total')).toBe(1);
    expect(value(text, 'kubeproxy_sync_proxy_rules_endpoint_changes_pending')).toBe(1);
    t.checkout();
    const res = await fetch(`http://127.0.0.1:${handle!.port}/metrics`);
    text = await res.text();
    expect(value(text, 'kubeproxy_sync_proxy_rules_service_changes_pending')).toBe(0);
    expect(value(text, 'kubeproxy_sync_proxy_rules_service_changes_total')).toBe(2);
  });

  it('exports datapath counters through the hook, read at each scrape', async () => {
    const m = new ProxyMetrics();
    let drops = 5;
    m.setDatapathStats(() => ({
      packets: { DROP_BAD_IP_CSUM: drops, TX_DNAT: 100 },
      conntrackEntries: 42,
      mapFill: { conntrack: 0.25, services: 0.5 },
    }));
    let text = await scrape(m);
    expect(value(text, 'kubetun_datapath_packets_total{reason="DROP_BAD_IP_CSUM"}')).toBe(5);
    expect(value(text, 'kubetun_datapath_packets_total{reason="TX_DNAT"}')).toBe(100);
    expect(value(text, 'kubetun_conntrack_entries')).toBe(42);
    expect(value(text, 'kubetun_map_fill_ratio{map="conntrack"}')).toBe(0.25);
    drops = 7;
    text = await (await fetch(`http://127.0.0.1:${handle!.port}/metrics`)).text();
    expect(value(text, 'kubetun_datapath_packets_total{reason="DROP_BAD_IP_CSUM"}')).toBe(7);
  });

  it('exports the TUN kernel-side drops by direction, and skips an unreadable one', async () => {
    const m = new ProxyMetrics();
    m.setDatapathStats(() => ({ tunKernelDrops: { to_agent: 81234, from_agent: -1 } }));
    const text = await scrape(m);
    expect(value(text, 'kubetun_tun_kernel_dropped_packets_total{direction="to_agent"}')).toBe(
      81234,
    );
    expect(text).not.toContain('direction="from_agent"');
  });

  it('answers 404 off /metrics', async () => {
    handle = await startMetricsServer(new ProxyMetrics(), { host: '127.0.0.1', port: 0 });
    expect((await fetch(`http://127.0.0.1:${handle.port}/other`)).status).toBe(404);
  });

  it('uses kube-proxy network programming buckets', () => {
    expect(NETWORK_PROGRAMMING_BUCKETS.slice(0, 4)).toEqual([0.25, 0.5, 1, 2]);
    expect(NETWORK_PROGRAMMING_BUCKETS).toContain(115);
    expect(NETWORK_PROGRAMMING_BUCKETS.at(-1)).toBe(300);
    expect(NETWORK_PROGRAMMING_BUCKETS).toHaveLength(80);
  });
});

describe('countNoLocalEndpoints', () => {
  function rsp(
    over: Parameters<typeof svc>[1],
    nodes: (string | undefined)[],
  ): ResolvedServicePort {
    const s = svc('web', { ports: [port('http', 'TCP', 80)], ...over });
    return {
      service: s,
      port: s.ports[0],
      servicePortName: 'default/web:http',
      endpoints: nodes.map((n, i) => ({
        ip: `10.244.0.${i + 1}`,
        port: 80,
        ready: true,
        serving: true,
        terminating: false,
        nodeName: n,
      })),
    };
  }

  it('counts Local policies with endpoints elsewhere but none on this node', () => {
    const ports = [
      rsp({ internalTrafficPolicy: 'Local' }, ['n2']),
      rsp({ internalTrafficPolicy: 'Local' }, ['n1']),
      rsp({ internalTrafficPolicy: 'Local' }, []),
      rsp(
        {
          type: 'NodePort',
          externalTrafficPolicy: 'Local',
          ports: [port('http', 'TCP', 80, { nodePort: 30080 })],
        },
        ['n2', 'n3'],
      ),
      rsp({ externalTrafficPolicy: 'Local' }, ['n2']), // ClusterIP only: not externally reachable
    ];
    expect(countNoLocalEndpoints(ports, 'n1')).toEqual({ internal: 1, external: 1 });
  });
});

// End to end in one process: a manifests directory → Proxier → kubetun's maps, with the metrics
// and health servers on ephemeral ports.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type ControlPlane, startControlPlane } from '../../src/control/control-plane.ts';
import { datapathSync } from '../../src/control/datapath-sync.ts';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { ipv4ToU32 } from '../../src/wire/addr.ts';

function manifest(ips: string[]): string {
  return `apiVersion: v1
kind: Service
metadata: {name: dns, namespace: kube-system}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: dns, protocol: UDP, port: 53, targetPort: 53}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dns-1
  namespace: kube-system
  labels: {kubernetes.io/service-name: dns}
addressType: IPv4
ports: [{name: dns, protocol: UDP, port: 53}]
endpoints:
${ips.map((ip) => `- addresses: [${ip}]\n  conditions: {ready: true}`).join('\n')}
`;
}

let dir: string;
let cp: ControlPlane | undefined;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'kubetun-cp-'));
});
afterEach(async () => {
  await cp?.stop();
  cp = undefined;
  rmSync(dir, { recursive: true, force: true });
});

/** Backends behind 10.96.0.10:53/UDP in the service map (the master entry's count). */
function backendCount(dp: Datapath): number {
  const i = dp.svc.lookup(ipv4ToU32('10.96.0.10'), 53, 17, 0);
  return i < 0 ? -1 : dp.svc.count(i);
}

describe('startControlPlane', () => {
  it('programs the maps from a manifests directory, follows edits, and serves metrics and health', async () => {
    writeFileSync(join(dir, 'dns.yaml'), manifest(['10.244.1.5']));
    const dp = createDatapath({
      svcCapacity: 1024,
      beCapacity: 1024,
      revNatCapacity: 1024,
      ctCapacity: 1024,
    });
    const sync = datapathSync(dp);
    cp = await startControlPlane({
      source: { dir, pollIntervalMs: 50, debounceMs: 10 },
      program: sync.program,
      cleanupConntrack: sync.cleanupConntrack,
      datapathStats: sync.stats,
      minSyncPeriodMs: 10,
      metricsBind: { host: '127.0.0.1', port: 0 },
      healthzBind: { host: '127.0.0.1', port: 0 },
    });
    await vi.waitFor(() => expect(backendCount(dp)).toBe(1), { timeout: 5000, interval: 10 });

    writeFileSync(join(dir, 'dns.yaml'), manifest(['10.244.1.5', '10.244.2.7']));
    await vi.waitFor(() => expect(backendCount(dp)).toBe(2), { timeout: 5000, interval: 10 });

    const text = await (await fetch(`http://127.0.0.1:${cp.metricsServer!.port}/metrics`)).text();
    expect(text).toMatch(
      /kubeproxy_sync_full_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} 1\n/,
    );
    expect(text).toMatch(
      /kubeproxy_sync_partial_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} [1-9]/,
    );
    expect(text).toMatch(/kubetun_map_fill_ratio\{map="services"\} 0\.\d+/);
    expect(text).toContain('kubeproxy_sync_proxy_rules_endpoint_changes_total 2');
    const res = await fetch(`http://127.0.0.1:${cp.healthServer!.port}/healthz`);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { nodeEligible: boolean }).nodeEligible).toBe(true);
  });
});

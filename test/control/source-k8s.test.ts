// The Kubernetes API source against the fake list/watch server, with the real client library.
import { KubeConfig } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ProxyHealth } from '../../src/control/health.ts';
import { KubernetesSource } from '../../src/control/source-k8s.ts';
import { ChangeTracker } from '../../src/control/tracker.ts';
import { FakeApiServer } from './fake-apiserver.ts';

function svcObj(name: string, ip: string, labels: Record<string, string> = {}) {
  return {
    metadata: { name, namespace: 'default', labels },
    spec: {
      type: 'ClusterIP',
      clusterIP: ip,
      clusterIPs: [ip],
      ports: [{ name: 'dns', protocol: 'UDP', port: 53, targetPort: 53 }],
    },
  };
}

function sliceObj(name: string, service: string, ips: string[]) {
  return {
    metadata: { name, namespace: 'default', labels: { 'kubernetes.io/service-name': service } },
    addressType: 'IPv4',
    ports: [{ name: 'dns', protocol: 'UDP', port: 53 }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } })),
  };
}

let api: FakeApiServer;
let source: KubernetesSource | undefined;
beforeEach(async () => {
  api = new FakeApiServer();
  await api.start();
});
afterEach(async () => {
  await source?.stop();
  source = undefined;
  await api.stop();
});

function kubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromClusterAndUser(
    { name: 'fake', server: api.url, skipTLSVerify: true },
    { name: 'nobody' },
  );
  return kc;
}

function setup(opts: { backoffInitialMs?: number } = {}) {
  const tracker = new ChangeTracker();
  const synced: string[] = [];
  const errors: unknown[] = [];
  const onChange = vi.fn();
  source = new KubernetesSource({
    kubeConfig: kubeConfig(),
    sink: tracker,
    onSynced: (s) => synced.push(s),
    onChange,
    onError: (e) => errors.push(e),
    backoffInitialMs: opts.backoffInitialMs ?? 20,
  });
  return { tracker, synced, errors, onChange, source };
}

function endpoints(t: ChangeTracker, spn: string): string[] {
  return (t.resolve(spn)?.endpoints ?? []).map((e) => `${e.ip}:${e.port}`);
}

const wait = (fn: () => void) => vi.waitFor(fn, { timeout: 5000, interval: 10 });

describe('KubernetesSource with @kubernetes/client-node informers', () => {
  it('lists, reports both sources synced, then follows watch events', async () => {
    api.upsert('Service', svcObj('dns', '10.96.0.10'));
    api.upsert('EndpointSlice', sliceObj('dns-1', 'dns', ['10.244.1.5']));
    api.upsert(
      'Service',
      svcObj('other', '10.96.0.11', { 'service.kubernetes.io/service-proxy-name': 'someone-else' }),
    );
    const { tracker, synced, source: s } = setup();
    await s.start();
    expect(synced.sort()).toEqual(['endpointslices', 'services']);
    tracker.checkout();
    expect(tracker.resolveAll().map((r) => r.servicePortName)).toEqual(['default/dns:dns']);
    expect(endpoints(tracker, 'default/dns:dns')).toEqual(['10.244.1.5:53']);

    api.upsert('EndpointSlice', sliceObj('dns-1', 'dns', ['10.244.1.5', '10.244.2.7']));
    await wait(() => expect(tracker.pendingEndpointChanges).toBe(1));
    tracker.checkout();
    expect(endpoints(tracker, 'default/dns:dns')).toEqual(['10.244.1.5:53', '10.244.2.7:53']);

    api.remove('Service', 'default', 'dns');
    await wait(() => expect(tracker.pendingServiceChanges).toBe(1));
    expect(tracker.checkout().deletedServicePorts).toEqual(['default/dns:dns']);
    expect(api.lists).toBe(2);
  });

  it('passes a dual-stack Service and its IPv6 EndpointSlice through, both families', async () => {
    const dual = svcObj('dns', '10.96.0.10');
    Object.assign(dual.spec, {
      clusterIPs: ['10.96.0.10', 'fd00:10:96::a'],
      ipFamilies: ['IPv4', 'IPv6'],
      ipFamilyPolicy: 'PreferDualStack',
    });
    api.upsert('Service', dual);
    api.upsert('EndpointSlice', sliceObj('dns-v4', 'dns', ['10.244.1.5']));
    api.upsert('EndpointSlice', {
      ...sliceObj('dns-v6', 'dns', ['fd00:10:244:1::5']),
      addressType: 'IPv6',
    });
    const { tracker, errors, source: s } = setup();
    await s.start();
    expect(errors).toEqual([]);
    expect(tracker.pendingService('default/dns')?.current).toMatchObject({
      clusterIPs: ['10.96.0.10', 'fd00:10:96::a'],
      ipFamilies: ['IPv4', 'IPv6'],
      ipFamilyPolicy: 'PreferDualStack',
    });
    expect(tracker.pendingEndpointSlice('default/dns-v6')?.current?.addressType).toBe('IPv6');
    tracker.checkout();
    expect(endpoints(tracker, 'default/dns:dns')).toEqual(['10.244.1.5:53']);
    // the IPv6 half passes through to the data plane, not only the IPv4 one
    const v6 = tracker.resolve('default/dns:dns')?.endpoints6 ?? [];
    expect(v6.map((e) => `${e.ip}:${e.port}`)).toEqual(['fd00:10:244:1::5:53']);
  });

  it('re-lists after 410 Gone and turns objects deleted meanwhile into deletes', async () => {
    api.upsert('Service', svcObj('dns', '10.96.0.10'));
    api.upsert('Service', svcObj('web', '10.96.0.20'));
    const { tracker, source: s } = setup();
    await s.start();
    tracker.checkout();
    // The watch breaks, and while it is down the history is compacted past the client's version.
    api.closeWatches();
    api.remove('Service', 'default', 'web');
    api.upsert('Service', svcObj('new', '10.96.0.30'));
    api.compact();
    await wait(() => expect(tracker.pendingServiceChanges).toBe(2));
    const ch = tracker.checkout();
    expect(ch.deletedServicePorts).toEqual(['default/web:dns']);
    expect(ch.changedServicePorts).toEqual(['default/new:dns', 'default/web:dns']);
    expect(api.lists).toBeGreaterThanOrEqual(3);
  });

  it('handles a watch answered with HTTP 410 the same way', async () => {
    api.goneAsHttpStatus = true;
    api.upsert('Service', svcObj('dns', '10.96.0.10'));
    const { tracker, source: s } = setup();
    await s.start();
    tracker.checkout();
    api.closeWatches();
    api.upsert('Service', svcObj('new', '10.96.0.30'));
    api.compact();
    await wait(() => expect(tracker.pendingServiceChanges).toBe(1));
    expect(tracker.checkout().changedServicePorts).toEqual(['default/new:dns']);
  });

  it('retries a failing list with backoff and syncs once the server answers', async () => {
    api.upsert('Service', svcObj('dns', '10.96.0.10'));
    api.failNext(3);
    const { synced, errors, source: s } = setup({ backoffInitialMs: 10 });
    await s.start();
    await wait(() => expect(synced.sort()).toEqual(['endpointslices', 'services']));
    expect(errors.length).toBeGreaterThanOrEqual(1);
    expect(s.services.objects.has('default/dns')).toBe(true);
  });

  it('reports an object the parsers reject and keeps its last good version', async () => {
    api.upsert('Service', svcObj('dns', '10.96.0.10'));
    const { tracker, errors, source: s } = setup();
    await s.start();
    tracker.checkout();
    const bad = svcObj('dns', '10.96.0.10');
    bad.spec.ports[0].port = 70000;
    api.upsert('Service', bad);
    await wait(() => expect(errors).toHaveLength(1));
    expect(String(errors[0])).toContain('spec.ports[0].port');
    expect(tracker.pendingServiceChanges).toBe(0);
    expect(s.services.objects.get('default/dns')?.ports[0].port).toBe(53);
  });
});

describe('FakeApiServer', () => {
  it('sends BOOKMARK events to watches that ask for them', async () => {
    const res = await fetch(
      `${api.url}/api/v1/services?watch=true&resourceVersion=${api.rv}&allowWatchBookmarks=true`,
    );
    const reader = res.body!.getReader();
    api.upsert('Service', svcObj('dns', '10.96.0.10'));
    api.bookmark();
    let text = '';
    while (text.split('\n').length < 3)
      text += new TextDecoder().decode((await reader.read()).value);
    const events = text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(events.map((e) => e.type)).toEqual(['ADDED', 'BOOKMARK']);
    expect(events[1].object.metadata.resourceVersion).toBe(String(api.rv));
    await reader.cancel();
  });
});

describe('KubernetesSource: this node', () => {
  it('reports the Node so health can drain a node being deleted', async () => {
    api.upsert('Node', { metadata: { name: 'n1', namespace: '' }, spec: {} });
    api.upsert('Node', { metadata: { name: 'n2', namespace: '' }, spec: {} });
    const health = new ProxyHealth();
    const seen: string[] = [];
    source = new KubernetesSource({
      kubeConfig: kubeConfig(),
      sink: new ChangeTracker(),
      nodeName: 'n1',
      onNode: (n) => {
        seen.push((n as { name?: string }).name ?? '?');
        health.syncNode(n);
      },
    });
    await source.start();
    expect(seen).toEqual(['n1']);
    expect(health.nodeEligible).toBe(true);
    api.upsert('Node', {
      metadata: { name: 'n2', namespace: '' },
      spec: { taints: [{ key: 'ToBeDeletedByClusterAutoscaler', effect: 'NoSchedule' }] },
    });
    api.upsert('Node', {
      metadata: { name: 'n1', namespace: '' },
      spec: { taints: [{ key: 'ToBeDeletedByClusterAutoscaler', effect: 'NoSchedule' }] },
    });
    await wait(() => expect(health.nodeEligible).toBe(false));
    expect(seen).toEqual(['n1', 'n1']);
    api.upsert('Node', { metadata: { name: 'n1', namespace: '' }, spec: { taints: [] } });
    await wait(() => expect(health.nodeEligible).toBe(true));
    api.remove('Node', '', 'n1');
    await wait(() => expect(health.nodeEligible).toBe(false));
  });
});

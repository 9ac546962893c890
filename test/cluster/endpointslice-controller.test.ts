// The EndpointSlice controller against kube-controller-manager's behaviour: the cases of
// staging/src/k8s.io/endpointslice reconciler_test.go and utils_test.go, ported as facts
// (what goes in, what comes out), not as code.
import { describe, expect, test } from 'vitest';
import {
  expandGenerateName,
  reconcileSlices,
  type SlicePlan,
} from '../../src/cluster/endpointslice-controller.ts';
import type { EndpointSlice, Node, Pod, Service } from '../../src/cluster/types.ts';

function service(spec: Partial<Service['spec']> = {}, labels?: Record<string, string>): Service {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'web', namespace: 'default', uid: 'svc-uid', ...(labels ? { labels } : {}) },
    spec: {
      type: 'ClusterIP',
      clusterIP: '10.96.0.10',
      selector: { app: 'web' },
      ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }],
      ...spec,
    },
  };
}

interface PodOpts {
  ip?: string;
  node?: string;
  ready?: boolean;
  deleting?: boolean;
  phase?: 'Running' | 'Succeeded' | 'Failed' | 'Pending';
  labels?: Record<string, string>;
  ports?: { name?: string; containerPort: number; protocol?: 'TCP' | 'UDP' }[];
  hostname?: string;
  subdomain?: string;
  namespace?: string;
}

function pod(name: string, o: PodOpts = {}): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: o.namespace ?? 'default',
      uid: `uid-${name}`,
      labels: o.labels ?? { app: 'web' },
      ...(o.deleting ? { deletionTimestamp: '2026-12-01T00:00:00Z' } : {}),
    },
    spec: {
      nodeName: o.node ?? 'node1',
      containers: [
        { name: 'c', image: 'echo', ports: o.ports ?? [{ name: 'http', containerPort: 8080 }] },
      ],
      ...(o.hostname ? { hostname: o.hostname } : {}),
      ...(o.subdomain ? { subdomain: o.subdomain } : {}),
    },
    status: {
      phase: o.phase ?? 'Running',
      ...(o.ip === ''
        ? {}
        : { podIP: o.ip ?? '10.244.1.2', podIPs: [{ ip: o.ip ?? '10.244.1.2' }] }),
      conditions: [{ type: 'Ready', status: o.ready === false ? 'False' : 'True' }],
    },
  };
}

const nodes: Node[] = [
  {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: 'node1', labels: { 'topology.kubernetes.io/zone': 'zone-a' } },
  },
  { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node2' } },
];

const ip = (i: number) => `10.244.${1 + Math.floor(i / 250)}.${2 + (i % 250)}`;
const pods = (n: number, o: PodOpts = {}) =>
  Array.from({ length: n }, (_, i) => pod(`p${String(i).padStart(3, '0')}`, { ...o, ip: ip(i) }));

/** Applies a plan the way the store does: created slices get a name. */
function apply(existing: EndpointSlice[], plan: SlicePlan): EndpointSlice[] {
  let n = 0;
  const gone = new Set([...plan.delete, ...plan.update].map((s) => s.metadata.name));
  const kept = existing.filter((s) => !gone.has(s.metadata.name));
  const created = plan.create.map((s) => ({
    ...s,
    metadata: { ...s.metadata, name: `${s.metadata.generateName}${n++}x` },
  }));
  return [...kept, ...plan.update, ...created];
}

const count = (p: SlicePlan) => [p.create.length, p.update.length, p.delete.length];

describe('reconcileSlices', () => {
  test('one ready Pod: one slice with labels, owner, conditions, nodeName, zone, targetRef', () => {
    const plan = reconcileSlices(service({}, { team: 'a' }), [pod('pod-a')], nodes, []);
    expect(count(plan)).toEqual([1, 0, 0]);
    const s = plan.create[0];
    expect(s.metadata).toMatchObject({
      generateName: 'web-',
      namespace: 'default',
      labels: {
        team: 'a',
        'kubernetes.io/service-name': 'web',
        'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io',
      },
      ownerReferences: [
        {
          apiVersion: 'v1',
          kind: 'Service',
          name: 'web',
          uid: 'svc-uid',
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    });
    expect(s.addressType).toBe('IPv4');
    expect(s.ports).toEqual([{ name: 'http', port: 8080, protocol: 'TCP' }]);
    expect(s.endpoints).toEqual([
      {
        addresses: ['10.244.1.2'],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: 'node1',
        zone: 'zone-a',
        targetRef: { kind: 'Pod', namespace: 'default', name: 'pod-a', uid: 'uid-pod-a' },
      },
    ]);
  });

  test('readiness, terminating and publishNotReadyAddresses set the conditions', () => {
    const ps = [
      pod('unready', { ip: '10.244.1.3', ready: false }),
      pod('leaving', { ip: '10.244.1.4', deleting: true }),
      pod('leaving-unready', { ip: '10.244.1.5', deleting: true, ready: false }),
    ];
    const cond = (plan: SlicePlan) =>
      Object.fromEntries(plan.create[0].endpoints.map((e) => [e.targetRef?.name, e.conditions]));
    expect(cond(reconcileSlices(service(), ps, nodes, []))).toEqual({
      unready: { ready: false, serving: false, terminating: false },
      leaving: { ready: false, serving: true, terminating: true },
      'leaving-unready': { ready: false, serving: false, terminating: true },
    });
    expect(
      cond(reconcileSlices(service({ publishNotReadyAddresses: true }), ps, nodes, [])),
    ).toEqual({
      unready: { ready: true, serving: false, terminating: false },
      leaving: { ready: true, serving: true, terminating: true },
      'leaving-unready': { ready: true, serving: false, terminating: true },
    });
  });

  test('Pods without an IP, terminal Pods, other labels and other namespaces are left out', () => {
    const ps = [
      pod('no-ip', { ip: '' }),
      pod('done', { ip: '10.244.1.3', phase: 'Succeeded' }),
      pod('failed', { ip: '10.244.1.4', phase: 'Failed' }),
      pod('other', { ip: '10.244.1.5', labels: { app: 'db' } }),
      pod('elsewhere', { ip: '10.244.1.6', namespace: 'kube-system' }),
      pod('in', { ip: '10.244.1.7' }),
    ];
    const plan = reconcileSlices(service(), ps, nodes, []);
    expect(plan.create.flatMap((s) => s.endpoints.map((e) => e.targetRef?.name))).toEqual(['in']);
  });

  test('a Pod on a Node that does not exist is skipped, unless publishNotReadyAddresses', () => {
    const ps = [pod('lost', { node: 'node9' })];
    expect(reconcileSlices(service(), ps, nodes, []).create[0].endpoints).toEqual([]);
    const pub = reconcileSlices(service({ publishNotReadyAddresses: true }), ps, nodes, []);
    expect(pub.create[0].endpoints.map((e) => e.nodeName)).toEqual(['node9']);
    expect(pub.create[0].endpoints[0].zone).toBeUndefined();
  });

  test('250 Pods: slices of 100, 100 and 50 (maxEndpointsPerSlice)', () => {
    const plan = reconcileSlices(service(), pods(250), nodes, []);
    expect(plan.create.map((s) => s.endpoints.length)).toEqual([100, 100, 50]);
    const small = reconcileSlices(service(), pods(5), nodes, [], { maxEndpointsPerSlice: 2 });
    expect(small.create.map((s) => s.endpoints.length)).toEqual([2, 2, 1]);
  });

  test('nothing matches: one placeholder slice, kept (not re-created) on the next pass', () => {
    const plan = reconcileSlices(service(), [], nodes, []);
    expect(count(plan)).toEqual([1, 0, 0]);
    expect(plan.create[0]).toMatchObject({ endpoints: [], ports: [] });
    const state = apply([], plan);
    expect(count(reconcileSlices(service(), [], nodes, state))).toEqual([0, 0, 0]);
  });

  test('a steady state is no change at all', () => {
    const svc = service();
    const state = apply([], reconcileSlices(svc, pods(150), nodes, []));
    expect(count(reconcileSlices(svc, pods(150), nodes, state))).toEqual([0, 0, 0]);
  });

  test('a Pod gone: its slice is updated in place, not replaced', () => {
    const svc = service();
    const state = apply([], reconcileSlices(svc, pods(3), nodes, []));
    const plan = reconcileSlices(svc, pods(3).slice(1), nodes, state);
    expect(count(plan)).toEqual([0, 1, 0]);
    expect(plan.update[0].metadata.name).toBe(state[0].metadata.name);
    expect(plan.update[0].endpoints.map((e) => e.targetRef?.name)).toEqual(['p001', 'p002']);
  });

  test('a readiness flip updates the endpoint in its slice', () => {
    const svc = service();
    const state = apply([], reconcileSlices(svc, [pod('a')], nodes, []));
    const plan = reconcileSlices(svc, [pod('a', { ready: false })], nodes, state);
    expect(count(plan)).toEqual([0, 1, 0]);
    expect(plan.update[0].endpoints[0].conditions).toEqual({
      ready: false,
      serving: false,
      terminating: false,
    });
  });

  test('new endpoints go to the unchanged slice that ends closest to full', () => {
    const svc = service();
    const a = apply([], reconcileSlices(svc, pods(95), nodes, []))[0];
    const b50 = pods(145).slice(95);
    const b = {
      ...apply([], reconcileSlices(svc, b50, nodes, []))[0],
      metadata: { ...a.metadata, name: 'web-b' },
    };
    const plan = reconcileSlices(svc, pods(149), nodes, [
      { ...a, metadata: { ...a.metadata, name: 'web-a' } },
      b,
    ]);
    expect(count(plan)).toEqual([0, 1, 0]);
    expect(plan.update[0].metadata.name).toBe('web-a');
    expect(plan.update[0].endpoints).toHaveLength(99);
  });

  test('new endpoints fill a slice that is being updated before any other', () => {
    const svc = service();
    const state = apply([], reconcileSlices(svc, pods(150), nodes, []));
    // p000 leaves (slice 1, now 99, is being updated); p150 and p151 arrive: the first tops
    // slice 1 up to 100, the second goes to the unchanged slice closest to full (50 → 51)
    const next = [...pods(152).slice(1)];
    const plan = reconcileSlices(svc, next, nodes, state);
    expect(count(plan)).toEqual([0, 2, 0]);
    const sizes = Object.fromEntries(plan.update.map((s) => [s.metadata.name, s.endpoints.length]));
    expect(sizes).toEqual({ [state[0].metadata.name]: 100, [state[1].metadata.name]: 51 });
  });

  test('named targetPort resolves per Pod: different numbers make different slices', () => {
    const svc = service({
      ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 'http' }],
    });
    const ps = [
      pod('a', { ip: '10.244.1.2', ports: [{ name: 'http', containerPort: 8080 }] }),
      pod('b', { ip: '10.244.1.3', ports: [{ name: 'http', containerPort: 9090 }] }),
      pod('udp-only', {
        ip: '10.244.1.4',
        ports: [{ name: 'http', containerPort: 8080, protocol: 'UDP' }],
      }),
    ];
    const plan = reconcileSlices(svc, ps, nodes, []);
    const byPort = Object.fromEntries(
      plan.create.map((s) => [JSON.stringify(s.ports), s.endpoints.map((e) => e.targetRef?.name)]),
    );
    expect(byPort).toEqual({
      '[{"name":"http","port":8080,"protocol":"TCP"}]': ['a'],
      '[{"name":"http","port":9090,"protocol":"TCP"}]': ['b'],
      '[]': ['udp-only'], // the name matches but not the protocol: no port for this Pod
    });
  });

  test('a port change replaces the group by updating the old slice (create + delete → update)', () => {
    const state = apply([], reconcileSlices(service(), pods(2), nodes, []));
    const moved = service({
      ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 9090 }],
    });
    const plan = reconcileSlices(moved, pods(2), nodes, state);
    expect(count(plan)).toEqual([0, 1, 0]);
    expect(plan.update[0].metadata.name).toBe(state[0].metadata.name);
    expect(plan.update[0].ports).toEqual([{ name: 'http', port: 9090, protocol: 'TCP' }]);
  });

  test('the Service labels are mirrored and follow changes; headless gets its label', () => {
    const state = apply([], reconcileSlices(service({}, { v: '1' }), pods(1), nodes, []));
    const plan = reconcileSlices(service({}, { v: '2' }), pods(1), nodes, state);
    expect(count(plan)).toEqual([0, 1, 0]);
    expect(plan.update[0].metadata.labels?.v).toBe('2');
    const hl = reconcileSlices(service({ clusterIP: 'None' }), pods(1), nodes, []);
    expect(hl.create[0].metadata.labels?.['service.kubernetes.io/headless']).toBe('');
  });

  test('hostname is published when the Pod subdomain names the Service', () => {
    const ps = [
      pod('a', { ip: '10.244.1.2', hostname: 'a', subdomain: 'web' }),
      pod('b', { ip: '10.244.1.3', hostname: 'b', subdomain: 'other' }),
    ];
    const eps = reconcileSlices(service({ clusterIP: 'None' }), ps, nodes, []).create[0].endpoints;
    expect(eps.map((e) => e.hostname)).toEqual(['a', undefined]);
  });

  test('ExternalName and selector-less Services get nothing; hand-written slices are left alone', () => {
    const hand: EndpointSlice = {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        name: 'web-manual',
        namespace: 'default',
        labels: { 'kubernetes.io/service-name': 'web' },
      },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['192.168.1.5'] }],
    };
    expect(
      count(reconcileSlices(service({ selector: undefined }), pods(2), nodes, [hand])),
    ).toEqual([0, 0, 0]);
    expect(
      count(reconcileSlices(service({ type: 'ExternalName' }), pods(2), nodes, [hand])),
    ).toEqual([0, 0, 0]);
    // with a selector, the controller manages its own slices and still ignores the manual one
    const plan = reconcileSlices(service(), pods(1), nodes, [hand]);
    expect(count(plan)).toEqual([1, 0, 0]);
  });

  test('a managed slice owned by an earlier Service of the same name is deleted', () => {
    const state = apply([], reconcileSlices(service(), pods(1), nodes, []));
    const again = service();
    again.metadata.uid = 'new-uid';
    const plan = reconcileSlices(again, pods(1), nodes, state);
    expect(plan.delete.map((s) => s.metadata.name)).toEqual([state[0].metadata.name]);
    expect(plan.create).toHaveLength(1);
  });

  test('generateName expands to the prefix and five characters, avoiding taken names', () => {
    let i = 0;
    const seq = [0, 0, 0, 0, 0, 0.99, 0.99, 0.99, 0.99, 0.99];
    const name = expandGenerateName(
      'web-',
      (n) => n === 'web-bbbbb',
      () => seq[i++],
    );
    expect(name).toBe('web-99999');
  });

  test('a named port served by a sidecar (init container, restartPolicy Always) resolves', () => {
    const svc = service({
      ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 'proxy' }],
    });
    const p = pod('a', { ports: [] });
    p.spec.initContainers = [
      {
        name: 'side',
        image: 'envoy',
        restartPolicy: 'Always',
        ports: [{ name: 'proxy', containerPort: 15001 }],
      },
    ];
    expect(reconcileSlices(svc, [p], nodes, []).create[0].ports).toEqual([
      { name: 'http', port: 15001, protocol: 'TCP' },
    ]);
    p.spec.initContainers[0].restartPolicy = undefined; // a plain init container has exited
    expect(reconcileSlices(svc, [p], nodes, []).create[0].ports).toEqual([]);
  });

  test('a Service being deleted gets no new slices', () => {
    const svc = service();
    svc.metadata.deletionTimestamp = '2026-12-01T00:00:00Z';
    expect(count(reconcileSlices(svc, pods(3), nodes, []))).toEqual([0, 0, 0]);
  });
});

// Admission: real kubectl output is accepted unchanged and defaulted as the apiserver would;
// allocation happens once and conflicts are refused naming file, object and field.
import { beforeAll, describe, expect, test } from 'vitest';
import { parse } from 'yaml';
import { type AdmissionContext, type AdmissionResult, admit } from '../../src/cluster/admission.ts';
import { Allocator } from '../../src/cluster/allocator.ts';
import type { Deployment, KObject, Pod, Service } from '../../src/cluster/types.ts';
import { committedFixture, KUBECTL_CASES, kubectlOutputs } from './kubectl.ts';

function context(
  store = new Map<string, KObject>(),
): AdmissionContext & { store: Map<string, KObject> } {
  const allocator = new Allocator({ serviceCidr: '10.96.0.0/12' });
  return {
    serviceCidr: '10.96.0.0/12',
    nodePortRange: { min: 30000, max: 32767 },
    allocator,
    clusterCidr: '10.244.0.0/16',
    store,
    get: (kind, ns, name) => store.get(`${kind} ${ns}/${name}`),
  };
}

/** admit + store on success, as the lab's store does. */
function apply(ctx: ReturnType<typeof context>, obj: unknown, file = 'f.yaml'): AdmissionResult {
  const r = admit(obj, ctx, file);
  if ('object' in r) {
    const o = r.object;
    ctx.store.set(`${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`, o);
  }
  return r;
}

function ok(r: AdmissionResult): KObject {
  if (!('object' in r)) throw new Error(`refused: ${JSON.stringify(r)}`);
  return r.object;
}

function errors(r: AdmissionResult): string[] {
  if (!('errors' in r)) throw new Error(`not refused: ${JSON.stringify(r)}`);
  return r.errors.map((e) => e.message);
}

const svc = (name: string, spec: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name, ...extra },
  spec,
});

describe('kubectl output', () => {
  let texts: Record<string, string> = {};
  beforeAll(async () => {
    const live = await kubectlOutputs();
    texts = Object.fromEntries(Object.keys(KUBECTL_CASES).map((n) => [n, committedFixture(n)]));
    // Where kubectl is installed the committed copies must still be what it prints.
    if (live) for (const n of Object.keys(KUBECTL_CASES)) expect(texts[n], n).toBe(live[n]);
  }, 60_000);

  test('create service clusterip: clusterIP allocated, ports defaulted, selector kept', () => {
    const o = ok(apply(context(), parse(texts['svc-clusterip']), 'foo.yaml')) as Service;
    expect(o.metadata.namespace).toBe('default');
    expect(o.spec.clusterIP).toMatch(/^10\.(9[6-9]|10[0-9]|11[01])\./);
    expect(o.spec.clusterIPs).toEqual([o.spec.clusterIP]);
    expect(o.spec.ports).toEqual([
      { name: '80-8080', port: 80, protocol: 'TCP', targetPort: 8080 },
    ]);
    expect(o.spec.selector).toEqual({ app: 'foo' });
    expect(o.spec).toMatchObject({
      type: 'ClusterIP',
      sessionAffinity: 'None',
      internalTrafficPolicy: 'Cluster',
      ipFamilies: ['IPv4'],
      ipFamilyPolicy: 'SingleStack',
    });
    expect(o.spec.externalTrafficPolicy).toBeUndefined();
  });

  test('dynamic ClusterIPs come from the upper band: 10.96.1.1 (base 10.96.0.1 + 256) for a /12', () => {
    const ctx = context();
    const a = ok(apply(ctx, parse(texts['svc-clusterip']))) as Service;
    const b = ok(apply(ctx, parse(texts['svc-clusterip-multi']))) as Service;
    expect(a.spec.clusterIP).toBe('10.96.1.1');
    expect(b.spec.clusterIP).toBe('10.96.1.2');
    expect(ctx.allocator.owner('clusterIP', '10.96.1.1')).toBe('Service default/foo');
  });

  test('create service nodeport: nodePort allocated from the upper band, ETP Cluster', () => {
    const o = ok(apply(context(), parse(texts['svc-nodeport']))) as Service;
    expect(o.spec.ports?.[0].nodePort).toBe(30086); // 2768 ports: static band 30000-30085
    expect(o.spec.externalTrafficPolicy).toBe('Cluster');
  });

  test('a requested nodePort is kept, and a second Service asking for it is refused', () => {
    const ctx = context();
    const o = ok(apply(ctx, parse(texts['svc-nodeport-fixed']), 'a.yaml')) as Service;
    expect(o.spec.ports?.[0].nodePort).toBe(30080);
    const again = parse(texts['svc-nodeport-fixed']);
    again.metadata.name = 'other';
    expect(errors(apply(ctx, again, 'b.yaml'))).toEqual([
      'b.yaml: Service default/other: spec.ports[0].nodePort: Invalid value: 30080: failed to allocate port 30080: provided port is already allocated (held by Service default/npf)',
    ]);
    expect(ctx.allocator.owner('nodePort', 30080)).toBe('Service default/npf');
  });

  test('create service loadbalancer: node port allocated, allocateLoadBalancerNodePorts true', () => {
    const o = ok(apply(context(), parse(texts['svc-loadbalancer']))) as Service;
    expect(o.spec.allocateLoadBalancerNodePorts).toBe(true);
    expect(o.spec.ports?.[0].nodePort).toBeGreaterThanOrEqual(30086);
    expect(o.spec.healthCheckNodePort).toBeUndefined();
  });

  test('create service externalname: no clusterIP, no ports, selector ignored', () => {
    const ctx = context();
    const o = ok(apply(ctx, parse(texts['svc-externalname']))) as Service;
    expect(o.spec.clusterIP).toBeUndefined();
    expect(o.spec.externalName).toBe('example.com');
    expect(o.spec.internalTrafficPolicy).toBeUndefined();
    expect(ctx.allocator.toJSON().clusterIPs).toEqual({});
  });

  test('create service clusterip --clusterip=None: headless, nothing allocated', () => {
    const ctx = context();
    const o = ok(apply(ctx, parse(texts['svc-headless']))) as Service;
    expect(o.spec.clusterIP).toBe('None');
    expect(o.spec.clusterIPs).toEqual(['None']);
    expect(ctx.allocator.toJSON().clusterIPs).toEqual({});
  });

  test('create deployment: replicas kept, strategy and pod template defaulted', () => {
    const o = ok(apply(context(), parse(texts['deploy-web']))) as Deployment;
    expect(o.spec.replicas).toBe(3);
    expect(o.spec.strategy).toEqual({
      type: 'RollingUpdate',
      rollingUpdate: { maxSurge: '25%', maxUnavailable: '25%' },
    });
    expect(o.spec.revisionHistoryLimit).toBe(10);
    expect(o.spec.progressDeadlineSeconds).toBe(600);
    const pod = o.spec.template.spec;
    expect(pod).toMatchObject({
      restartPolicy: 'Always',
      terminationGracePeriodSeconds: 30,
      dnsPolicy: 'ClusterFirst',
      schedulerName: 'default-scheduler',
    });
    expect(pod.containers[0]).toMatchObject({
      name: 'nginx',
      imagePullPolicy: 'Always', // no tag
      ports: [{ containerPort: 8080, protocol: 'TCP' }],
      terminationMessagePath: '/dev/termination-log',
    });
  });

  test('kubectl run: the Pod is admitted with its ports and labels', () => {
    const o = ok(apply(context(), parse(texts['pod-run']))) as Pod;
    expect(o.metadata.labels).toEqual({ app: 'web' });
    expect(o.spec.containers[0].ports).toEqual([{ containerPort: 8080, protocol: 'TCP' }]);
    expect(o.spec.terminationGracePeriodSeconds).toBe(30);
  });

  test('create namespace: cluster-scoped, finalizer and phase defaulted', () => {
    const o = ok(apply(context(), parse(texts['ns-demo'])));
    expect(o.metadata.namespace).toBeUndefined();
    expect(o.spec).toEqual({ finalizers: ['kubernetes'] });
    expect(o.status).toEqual({ phase: 'Active' });
  });

  test('admitting the same file twice keeps the allocation (allocation happens once)', () => {
    const ctx = context();
    const first = ok(apply(ctx, parse(texts['svc-nodeport']))) as Service;
    const second = ok(apply(ctx, parse(texts['svc-nodeport']))) as Service;
    expect(second.spec.clusterIP).toBe(first.spec.clusterIP);
    expect(second.spec.ports?.[0].nodePort).toBe(first.spec.ports?.[0].nodePort);
    expect(Object.keys(ctx.allocator.toJSON().nodePorts)).toHaveLength(1);
    expect(Object.keys(ctx.allocator.toJSON().clusterIPs)).toHaveLength(1);
  });
});

describe('Service allocation refusals', () => {
  test('a requested clusterIP outside the service CIDR (a pod address) is refused', () => {
    const ctx = context();
    const r = apply(
      ctx,
      svc('web', { clusterIP: '10.244.2.2', ports: [{ port: 80 }] }),
      'web.yaml',
    );
    expect(errors(r)).toEqual([
      'web.yaml: Service default/web: spec.clusterIP: Invalid value: "10.244.2.2": failed to allocate IP 10.244.2.2: provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/12',
    ]);
    expect(ctx.allocator.toJSON().clusterIPs).toEqual({});
  });

  test('a taken clusterIP is refused naming the holder; the network address never allocated', () => {
    const ctx = context();
    ok(apply(ctx, svc('a', { clusterIP: '10.96.0.10', ports: [{ port: 80 }] })));
    expect(
      errors(apply(ctx, svc('b', { clusterIP: '10.96.0.10', ports: [{ port: 80 }] })))[0],
    ).toContain(
      'spec.clusterIP: Invalid value: "10.96.0.10": failed to allocate IP 10.96.0.10: provided IP is already allocated (held by Service default/a)',
    );
    expect(
      errors(apply(ctx, svc('c', { clusterIP: '10.96.0.0', ports: [{ port: 80 }] })))[0],
    ).toContain('not in the valid range');
  });

  test('a nodePort out of range is refused and nothing stays allocated', () => {
    const ctx = context();
    const r = apply(ctx, svc('np', { type: 'NodePort', ports: [{ port: 80, nodePort: 8080 }] }));
    expect(errors(r)).toEqual([
      'f.yaml: Service default/np: spec.ports[0].nodePort: Invalid value: 8080: failed to allocate port 8080: provided port is not in the valid range. The range of valid ports is 30000-32767',
    ]);
    expect(ctx.allocator.toJSON()).toMatchObject({ clusterIPs: {}, nodePorts: {} });
  });

  test('a refusal by validation rolls the allocation back', () => {
    const ctx = context();
    const r = apply(ctx, svc('bad', { type: 'NodePort', ports: [{ port: 80, protocol: 'ICMP' }] }));
    expect(errors(r)[0]).toContain('spec.ports[0].protocol');
    expect(ctx.allocator.toJSON()).toMatchObject({ clusterIPs: {}, nodePorts: {} });
  });

  test('changing a set clusterIP is refused as immutable', () => {
    const ctx = context();
    ok(apply(ctx, svc('a', { clusterIP: '10.96.0.10', ports: [{ port: 80 }] })));
    expect(
      errors(apply(ctx, svc('a', { clusterIP: '10.96.0.11', ports: [{ port: 80 }] })))[0],
    ).toContain('spec.clusterIP: Invalid value: "10.96.0.11": field is immutable');
    expect(ctx.allocator.owner('clusterIP', '10.96.0.11')).toBeUndefined();
  });

  test('NodePort → ClusterIP releases the node port; → ExternalName releases the IP', () => {
    const ctx = context();
    const np = ok(apply(ctx, svc('a', { type: 'NodePort', ports: [{ port: 80 }] }))) as Service;
    const port = np.spec.ports?.[0].nodePort as number;
    ok(apply(ctx, svc('a', { type: 'ClusterIP', ports: [{ port: 80 }] })));
    expect(ctx.allocator.owner('nodePort', port)).toBeUndefined();
    expect(ctx.allocator.owner('clusterIP', np.spec.clusterIP as string)).toBe('Service default/a');
    ok(apply(ctx, svc('a', { type: 'ExternalName', externalName: 'example.com' })));
    expect(ctx.allocator.toJSON()).toMatchObject({ clusterIPs: {}, nodePorts: {} });
  });

  test('LoadBalancer + ETP Local gets a healthCheckNodePort; NodePort + Local may not set one', () => {
    const ctx = context();
    const lb = ok(
      apply(
        ctx,
        svc('lb', { type: 'LoadBalancer', externalTrafficPolicy: 'Local', ports: [{ port: 80 }] }),
      ),
    ) as Service;
    expect(lb.spec.healthCheckNodePort).toBeGreaterThanOrEqual(30000);
    expect(lb.spec.healthCheckNodePort).not.toBe(lb.spec.ports?.[0].nodePort);
    const np = apply(
      ctx,
      svc('np', {
        type: 'NodePort',
        externalTrafficPolicy: 'Local',
        healthCheckNodePort: 32081,
        ports: [{ port: 80 }],
      }),
    );
    expect(errors(np)[0]).toContain(
      "spec.healthCheckNodePort: Invalid value: 32081: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
    );
  });

  test('one Service may use one nodePort for TCP and UDP; another Service may not', () => {
    const ctx = context();
    const dns = ok(
      apply(
        ctx,
        svc('dns', {
          type: 'NodePort',
          ports: [
            { name: 'udp', port: 53, protocol: 'UDP', nodePort: 30053 },
            { name: 'tcp', port: 53, protocol: 'TCP', nodePort: 30053 },
          ],
        }),
      ),
    ) as Service;
    expect(dns.spec.ports?.map((p) => p.nodePort)).toEqual([30053, 30053]);
    const other = apply(
      ctx,
      svc('o', { type: 'NodePort', ports: [{ port: 53, protocol: 'UDP', nodePort: 30053 }] }),
    );
    expect(errors(other)[0]).toContain('provided port is already allocated');
  });
});

describe('Service validation', () => {
  test('ETP on a ClusterIP Service is refused', () => {
    const r = apply(context(), svc('a', { externalTrafficPolicy: 'Local', ports: [{ port: 80 }] }));
    expect(errors(r)[0]).toBe(
      'f.yaml: Service default/a: spec.externalTrafficPolicy: Invalid value: "Local": may only be set for externally-accessible services',
    );
  });

  test('named targetPort, sessionAffinity ClientIP and publishNotReadyAddresses are accepted', () => {
    const o = ok(
      apply(
        context(),
        svc('a', {
          selector: { app: 'a' },
          sessionAffinity: 'ClientIP',
          publishNotReadyAddresses: true,
          ports: [{ name: 'http', port: 80, targetPort: 'http' }],
        }),
      ),
    ) as Service;
    expect(o.spec.sessionAffinityConfig).toEqual({ clientIP: { timeoutSeconds: 10800 } });
    expect(o.spec.ports?.[0].targetPort).toBe('http');
  });

  test('bad names, selectors and externalIPs name their field', () => {
    const ctx = context();
    expect(errors(apply(ctx, svc('1web', { ports: [{ port: 80 }] })))[0]).toContain(
      'metadata.name: Invalid value',
    );
    expect(
      errors(apply(ctx, svc('a', { selector: { app: 'a b' }, ports: [{ port: 80 }] })))[0],
    ).toContain('spec.selector["app"]');
    expect(
      errors(apply(ctx, svc('a', { externalIPs: ['10.244.1.5'], ports: [{ port: 80 }] })))[0],
    ).toContain(
      'spec.externalIPs[0]: "10.244.1.5" is inside the pod network 10.244.0.0/16: it would take over a Pod\'s address',
    );
    expect(
      errors(apply(ctx, svc('a', { externalIPs: ['127.0.0.1'], ports: [{ port: 80 }] })))[0],
    ).toContain('may not be in the loopback range');
  });

  test('two ClusterIPs (dual-stack) are refused: the lab is IPv4-only', () => {
    const ctx = context();
    const r = apply(
      ctx,
      svc('a', { clusterIPs: ['10.96.0.10', '10.96.0.11'], ports: [{ port: 80 }] }),
    );
    expect(errors(r)[0]).toContain(
      'spec.clusterIPs[1]: Invalid value: "10.96.0.11": may only hold one IP of each family',
    );
    expect(ctx.allocator.toJSON().clusterIPs).toEqual({});
  });

  test('EndpointSlice limits: more than 1000 endpoints, a bad hostname', () => {
    const slice = (endpoints: unknown[]) => ({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 's', labels: { 'kubernetes.io/service-name': 'x' } },
      addressType: 'IPv4',
      endpoints,
    });
    const many = Array.from({ length: 1001 }, (_, i) => ({
      addresses: [`10.244.${i >> 8}.${i & 255 || 1}`],
    }));
    expect(errors(admit(slice(many), context(), 's.yaml'))).toEqual([
      's.yaml: EndpointSlice default/s: endpoints: Too many: 1001: must have at most 1000 items',
    ]);
    const bad = [{ addresses: ['10.244.1.2'], hostname: 'Web_1' }];
    expect(errors(admit(slice(bad), context(), 's.yaml'))[0]).toContain(
      'endpoints[0].hostname: Invalid value',
    );
  });

  test('unknown kinds are one ignored line, not an error', () => {
    const r = admit(
      { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'x' } },
      context(),
      'cm.yaml',
    );
    expect(r).toEqual({ ignored: 'cm.yaml: kind ConfigMap is not served by the lab; ignored' });
  });

  test('hand-written EndpointSlice: loopback endpoint refused with its field', () => {
    const r = admit(
      {
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: { name: 'ext-1', labels: { 'kubernetes.io/service-name': 'ext' } },
        addressType: 'IPv4',
        endpoints: [{ addresses: ['10.244.1.2'] }, { addresses: ['127.0.0.1'] }],
        ports: [{ port: 8080 }],
      },
      context(),
      'ext.yaml',
    );
    expect(errors(r)).toEqual([
      'ext.yaml: EndpointSlice default/ext-1: endpoints[1].addresses[0]: "127.0.0.1" may not be in the loopback range (127.0.0.0/8)',
    ]);
  });
});

describe('Deployment and Pod validation', () => {
  const deploy = (spec: Record<string, unknown>) => ({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web' },
    spec,
  });
  const template = (labels: Record<string, string>, extra: Record<string, unknown> = {}) => ({
    metadata: { labels },
    spec: { containers: [{ name: 'c', image: 'nginx:1.27', ...extra }] },
  });

  test('selector that does not match the template labels is refused', () => {
    const r = apply(
      context(),
      deploy({ selector: { matchLabels: { app: 'web' } }, template: template({ app: 'wbe' }) }),
    );
    expect(errors(r)).toEqual([
      'f.yaml: Deployment default/web: spec.template.metadata.labels: Invalid value: {"app":"wbe"}: `selector` does not match template `labels`',
    ]);
  });

  test('probe defaults and thresholds; a probe with two handlers is refused', () => {
    const ctx = context();
    const o = ok(
      apply(
        ctx,
        deploy({
          selector: { matchLabels: { app: 'web' } },
          template: template({ app: 'web' }, { readinessProbe: { httpGet: { port: 8080 } } }),
        }),
      ),
    ) as Deployment;
    expect(o.spec.template.spec.containers[0].readinessProbe).toEqual({
      httpGet: { port: 8080, path: '/', scheme: 'HTTP' },
      periodSeconds: 10,
      timeoutSeconds: 1,
      successThreshold: 1,
      failureThreshold: 3,
    });
    expect(o.spec.template.spec.containers[0].imagePullPolicy).toBe('IfNotPresent');
    const two = deploy({
      selector: { matchLabels: { app: 'web' } },
      template: template(
        { app: 'web' },
        { readinessProbe: { httpGet: { port: 8080 }, tcpSocket: { port: 8080 } } },
      ),
    });
    expect(errors(apply(ctx, two))[0]).toContain(
      'spec.template.spec.containers[0].readinessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type',
    );
  });

  test('maxSurge and maxUnavailable both 0 are refused; the selector is immutable', () => {
    const ctx = context();
    const zero = deploy({
      selector: { matchLabels: { app: 'web' } },
      strategy: { rollingUpdate: { maxSurge: 0, maxUnavailable: 0 } },
      template: template({ app: 'web' }),
    });
    expect(errors(apply(ctx, zero))[0]).toContain('may not be 0 when `maxSurge` is 0');
    ok(
      apply(
        ctx,
        deploy({
          selector: { matchLabels: { app: 'web' } },
          template: template({ app: 'web', v: '1' }),
        }),
      ),
    );
    const moved = deploy({
      selector: { matchLabels: { v: '1' } },
      template: template({ app: 'web', v: '1' }),
    });
    expect(errors(apply(ctx, moved))[0]).toContain('spec.selector: Invalid value');
  });

  test('preStop sleep longer than the grace period is refused', () => {
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'p' },
      spec: {
        terminationGracePeriodSeconds: 5,
        containers: [{ name: 'c', image: 'x', lifecycle: { preStop: { sleep: { seconds: 10 } } } }],
      },
    };
    expect(errors(apply(context(), pod))[0]).toContain(
      'spec.containers[0].lifecycle.preStop.sleep.seconds: Invalid value: 10: must be greater than 0 and less than terminationGracePeriodSeconds (5)',
    );
  });

  test('duplicate container port names and a missing image are refused', () => {
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'p' },
      spec: {
        containers: [
          { name: 'a', image: 'x', ports: [{ name: 'http', containerPort: 80 }] },
          { name: 'b', ports: [{ name: 'http', containerPort: 81 }] },
        ],
      },
    };
    expect(errors(apply(context(), pod))).toEqual([
      'f.yaml: Pod default/p: spec.containers[1].image: Required value',
      'f.yaml: Pod default/p: spec.containers[1].ports[0].name: Duplicate value: "http"',
    ]);
  });
});

describe('an IPv6 EndpointSlice on an IPv4-only lab', () => {
  const slice = {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: 'web-v6',
      namespace: 'default',
      labels: { 'kubernetes.io/service-name': 'web' },
    },
    addressType: 'IPv6',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: [{ addresses: ['fd00:10:244:2::3'], conditions: { ready: true } }],
  };

  test('is ignored, said in one line (as a PreferDualStack Service keeps no IPv6 ClusterIP)', () => {
    const r = admit(slice, context(), 'web.yaml');
    expect(r).toEqual({
      ignored:
        'web.yaml: EndpointSlice default/web-v6: addressType IPv6 on an IPv4-only lab (its topology has no ipv6 block); ignored',
    });
  });

  test('is stored on a dual-stack lab', () => {
    const ctx = context();
    ctx.allocator = new Allocator({
      serviceCidr: '10.96.0.0/12',
      serviceCidrV6: 'fd00:10:96::/112',
    });
    expect(ok(admit(slice, ctx, 'web.yaml')).metadata.name).toBe('web-v6');
  });
});

// The new-user flow on the pure modules: kubectl's Deployment and Service files admitted,
// Pods made from the template (as the Deployment controller and kubelet would), and the
// EndpointSlice controller filling the Service's slice — or leaving it empty on a selector typo.
import { describe, expect, test } from 'vitest';
import { parse } from 'yaml';
import { admit } from '../../src/cluster/admission.ts';
import { Allocator } from '../../src/cluster/allocator.ts';
import { reconcileSlices } from '../../src/cluster/endpointslice-controller.ts';
import type { Deployment, KObject, Node, Pod, Service } from '../../src/cluster/types.ts';
import { committedFixture } from './kubectl.ts';

const ctx = () => ({
  serviceCidr: '10.96.0.0/16',
  nodePortRange: { min: 30000, max: 32767 },
  allocator: new Allocator({ serviceCidr: '10.96.0.0/16' }),
  get: () => undefined,
});

function admitted<T extends KObject>(text: string, c = ctx()): T {
  const r = admit(parse(text), c, 'x.yaml');
  if (!('object' in r)) throw new Error(JSON.stringify(r));
  return r.object as T;
}

function podsOf(d: Deployment, ready: boolean): Pod[] {
  return Array.from({ length: d.spec.replicas ?? 1 }, (_, i) => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: `web-abc-${i}`,
      namespace: 'default',
      labels: { ...d.spec.template.metadata?.labels },
    },
    spec: { ...structuredClone(d.spec.template.spec), nodeName: i % 2 ? 'node2' : 'node1' },
    status: {
      phase: 'Running',
      podIP: `10.244.${1 + (i % 2)}.${10 + i}`,
      conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }],
    },
  }));
}

const nodes: Node[] = ['node1', 'node2'].map((name) => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name },
}));

describe('kubectl create deployment + service → EndpointSlice', () => {
  const deploy = admitted<Deployment>(committedFixture('deploy-web'));
  // `kubectl create service clusterip web --tcp=80:8080` is the foo fixture with the name web
  const svcText = committedFixture('svc-clusterip').replaceAll('foo', 'web');

  test('the selector matches the template: three endpoints on 8080, ready', () => {
    const svc = admitted<Service>(svcText);
    const plan = reconcileSlices(svc, podsOf(deploy, true), nodes, []);
    expect(plan.create).toHaveLength(1);
    expect(plan.create[0].ports).toEqual([{ name: '80-8080', port: 8080, protocol: 'TCP' }]);
    expect(plan.create[0].endpoints.map((e) => [e.addresses[0], e.conditions?.ready])).toEqual([
      ['10.244.1.10', true],
      ['10.244.2.11', true],
      ['10.244.1.12', true],
    ]);
  });

  test('not ready yet: the endpoints are there, not ready', () => {
    const svc = admitted<Service>(svcText);
    const plan = reconcileSlices(svc, podsOf(deploy, false), nodes, []);
    expect(plan.create[0].endpoints.every((e) => e.conditions?.ready === false)).toBe(true);
  });

  test('a selector typo: the slice is empty (the placeholder), so the Service has no endpoints', () => {
    const typo = admitted<Service>(
      svcText.replace('  selector:\n    app: web', '  selector:\n    app: wbe'),
    );
    const plan = reconcileSlices(typo, podsOf(deploy, true), nodes, []);
    expect(plan.create).toHaveLength(1);
    expect(plan.create[0].endpoints).toEqual([]);
    expect(plan.create[0].ports).toEqual([]);
  });
});

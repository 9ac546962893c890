// The lab control plane at scale (offline: no kubelets): a reconcile pass must not list the
// store once per Service. It did (the EndpointSlice controller listed every slice and Pod of
// the namespace for each Service, and each list re-sorted them), so `bench:e2e` growing the lab
// to 10k Services waited more than a quarter of an hour for the view.
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { LabControlPlane } from '../../src/lab/control-plane.ts';
import { parseTopology } from '../../src/lab/topology.ts';

const DEFAULT = join(import.meta.dirname, '../../lab/topology.yaml');

/** n selector-less Services with hand-written slices and n selecting the topology's Pods. */
function manifests(n: number): string {
  const items: unknown[] = [];
  for (let i = 0; i < n; i++) {
    const ip = `10.96.${100 + Math.floor(i / 250)}.${1 + (i % 250)}`;
    const port = [{ protocol: 'TCP', port: 80, targetPort: 8080 }];
    items.push(
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: `h${i}` },
        spec: { clusterIP: ip, ports: port },
      },
      {
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: { name: `h${i}`, labels: { 'kubernetes.io/service-name': `h${i}` } },
        addressType: 'IPv4',
        ports: [{ protocol: 'TCP', port: 8080 }],
        endpoints: [{ addresses: ['10.244.2.2'] }],
      },
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: `s${i}` },
        spec: { selector: { app: `nothing-${i}` }, ports: port },
      },
    );
  }
  return JSON.stringify({ apiVersion: 'v1', kind: 'List', items });
}

/** store.list calls of one reconcile pass after the manifests are applied, and the view's size. */
function listsPerPass(n: number): { lists: number; services: number } {
  const dir = mkdtempSync(join(tmpdir(), 'kubetun-cp-scale-'));
  mkdirSync(join(dir, 'manifests'));
  writeFileSync(join(dir, 'manifests', 'many.json'), manifests(n));
  const file = join(dir, 'topology.yaml');
  writeFileSync(
    file,
    readFileSync(DEFAULT, 'utf8').replace(/^manifests: .*$/m, 'manifests: manifests'),
  );
  const cp = new LabControlPlane(parseTopology(readFileSync(file, 'utf8'), file), {
    viewDir: join(dir, 'view'),
    kubelets: false,
  });
  cp.startOffline();
  const list = vi.spyOn(cp.store, 'list');
  cp.reconcile();
  const lists = list.mock.calls.length;
  list.mockRestore();
  const view = JSON.parse(readFileSync(join(dir, 'view', 'cluster.json'), 'utf8')) as {
    items: { kind: string }[];
  };
  return { lists, services: view.items.filter((o) => o.kind === 'Service').length };
}

describe('lab control plane at scale', () => {
  it('lists the store as often in a pass over 200 Services as over 5', () => {
    const few = listsPerPass(5);
    const many = listsPerPass(200);
    expect(many.services - few.services).toBe(2 * 195);
    expect(many.lists).toBe(few.lists);
  });
});

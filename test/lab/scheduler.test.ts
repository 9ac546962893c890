// The lab control plane's scheduler (offline: no kubelets, no namespaces): a Deployment's
// replicas are spread over the nodes even when the nodes already carry different numbers of Pods.
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Pod } from '../../src/cluster/types.ts';
import { LabControlPlane } from '../../src/lab/control-plane.ts';
import { parseTopology } from '../../src/lab/topology.ts';

const DEFAULT = join(import.meta.dirname, '../../lab/topology.yaml');

const deployment = (name: string, replicas: number) => `apiVersion: apps/v1
kind: Deployment
metadata: { name: ${name} }
spec:
  replicas: ${replicas}
  selector: { matchLabels: { app: ${name} } }
  template:
    metadata: { labels: { app: ${name} } }
    spec:
      containers: [{ name: echo, image: kubetun/echo, ports: [{ containerPort: 8080 }] }]
`;

/** The nodes the Pods of app landed on, when node1 has no named pod and node2 has two. */
function placed(manifests: string): Map<string, string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'kubetun-sched-'));
  mkdirSync(join(dir, 'manifests'));
  writeFileSync(join(dir, 'manifests', 'apps.yaml'), manifests);
  const text = readFileSync(DEFAULT, 'utf8')
    .replace(/^ {6}- \{ name: pod-a,.*\n/m, '')
    .replace(/^ {6}- \{ name: pod-b,.*\n/m, '')
    .replace(/^ {4}pods:\n(?= {2}- name: node2)/m, '    pods: []\n');
  const file = join(dir, 'topology.yaml');
  writeFileSync(file, text);
  const cp = new LabControlPlane(parseTopology(text, file), {
    viewDir: join(dir, 'view'),
    storeDir: join(dir, 'store'),
    kubelets: false,
  });
  cp.startOffline();
  const nodes = new Map<string, string[]>();
  for (const p of cp.store.list<Pod>('Pod')) {
    const app = p.metadata.ownerReferences ? p.metadata.labels!.app! : p.metadata.name;
    nodes.set(app, [...(nodes.get(app) ?? []), p.spec.nodeName ?? '-'].sort());
  }
  return nodes;
}

describe('lab scheduler', () => {
  it('spreads a Deployment over the nodes though node2 already has more Pods', () => {
    const got = placed(deployment('two', 2));
    expect(got.get('pod-c')).toEqual(['node2']); // the topology's own, bound by name
    expect(got.get('two')).toEqual(['node1', 'node2']);
  });

  it('spreads each of two Deployments placed in the same pass, filling the emptier node', () => {
    const got = placed(`${deployment('x', 3)}---\n${deployment('y', 2)}`);
    expect(got.get('x')).toEqual(['node1', 'node1', 'node2']);
    expect(got.get('y')).toEqual(['node1', 'node2']);
  });
});

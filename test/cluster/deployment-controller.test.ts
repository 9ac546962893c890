// Deployment → ReplicaSet → Pods on the store, with a stand-in kubelet that marks Pods ready or
// removes terminating ones when the test says so: replicas, the pod-template-hash, the rolling
// update's bounds (maxSurge 25% up, maxUnavailable 25% down, as Deployments default), scale, and
// the cascade on delete.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  HASH_LABEL,
  RESTARTED_AT_ANNOTATION,
  reconcileDeployments,
  rollingBounds,
} from '../../src/cluster/deployment-controller.ts';
import { parseObjects } from '../../src/cluster/files.ts';
import { Store } from '../../src/cluster/store.ts';
import type { Deployment, Pod, ReplicaSet } from '../../src/cluster/types.ts';

const FILE = join(import.meta.dirname, '../fixtures/kubectl/deploy-web.yaml');
const deploy = parseObjects(readFileSync(FILE, 'utf8'), FILE)[0]!.object as Deployment;

function setup(replicas = 3) {
  const s = new Store({ serviceCidr: '10.96.0.0/16' });
  const r = s.apply({ ...deploy, spec: { ...deploy.spec, replicas } }, FILE);
  if (!('object' in r)) throw new Error(JSON.stringify(r));
  return s;
}

const live = (s: Store) => s.list<Pod>('Pod').filter((p) => !p.metadata.deletionTimestamp);
const ready = (p: Pod) =>
  (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');

/** The kubelet's part: every live Pod ready, every terminating Pod gone. */
function kubelet(s: Store, opts: { ready?: boolean; removeTerminating?: boolean } = {}) {
  for (const p of s.list<Pod>('Pod')) {
    if (p.metadata.deletionTimestamp) {
      if (opts.removeTerminating !== false) s.remove('Pod', p.metadata.namespace, p.metadata.name);
    } else if (opts.ready !== false && !ready(p)) {
      s.updateStatus('Pod', p.metadata.namespace, p.metadata.name, {
        phase: 'Running',
        conditions: [{ type: 'Ready', status: 'True' }],
      });
    }
  }
}

function converge(s: Store, rounds = 20) {
  for (let i = 0; i < rounds; i++) {
    reconcileDeployments(s);
    kubelet(s);
  }
  reconcileDeployments(s);
}

describe('deployment controller', () => {
  it('rounds maxSurge up and maxUnavailable down, and never lets both be 0', () => {
    const d = (replicas: number, ru?: object) =>
      ({
        ...deploy,
        spec: { ...deploy.spec, replicas, strategy: ru ? { rollingUpdate: ru } : {} },
      }) as Deployment;
    expect(rollingBounds(d(2))).toEqual({ surge: 1, unavailable: 0 });
    expect(rollingBounds(d(4))).toEqual({ surge: 1, unavailable: 1 });
    expect(rollingBounds(d(10))).toEqual({ surge: 3, unavailable: 2 });
    expect(rollingBounds(d(3, { maxSurge: 0, maxUnavailable: 0 }))).toEqual({
      surge: 0,
      unavailable: 1,
    });
  });

  it('makes one ReplicaSet named by the template hash and its Pods, owned all the way down', () => {
    const s = setup(3);
    converge(s);
    const [rs] = s.list<ReplicaSet>('ReplicaSet');
    const hash = rs!.metadata.labels![HASH_LABEL]!;
    expect(rs!.metadata.name).toBe(`web-${hash}`);
    expect(rs!.spec.selector.matchLabels).toEqual({ app: 'web', [HASH_LABEL]: hash });
    const pods = live(s);
    expect(pods).toHaveLength(3);
    for (const p of pods) {
      expect(p.metadata.name).toMatch(new RegExp(`^web-${hash}-[a-z0-9]{5}$`));
      expect(p.metadata.ownerReferences![0]!.uid).toBe(rs!.metadata.uid);
      expect(p.metadata.labels).toEqual({ app: 'web', [HASH_LABEL]: hash });
    }
    const d = s.get('Deployment', 'default', 'web') as Deployment;
    expect(d.status).toMatchObject({ replicas: 3, readyReplicas: 3, updatedReplicas: 3 });
  });

  it('rolls a restart over within the bounds: never below replicas - maxUnavailable ready, never above replicas + maxSurge', () => {
    const s = setup(4); // surge 1, unavailable 1
    converge(s);
    const before = new Set(live(s).map((p) => p.metadata.name));
    const d = s.get('Deployment', 'default', 'web') as Deployment;
    const tpl = d.spec.template;
    const restarted = {
      ...tpl,
      metadata: { ...tpl.metadata, annotations: { [RESTARTED_AT_ANNOTATION]: 'now' } },
    };
    expect('object' in s.apply({ ...d, spec: { ...d.spec, template: restarted } }, 'restart')).toBe(
      true,
    );
    let steps = 0;
    for (; steps < 40; steps++) {
      reconcileDeployments(s);
      const pods = live(s);
      expect(pods.length).toBeLessThanOrEqual(5);
      expect(pods.filter(ready).length).toBeGreaterThanOrEqual(3);
      if (pods.length === 4 && pods.every((p) => ready(p) && !before.has(p.metadata.name))) break;
      // the kubelet: one new Pod becomes ready per step, terminating Pods finish
      const pending = pods.find((p) => !ready(p));
      if (pending)
        s.updateStatus('Pod', 'default', pending.metadata.name, {
          phase: 'Running',
          conditions: [{ type: 'Ready', status: 'True' }],
        });
      kubelet(s, { ready: false });
    }
    expect(steps).toBeLessThan(40);
    const sets = s.list<ReplicaSet>('ReplicaSet');
    expect(sets.map((r) => r.spec.replicas).sort()).toEqual([0, 4]);
  });

  it('waits for a new Pod to be ready before taking an old one away (replicas 2: surge 1, unavailable 0)', () => {
    const s = setup(2);
    converge(s);
    const d = s.get('Deployment', 'default', 'web') as Deployment;
    const tpl = d.spec.template;
    const restarted = {
      ...tpl,
      metadata: { ...tpl.metadata, annotations: { [RESTARTED_AT_ANNOTATION]: 'now' } },
    };
    s.apply({ ...d, spec: { ...d.spec, template: restarted } }, 'restart');
    for (let i = 0; i < 5; i++) reconcileDeployments(s); // nothing becomes ready
    expect(live(s)).toHaveLength(3);
    expect(s.list<Pod>('Pod').filter((p) => p.metadata.deletionTimestamp)).toEqual([]);
  });

  it('scales up and down; the surplus Pods are deleted gracefully; deleting the Deployment takes everything', () => {
    const s = setup(2);
    converge(s);
    const d = s.get('Deployment', 'default', 'web') as Deployment;
    s.apply({ ...d, spec: { ...d.spec, replicas: 5 } }, 'scale');
    converge(s);
    expect(live(s)).toHaveLength(5);
    expect(s.list<ReplicaSet>('ReplicaSet')).toHaveLength(1);
    s.apply({ ...d, spec: { ...d.spec, replicas: 1 } }, 'scale');
    reconcileDeployments(s);
    expect(live(s)).toHaveLength(1);
    expect(s.list<Pod>('Pod').filter((p) => p.metadata.deletionTimestamp)).toHaveLength(4);
    s.delete('Deployment', 'default', 'web');
    expect(s.list('ReplicaSet')).toEqual([]);
    expect(live(s)).toEqual([]);
  });
});

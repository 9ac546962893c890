// The lab's object store: admission on every write (real kubectl output defaulted and
// allocated, conflicts refused naming object and field), allocation persisted across a
// restart, graceful Pod deletion, owner-reference cascade, and the view directory the data
// planes read.
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseObjects } from '../../src/cluster/files.ts';
import { Store, writeView } from '../../src/cluster/store.ts';
import type { KObject, Pod, Service } from '../../src/cluster/types.ts';
import { loadManifests } from '../../src/manifests/index.ts';

const FIXTURES = join(import.meta.dirname, '../fixtures/kubectl');
const fixture = (name: string) => {
  const file = join(FIXTURES, `${name}.yaml`);
  return { file, object: parseObjects(readFileSync(file, 'utf8'), file)[0]!.object };
};
const opts = { serviceCidr: '10.96.0.0/16', clusterCidr: '10.244.0.0/16' };

function created(r: ReturnType<Store['apply']>): KObject {
  if (!('object' in r)) throw new Error(`not admitted: ${JSON.stringify(r)}`);
  return r.object;
}

describe('lab store', () => {
  it('admits kubectl create output unchanged, allocating the ClusterIP and NodePort', () => {
    const s = new Store(opts);
    const np = fixture('svc-nodeport');
    const svc = created(s.apply(np.object, np.file)) as Service;
    expect(svc.spec.clusterIP).toMatch(/^10\.96\.\d+\.\d+$/);
    expect(svc.spec.ports![0]!.nodePort).toBeGreaterThanOrEqual(30000);
    expect(svc.metadata.uid).toBeTruthy();
    expect(svc.metadata.resourceVersion).toBe('1');
    expect(s.apply(np.object, np.file)).toMatchObject({ action: 'unchanged' });
  });

  it('refuses a taken ClusterIP naming the file, the object and the field, and keeps the first', () => {
    const s = new Store(opts);
    const a = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'a' },
      spec: { clusterIP: '10.96.0.10', ports: [{ port: 80 }] },
    };
    const b = { ...a, metadata: { name: 'b' } };
    created(s.apply(a, 'a.yaml'));
    const r = s.apply(b, 'b.yaml');
    expect('errors' in r && r.errors[0]!.message).toMatch(
      /^b\.yaml: Service default\/b: spec\.clusterIP/,
    );
    expect(s.get('Service', 'default', 'b')).toBeUndefined();
    expect((s.get('Service', 'default', 'a') as Service).spec.clusterIP).toBe('10.96.0.10');
  });

  it('keeps allocations across a restart: the same Service keeps its IP, a new one gets another', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kubetun-store-'));
    const one = new Store({ ...opts, dir });
    const ip = (created(one.apply(fixture('svc-clusterip').object, 'x')) as Service).spec.clusterIP;
    one.save();
    const two = new Store({ ...opts, dir });
    expect((two.get('Service', 'default', 'foo') as Service).spec.clusterIP).toBe(ip);
    const again = created(two.apply(fixture('svc-clusterip').object, 'x'));
    expect((again as Service).spec.clusterIP).toBe(ip);
    const other = created(two.apply(fixture('svc-clusterip-multi').object, 'y')) as Service;
    expect(other.spec.clusterIP).not.toBe(ip);
  });

  it('deletes a Pod gracefully: Terminating with its grace period until removed; a second delete only shortens it', () => {
    const s = new Store(opts);
    const pod = created(s.apply(fixture('pod-run').object, 'pod.yaml')) as Pod;
    expect(pod.spec.terminationGracePeriodSeconds).toBe(30);
    s.delete('Pod', 'default', 'pod-a');
    const t = s.get('Pod', 'default', 'pod-a')!;
    expect(t.metadata.deletionTimestamp).toBeTruthy();
    expect(t.metadata.deletionGracePeriodSeconds).toBe(30);
    s.delete('Pod', 'default', 'pod-a', 60);
    expect(s.get('Pod', 'default', 'pod-a')!.metadata.deletionGracePeriodSeconds).toBe(30);
    s.delete('Pod', 'default', 'pod-a', 0);
    expect(s.get('Pod', 'default', 'pod-a')!.metadata.deletionGracePeriodSeconds).toBe(0);
    s.remove('Pod', 'default', 'pod-a');
    expect(s.get('Pod', 'default', 'pod-a')).toBeUndefined();
  });

  it('deletes what an object owns (ownerReferences), and expands generateName', () => {
    const s = new Store(opts);
    const svc = created(s.apply(fixture('svc-clusterip').object, 'x'));
    const slice = created(
      s.apply(
        {
          apiVersion: 'discovery.k8s.io/v1',
          kind: 'EndpointSlice',
          metadata: {
            generateName: 'foo-',
            labels: { 'kubernetes.io/service-name': 'foo' },
            ownerReferences: [
              {
                apiVersion: 'v1',
                kind: 'Service',
                name: 'foo',
                uid: svc.metadata.uid!,
                controller: true,
              },
            ],
          },
          addressType: 'IPv4',
          endpoints: [],
        },
        'controller',
      ),
    );
    expect(slice.metadata.name).toMatch(/^foo-[bcdfghjklmnpqrstvwxz2456789]{5}$/);
    s.delete('Service', 'default', 'foo');
    expect(s.list('EndpointSlice')).toEqual([]);
  });

  it('lists by kind and namespace in name order, and every write shows in the next list', () => {
    const s = new Store(opts);
    const svc = (name: string, namespace: string) => ({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace },
      spec: { ports: [{ port: 80 }] },
    });
    const names = (l: KObject[]) => l.map((o) => `${o.metadata.namespace}/${o.metadata.name}`);
    created(s.apply(svc('b', 'x'), 'f'));
    created(s.apply(svc('a', 'y'), 'f'));
    expect(names(s.list('Service'))).toEqual(['x/b', 'y/a']);
    expect(names(s.list('Service', 'y'))).toEqual(['y/a']);
    // a list answer is the caller's: changing it changes nothing in the store
    s.list('Service').pop();
    expect(names(s.list('Service'))).toEqual(['x/b', 'y/a']);
    created(s.apply(svc('a', 'x'), 'f'));
    expect(names(s.list('Service'))).toEqual(['x/a', 'x/b', 'y/a']);
    expect(names(s.list('Service', 'x'))).toEqual(['x/a', 'x/b']);
    s.delete('Service', 'x', 'b');
    expect(names(s.list('Service', 'x'))).toEqual(['x/a']);
    s.updateStatus('Service', 'y', 'a', { loadBalancer: {} });
    expect(s.list('Service', 'y')[0]!.status).toEqual({ loadBalancer: {} });
    expect(s.list('Pod')).toEqual([]);
  });

  it('writes the view: Namespaces, Services and EndpointSlices only, the agents loader reads it, rewritten only on change', () => {
    const s = new Store(opts);
    created(s.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'default' } }, 'ns'));
    created(s.apply(fixture('svc-nodeport').object, 'np'));
    created(s.apply(fixture('pod-run').object, 'pod'));
    const dir = mkdtempSync(join(tmpdir(), 'kubetun-view-'));
    const last = { text: '' };
    expect(writeView(s, dir, last)).toBe(true);
    expect(writeView(s, dir, last)).toBe(false);
    expect(readdirSync(dir)).toEqual(['cluster.json']);
    const view = JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')) as {
      items: KObject[];
    };
    expect(view.items.map((o) => o.kind)).toEqual(['Namespace', 'Service']);
    const state = loadManifests(dir);
    expect(state.services.map((x) => x.name)).toEqual(['np']);
  });
});

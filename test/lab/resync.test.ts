// The control plane's resync (POST /resync), offline: the addon manager's pass on demand, so
// `exercise reset` can put the store back as the files say — an object deleted by hand comes
// back, one `lab apply` added goes (prune), and without force an unchanged directory is left
// alone (what the file watch would do).
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Service } from '../../src/cluster/types.ts';
import { LabControlPlane } from '../../src/lab/control-plane.ts';
import { loadTopology } from '../../src/lab/topology.ts';

const ROOT = join(import.meta.dirname, '../..');
let dir: string;
let cp: LabControlPlane;

const names = () =>
  cp.store
    .list<Service>('Service')
    .map((s) => `${s.metadata.namespace}/${s.metadata.name}`)
    .sort();

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'kt-resync-'));
  cpSync(join(ROOT, 'lab/manifests'), join(dir, 'manifests'), { recursive: true });
  const t = { ...loadTopology(join(ROOT, 'lab/topology.yaml')), manifests: join(dir, 'manifests') };
  cp = new LabControlPlane(t, { viewDir: join(dir, 'view'), kubelets: false });
  cp.startOffline();
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('resync', () => {
  it('force brings back a Service deleted by hand; prune deletes one only lab apply made', () => {
    const before = names();
    expect(before).toContain('default/web');
    cp.store.delete('Service', 'default', 'web');
    const extra = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'web-direct', namespace: 'default' },
      // the shortcut: web's own ClusterIP, freed by the delete, on a Service without a selector
      spec: { clusterIP: '10.96.0.10', ports: [{ port: 80, targetPort: 8080 }] },
    };
    expect('object' in cp.store.apply(extra, 'kubetun lab')).toBe(true);
    expect(cp.resync(false, false).removed).toEqual([]);
    expect(names()).not.toContain('default/web'); // unchanged files: the watch does nothing
    expect(names()).toContain('default/web-direct');
    expect(cp.resync(true, false).removed).toEqual([]);
    expect(names()).not.toContain('default/web'); // its address is taken: admission refuses it
    expect(cp.resync(true, true).removed).toEqual(['Service default/web-direct']);
    expect(names()).toEqual(before);
    const web = cp.store.get('Service', 'default', 'web') as Service;
    expect(web.spec.clusterIP).toBe('10.96.0.10');
  });

  it('without force, a changed file is applied now and the view written', () => {
    writeFileSync(
      join(dir, 'manifests', 'orders.yaml'),
      'apiVersion: v1\nkind: Service\nmetadata: { name: orders, namespace: default }\nspec:\n  selector: { app: web }\n  ports: [{ port: 80, targetPort: http }]\n',
    );
    cp.resync(false, false);
    expect(names()).toContain('default/orders');
  });

  it('a file renamed to another Service: the old one is pruned before the new one takes its ClusterIP', () => {
    rmSync(join(dir, 'manifests', 'web.yaml'));
    writeFileSync(
      join(dir, 'manifests', 'web-direct.yaml'),
      'apiVersion: v1\nkind: Service\nmetadata: { name: web-direct }\nspec:\n  clusterIP: 10.96.0.10\n  ports: [{ port: 80, targetPort: 8080 }]\n',
    );
    cp.resync(false, false);
    expect(names()).not.toContain('default/web');
    const d = cp.store.get('Service', 'default', 'web-direct') as Service;
    expect(d?.spec.clusterIP).toBe('10.96.0.10');
  });
});

import { mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../src/control/clock.ts';
import { ManifestDirSource } from '../../src/control/source-dir.ts';
import { ChangeTracker } from '../../src/control/tracker.ts';
import { ManifestError } from '../../src/manifests/errors.ts';

function service(name: string, ip: string, port = 53): string {
  return `apiVersion: v1
kind: Service
metadata: {name: ${name}, namespace: kube-system}
spec:
  clusterIP: ${ip}
  ports: [{name: dns, protocol: UDP, port: ${port}, targetPort: 53}]
`;
}

function endpointSlice(name: string, service: string, ips: string[]): string {
  return `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ${name}
  namespace: kube-system
  labels: {kubernetes.io/service-name: ${service}}
addressType: IPv4
ports: [{name: dns, protocol: UDP, port: 53}]
endpoints:
${ips.map((ip) => `- addresses: [${ip}]\n  conditions: {ready: true}`).join('\n')}
`;
}

let dir: string;
let source: ManifestDirSource | undefined;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'kubetun-control-'));
});
afterEach(() => {
  source?.stop();
  source = undefined;
  rmSync(dir, { recursive: true, force: true });
});

function endpointsOf(t: ChangeTracker, spn: string): string[] {
  return (t.resolve(spn)?.endpoints ?? []).map((e) => `${e.ip}:${e.port}`);
}

describe('ManifestDirSource', () => {
  it('loads the directory, reports synced once, and feeds the trackers', () => {
    writeFileSync(
      join(dir, 'dns.yaml'),
      `${service('dns', '10.96.0.10')}---\n${endpointSlice('dns-1', 'dns', ['10.244.1.5'])}`,
    );
    const t = new ChangeTracker();
    const synced = vi.fn();
    const changed = vi.fn();
    source = new ManifestDirSource({
      dir,
      sink: t,
      onSynced: synced,
      onChange: changed,
      watch: false,
      pollIntervalMs: 0,
    });
    expect(source.start()).toBe(true);
    expect(synced).toHaveBeenCalledTimes(1);
    expect(changed).toHaveBeenCalledTimes(1);
    expect(t.checkout().changedServicePorts).toEqual(['kube-system/dns:dns']);
    expect(endpointsOf(t, 'kube-system/dns:dns')).toEqual(['10.244.1.5:53']);
    // Reloading the same files is no event at all.
    expect(source.reload()).toBe(true);
    expect(synced).toHaveBeenCalledTimes(1);
    expect(t.pendingChanges()).toBe(0);
    expect(t.serviceChangesTotal + t.endpointChangesTotal).toBe(2);
  });

  it('an invalid object is refused alone: the rest of the directory moves on (issue 18)', () => {
    writeFileSync(
      join(dir, 'dns.yaml'),
      `${service('dns', '10.96.0.10')}---\n${endpointSlice('dns-1', 'dns', ['10.244.1.5'])}`,
    );
    const t = new ChangeTracker();
    const errors: Error[] = [];
    source = new ManifestDirSource({
      dir,
      sink: t,
      onError: (e) => errors.push(e),
      watch: false,
      pollIntervalMs: 0,
    });
    source.start();
    t.checkout();
    // A good edit and a bad file together: the edit goes through, the bad object is refused.
    writeFileSync(
      join(dir, 'dns.yaml'),
      `${service('dns', '10.96.0.10')}---\n${endpointSlice('dns-1', 'dns', ['10.244.1.6'])}`,
    );
    writeFileSync(join(dir, 'web.yaml'), service('web', '10.96.0.20', 70000));
    expect(source.reload()).toBe(false);
    expect(errors).toHaveLength(1);
    const err = errors[0] as ManifestError;
    expect(err).toBeInstanceOf(ManifestError);
    expect(err.file).toBe(join(dir, 'web.yaml'));
    expect(err.object).toBe('Service kube-system/web');
    expect(err.field).toBe('spec.ports[0].port');
    expect(source.lastError).toBe(err);
    expect(t.checkout().changedServicePorts).toEqual(['kube-system/dns:dns']);
    expect(endpointsOf(t, 'kube-system/dns:dns')).toEqual(['10.244.1.6:53']);
    expect(source.services.has('kube-system/web')).toBe(false);
    // Fixed: the new service goes through.
    writeFileSync(join(dir, 'web.yaml'), service('web', '10.96.0.20', 80));
    expect(source.reload()).toBe(true);
    expect(source.lastError).toBeUndefined();
    expect(t.checkout().changedServicePorts).toEqual(['kube-system/web:dns']);
  });

  it('a refused edit keeps that object at its last good version, not at nothing', () => {
    writeFileSync(join(dir, 'dns.yaml'), service('dns', '10.96.0.10'));
    writeFileSync(join(dir, 'web.yaml'), service('web', '10.96.0.20', 80));
    const t = new ChangeTracker();
    const errors: string[] = [];
    source = new ManifestDirSource({
      dir,
      sink: t,
      onError: (e) => errors.push(e.message),
      watch: false,
      pollIntervalMs: 0,
      parse: { serviceCidr: '10.96.0.0/16', clusterCidr: '10.244.0.0/16' },
    });
    expect(source.start()).toBe(true);
    t.checkout();
    // The probe's break: a ClusterIP that is pod-c's address. Refused; web keeps 10.96.0.20.
    writeFileSync(join(dir, 'web.yaml'), service('web', '10.244.2.2', 80));
    writeFileSync(join(dir, 'dns.yaml'), service('dns', '10.96.0.10', 5353));
    expect(source.reload()).toBe(false);
    expect(errors).toEqual([
      `${join(dir, 'web.yaml')}: Service kube-system/web: spec.clusterIP: Invalid value: "10.244.2.2": provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/16`,
    ]);
    expect(source.services.get('kube-system/web')?.clusterIPs).toEqual(['10.96.0.20']);
    expect(source.services.get('kube-system/dns')?.ports[0].port).toBe(5353);
    expect(t.checkout().changedServicePorts).toEqual(['kube-system/dns:dns']);
    // A file that is no longer YAML keeps all of its objects too.
    writeFileSync(join(dir, 'web.yaml'), 'kind: [unclosed');
    expect(source.reload()).toBe(false);
    expect(source.services.get('kube-system/web')?.clusterIPs).toEqual(['10.96.0.20']);
    expect(t.pendingChanges()).toBe(0);
  });

  it('a new object colliding with a kept one is the one refused', () => {
    writeFileSync(join(dir, 'a.yaml'), service('a', '10.96.0.10'));
    const t = new ChangeTracker();
    source = new ManifestDirSource({ dir, sink: t, watch: false, pollIntervalMs: 0 });
    source.start();
    // "0.yaml" sorts first, yet the Service that already holds the IP keeps it.
    writeFileSync(join(dir, '0.yaml'), service('b', '10.96.0.10'));
    expect(source.reload()).toBe(false);
    expect(source.lastError?.message).toContain(
      'Service kube-system/b: spec.clusterIP: clusterIP 10.96.0.10 is already used by the Service in',
    );
    expect([...source.services.keys()]).toEqual(['kube-system/a']);
  });

  it('kinds kubetun does not read: one line per file, reported once', () => {
    const deploy = 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n';
    const cm = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n';
    writeFileSync(
      join(dir, 'web.yaml'),
      `${deploy}---\n${cm}---\n${service('web', '10.96.0.20', 80)}`,
    );
    const lines: string[] = [];
    const errors: Error[] = [];
    source = new ManifestDirSource({
      dir,
      sink: new ChangeTracker(),
      onIgnored: (l) => lines.push(l),
      onError: (e) => errors.push(e),
      watch: false,
      pollIntervalMs: 0,
    });
    expect(source.start()).toBe(true);
    source.reload();
    expect(lines).toEqual([
      `${join(dir, 'web.yaml')}: ignored kind Deployment, ConfigMap (kubetun reads Service and EndpointSlice)`,
    ]);
    expect(errors).toEqual([]);
    expect(source.services.has('kube-system/web')).toBe(true);
  });

  it('a first load that fails reports no sync until the directory is valid', () => {
    writeFileSync(join(dir, 'bad.yaml'), 'kind: [unclosed');
    const synced = vi.fn();
    const t = new ChangeTracker();
    source = new ManifestDirSource({
      dir,
      sink: t,
      onSynced: synced,
      watch: false,
      pollIntervalMs: 0,
    });
    expect(source.start()).toBe(false);
    expect(synced).not.toHaveBeenCalled();
    writeFileSync(join(dir, 'bad.yaml'), service('dns', '10.96.0.10'));
    expect(source.reload()).toBe(true);
    expect(synced).toHaveBeenCalledTimes(1);
  });

  it('deleting a file deletes its objects', () => {
    writeFileSync(join(dir, 'dns.yaml'), service('dns', '10.96.0.10'));
    writeFileSync(join(dir, 'web.yaml'), service('web', '10.96.0.20', 80));
    const t = new ChangeTracker();
    source = new ManifestDirSource({ dir, sink: t, watch: false, pollIntervalMs: 0 });
    source.start();
    t.checkout();
    unlinkSync(join(dir, 'web.yaml'));
    source.reload();
    expect(t.checkout().deletedServicePorts).toEqual(['kube-system/web:dns']);
  });

  it('the poll fallback notices a change without fs.watch, debounced into one reload', () => {
    writeFileSync(join(dir, 'dns.yaml'), service('dns', '10.96.0.10'));
    const clock = new FakeClock();
    const t = new ChangeTracker();
    source = new ManifestDirSource({
      dir,
      sink: t,
      clock,
      watch: false,
      pollIntervalMs: 1000,
      debounceMs: 100,
    });
    source.start();
    t.checkout();
    clock.advance(5000);
    expect(source.reloads).toBe(1); // nothing changed: no reload
    writeFileSync(join(dir, 'web.yaml'), service('web', '10.96.0.20', 80));
    clock.advance(1000);
    expect(source.reloads).toBe(1); // noticed, waiting out the debounce
    clock.advance(100);
    expect(source.reloads).toBe(2);
    expect(t.checkout().changedServicePorts).toEqual(['kube-system/web:dns']);
  });

  it('fs.watch triggers a reload on its own', async () => {
    writeFileSync(join(dir, 'dns.yaml'), service('dns', '10.96.0.10'));
    const t = new ChangeTracker();
    const changed = vi.fn();
    source = new ManifestDirSource({
      dir,
      sink: t,
      onChange: changed,
      pollIntervalMs: 0,
      debounceMs: 20,
    });
    source.start();
    t.checkout();
    changed.mockClear();
    writeFileSync(join(dir, 'web.yaml'), service('web', '10.96.0.20', 80));
    await vi.waitFor(() => expect(changed).toHaveBeenCalled(), { timeout: 5000, interval: 20 });
    expect(t.checkout().changedServicePorts).toEqual(['kube-system/web:dns']);
  });
});

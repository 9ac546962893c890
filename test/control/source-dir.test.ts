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

  it('keeps the last good state on an invalid file and names file, object and field', () => {
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
    // A good edit and a bad file together: nothing is applied.
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
    expect(t.pendingChanges()).toBe(0);
    expect(source.services.has('kube-system/dns')).toBe(true);
    expect(endpointsOf(t, 'kube-system/dns:dns')).toEqual(['10.244.1.5:53']);
    // Fixed: both the edit and the new service go through.
    writeFileSync(join(dir, 'web.yaml'), service('web', '10.96.0.20', 80));
    expect(source.reload()).toBe(true);
    expect(source.lastError).toBeUndefined();
    expect(t.checkout().changedServicePorts).toEqual([
      'kube-system/dns:dns',
      'kube-system/web:dns',
    ]);
    expect(endpointsOf(t, 'kube-system/dns:dns')).toEqual(['10.244.1.6:53']);
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

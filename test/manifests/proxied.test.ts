// kube-proxy does not proxy Services labelled service.kubernetes.io/service-proxy-name or
// service.kubernetes.io/headless (Kubernetes e2e "should implement
// service.kubernetes.io/service-proxy-name" / ".../headless"). One filter for every source:
// the manifests path (`kubetun rules`, the manifests directory), the change tracker (which the
// directory and the API source feed) and the API source's label selector.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { renderRules } from '../../src/cli/rules.ts';
import { ChangeTracker } from '../../src/control/tracker.ts';
import { KUBE_PROXY_LABEL_SELECTOR, proxiedByKubeProxy } from '../../src/manifests/proxied.ts';
import { resolveServicePorts } from '../../src/manifests/resolve.ts';
import { ep, slice, svc } from '../control/fixtures.ts';

const plain = svc('plain', { clusterIPs: ['10.96.0.10'] });
const other = svc('other', {
  clusterIPs: ['10.96.0.11'],
  labels: { 'service.kubernetes.io/service-proxy-name': 'foo-bar' },
});
const headless = svc('headless', {
  clusterIPs: ['10.96.0.12'],
  labels: { 'service.kubernetes.io/headless': '' },
});
const slices = ['plain', 'other', 'headless'].map((s) => slice(`${s}-1`, s, [ep('10.244.1.5')]));

describe('service.kubernetes.io/service-proxy-name and /headless: not proxied', () => {
  it('the predicate: presence decides, whatever the value', () => {
    expect(proxiedByKubeProxy({})).toBe(true);
    expect(proxiedByKubeProxy({ app: 'web' })).toBe(true);
    expect(proxiedByKubeProxy(other.labels)).toBe(false);
    expect(proxiedByKubeProxy(headless.labels)).toBe(false);
  });

  it('the API source asks the server with the same labels', () => {
    expect(KUBE_PROXY_LABEL_SELECTOR).toBe(
      '!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless',
    );
  });

  it('the manifests path resolves only the proxied Service', () => {
    const ports = resolveServicePorts({ services: [plain, other, headless], slices });
    expect(ports.map((p) => p.servicePortName)).toEqual(['default/plain:dns']);
  });

  it('the change tracker (directory and API sources) programs only the proxied Service', () => {
    const t = new ChangeTracker();
    for (const s of [plain, other, headless]) t.services.update(null, s);
    for (const s of slices) t.endpointSlices.update(null, s);
    t.checkout();
    expect(t.resolveAll().map((p) => p.servicePortName)).toEqual(['default/plain:dns']);
  });

  const dir = mkdtempSync(join(tmpdir(), 'kubetun-proxied-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('kubetun rules writes no chain for them', async () => {
    const svcYaml = (name: string, ip: string, labels: string) =>
      `apiVersion: v1\nkind: Service\nmetadata: { name: ${name}, namespace: default${labels} }\n` +
      `spec:\n  clusterIP: ${ip}\n  ports: [{ name: http, port: 80, protocol: TCP }]\n`;
    const sliceYaml = (name: string) =>
      `apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\naddressType: IPv4\n` +
      `metadata: { name: ${name}-1, namespace: default, labels: { kubernetes.io/service-name: ${name} } }\n` +
      `ports: [{ name: http, port: 8080, protocol: TCP }]\nendpoints: [{ addresses: [10.244.1.5] }]\n`;
    writeFileSync(
      join(dir, 'svc.yaml'),
      [
        svcYaml('plain', '10.96.0.10', ''),
        svcYaml('other', '10.96.0.11', ', labels: { service.kubernetes.io/service-proxy-name: foo }'),
        svcYaml('headless', '10.96.0.12', ', labels: { service.kubernetes.io/headless: "" }'),
        sliceYaml('plain'),
        sliceYaml('other'),
        sliceYaml('headless'),
      ].join('---\n'),
    );
    const rules = await renderRules({ manifests: dir, mode: 'iptables' as const, nodeName: 'n1' });
    expect(rules).toContain('default/plain:http cluster IP');
    expect(rules).not.toContain('default/other');
    expect(rules).not.toContain('default/headless');
  });
});

// Root test: Kubernetes e2e behaviours of issue 16 with a real `kubetun run` fed by a manifests
// directory (topo.ts: one node namespace, its pods):
//   "should implement service.kubernetes.io/service-proxy-name" and "…/headless": such Services
//   are not proxied — no entry in the node's service table;
//   "should fail health check node port if there are only terminating endpoints": the
//   health-check node port of an externalTrafficPolicy Local Service answers 503 when this
//   node's only endpoint is terminating, 200 when it is ready.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SvcReport } from '../../src/inspect/types.ts';
import { ctlRequest } from '../../src/node/ctl.ts';
import { NODE_IP, Topo, VIP } from './topo.ts';

const t = new Topo();

const service = (name: string, ip: string, extra: string, labels = '{}') => `apiVersion: v1
kind: Service
metadata: {name: ${name}, namespace: default, labels: ${labels}}
spec:
  clusterIP: ${ip}
  selector: {app: ${name}}
${extra}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ${name}-1, namespace: default, labels: {kubernetes.io/service-name: ${name}}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
`;
const PORT = '  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]';
const lb = (np: number, hc: number) =>
  `  type: LoadBalancer\n  externalTrafficPolicy: Local\n  healthCheckNodePort: ${hc}\n  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP, nodePort: ${np}}]`;
const READY = '  - {addresses: [10.244.1.11], conditions: {ready: true}, nodeName: node1}\n';
const TERMINATING =
  '  - {addresses: [10.244.1.12], conditions: {ready: false, serving: true, terminating: true}, nodeName: node1}\n';

const MANIFESTS = [
  service('other-proxy', '10.96.0.40', PORT, '{service.kubernetes.io/service-proxy-name: other}') +
    READY,
  service('headless-label', '10.96.0.41', PORT, '{service.kubernetes.io/headless: ""}') + READY,
  service('lb-terminating', '10.96.0.42', lb(30142, 32142)) + TERMINATING,
  service('lb-ready', '10.96.0.43', lb(30143, 32143)) + READY,
].join('---\n');

beforeAll(async () => {
  await t.setup();
  writeFileSync(join(t.manifests, 'e2e.yaml'), MANIFESTS);
  await t.startAgent();
}, 120_000);

afterAll(() => t.teardown());

/** The health-check node port's HTTP status, asked from the node itself. */
function health(port: number): string {
  const r = t.exec('node', [
    'curl',
    '-s',
    '-o',
    '/dev/null',
    '-w',
    '%{http_code}',
    '-m',
    '3',
    `http://${NODE_IP}:${port}/healthz`,
  ]);
  return r.out.trim();
}

async function eventually(f: () => string, want: string): Promise<string> {
  let got = '';
  for (let i = 0; i < 60 && got !== want; i++) {
    got = f();
    if (got !== want) await new Promise((r) => setTimeout(r, 250));
  }
  return got;
}

describe('Kubernetes e2e behaviours through kubetun run', () => {
  it('does not proxy Services labelled service-proxy-name or headless', async () => {
    const r = (await ctlRequest(t.socket, { cmd: 'svc' })) as SvcReport;
    const vips = new Set(r.services.map((s) => s.vip));
    expect(vips.has(VIP)).toBe(true); // the unlabelled web is there
    expect(vips.has('10.96.0.42')).toBe(true);
    expect(vips.has('10.96.0.40')).toBe(false);
    expect(vips.has('10.96.0.41')).toBe(false);
  });

  it('health-check node port: 503 with only a terminating local endpoint, 200 with a ready one', async () => {
    expect(await eventually(() => health(32143), '200')).toBe('200');
    expect(await eventually(() => health(32142), '503')).toBe('503');
  });
});

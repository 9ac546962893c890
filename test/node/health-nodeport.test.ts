// Health-check node ports (src/node/health-nodeport.ts): kube-proxy's answer on a port per
// externalTrafficPolicy: Local service, and a served port's later errors logged, not fatal.
import { createServer } from 'node:net';
import type { Logger } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { HealthNodePorts, healthServices } from '../../src/node/health-nodeport.ts';
import { endpoint, service, servicePort } from '../datapath/harness.ts';

/** A port the kernel just handed out on loopback (free again when this returns). */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

const warnings: string[] = [];
const log = {
  info: () => {},
  warn: (_o: object, msg: string) => warnings.push(msg),
} as unknown as Logger;

let hp: HealthNodePorts | undefined;
afterEach(async () => {
  await hp?.close();
  warnings.length = 0;
});

describe('health-check node ports', () => {
  it('answers 200 with the local endpoint count, and a later server error is only logged', async () => {
    const port = await freePort();
    hp = new HealthNodePorts('127.0.0.1', log);
    await hp.sync([{ namespace: 'default', name: 'web', port, localEndpoints: 2 }]);
    const res = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-load-balancing-endpoint-weight')).toBe('2');
    expect(((await res.json()) as { localEndpoints: number }).localEndpoints).toBe(2);
    // e.g. EMFILE on accept: without a listener, emit throws (an uncaught 'error' event)
    const server = (
      hp as unknown as { servers: Map<number, { server: NodeJS.EventEmitter }> }
    ).servers.get(port)!.server;
    expect(() => server.emit('error', new Error('accept EMFILE'))).not.toThrow();
    expect(warnings).toContain('health-check node port error');
    expect((await fetch(`http://127.0.0.1:${port}/`)).status).toBe(200);
  });
});

// Kubernetes e2e "should fail health check node port if there are only terminating endpoints":
// kube-proxy counts ready local endpoints only, so a node whose local endpoint is terminating
// answers 503 (localEndpoints 0) even though the datapath may still fall back to it.
describe('healthServices', () => {
  const svc = service('web', '10.96.0.10', {
    type: 'LoadBalancer',
    externalTrafficPolicy: 'Local',
    healthCheckNodePort: 32000,
  });
  const local = (ip: string, ready: boolean) => ({
    ...endpoint(`${ip}:8080`),
    nodeName: 'node1',
    ready,
    serving: true,
    terminating: !ready,
  });

  it('counts a terminating local endpoint as none (503)', () => {
    const elsewhere = { ...endpoint('10.244.2.5:8080'), nodeName: 'node2' };
    const h = healthServices(
      [servicePort(svc, 80, 'TCP', [local('10.244.1.5', false), elsewhere])],
      'node1',
    );
    expect(h).toEqual([{ namespace: 'default', name: 'web', port: 32000, localEndpoints: 0 }]);
  });

  it('counts ready local endpoints once each', () => {
    const eps = [local('10.244.1.5', true), local('10.244.1.6', false)];
    const h = healthServices(
      [servicePort(svc, 80, 'TCP', eps), servicePort(svc, 443, 'TCP', eps)],
      'node1',
    );
    expect(h[0]?.localEndpoints).toBe(1);
  });
});

// kube-proxy runs one health server per family (its proxier of that family, on that family's
// node IP): the IPv4 one knows the services with an IPv4 ClusterIP and counts IPv4 endpoints,
// the IPv6 one (kubetun: with --node-ip-v6) those with an IPv6 ClusterIP and IPv6 endpoints.
describe('healthServices per family', () => {
  const lb = { type: 'LoadBalancer' as const, externalTrafficPolicy: 'Local' as const };
  const at = (ip: string, node = 'node1') => ({ ...endpoint('10.0.0.1:8080'), ip, nodeName: node });
  const v4 = [at('10.244.1.5'), at('10.244.1.6'), at('10.244.2.5', 'node2')];
  const v6 = [at('fd00:244:1::5'), at('fd00:244:2::5', 'node2')];

  it('a dual-stack service: each family its own local count', () => {
    const svc = service('dual', '10.96.0.10', {
      ...lb,
      clusterIPs: ['10.96.0.10', 'fd00:10:96::10'],
      healthCheckNodePort: 32010,
    });
    const rsp = { ...servicePort(svc, 80, 'TCP', v4), endpoints6: v6 };
    const want = (n: number) => [
      { namespace: 'default', name: 'dual', port: 32010, localEndpoints: n },
    ];
    expect(healthServices([rsp], 'node1', 'IPv4')).toEqual(want(2));
    expect(healthServices([rsp], 'node1', 'IPv6')).toEqual(want(1));
    expect(healthServices([rsp], 'node1')).toEqual(want(2)); // IPv4 unless asked
  });

  it('a single-stack service is served by its own family only', () => {
    const s6 = service('only6', 'fd00:10:96::11', { ...lb, healthCheckNodePort: 32011 });
    const s4 = service('only4', '10.96.0.11', { ...lb, healthCheckNodePort: 32012 });
    const ports = [
      { ...servicePort(s6, 80, 'TCP', []), endpoints6: v6 },
      servicePort(s4, 80, 'TCP', v4),
    ];
    expect(healthServices(ports, 'node1', 'IPv6')).toEqual([
      { namespace: 'default', name: 'only6', port: 32011, localEndpoints: 1 },
    ]);
    expect(healthServices(ports, 'node1', 'IPv4')).toEqual([
      { namespace: 'default', name: 'only4', port: 32012, localEndpoints: 2 },
    ]);
  });
});

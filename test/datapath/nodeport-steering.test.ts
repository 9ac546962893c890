// The numbers steering and the health-check node ports are built from, checked exhaustively:
// the five u32 prefix/mask keys cover exactly 30000-32767, the SNAT range key exactly its
// range, and the health answers are kube-proxy's (status, weight header, JSON body).
import { describe, expect, it } from 'vitest';
import { DEFAULT_DATAPATH_CONFIG } from '../../src/datapath/state/config.ts';
import { checkNatConfig, snatRangeMask } from '../../src/datapath/state/nat-config.ts';
import { healthAnswer, healthServices } from '../../src/node/health-nodeport.ts';
import { NODEPORT_KEYS } from '../../src/node/steering.ts';
import { endpoint, service, servicePort } from './harness.ts';

describe('uplink match keys', () => {
  it('the NodePort keys match exactly the ports 30000-32767', () => {
    const wrong: number[] = [];
    for (let p = 0; p <= 0xffff; p++) {
      const hit = NODEPORT_KEYS.some(([v, m]) => (p & m) === v);
      if (hit !== (p >= 30000 && p <= 32767)) wrong.push(p);
    }
    expect(wrong).toEqual([]);
  });

  it('the SNAT key matches exactly the configured range', () => {
    const { value, mask } = snatRangeMask(61440, 62463);
    expect([value, mask]).toEqual([0xf000, 0xfc00]);
    let n = 0;
    for (let p = 0; p <= 0xffff; p++) if ((p & mask) === value) n++;
    expect(n).toBe(1024);
  });

  it('refuses a SNAT range that one key cannot match', () => {
    const base = DEFAULT_DATAPATH_CONFIG;
    expect(() => checkNatConfig({ ...base, snatPortMin: 61440, snatPortMax: 62000 })).toThrow(
      /power-of-two block/,
    );
    expect(() =>
      checkNatConfig({ ...base, snatPortMin: 61441, snatPortMax: 61441 + 1023 }),
    ).toThrow(/aligned/);
    expect(() => checkNatConfig({ ...base, snatPortMin: 61440, snatPortMax: 62463 })).not.toThrow();
    // the IPv6 range is held to the same rule, naming its own fields
    expect(() => checkNatConfig({ ...base, snat6PortMin: 61440, snat6PortMax: 62000 })).toThrow(
      /snat6PortMin\.\.snat6PortMax 61440\.\.62000 must be a power-of-two block/,
    );
    expect(() => checkNatConfig({ ...base, nodeIp6: 'fd00::1::2' })).toThrow(/nodeIp6/);
    expect(() => checkNatConfig({ ...base, podCidr6: 'fd00:244:1::/129' })).toThrow(/podCidr6/);
  });
});

describe('health-check node ports', () => {
  function ports() {
    const svc = service('web-local', '10.96.0.81', {
      type: 'NodePort',
      externalTrafficPolicy: 'Local',
      healthCheckNodePort: 32081,
    });
    const eps = (port: number) => [
      endpoint(`10.244.2.2:${port}`, { nodeName: 'node2' }),
      endpoint(`10.244.2.3:${port}`, {
        nodeName: 'node2',
        ready: false,
        serving: true,
        terminating: true,
      }),
      endpoint(`10.244.1.2:${port}`, {
        nodeName: 'node1',
        ready: false,
        serving: true,
        terminating: true,
      }),
    ];
    const other = service('web-np', '10.96.0.80', { type: 'NodePort', healthCheckNodePort: 0 });
    return [
      servicePort(svc, 80, 'TCP', eps(8080), 'http'),
      servicePort(svc, 53, 'UDP', eps(5353), 'dns'),
      servicePort(other, 80, 'TCP', eps(8080), 'http'),
    ];
  }

  it('counts ready local endpoints once per endpoint; terminating ones never', () => {
    expect(healthServices(ports(), 'node2')).toEqual([
      { namespace: 'default', name: 'web-local', port: 32081, localEndpoints: 1 },
    ]);
    // node1 has only a terminating endpoint: kube-proxy's LocalReadyEndpoints is 0, so 503
    // (Kubernetes e2e "should fail health check node port if there are only terminating endpoints")
    expect(healthServices(ports(), 'node1')[0]!.localEndpoints).toBe(0);
    expect(healthServices(ports(), 'node3')[0]!.localEndpoints).toBe(0);
  });

  it("answers kube-proxy's 200 with the weight header, or 503 without local endpoints", () => {
    const h = { namespace: 'default', name: 'web-local', port: 32081, localEndpoints: 2 };
    const ok = healthAnswer(h);
    expect(ok.status).toBe(200);
    expect(ok.headers['X-Load-Balancing-Endpoint-Weight']).toBe('2');
    expect(ok.body).toBe(
      '{"service":{"namespace":"default","name":"web-local"},"localEndpoints":2,"serviceProxyHealthy":true}',
    );
    const none = healthAnswer({ ...h, localEndpoints: 0 });
    expect(none.status).toBe(503);
    expect(none.headers['X-Load-Balancing-Endpoint-Weight']).toBeUndefined();
    expect(JSON.parse(none.body).localEndpoints).toBe(0);
  });
});

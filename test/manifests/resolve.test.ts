import { describe, expect, it } from 'vitest';
import { resolveServicePorts } from '../../src/manifests/index.ts';
import type {
  ClusterState,
  Endpoint,
  EndpointSlice,
  EndpointSlicePort,
  Service,
  ServicePort,
} from '../../src/model.ts';
import { makeDefaultService } from '../fixtures/model.ts';

function port(name: string, p: number, protocol: ServicePort['protocol'] = 'TCP'): ServicePort {
  return { name, protocol, port: p, targetPort: p, nodePort: 0 };
}

function service(name: string, ports: ServicePort[], extra: Partial<Service> = {}): Service {
  return makeDefaultService(name, { clusterIPs: ['10.96.0.10'], ports, ...extra });
}

function ep(ip: string, extra: Partial<Endpoint> = {}, ready = true): Endpoint {
  return { addresses: [ip], conditions: { ready, serving: ready, terminating: false }, ...extra };
}

function slice(
  name: string,
  svc: string,
  ports: EndpointSlicePort[],
  endpoints: Endpoint[],
  extra: Partial<EndpointSlice> = {},
): EndpointSlice {
  return {
    namespace: 'default',
    name,
    serviceName: svc,
    addressType: 'IPv4',
    ports,
    endpoints,
    ...extra,
  };
}

const sp = (
  name: string,
  p: number,
  protocol: EndpointSlicePort['protocol'] = 'TCP',
): EndpointSlicePort => ({ name, protocol, port: p });

/** ip:port list of the endpoints of each resolved port, keyed by servicePortName/protocol. */
function summary(state: ClusterState, nodeName?: string): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const r of resolveServicePorts(state, { nodeName })) {
    out[`${r.servicePortName}/${r.port.protocol}`] = r.endpoints.map(
      (e) => `${e.ip}:${e.port}${e.ready ? '' : ' (not ready)'}`,
    );
  }
  return out;
}

describe('resolveServicePorts', () => {
  it('yields one entry per service port, named as kube-proxy names it', () => {
    const state: ClusterState = {
      services: [
        service('web', [port('http', 80), port('dns', 53, 'UDP')]),
        service('solo', [port('', 81)], { clusterIPs: ['10.96.0.11'] }),
      ],
      slices: [],
    };
    const r = resolveServicePorts(state);
    expect(r.map((x) => [x.servicePortName, x.port.port, x.service.name, x.endpoints])).toEqual([
      ['default/web:http', 80, 'web', []],
      ['default/web:dns', 53, 'web', []],
      ['default/solo', 81, 'solo', []],
    ]);
  });

  it('skips headless and ExternalName Services', () => {
    const state: ClusterState = {
      services: [
        service('headless', [port('', 80)], { clusterIPs: [] }),
        service('ext', [port('', 80)], { type: 'ExternalName', clusterIPs: [] }),
        service('web', [port('', 80)]),
      ],
      slices: [slice('headless-1', 'headless', [sp('', 80)], [ep('10.244.0.1')])],
    };
    expect(resolveServicePorts(state).map((x) => x.servicePortName)).toEqual(['default/web']);
  });

  it('merges every slice of the Service in its namespace, and only those', () => {
    const state: ClusterState = {
      services: [service('web', [port('', 80)])],
      slices: [
        slice('web-1', 'web', [sp('', 8080)], [ep('10.244.0.1')]),
        slice('web-2', 'web', [sp('', 8080)], [ep('10.244.0.2')]),
        slice('web-3', 'web', [sp('', 8080)], [ep('10.244.0.3')], { namespace: 'other' }),
        slice('api-1', 'api', [sp('', 8080)], [ep('10.244.0.4')]),
      ],
    };
    expect(summary(state)).toEqual({ 'default/web/TCP': ['10.244.0.1:8080', '10.244.0.2:8080'] });
  });

  it('ignores IPv6 and FQDN slices', () => {
    const state: ClusterState = {
      services: [service('web', [port('', 80)])],
      slices: [
        slice('web-6', 'web', [sp('', 8080)], [ep('fd00::1')], { addressType: 'IPv6' }),
        slice('web-f', 'web', [sp('', 8080)], [ep('db.example.com')], { addressType: 'FQDN' }),
        slice('web-4', 'web', [sp('', 8080)], [ep('10.244.0.1')]),
      ],
    };
    expect(summary(state)).toEqual({ 'default/web/TCP': ['10.244.0.1:8080'] });
  });

  it('matches the slice port by name and protocol, not by number', () => {
    const state: ClusterState = {
      services: [service('web', [port('http', 80), port('dns', 53, 'UDP'), port('dns-tcp', 53)])],
      slices: [
        slice(
          'web-1',
          'web',
          [sp('http', 8080), sp('dns', 5353, 'UDP'), sp('dns-tcp', 5354, 'UDP'), sp('', 80)],
          [ep('10.244.0.1')],
        ),
      ],
    };
    expect(summary(state)).toEqual({
      'default/web:http/TCP': ['10.244.0.1:8080'],
      'default/web:dns/UDP': ['10.244.0.1:5353'],
      // the slice's dns-tcp port is UDP: no match, no endpoints
      'default/web:dns-tcp/TCP': [],
    });
  });

  it('uses only the first address of an endpoint', () => {
    const state: ClusterState = {
      services: [service('web', [port('', 80)])],
      slices: [
        slice(
          'web-1',
          'web',
          [sp('', 8080)],
          [{ ...ep('10.244.0.1'), addresses: ['10.244.0.1', '10.244.0.9'] }],
        ),
      ],
    };
    expect(summary(state)).toEqual({ 'default/web/TCP': ['10.244.0.1:8080'] });
  });

  it('sorts by the "ip:port" string as kube-proxy does, not numerically', () => {
    const state: ClusterState = {
      services: [service('web', [port('', 80)])],
      slices: [
        slice('web-a', 'web', [sp('', 8080)], [ep('10.244.1.5'), ep('10.244.1.10'), ep('9.1.1.1')]),
        // a second slice with another target port (a rolling update changing targetPort)
        slice('web-b', 'web', [sp('', 10)], [ep('10.244.1.5')]),
      ],
    };
    expect(summary(state)).toEqual({
      'default/web/TCP': ['10.244.1.10:8080', '10.244.1.5:10', '10.244.1.5:8080', '9.1.1.1:8080'],
    });
  });

  it('deduplicates by ip:port: the first slice (by name) wins', () => {
    const mk = (order: 'ab' | 'ba'): ClusterState => {
      const a = slice('web-a', 'web', [sp('', 8080)], [ep('10.244.0.1', { targetName: 'from-a' })]);
      const b = slice('web-b', 'web', [sp('', 8080)], [ep('10.244.0.1', { targetName: 'from-b' })]);
      return {
        services: [service('web', [port('', 80)])],
        slices: order === 'ab' ? [a, b] : [b, a],
      };
    };
    for (const order of ['ab', 'ba'] as const) {
      const [r] = resolveServicePorts(mk(order));
      expect(r.endpoints.map((e) => e.targetName)).toEqual(['from-a']);
    }
  });

  it('deduplicates with a ready copy beating a not-ready one, whichever comes first', () => {
    const state: ClusterState = {
      services: [service('web', [port('', 80)])],
      slices: [
        slice('web-a', 'web', [sp('', 8080)], [ep('10.244.0.1', {}, false), ep('10.244.0.2')]),
        slice('web-b', 'web', [sp('', 8080)], [ep('10.244.0.1'), ep('10.244.0.2', {}, false)]),
      ],
    };
    expect(summary(state)).toEqual({ 'default/web/TCP': ['10.244.0.1:8080', '10.244.0.2:8080'] });
  });

  it('deduplicates preferring the copy on this node at equal readiness', () => {
    const state: ClusterState = {
      services: [service('web', [port('', 80)])],
      slices: [
        slice('web-a', 'web', [sp('', 8080)], [ep('10.244.0.1', { nodeName: 'n2' })]),
        slice('web-b', 'web', [sp('', 8080)], [ep('10.244.0.1', { nodeName: 'n1' })]),
      ],
    };
    expect(resolveServicePorts(state, { nodeName: 'n1' })[0].endpoints[0].nodeName).toBe('n1');
    expect(resolveServicePorts(state)[0].endpoints[0].nodeName).toBe('n2');
  });

  it('carries conditions, node, zone, hints and target name', () => {
    const e: Endpoint = {
      addresses: ['10.244.0.1'],
      conditions: { ready: false, serving: true, terminating: true },
      nodeName: 'n1',
      zone: 'z1',
      hintsForZones: ['z1', 'z2'],
      hintsForNodes: ['n1'],
      targetName: 'web-0',
    };
    const state: ClusterState = {
      services: [service('web', [port('', 80)])],
      slices: [slice('web-a', 'web', [sp('', 8080)], [e, ep('10.244.0.2')])],
    };
    expect(resolveServicePorts(state)[0].endpoints).toEqual([
      {
        ip: '10.244.0.1',
        port: 8080,
        ready: false,
        serving: true,
        terminating: true,
        nodeName: 'n1',
        zone: 'z1',
        hintsForZones: ['z1', 'z2'],
        hintsForNodes: ['n1'],
        targetName: 'web-0',
      },
      { ip: '10.244.0.2', port: 8080, ready: true, serving: true, terminating: false },
    ]);
  });
});

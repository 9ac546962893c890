// Model builders in the shape of kube-proxy's test helpers (makeTestService,
// makeTestEndpointSlice, populateEndpointSlices): defaults of an empty Service spec, endpoint
// conditions defaulted as the API does (nil ready = ready), and a small resolver that groups
// slice endpoints by (service, port name, protocol) the way kube-proxy's EndpointSliceCache
// does. Used where a case needs things manifests cannot express (bad IPs, >1000 endpoints).

import type {
  Endpoint,
  EndpointSlice,
  EndpointSlicePort,
  Protocol,
  ResolvedEndpoint,
  ResolvedServicePort,
  Service,
  ServicePort,
} from '../../src/model.ts';
import { servicePortName } from '../../src/model.ts';
import { makeDefaultService } from '../fixtures/model.ts';

export const testNodeName = 'test-node';
export const testNodeIP = '192.168.0.2';
export const testNodeIPAlt = '192.168.1.2';
export const testExternalIP = '192.168.99.11';
export const testExternalClient = '203.0.113.2';
export const testExternalClientBlocked = '203.0.113.130';
/** IPs the tracer treats as local (kube-proxy's testNodeIPs, IPv4 part). */
export const testNodeIPs = [testNodeIP, testNodeIPAlt, testExternalIP];

/** NewFakeProxier's settings. */
export const fakeProxierOptions = {
  nodeName: testNodeName,
  nodeIPs: [testNodeIP, testNodeIPAlt, testExternalIP],
  clusterCIDR: '10.0.0.0/8',
  masqueradeMark: '0x4000',
  randomFully: false,
  nfacct: true,
  localhostNodePorts: true,
};

export function port(p: Partial<ServicePort> & { port: number }): ServicePort {
  return { name: '', protocol: 'TCP', targetPort: p.port, nodePort: 0, ...p };
}

export function makeService(namespace: string, name: string, fn: (s: Service) => void): Service {
  const s = makeDefaultService(name, { namespace });
  fn(s);
  return s;
}

export function ep(
  address: string,
  more: Partial<Omit<Endpoint, 'addresses' | 'conditions'>> & {
    ready?: boolean;
    serving?: boolean;
    terminating?: boolean;
  } = {},
): Endpoint {
  const { ready, serving, terminating, ...rest } = more;
  const r = ready ?? true;
  return {
    addresses: [address],
    conditions: { ready: r, serving: serving ?? r, terminating: terminating ?? false },
    ...rest,
  };
}

export function slicePort(name: string, p: number, protocol: Protocol = 'TCP'): EndpointSlicePort {
  return { name, port: p, protocol };
}

export function makeSlice(
  namespace: string,
  serviceName: string,
  endpoints: Endpoint[],
  ports: EndpointSlicePort[],
  n = 1,
): EndpointSlice {
  return {
    namespace,
    name: `${serviceName}-${n}`,
    serviceName,
    addressType: 'IPv4',
    ports,
    endpoints,
  };
}

/** Join services with slices by (namespace, service, port name, protocol), as kube-proxy does. */
export function resolve(services: Service[], slices: EndpointSlice[]): ResolvedServicePort[] {
  const out: ResolvedServicePort[] = [];
  for (const svc of services) {
    for (const sp of svc.ports) {
      const eps = new Map<string, ResolvedEndpoint>();
      for (const sl of slices) {
        if (sl.namespace !== svc.namespace || sl.serviceName !== svc.name) continue;
        const match = sl.ports.find((p) => p.name === sp.name && p.protocol === sp.protocol);
        if (!match) continue;
        for (const e of sl.endpoints) {
          const key = `${e.addresses[0]}:${match.port}`;
          if (eps.has(key)) continue;
          eps.set(key, {
            ip: e.addresses[0],
            port: match.port,
            ...e.conditions,
            nodeName: e.nodeName,
            zone: e.zone,
            hintsForZones: e.hintsForZones,
            hintsForNodes: e.hintsForNodes,
          });
        }
      }
      const endpoints = [...eps.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1)).map((e) => e[1]);
      out.push({ service: svc, port: sp, servicePortName: servicePortName(svc, sp), endpoints });
    }
  }
  return out;
}

/** kube-proxy's TestBadIPs input: every address and CIDR written with leading zeros. */
export function badIPsModel(): { services: Service[]; slices: EndpointSlice[] } {
  const services = [
    makeService('ns1', 'svc1', (s) => {
      s.type = 'LoadBalancer';
      s.clusterIPs = ['172.30.0.041'];
      s.ports = [port({ name: 'p80', port: 80, nodePort: 3001 })];
      s.loadBalancerIPs = ['1.2.3.004'];
      s.externalIPs = ['192.168.099.022'];
      s.loadBalancerSourceRanges = ['203.0.113.000/025'];
    }),
  ];
  const slices = [makeSlice('ns1', 'svc1', [ep('10.180.00.001')], [slicePort('p80', 80)])];
  return { services, slices };
}

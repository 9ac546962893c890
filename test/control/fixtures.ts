// Builders for model objects in control tests: a complete object with overridable fields.
import type { Endpoint, EndpointSlice, Protocol, Service, ServicePort } from '../../src/model.ts';
import { makeDefaultService } from '../fixtures/model.ts';

export function svc(name: string, over: Partial<Service> = {}, ns = 'default'): Service {
  return makeDefaultService(name, {
    namespace: ns,
    clusterIPs: ['10.96.0.10'],
    ports: [port('dns', 'UDP', 53)],
    ...over,
  });
}

export function port(
  name: string,
  protocol: Protocol,
  p: number,
  over: Partial<ServicePort> = {},
): ServicePort {
  return { name, protocol, port: p, targetPort: p, nodePort: 0, ...over };
}

export function ep(
  ip: string,
  over: Partial<Endpoint> = {},
  cond: Partial<Endpoint['conditions']> = {},
): Endpoint {
  return {
    addresses: [ip],
    conditions: { ready: true, serving: true, terminating: false, ...cond },
    ...over,
  };
}

export function slice(
  name: string,
  service: string,
  endpoints: Endpoint[],
  ports: EndpointSlice['ports'] = [{ name: 'dns', protocol: 'UDP', port: 5353 }],
  ns = 'default',
): EndpointSlice {
  return { namespace: ns, name, serviceName: service, addressType: 'IPv4', ports, endpoints };
}

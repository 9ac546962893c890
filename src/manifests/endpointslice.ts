// discovery.k8s.io/v1 EndpointSlice → model EndpointSlice, with the API's defaults for endpoint
// conditions (ready nil → true, serving nil → ready, terminating nil → false).
import type { Endpoint, EndpointSlice, EndpointSlicePort } from '../model.ts';
import { type Json, type ObjectReader, readMeta, sub } from './fields.ts';
import { endpointIPProblem, endpointIPv6Problem, ipv4Problem } from './ip.ts';
import { checkPort, PROTOCOLS } from './service.ts';

export { LABEL_SERVICE_NAME as SERVICE_NAME_LABEL } from '../cluster/types.ts';
import { LABEL_SERVICE_NAME as SERVICE_NAME_LABEL } from '../cluster/types.ts';
const ADDRESS_TYPES = ['IPv4', 'IPv6', 'FQDN'] as const;

/**
 * The apiserver's EndpointSlice limits (discovery.k8s.io/v1 API reference: "a maximum of 1000
 * endpoints", "a maximum of 100 ports", an endpoint's addresses "at least one ... but no more
 * than 100"), refused before anything is read item by item.
 */
export const SLICE_MAX_ENDPOINTS = 1000;
export const SLICE_MAX_PORTS = 100;
export const ENDPOINT_MAX_ADDRESSES = 100;

export function parseEndpointSlice(r: ObjectReader, o: Json): EndpointSlice {
  const meta = readMeta(r, o);
  const serviceName = meta.labels[SERVICE_NAME_LABEL];
  if (!serviceName) {
    r.fail(
      'MANIFEST_SLICE_NO_SERVICE',
      `metadata.labels["${SERVICE_NAME_LABEL}"]`,
      `an EndpointSlice without the ${SERVICE_NAME_LABEL} label belongs to no Service`,
    );
  }
  if (o.addressType === undefined || o.addressType === null || o.addressType === '')
    r.missing('addressType');
  const addressType = r.oneOf(
    o.addressType,
    'addressType',
    ADDRESS_TYPES,
    'IPv4',
    'MANIFEST_ADDRESS_TYPE',
  );
  return {
    namespace: meta.namespace,
    name: meta.name,
    serviceName,
    addressType,
    ports: readSlicePorts(r, o),
    endpoints: r
      .list(o.endpoints, 'endpoints', SLICE_MAX_ENDPOINTS)
      .map((v, i) => readEndpoint(r, v, `endpoints[${i}]`, addressType)),
  };
}

/**
 * Slice ports without a port number are skipped: the API allows them ("all ports") but
 * kube-proxy ignores them, having no port to DNAT to.
 */
function readSlicePorts(r: ObjectReader, o: Json): EndpointSlicePort[] {
  const out: EndpointSlicePort[] = [];
  const names: string[] = [];
  r.list(o.ports, 'ports', SLICE_MAX_PORTS).forEach((v, i) => {
    const path = `ports[${i}]`;
    const p = r.map(v, path) ?? r.wrongType(path, 'a mapping', v);
    const name = r.str(p.name, sub(path, 'name')) ?? '';
    const j = names.indexOf(name);
    if (j >= 0)
      r.fail(
        'MANIFEST_DUPLICATE_PORT',
        sub(path, 'name'),
        `duplicate port name "${name}" (also ports[${j}])`,
      );
    names.push(name);
    const protocol = r.oneOf(
      p.protocol,
      sub(path, 'protocol'),
      PROTOCOLS,
      'TCP',
      'MANIFEST_UNKNOWN_PROTOCOL',
    );
    const port = r.int(p.port, sub(path, 'port'));
    if (port === undefined) return;
    checkPort(r, port, sub(path, 'port'));
    out.push({ name, protocol, port });
  });
  return out;
}

function readEndpoint(
  r: ObjectReader,
  v: unknown,
  path: string,
  addressType: EndpointSlice['addressType'],
): Endpoint {
  const e = r.map(v, path) ?? r.wrongType(path, 'a mapping', v);
  const addresses = r.list(e.addresses, sub(path, 'addresses'), ENDPOINT_MAX_ADDRESSES).map((a, i) => {
    const field = `${path}.addresses[${i}]`;
    const s = r.reqStr(a, field);
    const bad =
      addressType === 'IPv4'
        ? (ipv4Problem(s) ?? endpointIPProblem(s))
        : addressType === 'IPv6'
          ? endpointIPv6Problem(s)
          : null;
    if (bad) r.fail('MANIFEST_BAD_IP', field, bad);
    return s;
  });
  if (addresses.length === 0) r.missing(sub(path, 'addresses'));
  const c = r.map(e.conditions, sub(path, 'conditions')) ?? {};
  const ready = r.bool(c.ready, `${path}.conditions.ready`) ?? true;
  const ep: Endpoint = {
    addresses,
    conditions: {
      ready,
      serving: r.bool(c.serving, `${path}.conditions.serving`) ?? ready,
      terminating: r.bool(c.terminating, `${path}.conditions.terminating`) ?? false,
    },
  };
  const nodeName = r.str(e.nodeName, sub(path, 'nodeName'));
  if (nodeName) ep.nodeName = nodeName;
  const zone = r.str(e.zone, sub(path, 'zone'));
  if (zone) ep.zone = zone;
  const hints = r.map(e.hints, sub(path, 'hints'));
  if (hints?.forZones !== undefined)
    ep.hintsForZones = readHintNames(r, hints.forZones, `${path}.hints.forZones`);
  if (hints?.forNodes !== undefined)
    ep.hintsForNodes = readHintNames(r, hints.forNodes, `${path}.hints.forNodes`);
  const ref = r.map(e.targetRef, sub(path, 'targetRef'));
  const targetName = r.str(ref?.name, `${path}.targetRef.name`);
  if (targetName) ep.targetName = targetName;
  return ep;
}

function readHintNames(r: ObjectReader, v: unknown, field: string): string[] {
  return r.list(v, field).map((h, i) => {
    const m = r.map(h, `${field}[${i}]`) ?? r.wrongType(`${field}[${i}]`, 'a mapping', h);
    return r.reqStr(m.name, `${field}[${i}].name`);
  });
}

// v1 Service → model Service, with the API server's defaults and the validation it would apply
// (pkg/apis/core/validation). kubetun has no allocator: ClusterIPs and node ports must be given.
// Both IP families are read (ip-families.ts: clusterIPs, ipFamilies, ipFamilyPolicy); which of
// them a consumer programs is its own business (a kube-proxy serves one family per proxier).
import type { Protocol, Service, ServicePort, ServiceType, TrafficPolicy } from '../model.ts';
import { type Json, type ObjectReader, readMeta, sub } from './fields.ts';
import {
  anyEndpointIPProblem,
  cidrProblem,
  ipInCidr,
  ipInServiceCidrs,
  ipProblem,
  parseServiceCidrs,
  type ServiceCidrs,
} from './ip.ts';
import { readClusterIPFields } from './ip-families.ts';

export const SERVICE_TYPES: readonly ServiceType[] = [
  'ClusterIP',
  'NodePort',
  'LoadBalancer',
  'ExternalName',
];
export const PROTOCOLS: readonly Protocol[] = ['TCP', 'UDP', 'SCTP'];
const POLICIES: readonly TrafficPolicy[] = ['Cluster', 'Local'];
const DEFAULT_AFFINITY_TIMEOUT = 10800;
const MAX_AFFINITY_TIMEOUT = 86400;

export interface ServiceParseOptions {
  /** kube-apiserver --service-node-port-range; default 30000-32767 */
  nodePortRange?: { min: number; max: number };
  /**
   * --service-cidr, one CIDR or one per family ("10.96.0.0/12,fd00:10:96::/112", as
   * kube-apiserver's --service-cluster-ip-range): when given, every ClusterIP must be one the
   * apiserver could have allocated from it, a family it lacks is refused, and no external IP
   * may lie in it (it would shadow a Service's VIP).
   */
  serviceCidr?: string;
  /**
   * --cluster-cidr (the pod network), one CIDR or one per family ("10.244.0.0/16,fd00:10:244::/56",
   * kube-proxy's form): when given, no external IP may shadow a Pod address.
   */
  clusterCidr?: string;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const IANA_SVC_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;

export function parseService(r: ObjectReader, o: Json, opts: ServiceParseOptions = {}): Service {
  const meta = readMeta(r, o);
  const spec = r.map(o.spec, 'spec') ?? {};
  const type = r.oneOf(spec.type, 'spec.type', SERVICE_TYPES, 'ClusterIP');
  const cidrs = serviceCidrsOf(opts.serviceCidr);
  const ipf = readClusterIPFields(r, spec, type, cidrs);
  const clusterIPs = ipf.clusterIPs;
  const headless = type === 'ClusterIP' && clusterIPs.length === 0;
  const range = opts.nodePortRange ?? { min: 30000, max: 32767 };
  const svc: Service = {
    namespace: meta.namespace,
    name: meta.name,
    type,
    clusterIPs,
    ipFamilies: ipf.ipFamilies,
    ports: readServicePorts(r, spec, type, headless, range),
    sessionAffinity: r.oneOf(
      spec.sessionAffinity,
      'spec.sessionAffinity',
      ['None', 'ClientIP'],
      'None',
    ),
    affinityTimeoutSeconds: readAffinityTimeout(r, spec),
    externalTrafficPolicy: r.oneOf(
      spec.externalTrafficPolicy,
      'spec.externalTrafficPolicy',
      POLICIES,
      'Cluster',
    ),
    internalTrafficPolicy: r.oneOf(
      spec.internalTrafficPolicy,
      'spec.internalTrafficPolicy',
      POLICIES,
      'Cluster',
    ),
    externalIPs: readExternalIPs(r, spec.externalIPs, opts, cidrs),
    loadBalancerIPs: readLoadBalancerIngress(r, o),
    loadBalancerSourceRanges: readSourceRanges(r, spec),
    healthCheckNodePort: readHealthCheckNodePort(r, spec, range),
    annotations: meta.annotations,
    labels: meta.labels,
  };
  if (ipf.ipFamilyPolicy) svc.ipFamilyPolicy = ipf.ipFamilyPolicy;
  if (spec.selector !== undefined && spec.selector !== null) {
    svc.selector = r.strMap(spec.selector, 'spec.selector');
  }
  const td = r.str(spec.trafficDistribution, 'spec.trafficDistribution');
  if (td) svc.trafficDistribution = td;
  return svc;
}

const cidrCache = new Map<string, ServiceCidrs>();

/** The parsed --service-cidr (cached: every Service of a sync is parsed with the same text). */
function serviceCidrsOf(text: string | undefined): ServiceCidrs | undefined {
  if (text === undefined) return undefined;
  let c = cidrCache.get(text);
  if (!c) {
    c = parseServiceCidrs(text);
    cidrCache.set(text, c);
  }
  return c;
}

function readServicePorts(
  r: ObjectReader,
  spec: Json,
  type: ServiceType,
  headless: boolean,
  range: { min: number; max: number },
): ServicePort[] {
  const raw = r.list(spec.ports, 'spec.ports');
  if (raw.length === 0 && !headless && type !== 'ExternalName') r.missing('spec.ports');
  const needNodePort =
    type === 'NodePort' ||
    (type === 'LoadBalancer' && spec.allocateLoadBalancerNodePorts !== false);
  const ports: ServicePort[] = [];
  raw.forEach((v, i) => {
    const path = `spec.ports[${i}]`;
    const p = readServicePort(r, v, path, raw.length > 1, type, needNodePort, range);
    ports.forEach((q, j) => {
      const other = ` (also spec.ports[${j}])`;
      if (q.port === p.port && q.protocol === p.protocol) {
        r.fail(
          'MANIFEST_DUPLICATE_PORT',
          sub(path, 'port'),
          `duplicate port ${p.port}/${p.protocol}${other}`,
        );
      }
      if (p.name !== '' && q.name === p.name) {
        r.fail(
          'MANIFEST_DUPLICATE_PORT',
          sub(path, 'name'),
          `duplicate port name "${p.name}"${other}`,
        );
      }
      if (p.nodePort !== 0 && q.nodePort === p.nodePort && q.protocol === p.protocol) {
        r.fail(
          'MANIFEST_DUPLICATE_PORT',
          sub(path, 'nodePort'),
          `duplicate nodePort ${p.nodePort}/${p.protocol}${other}`,
        );
      }
    });
    ports.push(p);
  });
  return ports;
}

function readServicePort(
  r: ObjectReader,
  v: unknown,
  path: string,
  several: boolean,
  type: ServiceType,
  needNodePort: boolean,
  range: { min: number; max: number },
): ServicePort {
  const p = r.map(v, path) ?? r.wrongType(path, 'a mapping', v);
  const name = r.str(p.name, sub(path, 'name')) ?? '';
  if (name === '' && several)
    r.missing(sub(path, 'name'), ' (required when a Service has more than one port)');
  if (name !== '' && (name.length > 63 || !DNS_LABEL.test(name))) {
    r.fail(
      'MANIFEST_INVALID_VALUE',
      sub(path, 'name'),
      `"${name}" is not a DNS label (lowercase letters, digits, "-")`,
    );
  }
  const protocol = r.oneOf(
    p.protocol,
    sub(path, 'protocol'),
    PROTOCOLS,
    'TCP',
    'MANIFEST_UNKNOWN_PROTOCOL',
  );
  const port = r.int(p.port, sub(path, 'port')) ?? r.missing(sub(path, 'port'));
  checkPort(r, port, sub(path, 'port'));
  return {
    name,
    protocol,
    port,
    targetPort: readTargetPort(r, p.targetPort, sub(path, 'targetPort'), port),
    nodePort: readNodePort(r, p.nodePort, sub(path, 'nodePort'), type, needNodePort, range),
  };
}

export function checkPort(r: ObjectReader, port: number, field: string): void {
  if (port < 1 || port > 65535)
    r.fail('MANIFEST_PORT_RANGE', field, `port ${port} is out of range 1-65535`);
}

function readTargetPort(r: ObjectReader, v: unknown, field: string, port: number): number | string {
  if (v === undefined || v === null || v === 0) return port;
  if (typeof v === 'number') {
    if (!Number.isInteger(v)) r.wrongType(field, 'an integer or a port name', v);
    checkPort(r, v, field);
    return v;
  }
  if (typeof v !== 'string') return r.wrongType(field, 'an integer or a port name', v);
  if (v.length > 15 || !IANA_SVC_NAME.test(v) || !/[a-z]/.test(v) || v.includes('--')) {
    const hint = /^\d+$/.test(v) ? ' (write a port number without quotes)' : '';
    r.fail(
      'MANIFEST_INVALID_VALUE',
      field,
      `"${v}" is not a port number or an IANA service name${hint}`,
    );
  }
  return v;
}

function readNodePort(
  r: ObjectReader,
  v: unknown,
  field: string,
  type: ServiceType,
  needed: boolean,
  range: { min: number; max: number },
): number {
  const np = r.int(v, field) ?? 0;
  if (np === 0) {
    if (needed) r.missing(field, ` (type ${type} needs node ports and kubetun allocates none)`);
    return 0;
  }
  if (type === 'ClusterIP' || type === 'ExternalName') {
    r.fail('MANIFEST_INVALID_VALUE', field, `may not be used when type is ${type}`);
  }
  if (np < range.min || np > range.max) {
    r.fail(
      'MANIFEST_NODEPORT_RANGE',
      field,
      `nodePort ${np} is out of range ${range.min}-${range.max}`,
    );
  }
  return np;
}

function readAffinityTimeout(r: ObjectReader, spec: Json): number {
  const field = 'spec.sessionAffinityConfig.clientIP.timeoutSeconds';
  const cfg = r.map(spec.sessionAffinityConfig, 'spec.sessionAffinityConfig');
  const cip = r.map(cfg?.clientIP, 'spec.sessionAffinityConfig.clientIP');
  const t = r.int(cip?.timeoutSeconds, field) ?? DEFAULT_AFFINITY_TIMEOUT;
  if (t < 1 || t > MAX_AFFINITY_TIMEOUT) {
    r.fail('MANIFEST_INVALID_VALUE', field, `${t} is out of range 1-${MAX_AFFINITY_TIMEOUT}`);
  }
  return t;
}

/**
 * spec.externalIPs: valid IPv4 or IPv6, an address the apiserver accepts as an external IP (its
 * endpoint-IP rule), and — when the agent knows its networks — not inside the service CIDR or
 * the pod network, where it would capture traffic meant for a VIP or a Pod.
 */
function readExternalIPs(
  r: ObjectReader,
  v: unknown,
  opts: ServiceParseOptions,
  cidrs: ServiceCidrs | undefined,
): string[] {
  const field = 'spec.externalIPs';
  return r.list(v, field).map((x, i) => {
    const f = `${field}[${i}]`;
    const ip = r.reqStr(x, f);
    const bad = ipProblem(ip) ?? anyEndpointIPProblem(ip);
    if (bad) r.fail('MANIFEST_BAD_IP', f, bad);
    if (cidrs !== undefined && ipInServiceCidrs(ip, cidrs)) {
      r.fail(
        'MANIFEST_BAD_IP',
        f,
        `"${ip}" is inside the service CIDR ${opts.serviceCidr}: it would shadow ClusterIPs (use an address outside it)`,
      );
    }
    const pods = opts.clusterCidr?.split(',').find((c) => ipInCidr(ip, c.trim()));
    if (pods !== undefined) {
      r.fail(
        'MANIFEST_BAD_IP',
        f,
        `"${ip}" is inside the pod network ${pods.trim()}: it would take over a Pod's address`,
      );
    }
    return ip;
  });
}

/** status.loadBalancer.ingress[].ip; hostname-only entries carry no IP to program. */
function readLoadBalancerIngress(r: ObjectReader, o: Json): string[] {
  const status = r.map(o.status, 'status');
  const lb = r.map(status?.loadBalancer, 'status.loadBalancer');
  const out: string[] = [];
  r.list(lb?.ingress, 'status.loadBalancer.ingress').forEach((x, i) => {
    const path = `status.loadBalancer.ingress[${i}]`;
    const ing = r.map(x, path) ?? r.wrongType(path, 'a mapping', x);
    const ip = r.str(ing.ip, `${path}.ip`);
    if (ip === undefined || ip === '') return;
    const bad = ipProblem(ip);
    if (bad) r.fail('MANIFEST_BAD_IP', `${path}.ip`, bad);
    out.push(ip);
  });
  return out;
}

function readSourceRanges(r: ObjectReader, spec: Json): string[] {
  const field = 'spec.loadBalancerSourceRanges';
  return r.list(spec.loadBalancerSourceRanges, field).map((x, i) => {
    // The API server trims blanks here (service.beta.kubernetes.io annotations did too).
    const cidr = r.reqStr(x, `${field}[${i}]`).trim();
    const bad = cidrProblem(cidr);
    if (bad) r.fail('MANIFEST_BAD_IP', `${field}[${i}]`, bad);
    return cidr;
  });
}

function readHealthCheckNodePort(
  r: ObjectReader,
  spec: Json,
  range: { min: number; max: number },
): number {
  const field = 'spec.healthCheckNodePort';
  const np = r.int(spec.healthCheckNodePort, field) ?? 0;
  if (np !== 0 && (np < range.min || np > range.max)) {
    r.fail(
      'MANIFEST_NODEPORT_RANGE',
      field,
      `nodePort ${np} is out of range ${range.min}-${range.max}`,
    );
  }
  return np;
}

// Allocation of a Service's ClusterIP, node ports and health-check node port, where the
// apiserver's Service registry does it (pkg/registry/core/service/storage/alloc.go):
//   - requested values are reserved, missing ones allocated; a value out of range or held by
//     another Service is refused on the field that asked for it;
//   - an update keeps what the stored object was given when the new one leaves it out (what
//     `kubectl apply` of the same file does), and may not change a ClusterIP once set, except by
//     going to or from type ExternalName;
//   - values the new object no longer uses (type ClusterIP dropping node ports, ExternalName
//     dropping the ClusterIP, ETP back to Cluster dropping the health port) are released.
// The caller releases `taken.values` if anything else refuses the object, and `taken.release`
// once it is accepted.
//
// Dual-stack (a lab with an IPv6 service CIDR): a Service whose ipFamilyPolicy is
// PreferDualStack or RequireDualStack gets an IPv6 ClusterIP as clusterIPs[1] (the one asked for,
// else the one it had, else the next free one) and ipFamilies [IPv4, IPv6]; IPv4 stays the
// primary family (an IPv6-first Service is refused). On an IPv4-only lab a PreferDualStack
// Service stays single-stack and an IPv6 address it names is dropped — where the apiserver
// would refuse it — so one manifests directory serves the single-stack and the dual-stack
// topologies alike (stored as SingleStack); RequireDualStack is refused there.
import { ipv4Problem } from '../manifests/ip.ts';
import type { Allocator, Pool } from './allocator.ts';
import { needsHealthCheckNodePort, needsNodePorts } from './admission-defaults.ts';
import type { Problem } from './admission-rules.ts';
import type { Service, ServicePortSpec } from './types.ts';

export interface Taken {
  /** newly reserved by this call (rolled back on refusal) */
  values: [Pool, string | number][];
  /** held for the old object and no longer used (released on success) */
  release: [Pool, string | number][];
}

export function allocateService(
  svc: Service,
  old: Service | undefined,
  a: Allocator,
  owner: string,
): { taken: Taken; problems: Problem[] } {
  const taken: Taken = { values: [], release: [] };
  const problems: Problem[] = [];
  const hold = (pool: Pool, v: string | number, field: string, what: string): boolean => {
    const had = a.owner(pool, v) === owner;
    const r = a.reserve(pool, v, owner);
    if (r === 'ok') {
      if (!had) taken.values.push([pool, v]);
      return true;
    }
    const holder = r === 'taken' ? ` (held by ${a.owner(pool, v)})` : '';
    problems.push({
      code: r === 'taken' ? 'ADMISSION_ALLOCATED' : 'ADMISSION_OUT_OF_RANGE',
      field,
      reason: `Invalid value: ${JSON.stringify(v)}: failed to allocate ${what} ${v}: ${a.explain(pool, r, v)}${holder}`,
    });
    return false;
  };
  const next = (pool: Pool, field: string): string | number | undefined => {
    const v = pool === 'clusterIP' ? a.allocate('clusterIP', owner) : a.allocate('nodePort', owner);
    if (v === undefined) {
      problems.push({
        code: 'ADMISSION_RANGE_FULL',
        field,
        reason: `failed to allocate: range is full`,
      });
    } else taken.values.push([pool, v]);
    return v;
  };
  const second = secondFamily(svc, a, problems);
  if (problems.length === 0) allocateClusterIP(svc, old, problems, hold, next);
  if (problems.length === 0 && second !== undefined)
    allocateClusterIPv6(svc, old, second, a, owner, problems, hold, taken);
  allocateNodePorts(svc, old, hold, next);
  allocateHealthCheckNodePort(svc, old, hold, next);
  if (old) taken.release = unusedOldValues(old, svc);
  return { taken, problems };
}

type Hold = (pool: Pool, v: string | number, field: string, what: string) => boolean;

const isV6 = (ip: string | undefined) => (ip ?? '').includes(':');

/**
 * Whether the Service gets an IPv6 ClusterIP: '' (allocate one) or the address it asks for, or
 * undefined (single-stack IPv4). Leaves spec.clusterIPs with the IPv4 entry alone for
 * allocateClusterIP.
 */
function secondFamily(svc: Service, a: Allocator, problems: Problem[]): string | undefined {
  const s = svc.spec;
  if (s.type === 'ExternalName') return undefined;
  const ips = s.clusterIPs ?? (s.clusterIP ? [s.clusterIP] : []);
  if (isV6(s.clusterIP) || isV6(ips[0]) || (s.ipFamilies?.[0] ?? 'IPv4') === 'IPv6') {
    problems.push({
      code: 'ADMISSION_INVALID',
      field: isV6(ips[0]) ? 'spec.clusterIPs[0]' : 'spec.ipFamilies[0]',
      reason: `Invalid value: ${JSON.stringify(ips[0] ?? s.ipFamilies?.[0])}: the lab's primary family is IPv4: list the IPv4 address (family) first`,
    });
    return undefined;
  }
  const policy = s.ipFamilyPolicy ?? 'SingleStack';
  const dual = policy !== 'SingleStack' && ips[0] !== 'None';
  if (!dual || (!a.serviceCidrV6 && policy === 'PreferDualStack')) {
    if (ips.length > 1 && (policy === 'SingleStack' || !isV6(ips[1]))) return undefined; // refused below
    // single-stack: an IPv6 address a PreferDualStack Service named on an IPv4-only lab goes
    if (dual) {
      // PreferDualStack on an IPv4-only lab: stored as SingleStack, so the agents' readers (which
      // take every family as configured) ask for no IPv6 address
      s.clusterIPs = ips.slice(0, 1);
      s.ipFamilies = ['IPv4'];
      s.ipFamilyPolicy = 'SingleStack';
    }
    return undefined;
  }
  if (!a.serviceCidrV6) {
    problems.push({
      code: 'ADMISSION_INVALID',
      field: 'spec.ipFamilyPolicy',
      reason: `Invalid value: "RequireDualStack": the lab is IPv4-only (its topology has no ipv6 block)`,
    });
    return undefined;
  }
  const six = ips[1] ?? '';
  if (six !== '' && !isV6(six)) {
    problems.push({
      code: 'ADMISSION_INVALID',
      field: 'spec.clusterIPs[1]',
      reason: `Invalid value: ${JSON.stringify(six)}: may only hold one IP of each family`,
    });
    return undefined;
  }
  if (ips.length > 1) s.clusterIPs = [ips[0]!];
  return six;
}

/** clusterIPs[1]: the IPv6 ClusterIP asked for, else the one the Service had, else the next free. */
function allocateClusterIPv6(
  svc: Service,
  old: Service | undefined,
  asked: string,
  a: Allocator,
  owner: string,
  problems: Problem[],
  hold: Hold,
  taken: Taken,
): void {
  const s = svc.spec;
  const was = old?.spec.clusterIPs?.find(isV6) ?? '';
  if (was !== '' && asked !== '' && asked !== was) {
    problems.push({
      code: 'ADMISSION_IMMUTABLE',
      field: 'spec.clusterIPs[1]',
      reason: `Invalid value: "${asked}": field is immutable (the Service has IPv6 ClusterIP ${was}; delete and re-create it to change it)`,
    });
    return;
  }
  let ip = asked || was;
  if (ip === '') {
    const got = a.allocate6(owner);
    if (got === undefined) {
      problems.push({
        code: 'ADMISSION_RANGE_FULL',
        field: 'spec.clusterIPs[1]',
        reason: 'failed to allocate: range is full',
      });
      return;
    }
    taken.values.push(['clusterIP', got]);
    ip = got;
  } else if (!hold('clusterIP', ip, 'spec.clusterIPs[1]', 'IP')) return;
  if (s.clusterIP === 'None') return;
  s.clusterIPs = [s.clusterIP ?? '', ip];
  s.ipFamilies = ['IPv4', 'IPv6'];
}
type Next = (pool: Pool, field: string) => string | number | undefined;

function allocateClusterIP(
  svc: Service,
  old: Service | undefined,
  problems: Problem[],
  hold: Hold,
  next: Next,
): void {
  const s = svc.spec;
  if (s.type === 'ExternalName') return;
  if ((s.clusterIPs?.length ?? 0) > 1) {
    problems.push({
      code: 'ADMISSION_INVALID',
      field: 'spec.clusterIPs[1]',
      reason: `Invalid value: ${JSON.stringify(s.clusterIPs?.[1])}: may only hold one IP of each family (a SingleStack Service has one; dual-stack: ipFamilyPolicy PreferDualStack or RequireDualStack on a topology with an ipv6 block)`,
    });
    return;
  }
  // Name the field the user wrote; the registry keeps clusterIP and clusterIPs[0] equal after.
  const field = s.clusterIP
    ? 'spec.clusterIP'
    : s.clusterIPs?.length
      ? 'spec.clusterIPs[0]'
      : 'spec.clusterIP';
  let ip = s.clusterIP || s.clusterIPs?.[0] || '';
  const oldIP = old && old.spec.type !== 'ExternalName' ? (old.spec.clusterIP ?? '') : '';
  if (ip === '' && oldIP !== '') ip = oldIP;
  if (oldIP !== '' && ip !== oldIP) {
    problems.push({
      code: 'ADMISSION_IMMUTABLE',
      field,
      reason: `Invalid value: "${ip}": field is immutable (the Service has ClusterIP ${oldIP}; delete and re-create it to change it)`,
    });
    return;
  }
  if (ip === 'None') {
    s.clusterIP = 'None'; // headless: no VIP
    s.clusterIPs = ['None'];
    return;
  }
  if (ip === '') {
    const got = next('clusterIP', 'spec.clusterIP');
    if (got === undefined) return;
    ip = String(got);
  } else if (ipv4Problem(ip) === null) {
    hold('clusterIP', ip, field, 'IP');
  } // a malformed address is the readers' to report, with their message
  s.clusterIP = ip;
  s.clusterIPs = [ip];
}

function allocateNodePorts(svc: Service, old: Service | undefined, hold: Hold, next: Next): void {
  if (!needsNodePorts(svc.spec)) return;
  const ports = Array.isArray(svc.spec.ports) ? svc.spec.ports : [];
  ports.forEach((p, i) => {
    if (typeof p !== 'object' || p === null) return;
    const field = `spec.ports[${i}].nodePort`;
    if (p.nodePort === undefined || p.nodePort === 0) {
      const was = old ? oldNodePort(old, p) : 0;
      if (was !== 0) p.nodePort = was;
    }
    // One Service may use one number for TCP and UDP: the second port reuses the first's.
    const twin = ports.find((q, j) => j < i && q.port === p.port && q.nodePort);
    if ((p.nodePort === undefined || p.nodePort === 0) && twin?.nodePort)
      p.nodePort = twin.nodePort;
    if (p.nodePort === undefined || p.nodePort === 0) {
      const got = next('nodePort', field);
      if (got !== undefined) p.nodePort = Number(got);
    } else if (Number.isInteger(p.nodePort)) {
      hold('nodePort', p.nodePort, field, 'port');
    }
  });
}

function oldNodePort(old: Service, p: ServicePortSpec): number {
  if (old.spec.type !== 'NodePort' && old.spec.type !== 'LoadBalancer') return 0;
  const q = (old.spec.ports ?? []).find(
    (q) => q.port === p.port && (q.protocol ?? 'TCP') === (p.protocol ?? 'TCP'),
  );
  return q?.nodePort ?? 0;
}

function allocateHealthCheckNodePort(
  svc: Service,
  old: Service | undefined,
  hold: Hold,
  next: Next,
): void {
  const s = svc.spec;
  if (!needsHealthCheckNodePort(s)) return;
  const field = 'spec.healthCheckNodePort';
  if (!s.healthCheckNodePort && old && needsHealthCheckNodePort(old.spec)) {
    s.healthCheckNodePort = old.spec.healthCheckNodePort;
  }
  if (!s.healthCheckNodePort) {
    const got = next('nodePort', field);
    if (got !== undefined) s.healthCheckNodePort = Number(got);
  } else if (Number.isInteger(s.healthCheckNodePort)) {
    hold('nodePort', s.healthCheckNodePort, field, 'port');
  }
}

/** Values the old object held and the new one does not. */
function unusedOldValues(old: Service, svc: Service): [Pool, string | number][] {
  const used = (s: Service) => {
    const ips =
      s.spec.type === 'ExternalName' ? [] : (s.spec.clusterIPs ?? []).filter((ip) => ip !== 'None');
    const ports = needsNodePorts(s.spec) ? (s.spec.ports ?? []).map((p) => p.nodePort ?? 0) : [];
    if (needsHealthCheckNodePort(s.spec)) ports.push(s.spec.healthCheckNodePort ?? 0);
    return { ips, ports: ports.filter((p) => p !== 0) };
  };
  const before = used(old);
  const after = used(svc);
  const out: [Pool, string | number][] = [];
  for (const ip of before.ips) if (!after.ips.includes(ip)) out.push(['clusterIP', ip]);
  for (const p of before.ports) if (!after.ports.includes(p)) out.push(['nodePort', p]);
  return out;
}

// What kube-proxy derives from one Service port before writing rules (its servicePortInfo and
// endpointInfo): canonical addresses of the proxier's family only (family.ts), traffic-policy
// flags computed the way pkg/api/v1/service does, and endpoints deduplicated and ordered by
// their "ip:port" string as kube-proxy's EndpointsMap holds them.

import {
  type Categorized,
  categorizeEndpoints,
  type EndpointFacts,
  endpointFacts,
  policyFacts,
  type TopologyNode,
} from '../endpoints/select.ts';
import type { ResolvedServicePort } from '../model.ts';
import { type FamilyCidr, IPV4, type RulesFamily } from './family.ts';

/** An endpoint as the renderer writes it, with what selection reads (EndpointFacts). */
export interface EndpointInfo extends EndpointFacts {
  ip: string;
  port: number;
  /** "ip:port" ("[ip]:port" for IPv6), hashed into KUBE-SEP names, used in comments and DNAT */
  str: string;
}

export interface PortInfo {
  /** "ns/name[:port]" */
  spn: string;
  namespace: string;
  name: string;
  /** '' when the port is unnamed */
  portName: string;
  /** lowercase: tcp, udp, sctp */
  protocol: string;
  clusterIP: string;
  port: number;
  nodePort: number;
  externalIPs: string[];
  lbVIPs: string[];
  sourceRanges: FamilyCidr[];
  healthCheckNodePort: number;
  affinity: boolean;
  stickySeconds: number;
  externalPolicyLocal: boolean;
  internalPolicyLocal: boolean;
  endpoints: EndpointInfo[];
}

function canonList(ips: readonly string[], fam: RulesFamily): string[] {
  const out: string[] = [];
  for (const ip of ips) {
    const c = fam.canon(ip);
    if (c !== null) out.push(c);
  }
  return out;
}

function collectEndpoints(
  rsp: ResolvedServicePort,
  nodeName: string | undefined,
  fam: RulesFamily,
): EndpointInfo[] {
  const byStr = new Map<string, EndpointInfo>();
  const facts = endpointFacts(
    rsp.endpoints,
    nodeName,
    rsp.service.trafficDistribution === 'PreferClose',
  );
  for (const ep of rsp.endpoints) {
    const ip = fam.canon(ep.ip);
    if (ip === null) continue;
    const str = fam.hostPort(ip, ep.port);
    if (byStr.has(str)) continue;
    byStr.set(str, { ip, port: ep.port, str, ...facts(ep) });
  }
  // Plain code-unit order, as Go's sort on strings: "10.1.1.11:11" < "10.1.1.1:11".
  return [...byStr.values()].sort((a, b) => (a.str < b.str ? -1 : a.str > b.str ? 1 : 0));
}

/** Null when kube-proxy would skip the port (headless, ExternalName, no cluster IP of `fam`). */
export function portInfo(
  rsp: ResolvedServicePort,
  nodeName?: string,
  fam: RulesFamily = IPV4,
): PortInfo | null {
  const svc = rsp.service;
  if (svc.type === 'ExternalName') return null;
  const clusterIP = canonList(svc.clusterIPs, fam)[0];
  if (clusterIP === undefined) return null;
  const externalIPs = canonList(svc.externalIPs, fam);
  // pkg/api/v1/service: ExternallyAccessible / ExternalPolicyLocal / NeedsHealthCheck.
  const svcExternallyAccessible =
    svc.type === 'LoadBalancer' ||
    svc.type === 'NodePort' ||
    (svc.type === 'ClusterIP' && svc.externalIPs.length > 0);
  const externalPolicyLocal = svcExternallyAccessible && svc.externalTrafficPolicy === 'Local';
  const needsHealthCheck = svc.type === 'LoadBalancer' && externalPolicyLocal;
  const sourceRanges: FamilyCidr[] = [];
  for (const r of svc.loadBalancerSourceRanges) {
    const c = fam.cidr(r);
    if (c !== null) sourceRanges.push(c);
  }
  return {
    spn: rsp.servicePortName,
    namespace: svc.namespace,
    name: svc.name,
    portName: rsp.port.name,
    protocol: rsp.port.protocol.toLowerCase(),
    clusterIP,
    port: rsp.port.port,
    nodePort: rsp.port.nodePort,
    externalIPs,
    lbVIPs: canonList(svc.loadBalancerIPs, fam),
    sourceRanges,
    healthCheckNodePort: needsHealthCheck ? svc.healthCheckNodePort : 0,
    affinity: svc.sessionAffinity === 'ClientIP',
    stickySeconds: svc.sessionAffinity === 'ClientIP' ? svc.affinityTimeoutSeconds : 0,
    externalPolicyLocal,
    internalPolicyLocal: svc.internalTrafficPolicy === 'Local',
    endpoints: collectEndpoints(rsp, nodeName, fam),
  };
}

/** Reachable other than by ClusterIP (kube-proxy's per-port ExternallyAccessible). */
export function externallyAccessible(p: PortInfo): boolean {
  return p.nodePort !== 0 || p.lbVIPs.length !== 0 || p.externalIPs.length !== 0;
}

export function usesClusterEndpoints(p: PortInfo): boolean {
  return policyOf(p).usesCluster;
}

export function usesLocalEndpoints(p: PortInfo): boolean {
  return policyOf(p).usesLocal;
}

function policyOf(p: PortInfo) {
  return policyFacts(p.internalPolicyLocal, p.externalPolicyLocal, externallyAccessible(p));
}

/** Service ports in a stable order (kube-proxy walks a Go map: its order is unspecified). */
export function portInfos(
  ports: readonly ResolvedServicePort[],
  nodeName?: string,
  fam: RulesFamily = IPV4,
): PortInfo[] {
  const infos = ports.map((r) => portInfo(r, nodeName, fam)).filter((p) => p !== null);
  const key = (p: PortInfo) => `${p.spn}\u0000${p.protocol}`;
  return infos.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

/** kube-proxy's CategorizeEndpoints for one port (src/endpoints/select.ts). */
export function categorizePort(p: PortInfo, node: TopologyNode): Categorized<EndpointInfo> {
  return categorizeEndpoints(p.endpoints, policyOf(p), node);
}

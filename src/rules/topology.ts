// kube-proxy's CategorizeEndpoints (pkg/proxy/topology.go): which endpoints Cluster and Local
// traffic policy use. Ready endpoints first (filtered by topology hints when every ready
// endpoint carries one and some match this node/zone); when none is ready, serving+terminating
// endpoints, ignoring topology. Local policy falls back the same way, independently.

import type { EndpointInfo, PortInfo } from './portinfo.ts';
import { usesClusterEndpoints, usesLocalEndpoints } from './portinfo.ts';

export interface Categorized {
  cluster: EndpointInfo[];
  local: EndpointInfo[];
  /** union of the two, in endpoint order: the KUBE-SEP chains this node writes */
  reachable: EndpointInfo[];
  /** any usable endpoint anywhere in the cluster (decides REJECT vs DROP) */
  hasAny: boolean;
}

export interface TopologyNode {
  nodeName?: string;
  nodeZone?: string;
  preferSameNode: boolean;
}

type TopologyMode = '' | 'PreferSameZone' | 'PreferSameNode';

function topologyMode(eps: EndpointInfo[], node: TopologyNode): TopologyMode {
  let forNode = false;
  let allNodeHints = true;
  let forZone = false;
  let allZoneHints = true;
  for (const ep of eps) {
    if (!ep.ready) continue;
    if (ep.nodeHints.length === 0) allNodeHints = false;
    else if (node.nodeName !== undefined && ep.nodeHints.includes(node.nodeName)) forNode = true;
    if (ep.zoneHints.length === 0) allZoneHints = false;
    else if (ep.zoneHints.includes(node.nodeZone ?? '')) forZone = true;
  }
  if (node.preferSameNode && allNodeHints && forNode) return 'PreferSameNode';
  if (allZoneHints && forZone) return 'PreferSameZone';
  return '';
}

function availableForTopology(ep: EndpointInfo, mode: TopologyMode, node: TopologyNode): boolean {
  if (mode === 'PreferSameNode') return ep.nodeHints.includes(node.nodeName ?? '');
  if (mode === 'PreferSameZone') return ep.zoneHints.includes(node.nodeZone ?? '');
  return true;
}

const servingTerminating = (ep: EndpointInfo) => ep.serving && ep.terminating;

function clusterSet(eps: EndpointInfo[], node: TopologyNode): [EndpointInfo[], TopologyMode] {
  const mode = topologyMode(eps, node);
  const ready = eps.filter((ep) => ep.ready && availableForTopology(ep, mode, node));
  return [ready.length > 0 ? ready : eps.filter(servingTerminating), mode];
}

function localSet(eps: EndpointInfo[]): { local: EndpointInfo[]; terminating: boolean } {
  if (eps.some((ep) => ep.local && ep.ready)) {
    return { local: eps.filter((ep) => ep.local && ep.ready), terminating: false };
  }
  const local = eps.filter((ep) => ep.local && !ep.ready && servingTerminating(ep));
  return { local, terminating: local.length > 0 };
}

export function categorizeEndpoints(p: PortInfo, node: TopologyNode): Categorized {
  const eps = p.endpoints;
  let cluster: EndpointInfo[] = [];
  let mode: TopologyMode = '';
  let hasAny = false;
  if (usesClusterEndpoints(p)) {
    [cluster, mode] = clusterSet(eps, node);
    hasAny = cluster.length > 0;
  }
  if (!usesLocalEndpoints(p)) return { cluster, local: [], reachable: cluster, hasAny };
  if (eps.some((ep) => ep.ready || servingTerminating(ep))) hasAny = true;
  const { local, terminating } = localSet(eps);
  if (!usesClusterEndpoints(p)) return { cluster, local, reachable: local, hasAny };
  if (mode === '' && !terminating) return { cluster, local, reachable: cluster, hasAny };
  const inEither = new Set([...cluster, ...local]);
  return { cluster, local, reachable: eps.filter((ep) => inEither.has(ep)), hasAny };
}

// kube-proxy's endpoint selection, the one place for every consumer that must agree with it:
// the rules renderer (src/rules/), the loader (src/loader/), metrics (src/control/metrics.ts)
// and the health-check node ports (src/node/health-nodeport.ts). Slow world: plain arrays.
//
// CategorizeEndpoints (pkg/proxy/topology.go) splits a service port's endpoints into
//   cluster    what Cluster traffic policy sends new flows to: the Ready endpoints that topology
//              allows; when none is Ready anywhere, the serving+terminating ones (connections
//              drain gracefully during a rollout), topology ignored
//   local      what Local traffic policy sends to: this node's Ready endpoints, else this node's
//              serving+terminating ones (the fallback is per node, independent of cluster)
//   reachable  the union, in endpoint order: what the node must be able to reach
//   hasAny     some usable endpoint exists anywhere (REJECT vs DROP when a list is empty)
// Topology (topologyModeFromHints): only the Ready endpoints' hints count. PreferSameNode when
// the node prefers it, every Ready endpoint has node hints (EndpointSlice hints.forNodes) and
// one names this node; else PreferSameZone when every Ready endpoint has zone hints
// (hints.forZones) and one names this node's zone; else no topology.

import type { ResolvedEndpoint, ResolvedServicePort } from '../model.ts';

/** What selection reads of one endpoint. */
export interface EndpointFacts {
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  /** on this node */
  local: boolean;
  zoneHints: readonly string[];
  nodeHints: readonly string[];
}

/** Which policies a service port uses (pkg/proxy ServicePort.UsesClusterEndpoints/Local). */
export interface PolicyFacts {
  usesCluster: boolean;
  usesLocal: boolean;
}

export interface TopologyNode {
  nodeName?: string;
  nodeZone?: string;
  /** kube-proxy's PreferSameTrafficDistribution feature gate: node hints are honoured */
  preferSameNode: boolean;
}

export interface Categorized<T> {
  cluster: T[];
  local: T[];
  /** union of the two, in endpoint order */
  reachable: T[];
  hasAny: boolean;
  /** cluster holds the serving+terminating fallback (no endpoint is Ready anywhere) */
  clusterTerminating: boolean;
  /** local holds the serving+terminating fallback */
  localTerminating: boolean;
}

type TopologyMode = '' | 'PreferSameZone' | 'PreferSameNode';

function topologyMode(eps: readonly EndpointFacts[], node: TopologyNode): TopologyMode {
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

function forTopology(ep: EndpointFacts, mode: TopologyMode, node: TopologyNode): boolean {
  if (mode === 'PreferSameNode') return ep.nodeHints.includes(node.nodeName ?? '');
  if (mode === 'PreferSameZone') return ep.zoneHints.includes(node.nodeZone ?? '');
  return true;
}

const servingTerminating = (ep: EndpointFacts) => ep.serving && ep.terminating;

function clusterSet<T extends EndpointFacts>(eps: readonly T[], node: TopologyNode) {
  const mode = topologyMode(eps, node);
  const ready = eps.filter((ep) => ep.ready && forTopology(ep, mode, node));
  return { cluster: ready.length > 0 ? ready : eps.filter(servingTerminating), mode };
}

function localSet<T extends EndpointFacts>(eps: readonly T[]) {
  const ready = eps.filter((ep) => ep.local && ep.ready);
  if (ready.length > 0) return { local: ready, terminating: false };
  const local = eps.filter((ep) => ep.local && !ep.ready && servingTerminating(ep));
  return { local, terminating: local.length > 0 };
}

export function categorizeEndpoints<T extends EndpointFacts>(
  eps: readonly T[],
  policy: PolicyFacts,
  node: TopologyNode,
): Categorized<T> {
  let cluster: T[] = [];
  let mode: TopologyMode = '';
  let hasAny = false;
  if (policy.usesCluster) {
    ({ cluster, mode } = clusterSet(eps, node));
    hasAny = cluster.length > 0;
  }
  const clusterTerminating = cluster.length > 0 && !cluster.some((ep) => ep.ready);
  const none = { local: [] as T[], localTerminating: false, clusterTerminating };
  if (!policy.usesLocal) return { cluster, reachable: cluster, hasAny, ...none };
  if (eps.some((ep) => ep.ready || servingTerminating(ep))) hasAny = true;
  const { local, terminating } = localSet(eps);
  const base = { cluster, local, hasAny, clusterTerminating, localTerminating: terminating };
  if (!policy.usesCluster) return { ...base, reachable: local };
  if (mode === '' && !terminating) return { ...base, reachable: cluster };
  const inEither = new Set<T>([...cluster, ...local]);
  return { ...base, reachable: eps.filter((ep) => inEither.has(ep)) };
}

/**
 * pkg/proxy's UsesClusterEndpoints / UsesLocalEndpoints: Cluster endpoints serve every path
 * but an internalTrafficPolicy-Local ClusterIP that nothing external reaches; Local endpoints
 * serve internalTrafficPolicy Local and, when the port is reachable from outside,
 * externalTrafficPolicy Local.
 */
export function policyFacts(
  internalLocal: boolean,
  externalLocal: boolean,
  externallyAccessible: boolean,
): PolicyFacts {
  return {
    usesCluster: !internalLocal || externallyAccessible,
    usesLocal: internalLocal || (externalLocal && externallyAccessible),
  };
}

export interface PortPolicy extends PolicyFacts {
  /** internalTrafficPolicy Local (applied only when the node's name is known) */
  internalLocal: boolean;
  /** externalTrafficPolicy Local on a port reachable from outside (kube-proxy's
   * ExternalPolicyLocal and ExternallyAccessible) */
  externalLocal: boolean;
}

/** pkg/api/v1/service's policy predicates for one model service port. */
export function portPolicy(rsp: ResolvedServicePort, nodeName: string | undefined): PortPolicy {
  const svc = rsp.service;
  const reachableFromOutside =
    rsp.port.nodePort !== 0 || svc.externalIPs.length > 0 || svc.loadBalancerIPs.length > 0;
  const svcExternal =
    svc.type === 'LoadBalancer' ||
    svc.type === 'NodePort' ||
    (svc.type === 'ClusterIP' && svc.externalIPs.length > 0);
  const internalLocal = svc.internalTrafficPolicy === 'Local' && nodeName !== undefined;
  const etpLocal = svcExternal && svc.externalTrafficPolicy === 'Local';
  const facts = policyFacts(internalLocal, etpLocal, reachableFromOutside);
  return { ...facts, internalLocal, externalLocal: etpLocal && reachableFromOutside };
}

/** What a node needs to select one model service port's endpoints. */
export interface NodeSelection {
  /** unset: no endpoint is local, internalTrafficPolicy Local is not applied */
  nodeName?: string;
  nodeZone?: string;
  /** default true: node hints honoured (PreferSameNode), as the rules renderer's default */
  preferSameNode?: boolean;
}

/**
 * A model service port (ResolvedServicePort) through categorizeEndpoints: the loader, metrics
 * and the agreement test call this; the rules renderer calls categorizeEndpoints on its
 * canonicalised PortInfo with the same facts (src/rules/portinfo.ts).
 */
export function selectPortEndpoints(
  rsp: ResolvedServicePort,
  node: NodeSelection,
): Categorized<ResolvedEndpoint> {
  const svc = rsp.service;
  const policy = portPolicy(rsp, node.nodeName);
  const facts = endpointFacts(rsp.endpoints, node.nodeName, svc.trafficDistribution === 'PreferClose');
  const withFacts = rsp.endpoints.map((ep) => ({ ep, ...facts(ep) }));
  const topo = { ...node, preferSameNode: node.preferSameNode ?? true };
  const c = categorizeEndpoints(withFacts, policy, topo);
  const unwrap = (l: typeof withFacts) => l.map((x) => x.ep);
  return { ...c, cluster: unwrap(c.cluster), local: unwrap(c.local), reachable: unwrap(c.reachable) };
}

/**
 * The hints an endpoint carries. A manifests directory has no EndpointSlice controller: for
 * trafficDistribution PreferClose (= PreferSameZone) the endpoint's own zone stands in for the
 * hint the controller would write, unless some endpoint carries explicit hints.
 */
export function endpointFacts(
  eps: readonly ResolvedEndpoint[],
  nodeName: string | undefined,
  preferClose: boolean,
): (ep: ResolvedEndpoint) => EndpointFacts {
  const explicit = eps.some((e) => e.ready && (e.hintsForZones?.length ?? 0) > 0);
  const synth = preferClose && !explicit;
  return (ep) => ({
    ready: ep.ready,
    serving: ep.serving,
    terminating: ep.terminating,
    local: nodeName !== undefined && ep.nodeName === nodeName,
    zoneHints: ep.hintsForZones?.length ? ep.hintsForZones : synth && ep.zone ? [ep.zone] : [],
    nodeHints: ep.hintsForNodes ?? [],
  });
}

/**
 * The health-check node port's count for externalTrafficPolicy: Local (kube-proxy's
 * LocalReadyEndpoints): this node's Ready endpoints, each address once. Terminating endpoints
 * do not count, not even as the fallback `local` uses: a node whose only local endpoints are
 * terminating answers 503 so the load balancer drains it (Kubernetes e2e "should fail health
 * check node port if there are only terminating endpoints").
 */
export function localReadyAddresses(eps: readonly ResolvedEndpoint[], node: string): Set<string> {
  return new Set(eps.filter((e) => e.ready && e.nodeName === node).map((e) => e.ip));
}

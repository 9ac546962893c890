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

// The sets below are plain loops, not filter() with closures and object spreads: the loader
// selects every service port of a full load (10k at the agent's start, and again for the
// metrics after each sync), where the spread copies were most of its planning (issue 18).

function clusterSet<T extends EndpointFacts>(
  eps: readonly T[],
  mode: TopologyMode,
  node: TopologyNode,
): T[] {
  const ready: T[] = [];
  for (const ep of eps) if (ep.ready && forTopology(ep, mode, node)) ready.push(ep);
  if (ready.length > 0) return ready;
  const draining: T[] = [];
  for (const ep of eps) if (servingTerminating(ep)) draining.push(ep);
  return draining;
}

/** This node's Ready endpoints, else its serving+terminating ones (then `terminating`). */
function localSet<T extends EndpointFacts>(
  eps: readonly T[],
): { local: T[]; terminating: boolean } {
  const ready: T[] = [];
  for (const ep of eps) if (ep.local && ep.ready) ready.push(ep);
  if (ready.length > 0) return { local: ready, terminating: false };
  const local: T[] = [];
  for (const ep of eps) if (ep.local && !ep.ready && servingTerminating(ep)) local.push(ep);
  return { local, terminating: local.length > 0 };
}

function someReady(eps: readonly EndpointFacts[]): boolean {
  for (const ep of eps) if (ep.ready) return true;
  return false;
}

function categorized<T>(
  cluster: T[],
  local: T[],
  reachable: T[],
  hasAny: boolean,
  clusterTerminating: boolean,
  localTerminating: boolean,
): Categorized<T> {
  return { cluster, local, reachable, hasAny, clusterTerminating, localTerminating };
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
    mode = topologyMode(eps, node);
    cluster = clusterSet(eps, mode, node);
    hasAny = cluster.length > 0;
  }
  const clusterTerminating = cluster.length > 0 && !someReady(cluster);
  if (!policy.usesLocal)
    return categorized(cluster, [], cluster, hasAny, clusterTerminating, false);
  for (const ep of eps) if (ep.ready || servingTerminating(ep)) hasAny = true;
  const { local, terminating } = localSet(eps);
  const reachable = !policy.usesCluster
    ? local
    : mode === '' && !terminating
      ? cluster
      : inEither(eps, cluster, local);
  return categorized(cluster, local, reachable, hasAny, clusterTerminating, terminating);
}

/** The endpoints in `a` or `b`, in the order of `eps`. */
function inEither<T>(eps: readonly T[], a: readonly T[], b: readonly T[]): T[] {
  const set = new Set<T>([...a, ...b]);
  return eps.filter((ep) => set.has(ep));
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
  const { usesCluster, usesLocal } = policyFacts(internalLocal, etpLocal, reachableFromOutside);
  const externalLocal = etpLocal && reachableFromOutside;
  return { usesCluster, usesLocal, internalLocal, externalLocal };
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
  const eps = rsp.endpoints;
  const policy = portPolicy(rsp, node.nodeName);
  const synth = synthZones(eps, svc.trafficDistribution === 'PreferClose');
  const withFacts: WithFacts[] = [];
  for (const ep of eps) withFacts.push(new WithFacts(ep, node.nodeName, synth));
  const topo: TopologyNode = {
    nodeName: node.nodeName,
    nodeZone: node.nodeZone,
    preferSameNode: node.preferSameNode ?? true,
  };
  const c = categorizeEndpoints(withFacts, policy, topo);
  const cluster = unwrap(c.cluster);
  const local = unwrap(c.local);
  const reachable =
    c.reachable === c.cluster ? cluster : c.reachable === c.local ? local : unwrap(c.reachable);
  return categorized(cluster, local, reachable, c.hasAny, c.clusterTerminating, c.localTerminating);
}

/** A model endpoint and its facts (endpointFacts's), one object of one shape per endpoint. */
class WithFacts implements EndpointFacts {
  readonly ready: boolean;
  readonly serving: boolean;
  readonly terminating: boolean;
  readonly local: boolean;
  readonly zoneHints: readonly string[];
  readonly nodeHints: readonly string[];
  constructor(
    readonly ep: ResolvedEndpoint,
    nodeName: string | undefined,
    synth: boolean,
  ) {
    this.ready = ep.ready;
    this.serving = ep.serving;
    this.terminating = ep.terminating;
    this.local = nodeName !== undefined && ep.nodeName === nodeName;
    this.zoneHints = zoneHints(ep, synth);
    this.nodeHints = ep.hintsForNodes ?? NO_HINTS;
  }
}

function unwrap(l: readonly WithFacts[]): ResolvedEndpoint[] {
  const out: ResolvedEndpoint[] = [];
  for (const x of l) out.push(x.ep);
  return out;
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
  const synth = synthZones(eps, preferClose);
  return (ep) => ({
    ready: ep.ready,
    serving: ep.serving,
    terminating: ep.terminating,
    local: nodeName !== undefined && ep.nodeName === nodeName,
    zoneHints: zoneHints(ep, synth),
    nodeHints: ep.hintsForNodes ?? NO_HINTS,
  });
}

/** Whether the endpoints' own zones stand in for zone hints (endpointFacts). */
function synthZones(eps: readonly ResolvedEndpoint[], preferClose: boolean): boolean {
  return preferClose && !eps.some((e) => e.ready && (e.hintsForZones?.length ?? 0) > 0);
}

function zoneHints(ep: ResolvedEndpoint, synth: boolean): readonly string[] {
  return ep.hintsForZones?.length ? ep.hintsForZones : synth && ep.zone ? [ep.zone] : NO_HINTS;
}

/** No hints: one shared empty list, not one per endpoint (never written to). */
const NO_HINTS: readonly string[] = Object.freeze([]);

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

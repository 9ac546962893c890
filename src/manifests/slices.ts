// The EndpointSlice resolver (kube-proxy's endpointSliceCache, pkg/proxy/endpointslicecache.go):
// the slices of a Service merged into endpoints per service port, keyed like ServicePortName
// (name and protocol), deduplicated by "ip:port" and sorted by that string. One resolver for
// the change tracker (src/control/tracker.ts) and the manifests path (resolve.ts).

import type { EndpointSlice, IPFamily, Protocol, ResolvedEndpoint } from '../model.ts';

/** The merged endpoints of one service port, as kube-proxy's endpointSliceCache builds them. */
export interface EndpointsEntry {
  servicePortName: string;
  protocol: Protocol;
  /** deduplicated by "ip:port", sorted by that string */
  endpoints: ResolvedEndpoint[];
}

/**
 * Whether two entries hold the same endpoints, every field compared (as JSON). Computed when a
 * change asks, not kept per entry: a string per service port for the few that change.
 */
export function sameEndpoints(a: EndpointsEntry, b: EndpointsEntry): boolean {
  return JSON.stringify(a.endpoints) === JSON.stringify(b.endpoints);
}

/**
 * Endpoints are keyed like kube-proxy's ServicePortName: name and protocol; an IPv6 entry (a
 * map holding both families: the change tracker's) also by its family.
 */
export function endpointsKey(spn: string, protocol: Protocol, family: IPFamily = 'IPv4'): string {
  return family === 'IPv4' ? `${spn}|${protocol}` : `${spn}|${protocol}|${family}`;
}

/** kube-proxy's endpoint String(): net.JoinHostPort, so an IPv6 address is bracketed. */
export function endpointString(e: { ip: string; port: number }): string {
  return e.ip.includes(':') ? `[${e.ip}]:${e.port}` : `${e.ip}:${e.port}`;
}

/**
 * Merges the slices of one service into endpoints per endpointsKey(). Only slices of `family`
 * count (kube-proxy's endpointSliceCache is per family: an IPv4 proxier never sees IPv6 slices);
 * an endpoint uses its first address (kube-proxy ignores the rest); slice ports without a
 * number are skipped. A duplicate "ip:port" keeps the first slice's copy (slices in name order)
 * unless a later one is ready where it was not, or, equally ready, local to nodeName where it
 * was not. The change tracker (src/control/tracker.ts) and resolveServicePorts
 * (resolve.ts, the manifests path and `kubetun rules`) both call this: one resolver.
 */
export function buildEndpoints(
  slices: EndpointSlice[],
  nodeName?: string,
  family: IPFamily = 'IPv4',
): Map<string, EndpointsEntry> {
  const sets = new Map<
    string,
    { spn: string; protocol: Protocol; eps: Map<string, ResolvedEndpoint> }
  >();
  const ordered = [...slices].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const s of ordered) {
    if (s.addressType !== family) continue;
    for (const p of s.ports) {
      if (!p.port) continue;
      const spn = p.name
        ? `${s.namespace}/${s.serviceName}:${p.name}`
        : `${s.namespace}/${s.serviceName}`;
      const key = endpointsKey(spn, p.protocol, family);
      let set = sets.get(key);
      if (!set) {
        set = { spn, protocol: p.protocol, eps: new Map() };
        sets.set(key, set);
      }
      addSliceEndpoints(set.eps, s, p.port, nodeName);
    }
  }
  const out = new Map<string, EndpointsEntry>();
  for (const [key, set] of sets) {
    const keys = [...set.eps.keys()].sort();
    const endpoints = keys.map((k) => set.eps.get(k)!);
    out.set(key, { servicePortName: set.spn, protocol: set.protocol, endpoints });
  }
  return out;
}

function addSliceEndpoints(
  eps: Map<string, ResolvedEndpoint>,
  s: EndpointSlice,
  port: number,
  nodeName: string | undefined,
): void {
  for (const e of s.endpoints) {
    if (e.addresses.length === 0) continue;
    const ep: ResolvedEndpoint = {
      ip: e.addresses[0],
      port,
      ready: e.conditions.ready,
      serving: e.conditions.serving,
      terminating: e.conditions.terminating,
    };
    if (e.nodeName !== undefined) ep.nodeName = e.nodeName;
    if (e.zone !== undefined) ep.zone = e.zone;
    if (e.hintsForZones !== undefined) ep.hintsForZones = e.hintsForZones;
    if (e.hintsForNodes !== undefined) ep.hintsForNodes = e.hintsForNodes;
    if (e.targetName !== undefined) ep.targetName = e.targetName;
    const k = endpointString(ep);
    const prev = eps.get(k);
    if (!prev || preferred(ep, prev, nodeName)) eps.set(k, ep);
  }
}

function preferred(cand: ResolvedEndpoint, prev: ResolvedEndpoint, nodeName?: string): boolean {
  if (cand.ready !== prev.ready) return cand.ready;
  return nodeName !== undefined && cand.nodeName === nodeName && prev.nodeName !== nodeName;
}

// Services × EndpointSlices → one ResolvedServicePort per service port, the unit kube-proxy
// programs (pkg/proxy/endpointslicecache.go): the slices of a Service are merged, the slice port
// is matched to the service port by name and protocol (the EndpointSlice controller has already
// resolved targetPort), endpoints are deduplicated by ip:port and sorted by that string.
import {
  type EndpointSlice,
  type EndpointSlicePort,
  type ClusterState,
  type ResolvedEndpoint,
  type ResolvedServicePort,
  type ServicePort,
  servicePortName,
} from '../model.ts';

export interface ResolveOptions {
  /** this node's name: among duplicates, an endpoint on this node is preferred, as kube-proxy does */
  nodeName?: string;
}

export function resolveServicePorts(
  state: ClusterState,
  opts: ResolveOptions = {},
): ResolvedServicePort[] {
  const slicesByService = groupSlices(state.slices);
  const out: ResolvedServicePort[] = [];
  for (const service of state.services) {
    // Headless and ExternalName Services have no VIP: DNS answers for them, kube-proxy skips them.
    if (service.type === 'ExternalName' || service.clusterIPs.length === 0) continue;
    const slices = slicesByService.get(`${service.namespace}/${service.name}`) ?? [];
    for (const port of service.ports) {
      out.push({
        service,
        port,
        servicePortName: servicePortName(service, port),
        endpoints: resolveEndpoints(slices, port, opts.nodeName),
      });
    }
  }
  return out;
}

/** IPv4 slices per "namespace/service", in slice-name order so "first wins" is deterministic. */
function groupSlices(slices: EndpointSlice[]): Map<string, EndpointSlice[]> {
  const by = new Map<string, EndpointSlice[]>();
  const sorted = slices
    .filter((s) => s.addressType === 'IPv4')
    .sort((a, b) => compare(a.name, b.name));
  for (const s of sorted) {
    const key = `${s.namespace}/${s.serviceName}`;
    const list = by.get(key);
    if (list) list.push(s);
    else by.set(key, [s]);
  }
  return by;
}

function resolveEndpoints(
  slices: EndpointSlice[],
  port: ServicePort,
  nodeName?: string,
): ResolvedEndpoint[] {
  const byKey = new Map<string, ResolvedEndpoint>();
  for (const slice of slices) {
    const sp = matchSlicePort(slice.ports, port);
    if (!sp) continue;
    for (const ep of slice.endpoints) {
      const cand = resolvedEndpoint(ep, sp.port);
      const key = `${cand.ip}:${cand.port}`;
      const prev = byKey.get(key);
      if (!prev || preferred(cand, prev, nodeName)) byKey.set(key, cand);
    }
  }
  return [...byKey.entries()].sort((a, b) => compare(a[0], b[0])).map((e) => e[1]);
}

/** kube-proxy keys endpoints by ServicePortName: the slice port's name and protocol must match. */
function matchSlicePort(
  ports: EndpointSlicePort[],
  port: ServicePort,
): EndpointSlicePort | undefined {
  return ports.find((p) => p.name === port.name && p.protocol === port.protocol);
}

/** kube-proxy uses only the first address of an endpoint. */
function resolvedEndpoint(ep: EndpointSlice['endpoints'][number], port: number): ResolvedEndpoint {
  const r: ResolvedEndpoint = {
    ip: ep.addresses[0],
    port,
    ready: ep.conditions.ready,
    serving: ep.conditions.serving,
    terminating: ep.conditions.terminating,
  };
  if (ep.nodeName !== undefined) r.nodeName = ep.nodeName;
  if (ep.zone !== undefined) r.zone = ep.zone;
  if (ep.hintsForZones !== undefined) r.hintsForZones = ep.hintsForZones;
  if (ep.hintsForNodes !== undefined) r.hintsForNodes = ep.hintsForNodes;
  if (ep.targetName !== undefined) r.targetName = ep.targetName;
  return r;
}

/**
 * Among duplicates the first seen wins, except that a ready copy beats a not-ready one (a stale
 * slice must not hide a live endpoint) and, at equal readiness, a copy on this node beats one
 * that is not (kube-proxy favours isLocal).
 */
function preferred(cand: ResolvedEndpoint, prev: ResolvedEndpoint, nodeName?: string): boolean {
  if (cand.ready !== prev.ready) return cand.ready;
  if (nodeName === undefined) return false;
  return cand.nodeName === nodeName && prev.nodeName !== nodeName;
}

/** Go's string order (UTF-16 code units equal bytes for the ASCII we compare). */
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

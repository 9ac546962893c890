// Services × EndpointSlices → one ResolvedServicePort per service port, the unit kube-proxy
// programs. The slices are merged by the one EndpointSlice resolver (slices.ts, which the change
// tracker uses too); Services kube-proxy does not proxy are skipped (proxied.ts).
import {
  type ClusterState,
  type IPFamily,
  ipsOfFamily,
  type ResolvedServicePort,
  servicePortName,
} from '../model.ts';
import { proxiedByKubeProxy } from './proxied.ts';
import { buildEndpoints, endpointsKey } from './slices.ts';

export interface ResolveOptions {
  /** this node's name: among duplicates, an endpoint on this node is preferred, as kube-proxy does */
  nodeName?: string;
  /**
   * The family resolved (default IPv4): Services with no ClusterIP of it are skipped, as
   * kube-proxy's ShouldSkipService does per proxier, and only its EndpointSlices count.
   */
  family?: IPFamily;
}

export function resolveServicePorts(
  state: ClusterState,
  opts: ResolveOptions = {},
): ResolvedServicePort[] {
  const slicesByService = groupSlices(state.slices);
  const family = opts.family ?? 'IPv4';
  const out: ResolvedServicePort[] = [];
  for (const service of state.services) {
    // Headless and ExternalName Services have no VIP: DNS answers for them, kube-proxy skips them.
    if (service.type === 'ExternalName' || service.clusterIPs.length === 0) continue;
    if (!proxiedByKubeProxy(service.labels)) continue;
    if (ipsOfFamily(service.clusterIPs, family).length === 0) continue;
    const slices = slicesByService.get(`${service.namespace}/${service.name}`) ?? [];
    const merged = buildEndpoints(slices, opts.nodeName, family);
    for (const port of service.ports) {
      const spn = servicePortName(service, port);
      const endpoints = merged.get(endpointsKey(spn, port.protocol, family))?.endpoints ?? [];
      out.push({ service, port, servicePortName: spn, endpoints });
    }
  }
  return out;
}

function groupSlices(slices: ClusterState['slices']): Map<string, ClusterState['slices']> {
  const by = new Map<string, ClusterState['slices']>();
  for (const s of slices) {
    const key = `${s.namespace}/${s.serviceName}`;
    const list = by.get(key);
    if (list) list.push(s);
    else by.set(key, [s]);
  }
  return by;
}

export { endpointString } from './slices.ts';

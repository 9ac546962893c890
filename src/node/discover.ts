// Pod interfaces: the lab (and a CNI's host-local routes) puts `<pod ip>/32 dev <veth>` in the
// node's main table, so a pod interface is any device other than the uplink and the TUN with a
// route to a destination inside this node's pod CIDR. A route wider than the pod CIDR (a default
// route, the cluster CIDR) does not count.
import { type Cidr, ipv4ToU32 } from '../wire/addr.ts';
import { runJson } from './sh.ts';

interface IpRoute {
  dst: string;
  dev?: string;
  type?: string;
}

export function podIfacesFromRoutes(
  routes: readonly IpRoute[],
  podCidr: Cidr,
  exclude: readonly string[],
): string[] {
  const found = new Set<string>();
  for (const r of routes) {
    if (!r.dev || exclude.includes(r.dev) || r.dst === 'default') continue;
    if (r.type && r.type !== 'unicast') continue;
    const [addr, len] = r.dst.split('/');
    const prefix = len === undefined ? 32 : Number(len);
    let a: number;
    try {
      a = ipv4ToU32(addr);
    } catch {
      continue;
    }
    if (prefix >= podCidr.prefix && (a & podCidr.mask) >>> 0 === podCidr.addr) found.add(r.dev);
  }
  return [...found].sort();
}

export function discoverPodIfaces(podCidr: Cidr, exclude: readonly string[]): string[] {
  const routes = runJson<IpRoute>(['ip', '-j', '-4', 'route', 'show', 'table', 'main']);
  return podIfacesFromRoutes(routes, podCidr, exclude);
}

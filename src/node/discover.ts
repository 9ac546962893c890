// Pod interfaces: the devices whose ingress steering hooks (steering.ts hookPod), for the two
// layouts CNIs build on a node.
//
//   per-pod veths with host routes (kindnet, Calico, the lab's default): the node's main table
//     holds `<pod ip>/32 dev <veth>`; a pod interface is any device other than the uplink and the
//     TUN with a route to a destination inside this node's pod CIDR. A route wider than the pod
//     CIDR (a default route, the cluster CIDR) does not count.
//   pods on a bridge (flannel, the bridge plugin: `cni0`): the pod CIDR is the bridge's connected
//     route, and the pods' veths are its ports. The ports are hooked, not the bridge: a reply of
//     a local backend to a local client is bridged port to port and never reaches the bridge's
//     own ingress (kube-proxy needs br_netfilter for that; a port's tc ingress sees every frame).
//
// kube-proxy's interface detectors name the devices instead (src/rules/local-detect.ts):
// BridgeInterface hooks exactly the named bridge's ports, InterfaceNamePrefix every link whose
// name starts with the prefix (Calico's `cali`). The CIDR modes discover by route.
//
// The routes and links are read from /proc/net/route and /sys/class/net, not from `ip -j`: the
// agent rescans every few seconds, and two forks of the agent each time blocked its packet loop
// for a millisecond natively and for seconds under the VM lab's software emulation.
import { readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { basename } from 'node:path';
import type { LocalDetector } from '../rules/local-detect.ts';
import { type Cidr, ipv4ToU32, u32ToIpv4 } from '../wire/addr.ts';

interface IpRoute {
  dst: string;
  dev?: string;
  type?: string;
}

/** `ip -j -d link show`: the fields discovery reads. */
export interface IpLink {
  ifname: string;
  /** the bridge (or bond) this link is a port of */
  master?: string;
  linkinfo?: { info_kind?: string };
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

/** The ports of a bridge (its veths), sorted. */
export function bridgePorts(links: readonly IpLink[], bridge: string): string[] {
  return links
    .filter((l) => l.master === bridge)
    .map((l) => l.ifname)
    .sort();
}

/** Devices found by route, each bridge among them replaced by its ports. */
export function expandBridges(devs: readonly string[], links: readonly IpLink[]): string[] {
  const kind = new Map(links.map((l) => [l.ifname, l.linkinfo?.info_kind]));
  const out = new Set<string>();
  for (const d of devs) {
    if (kind.get(d) === 'bridge') for (const p of bridgePorts(links, d)) out.add(p);
    else out.add(d);
  }
  return [...out].sort();
}

/** The pod interfaces for this detector (see the header), from `ip` JSON (pure, for tests). */
export function podIfacesFor(
  local: LocalDetector,
  routes: readonly IpRoute[],
  links: readonly IpLink[],
  podCidr: Cidr,
  exclude: readonly string[],
): string[] {
  if (local.by === 'iface' && !local.prefix) return bridgePorts(links, local.iface);
  if (local.by === 'iface') {
    return links
      .map((l) => l.ifname)
      .filter((n) => n.startsWith(local.iface) && !exclude.includes(n))
      .sort();
  }
  return expandBridges(podIfacesFromRoutes(routes, podCidr, exclude), links);
}

export function discoverPodIfaces(
  local: LocalDetector,
  podCidr: Cidr,
  exclude: readonly string[],
): string[] {
  return podIfacesFor(local, readRoutes(), readLinks(), podCidr, exclude);
}

/** RTF_REJECT: an unreachable or prohibit route. */
const RTF_REJECT = 0x0200;

/**
 * The main table's IPv4 routes as `ip -j -4 route show table main` gives the fields discovery
 * reads, from /proc/net/route (this network namespace's: Iface, Destination and Mask in hex,
 * the address's bytes in memory order).
 */
export function parseProcNetRoute(text: string): IpRoute[] {
  const out: IpRoute[] = [];
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8) continue;
    const [dev, dest, , flags, , , , mask] = f;
    // no device ('*': blackhole, unreachable, prohibit) or a reject route: nothing to hook
    if (dev === '*' || Number.parseInt(flags!, 16) & RTF_REJECT) continue;
    const len = Math.clz32(~hexAddr(mask!)); // the mask's leading ones
    const dst = len === 0 ? 'default' : `${u32ToIpv4(hexAddr(dest!))}/${len}`;
    out.push({ dst, dev, type: 'unicast' });
  }
  return out;
}

/** /proc/net/route's hex is the address in memory order: 0102A8C0 is 192.168.2.1. */
function hexAddr(hex: string): number {
  const v = Number.parseInt(hex, 16);
  return (
    (((v & 0xff) << 24) | (((v >>> 8) & 0xff) << 16) | (((v >>> 16) & 0xff) << 8) | (v >>> 24)) >>>
    0
  );
}

function readRoutes(): IpRoute[] {
  return parseProcNetRoute(readFileSync('/proc/net/route', 'utf8'));
}

/** The links as `ip -j -d link show` gives what discovery reads: name, master, bridge or not. */
export function readLinks(sysClassNet = '/sys/class/net'): IpLink[] {
  return readdirSync(sysClassNet).map((ifname) => {
    const dir = `${sysClassNet}/${ifname}`;
    const link: IpLink = { ifname };
    try {
      link.master = basename(readlinkSync(`${dir}/master`));
    } catch {}
    try {
      if (statSync(`${dir}/bridge`).isDirectory()) link.linkinfo = { info_kind: 'bridge' };
    } catch {}
    return link;
  });
}

/** `ip -j addr show`: the fields localAddrsFrom reads. */
export interface IpAddrs {
  ifname: string;
  addr_info?: { family?: string; local?: string; scope?: string }[];
}

/**
 * The node's own global addresses of each family, on every device but `exclude` (the TUN, lo),
 * deduplicated (a pod gateway sits on every veth): where replies of the node's own flows — and
 * of masqueraded ones, to their SNAT ports — arrive, delivered locally and never routed into the
 * TUN (steering.ts guards its endpoint tables with them). Pure, for tests.
 */
export function localAddrsFrom(
  addrs: readonly IpAddrs[],
  exclude: readonly string[],
): { v4: string[]; v6: string[] } {
  const v4 = new Set<string>();
  const v6 = new Set<string>();
  for (const d of addrs) {
    if (exclude.includes(d.ifname)) continue;
    for (const a of d.addr_info ?? []) {
      if (a.scope !== 'global' || !a.local) continue;
      if (a.family === 'inet') v4.add(a.local);
      else if (a.family === 'inet6') v6.add(a.local);
    }
  }
  return { v4: [...v4].sort(), v6: [...v6].sort() };
}

/**
 * Whether this detector's pods sit on a bridge (flannel, the bridge plugin): a reply of a local
 * backend to a local client is then bridged port to port, never routed.
 */
export function podsOnBridge(
  local: LocalDetector,
  routes: readonly IpRoute[],
  links: readonly IpLink[],
  podCidr: Cidr,
  exclude: readonly string[],
): boolean {
  if (local.by === 'iface') return !local.prefix;
  const kind = new Map(links.map((l) => [l.ifname, l.linkinfo?.info_kind]));
  return podIfacesFromRoutes(routes, podCidr, exclude).some((d) => kind.get(d) === 'bridge');
}

export function discoverPodsOnBridge(
  local: LocalDetector,
  podCidr: Cidr,
  exclude: readonly string[],
): boolean {
  return podsOnBridge(local, readRoutes(), readLinks(), podCidr, exclude);
}

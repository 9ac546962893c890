// `lab up --mode iptables|nftables`: the kernel as the data plane, programmed with the ruleset
// kube-proxy's iptables or nftables proxier would write for the same manifests (src/rules). The
// same topology and tests then show what kubetun must reproduce — the reference behaviour.
//
// Per node, in its namespace:
//   iptables: ensure the jumps from the built-in chains (kube-proxy does this before every full
//             sync), then `iptables-restore --noflush` the full ruleset;
//   nftables: `nft -f` the table `ip kube-proxy` (it brings its own base chains);
// with the node's name (local endpoints), node IP and cluster CIDR (the local-traffic detector
// that decides masquerading), and the conntrack sysctls kube-proxy sets at startup.
// A dual-stack topology gets kube-proxy's IPv6 proxier beside it, as a dual-stack kube-proxy
// runs one per family: `ip6tables-restore` of the IPv6 ruleset (after the ip6tables jumps), or
// the table `ip6 kube-proxy`, from the IPv6 ClusterIPs and IPv6 EndpointSlices of the same view,
// with the node's IPv6 address and the IPv6 cluster CIDR.
import { cpus } from 'node:os';
import { loadManifests, resolveServicePorts } from '../manifests/index.ts';
import { renderIptables } from '../rules/iptables.ts';
import { renderJumpCommands } from '../rules/jumps.ts';
import { renderNftables } from '../rules/nftables.ts';
import { inNs, sh, shTry } from '../sh.ts';
import { VIEW_DIR } from './state.ts';
import type { LabNode, Topology } from './topology.ts';
import type { IPFamily } from '../model.ts';

export type KernelMode = 'iptables' | 'nftables';
export const KERNEL_MODES: readonly KernelMode[] = ['iptables', 'nftables'];

export function isKernelMode(m: string): m is KernelMode {
  return (KERNEL_MODES as readonly string[]).includes(m);
}

function nodePorts(dir: string, n: LabNode, family: IPFamily = 'IPv4') {
  return resolveServicePorts(loadManifests(dir), { nodeName: n.name, family });
}

/** The families kube-proxy runs a proxier for on this topology's nodes. */
export function labFamilies(t: Topology): IPFamily[] {
  return t.ipv6 ? ['IPv4', 'IPv6'] : ['IPv4'];
}

/** What the proxier of one family is told about the node and the cluster. */
function familyOptions(t: Topology, n: LabNode, family: IPFamily) {
  return family === 'IPv6'
    ? { ipFamily: family, nodeIPs: [n.ip6!], clusterCIDR: t.ipv6!.clusterCidr }
    : { ipFamily: family, nodeIPs: [n.ip], clusterCIDR: t.clusterCidr };
}

/** The iptables-restore (IPv6: ip6tables-restore) input for one node, from the view directory. */
export function nodeIptablesRules(
  t: Topology,
  n: LabNode,
  dir = VIEW_DIR,
  family: IPFamily = 'IPv4',
): string {
  return renderIptables(nodePorts(dir, n, family), {
    nodeName: n.name,
    ...familyOptions(t, n, family),
    // xt_nfacct is often missing (it is here); kube-proxy then leaves the counter rules out too.
    nfacct: false,
  });
}

/** The `nft -f` input for one node: table ip kube-proxy (IPv6: table ip6 kube-proxy). */
export function nodeNftablesRules(
  t: Topology,
  n: LabNode,
  dir = VIEW_DIR,
  family: IPFamily = 'IPv4',
): string {
  return renderNftables(nodePorts(dir, n, family), {
    nodeName: n.name,
    ...familyOptions(t, n, family),
    serviceCIDRs: family === 'IPv6' ? [t.ipv6!.serviceCidr] : [t.serviceCidr],
  });
}

/** Installs kube-proxy's iptables ruleset (each family's) on one node; returns the number of rules. */
export function installKubeProxyRules(t: Topology, n: LabNode, dir = VIEW_DIR): number {
  let count = 0;
  for (const family of labFamilies(t)) {
    addServiceRoute(t, n, family);
    const cmd = family === 'IPv6' ? 'ip6tables' : 'iptables';
    sh(inNs(n.ns, ['sh', '-c', renderJumpCommands(cmd)]));
    const rules = nodeIptablesRules(t, n, dir, family);
    sh(inNs(n.ns, [`${cmd}-restore`, '-w', '--noflush', '--counters']), { input: rules });
    count += rules.split('\n').filter((l) => l.startsWith('-A ')).length;
  }
  return count;
}

/** Installs kube-proxy's nftables table (each family's) on one node; returns the number of rules. */
export function installKubeProxyNftables(t: Topology, n: LabNode, dir = VIEW_DIR): number {
  let count = 0;
  for (const family of labFamilies(t)) {
    addServiceRoute(t, n, family);
    const rules = nodeNftablesRules(t, n, dir, family);
    // A re-sync (the view changed) replaces the table in the same nft transaction, so no stale
    // chain or set element survives and no packet sees half a ruleset.
    const table = `table ${family === 'IPv6' ? 'ip6' : 'ip'} kube-proxy`;
    const replace = `add ${table}\ndelete ${table}\n`;
    sh(inNs(n.ns, ['nft', '-f', '-']), { input: replace + rules });
    count += rules.split('\n').filter((l) => l.startsWith('add rule ')).length;
  }
  return count;
}

/**
 * Real nodes have a default route, so a packet to a VIP is routed (towards the gateway) and
 * meets the FORWARD hook, where kube-proxy REJECTs ports without endpoints. Lab nodes have no
 * default route: without this one the route lookup fails before any filter rule runs.
 */
function addServiceRoute(t: Topology, n: LabNode, family: IPFamily = 'IPv4'): void {
  const cidr =
    family === 'IPv6'
      ? ['-6', 'route', 'replace', t.ipv6!.serviceCidr]
      : ['route', 'replace', t.serviceCidr];
  sh(inNs(n.ns, ['ip', ...cidr, 'dev', n.uplink]));
}

/** The data plane of a kernel mode on every node, with conntrack sysctls; says what it did. */
export function installKernelDataplane(
  t: Topology,
  mode: KernelMode,
  say: (msg: string) => void,
  dir = VIEW_DIR,
): void {
  for (const n of t.nodes) {
    for (const line of setConntrackSysctls(n.ns)) say(`${n.name}: ${line}`);
    const count =
      mode === 'iptables' ? installKubeProxyRules(t, n, dir) : installKubeProxyNftables(t, n, dir);
    say(`kube-proxy ${mode} rules on ${n.name}: ${count} rules`);
  }
}

/**
 * Removes every kernel data plane from the lab's nodes: all nftables tables (iptables-nft's
 * included — a lab node namespace holds nothing else), the service route and the conntrack
 * table, so the next data plane starts from a clean node.
 */
export function flushKernelDataplane(t: Topology): void {
  for (const n of t.nodes) {
    shTry(inNs(n.ns, ['nft', 'flush', 'ruleset']));
    shTry(inNs(n.ns, ['ip', 'route', 'del', t.serviceCidr, 'dev', n.uplink]));
    if (t.ipv6)
      shTry(inNs(n.ns, ['ip', '-6', 'route', 'del', t.ipv6.serviceCidr, 'dev', n.uplink]));
    shTry(inNs(n.ns, ['conntrack', '-F']));
  }
}

/** kube-proxy's conntrack sysctls (pkg/proxy/conntrack/sysctls.go); the values it computes. */
export function conntrackSysctls(nCpu = cpus().length): [string, number][] {
  return [
    ['net.netfilter.nf_conntrack_max', Math.max(32768 * nCpu, 131072)],
    ['net.netfilter.nf_conntrack_tcp_timeout_established', 86400],
    ['net.netfilter.nf_conntrack_tcp_timeout_close_wait', 3600],
  ];
}

/**
 * Sets kube-proxy's conntrack sysctls in a node namespace, each on its own: a network namespace
 * may not own one (nf_conntrack_max is global, writable only from the initial namespace), and the
 * lab never touches the host's. Like kube-proxy, nf_conntrack_max is only ever raised. Each write
 * is read back: a write the kernel accepts but ignores counts as skipped. Returns one line per
 * sysctl: set, already right, or skipped and why.
 */
export function setConntrackSysctls(ns: string): string[] {
  return conntrackSysctls().map(([key, want]) => {
    const read = () => shTry(inNs(ns, ['sysctl', '-n', key])).out.trim();
    const cur = read();
    if (cur === String(want)) return `${key} = ${want} (already)`;
    if (key.endsWith('nf_conntrack_max') && Number(cur) > want)
      return `${key} = ${cur} (above ${want}; kube-proxy only raises it)`;
    const r = shTry(inNs(ns, ['sysctl', '-qw', `${key}=${want}`]));
    const now = read();
    if (r.ok && now === String(want)) return `${key} = ${want}`;
    const why = r.err.trim() || `the kernel kept ${now}`;
    return `${key} not set (wanted ${want}, stays ${now || '?'}): ${why}; the namespace does not own it`;
  });
}

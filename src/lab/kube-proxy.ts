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
import { cpus } from 'node:os';
import { loadManifests, resolveServicePorts } from '../manifests/index.ts';
import { renderIptables } from '../rules/iptables.ts';
import { renderJumpCommands } from '../rules/jumps.ts';
import { renderNftables } from '../rules/nftables.ts';
import { inNs, sh, shTry } from '../sh.ts';
import { VIEW_DIR } from './state.ts';
import type { LabNode, Topology } from './topology.ts';

export type KernelMode = 'iptables' | 'nftables';
export const KERNEL_MODES: readonly KernelMode[] = ['iptables', 'nftables'];

export function isKernelMode(m: string): m is KernelMode {
  return (KERNEL_MODES as readonly string[]).includes(m);
}

function nodePorts(dir: string, n: LabNode) {
  return resolveServicePorts(loadManifests(dir), { nodeName: n.name });
}

/** The iptables-restore input for one node, from the view directory (or another manifests dir). */
export function nodeIptablesRules(t: Topology, n: LabNode, dir = VIEW_DIR): string {
  return renderIptables(nodePorts(dir, n), {
    nodeName: n.name,
    nodeIPs: [n.ip],
    clusterCIDR: t.clusterCidr,
    // xt_nfacct is often missing (it is here); kube-proxy then leaves the counter rules out too.
    nfacct: false,
  });
}

/** The `nft -f` input for one node: table ip kube-proxy. */
export function nodeNftablesRules(t: Topology, n: LabNode, dir = VIEW_DIR): string {
  return renderNftables(nodePorts(dir, n), {
    nodeName: n.name,
    nodeIPs: [n.ip],
    clusterCIDR: t.clusterCidr,
    serviceCIDRs: [t.serviceCidr],
  });
}

/** Installs kube-proxy's iptables ruleset on one node; returns the number of rules. */
export function installKubeProxyRules(t: Topology, n: LabNode, dir = VIEW_DIR): number {
  addServiceRoute(t, n);
  sh(inNs(n.ns, ['sh', '-c', renderJumpCommands('iptables')]));
  const rules = nodeIptablesRules(t, n, dir);
  sh(inNs(n.ns, ['iptables-restore', '-w', '--noflush', '--counters']), { input: rules });
  return rules.split('\n').filter((l) => l.startsWith('-A ')).length;
}

/** Installs kube-proxy's nftables table on one node; returns the number of rules. */
export function installKubeProxyNftables(t: Topology, n: LabNode, dir = VIEW_DIR): number {
  addServiceRoute(t, n);
  const rules = nodeNftablesRules(t, n, dir);
  // A re-sync (the view changed) replaces the table in the same nft transaction, so no stale
  // chain or set element survives and no packet sees half a ruleset.
  const replace = 'add table ip kube-proxy\ndelete table ip kube-proxy\n';
  sh(inNs(n.ns, ['nft', '-f', '-']), { input: replace + rules });
  return rules.split('\n').filter((l) => l.startsWith('add rule ')).length;
}

/**
 * Real nodes have a default route, so a packet to a VIP is routed (towards the gateway) and
 * meets the FORWARD hook, where kube-proxy REJECTs ports without endpoints. Lab nodes have no
 * default route: without this one the route lookup fails before any filter rule runs.
 */
function addServiceRoute(t: Topology, n: LabNode): void {
  sh(inNs(n.ns, ['ip', 'route', 'replace', t.serviceCidr, 'dev', n.uplink]));
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

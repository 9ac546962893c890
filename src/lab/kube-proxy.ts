// `lab up --mode iptables`: the kernel as the data plane, programmed with the ruleset
// kube-proxy's iptables proxier would write for the same manifests (src/rules). The same
// topology and tests then show what kubetun must reproduce — the reference behaviour.
//
// Per node, in its namespace, in kube-proxy's order: ensure the jumps from the built-in chains
// (kube-proxy does this before every full sync), then `iptables-restore --noflush` the full
// ruleset, with the node's name (local endpoints), node IP and cluster CIDR (the local-traffic
// detector that decides masquerading).
import { loadManifests, resolveServicePorts } from '../manifests/index.ts';
import { renderIptables } from '../rules/iptables.ts';
import { renderJumpCommands } from '../rules/jumps.ts';
import { inNs, sh } from './sh.ts';
import type { LabNode, Topology } from './topology.ts';

/** The iptables-restore input for one node. */
export function nodeIptablesRules(t: Topology, n: LabNode): string {
  const ports = resolveServicePorts(loadManifests(t.manifests), { nodeName: n.name });
  return renderIptables(ports, {
    nodeName: n.name,
    nodeIPs: [n.ip],
    clusterCIDR: t.clusterCidr,
    // xt_nfacct is often missing (it is here); kube-proxy then leaves the counter rules out too.
    nfacct: false,
  });
}

export function installKubeProxyRules(t: Topology, n: LabNode): number {
  // Real nodes have a default route, so a packet to a VIP is routed (towards the gateway) and
  // meets the FORWARD chain, where kube-proxy REJECTs ports without endpoints. Lab nodes have
  // no default route: without this one the route lookup fails before any filter rule runs.
  sh(['ip', '-n', n.ns, 'route', 'add', t.serviceCidr, 'dev', n.uplink]);
  sh(inNs(n.ns, ['sh', '-c', renderJumpCommands('iptables')]));
  const rules = nodeIptablesRules(t, n);
  sh(inNs(n.ns, ['iptables-restore', '-w', '--noflush', '--counters']), { input: rules });
  return rules.split('\n').filter((l) => l.startsWith('-A ')).length;
}

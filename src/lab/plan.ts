// The commands that build a topology, as data: `lab up` and `kubetun lab provision-node` run
// them, tests read them. Two parts:
//
//   lab only (planLab): the namespaces standing in for machines, the underlay bridge between
//   them and the client's routes — on Vagrant, the VMs and their private network are these.
//   node-local (planNode): what turns one machine into a lab node, the same on a VM and in a
//   node namespace — the pods (namespaces + veth joined to the node), gateways, pod routes,
//   host-gw routes to the other nodes' pod CIDRs over the uplink, sysctls.
//
//   kt-underlay: br0 ─┬─ u-node1 ══ eth0 kt-node1 ─┬─ veth-pod-a ══ eth0 kt-pod-a
//                     │                            └─ veth-pod-b ══ eth0 kt-pod-b
//                     ├─ u-node2 ══ eth0 kt-node2 ─┬─ veth-pod-c ══ eth0 kt-pod-c
//                     │                            └─ veth-pod-d ══ eth0 kt-pod-d
//                     └─ u-client ══ eth0 kt-client
//
// Pods: <ip>/32 on eth0, default route via the node's gateway 10.244.N.1 (onlink). Node-side
// veths: 10.244.N.1/32 + proxy_arp=1 (either alone breaks pod↔pod or pod→gateway ARP, see
// DESIGN.md), and a route <pod ip>/32 dev <veth> — `kubetun run` finds pod interfaces by it.
// With `cni: bridge` (topology.ts CniLayout) the node-side veths are instead ports of a cni0
// bridge holding <gateway>/<pod prefix>, and pods have <ip>/<pod prefix>: flannel's layout.
// A dual-stack topology (topology.ts TopologyV6) adds the IPv6 side beside each IPv4 step:
// <ip6>/<prefix> on the uplinks, fe80::1 on each node-side veth (the pods' IPv6 gateway, as
// Calico's; a pod has <ip6>/128 and a default route via fe80::1), a route <ip6>/128 dev <veth>,
// host-gw routes to the other nodes' podCidrV6, IPv6 forwarding. With `cni: bridge`, cni0 holds
// <gateway6>/<prefix> and pods <ip6>/<prefix>. No address runs duplicate address detection
// (nodad): the lab's addresses are unique by construction and usable at once.
// Nothing here touches the host's root namespace unless asked to (a VM: NodeTarget.ns unset).
import {
  type LabNode,
  type LabPod,
  labNamespaces,
  POD_BRIDGE,
  type Topology,
  UNDERLAY_BRIDGE,
  UNDERLAY_NS,
} from './topology.ts';

const bridged = (n: LabNode) => n.cni === 'bridge';
const podPrefix = (n: LabNode) => n.podCidr.split('/')[1]!;
const podPrefix6 = (n: LabNode) => n.podCidrV6?.split('/')[1];
/** The pods' IPv6 gateway on a routes-layout node: the link-local address of each node-side veth. */
export const POD_GATEWAY6 = 'fe80::1';

export interface Phase {
  title: string;
  cmds: string[][];
}

/**
 * Where a node's own commands run. ns: the node's network namespace (the namespace lab); unset:
 * the network namespace of the process running them (a VM, a real node, a test's stand-in).
 */
export interface NodeTarget {
  ns?: string;
  /** the interface towards the other nodes (namespace lab: eth0; Vagrant's private network: eth1) */
  uplink: string;
}

export function labTarget(n: LabNode): NodeTarget {
  return { ns: n.ns, uplink: n.uplink };
}

/** The whole namespace lab: the lab-only part and every node's node-local part. */
export function planUp(t: Topology): Phase[] {
  return [...planLab(t), ...t.nodes.flatMap((n) => planNode(t, n, labTarget(n)))];
}

/** The machines and the wire between them: what Vagrant provides when the nodes are VMs. */
export function planLab(t: Topology): Phase[] {
  return [
    { title: 'namespaces for the underlay, nodes and clients', cmds: planNamespaces(t) },
    { title: 'underlay bridge and node/client uplinks', cmds: planUnderlay(t) },
    { title: 'client routes to the pod CIDRs', cmds: planClientRoutes(t) },
  ];
}

/**
 * One node, made a lab node: the single provisioning path for a namespace and for a VM. With
 * pods false the topology's pods are left to the lab's kubelet (src/cluster/kubelet.ts), which
 * makes each one with planPod when its Pod object is bound to the node.
 */
export function planNode(
  t: Topology,
  n: LabNode,
  at: NodeTarget,
  opts: { pods?: boolean } = {},
): Phase[] {
  const node = opts.pods === false ? { ...n, pods: [] } : n;
  const phases = [
    { title: `${n.name}: ${POD_BRIDGE} bridge with the pod gateway`, cmds: planBridge(n, at) },
    { title: `${n.name}: pod namespaces`, cmds: node.pods.flatMap((p) => newNetns(p.ns)) },
    { title: `${n.name}: pod veths, gateways and pod routes`, cmds: planPods(node, at) },
    { title: `${n.name}: host-gw routes to the other nodes`, cmds: planRoutes(t, n, at) },
    { title: `${n.name}: sysctls (forwarding, proxy_arp)`, cmds: [planSysctls(node, at)] },
  ];
  return phases.filter((p) => p.cmds.length > 0);
}

/** argv run on the node: `ip -n <ns> ...` / `ip netns exec <ns> ...`, or as is on a VM. */
export function onNode(at: NodeTarget, argv: string[]): string[] {
  if (at.ns === undefined) return argv;
  if (argv[0] === 'ip') return ['ip', '-n', at.ns, ...argv.slice(1)];
  return ['ip', 'netns', 'exec', at.ns, ...argv];
}

function newNetns(ns: string): string[][] {
  return [
    ['ip', 'netns', 'add', ns],
    ['ip', '-n', ns, 'link', 'set', 'lo', 'up'],
  ];
}

function planNamespaces(t: Topology): string[][] {
  const pods = new Set(t.nodes.flatMap((n) => n.pods.map((p) => p.ns)));
  return labNamespaces(t)
    .filter((ns) => !pods.has(ns))
    .flatMap(newNetns);
}

function planUnderlay(t: Topology): string[][] {
  const u = UNDERLAY_NS;
  const cmds = [
    ['ip', '-n', u, 'link', 'add', UNDERLAY_BRIDGE, 'type', 'bridge'],
    ['ip', '-n', u, 'link', 'set', UNDERLAY_BRIDGE, 'up'],
  ];
  for (const h of [...t.nodes, ...t.clients]) {
    const veth = ['link', 'add', h.underlayIf, 'type', 'veth', 'peer', 'name', h.uplink];
    cmds.push(
      ['ip', '-n', u, ...veth, 'netns', h.ns],
      ['ip', '-n', u, 'link', 'set', h.underlayIf, 'master', UNDERLAY_BRIDGE, 'up'],
      ['ip', '-n', h.ns, 'addr', 'add', `${h.ip}/${t.underlayPrefix}`, 'dev', h.uplink],
      ...(h.ip6 && t.ipv6
        ? [[...addr6(h.ns), `${h.ip6}/${t.ipv6.underlayPrefix}`, 'dev', h.uplink, 'nodad']]
        : []),
      ['ip', '-n', h.ns, 'link', 'set', h.uplink, 'up'],
    );
  }
  return cmds;
}

/** `ip -6 addr add` in a namespace */
function addr6(ns: string): string[] {
  return ['ip', '-n', ns, '-6', 'addr', 'add'];
}

function planBridge(n: LabNode, at: NodeTarget): string[][] {
  if (!bridged(n)) return [];
  const gw6 = `${n.gateway6}/${podPrefix6(n)}`;
  return [
    onNode(at, ['ip', 'link', 'add', POD_BRIDGE, 'type', 'bridge']),
    onNode(at, ['ip', 'addr', 'add', `${n.gateway}/${podPrefix(n)}`, 'dev', POD_BRIDGE]),
    ...(n.gateway6
      ? [onNode(at, ['ip', '-6', 'addr', 'add', gw6, 'dev', POD_BRIDGE, 'nodad'])]
      : []),
    onNode(at, ['ip', 'link', 'set', POD_BRIDGE, 'up']),
  ];
}

function planPods(n: LabNode, at: NodeTarget): string[][] {
  return n.pods.flatMap((p) => planPodLinks(n, p, at));
}

/**
 * One pod joined to its node: namespace, veth, addresses, routes, proxy_arp. What a CNI plugin
 * does for one Pod; the lab's kubelet (src/cluster/kubelet.ts) runs it for every Pod it starts.
 */
export function planPod(n: LabNode, p: LabPod, at: NodeTarget): string[][] {
  const sysctl = bridged(n) ? [] : [planPodSysctl(p, at)];
  return [...newNetns(p.ns), ...planPodLinks(n, p, at), ...sysctl];
}

/** Takes one pod away: the veth (its peer, the gateway address and the /32 route go with it). */
export function planPodUndo(p: LabPod, at: NodeTarget): string[][] {
  return [onNode(at, ['ip', 'link', 'del', p.hostIf]), ['ip', 'netns', 'del', p.ns]];
}

function planPodLinks(n: LabNode, p: LabPod, at: NodeTarget): string[][] {
  const veth = ['link', 'add', p.hostIf, 'type', 'veth', 'peer', 'name', p.podIf];
  const v6 = p.ip6 !== undefined && n.gateway6 !== undefined;
  const route6 = (via: string) => ['ip', '-n', p.ns, '-6', 'route', 'add', 'default', 'via', via];
  if (bridged(n))
    return [
      onNode(at, ['ip', ...veth, 'netns', p.ns]),
      onNode(at, ['ip', 'link', 'set', p.hostIf, 'master', POD_BRIDGE, 'up']),
      ['ip', '-n', p.ns, 'addr', 'add', `${p.ip}/${podPrefix(n)}`, 'dev', p.podIf],
      ...(v6 ? [[...addr6(p.ns), `${p.ip6}/${podPrefix6(n)}`, 'dev', p.podIf, 'nodad']] : []),
      ['ip', '-n', p.ns, 'link', 'set', p.podIf, 'up'],
      ['ip', '-n', p.ns, 'route', 'add', 'default', 'via', n.gateway, 'dev', p.podIf],
      ...(v6 ? [[...route6(n.gateway6!), 'dev', p.podIf]] : []),
    ];
  return [
    onNode(at, ['ip', ...veth, 'netns', p.ns]),
    onNode(at, ['ip', 'addr', 'add', `${n.gateway}/32`, 'dev', p.hostIf]),
    ...(v6
      ? [onNode(at, ['ip', '-6', 'addr', 'add', `${POD_GATEWAY6}/64`, 'dev', p.hostIf, 'nodad'])]
      : []),
    onNode(at, ['ip', 'link', 'set', p.hostIf, 'up']),
    ['ip', '-n', p.ns, 'addr', 'add', `${p.ip}/32`, 'dev', p.podIf],
    ...(v6 ? [[...addr6(p.ns), `${p.ip6}/128`, 'dev', p.podIf, 'nodad']] : []),
    ['ip', '-n', p.ns, 'link', 'set', p.podIf, 'up'],
    ['ip', '-n', p.ns, 'route', 'add', 'default', 'via', n.gateway, 'dev', p.podIf, 'onlink'],
    ...(v6 ? [[...route6(POD_GATEWAY6), 'dev', p.podIf]] : []),
    onNode(at, ['ip', 'route', 'add', `${p.ip}/32`, 'dev', p.hostIf]),
    ...(v6 ? [onNode(at, ['ip', '-6', 'route', 'add', `${p.ip6}/128`, 'dev', p.hostIf])] : []),
  ];
}

function planPodSysctl(p: LabPod, at: NodeTarget): string[] {
  return onNode(at, ['sysctl', '-qw', `net.ipv4.conf.${p.hostIf}.proxy_arp=1`]);
}

/** Routes to the other nodes' pod CIDRs via their underlay addresses, both families: argv tails. */
function podCidrRoutes(t: Topology, n: LabNode | undefined, dev: string, verb = 'add'): string[][] {
  return t.nodes
    .filter((m) => m !== n)
    .flatMap((m) => [
      ['ip', 'route', verb, m.podCidr, 'via', m.ip, 'dev', dev],
      ...(m.podCidrV6 && m.ip6
        ? [['ip', '-6', 'route', verb, m.podCidrV6, 'via', m.ip6, 'dev', dev]]
        : []),
    ]);
}

function planRoutes(t: Topology, n: LabNode, at: NodeTarget): string[][] {
  return podCidrRoutes(t, n, at.uplink).map((r) => onNode(at, r));
}

function planClientRoutes(t: Topology): string[][] {
  return t.clients.flatMap((c) =>
    podCidrRoutes(t, undefined, c.uplink).map((r) => onNode({ ns: c.ns, uplink: c.uplink }, r)),
  );
}

function planSysctls(n: LabNode, at: NodeTarget): string[] {
  return onNode(at, [
    'sysctl',
    '-qw',
    'net.ipv4.ip_forward=1',
    ...(n.podCidrV6 ? ['net.ipv6.conf.all.forwarding=1'] : []),
    ...(bridged(n) ? [] : n.pods.map((p) => `net.ipv4.conf.${p.hostIf}.proxy_arp=1`)),
  ]);
}

/** What planNode adds to a node, to take it away again (a re-provisioned VM, a test). */
export function planNodeUndo(t: Topology, n: LabNode, at: NodeTarget): string[][] {
  return [
    ...podCidrRoutes(t, n, at.uplink, 'del').map((r) => onNode(at, r)),
    // The veth first: deleting it takes its peer, the gateway address and the /32 route at
    // once, while a deleted namespace is torn down by the kernel later (a re-provision would
    // find veth-<pod> still there).
    ...n.pods.flatMap((p) => planPodUndo(p, at)),
    ...(bridged(n) ? [onNode(at, ['ip', 'link', 'del', POD_BRIDGE])] : []),
  ];
}

/** The links lab up creates, "namespace:ifname", for the state file. */
export function planLinks(t: Topology): string[] {
  return [
    `${UNDERLAY_NS}:${UNDERLAY_BRIDGE}`,
    ...[...t.nodes, ...t.clients].flatMap((h) => [
      `${UNDERLAY_NS}:${h.underlayIf}`,
      `${h.ns}:${h.uplink}`,
    ]),
    ...t.nodes.filter(bridged).map((n) => `${n.ns}:${POD_BRIDGE}`),
    ...t.nodes.flatMap((n) => n.pods.flatMap((p) => [`${n.ns}:${p.hostIf}`, `${p.ns}:${p.podIf}`])),
  ];
}

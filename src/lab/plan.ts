// The commands that build a topology, as data: `lab up` runs them, tests read them. Nothing here
// touches the host's root namespace — every `ip` command names one of the lab's namespaces.
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
// Nodes: host-gw routes to the other nodes' pod CIDRs via their underlay IPs.
import { labNamespaces, type Topology, UNDERLAY_BRIDGE, UNDERLAY_NS } from './topology.ts';

export interface Phase {
  title: string;
  cmds: string[][];
}

export function planUp(t: Topology): Phase[] {
  return [
    { title: 'namespaces', cmds: planNamespaces(t) },
    { title: 'underlay bridge and node/client uplinks', cmds: planUnderlay(t) },
    { title: 'pod veths, gateways and pod routes', cmds: planPods(t) },
    { title: 'host-gw routes between nodes', cmds: planRoutes(t) },
    { title: 'sysctls (forwarding, proxy_arp)', cmds: planSysctls(t) },
  ];
}

function planNamespaces(t: Topology): string[][] {
  return labNamespaces(t).flatMap((ns) => [
    ['ip', 'netns', 'add', ns],
    ['ip', '-n', ns, 'link', 'set', 'lo', 'up'],
  ]);
}

function planUnderlay(t: Topology): string[][] {
  const u = UNDERLAY_NS;
  const cmds = [
    ['ip', '-n', u, 'link', 'add', UNDERLAY_BRIDGE, 'type', 'bridge'],
    ['ip', '-n', u, 'link', 'set', UNDERLAY_BRIDGE, 'up'],
  ];
  for (const h of [...t.nodes, ...t.clients]) {
    cmds.push(
      [
        'ip',
        '-n',
        u,
        'link',
        'add',
        h.underlayIf,
        'type',
        'veth',
        'peer',
        'name',
        h.uplink,
        'netns',
        h.ns,
      ],
      ['ip', '-n', u, 'link', 'set', h.underlayIf, 'master', UNDERLAY_BRIDGE, 'up'],
      ['ip', '-n', h.ns, 'addr', 'add', `${h.ip}/${t.underlayPrefix}`, 'dev', h.uplink],
      ['ip', '-n', h.ns, 'link', 'set', h.uplink, 'up'],
    );
  }
  return cmds;
}

function planPods(t: Topology): string[][] {
  const cmds: string[][] = [];
  for (const n of t.nodes) {
    for (const p of n.pods) {
      cmds.push(
        [
          'ip',
          '-n',
          n.ns,
          'link',
          'add',
          p.hostIf,
          'type',
          'veth',
          'peer',
          'name',
          p.podIf,
          'netns',
          p.ns,
        ],
        ['ip', '-n', n.ns, 'addr', 'add', `${n.gateway}/32`, 'dev', p.hostIf],
        ['ip', '-n', n.ns, 'link', 'set', p.hostIf, 'up'],
        ['ip', '-n', p.ns, 'addr', 'add', `${p.ip}/32`, 'dev', p.podIf],
        ['ip', '-n', p.ns, 'link', 'set', p.podIf, 'up'],
        ['ip', '-n', p.ns, 'route', 'add', 'default', 'via', n.gateway, 'dev', p.podIf, 'onlink'],
        ['ip', '-n', n.ns, 'route', 'add', `${p.ip}/32`, 'dev', p.hostIf],
      );
    }
  }
  return cmds;
}

function planRoutes(t: Topology): string[][] {
  const cmds: string[][] = [];
  for (const n of t.nodes) {
    for (const m of t.nodes) {
      if (m !== n)
        cmds.push(['ip', '-n', n.ns, 'route', 'add', m.podCidr, 'via', m.ip, 'dev', n.uplink]);
    }
  }
  for (const c of t.clients) {
    for (const m of t.nodes)
      cmds.push(['ip', '-n', c.ns, 'route', 'add', m.podCidr, 'via', m.ip, 'dev', c.uplink]);
  }
  return cmds;
}

function planSysctls(t: Topology): string[][] {
  return t.nodes.map((n) => [
    'ip',
    'netns',
    'exec',
    n.ns,
    'sysctl',
    '-qw',
    'net.ipv4.ip_forward=1',
    ...n.pods.map((p) => `net.ipv4.conf.${p.hostIf}.proxy_arp=1`),
  ]);
}

/** The links lab up creates, "namespace:ifname", for the state file. */
export function planLinks(t: Topology): string[] {
  return [
    `${UNDERLAY_NS}:${UNDERLAY_BRIDGE}`,
    ...[...t.nodes, ...t.clients].flatMap((h) => [
      `${UNDERLAY_NS}:${h.underlayIf}`,
      `${h.ns}:${h.uplink}`,
    ]),
    ...t.nodes.flatMap((n) => n.pods.flatMap((p) => [`${n.ns}:${p.hostIf}`, `${p.ns}:${p.podIf}`])),
  ];
}

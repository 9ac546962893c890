// The rendered rules doing their job in a real kernel, once per mode (iptables-restore plus the
// jump commands; nft -f). Topology, all network namespaces created (and removed) here, names
// prefixed ktr-<pid>-<mode initial>-:
//
//   client 192.168.50.2 ──veth── 192.168.50.1 node 10.244.1.1 ──veth── 10.244.1.5 be1 :8080
//                                              10.244.2.1 ──veth── 10.244.2.5 be2 :8080
//
// The node gets the rendered rules and nothing else. The client (and a pod) connect to the ClusterIP, the NodePort and an endpoint-less Service; each
// backend answers with its name and the source address it saw, so DNAT, load spreading,
// masquerade (client outside the pod CIDR, hairpin) and REJECT are all observed on real packets.

import { type ChildProcess, spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderIptables } from '../../src/rules/iptables.ts';
import { renderJumpCommands } from '../../src/rules/jumps.ts';
import { renderNftables } from '../../src/rules/nftables.ts';
import { ep, makeService, makeSlice, port, resolve, slicePort } from './builders.ts';
import { connect, inNs, link, type Names, sh, startServers } from './kernel-ns.ts';

function model() {
  const services = [
    makeService('default', 'web', (s) => {
      s.type = 'NodePort';
      s.clusterIPs = ['10.96.0.10'];
      s.ports = [port({ name: 'http', port: 80, targetPort: 8080, nodePort: 30080 })];
    }),
    makeService('default', 'empty', (s) => {
      s.clusterIPs = ['10.96.0.99'];
      s.ports = [port({ port: 80 })];
    }),
  ];
  const slice = makeSlice(
    'default',
    'web',
    [ep('10.244.1.5'), ep('10.244.2.5')],
    [slicePort('http', 8080)],
  );
  return resolve(services, [slice]);
}

const opts = {
  clusterCIDR: '10.244.0.0/16',
  nodeName: 'node-1',
  nodeIPs: ['192.168.50.1'],
  nfacct: false,
};

function topology(ns: Names): void {
  for (const n of Object.values(ns)) sh(['ip', 'netns', 'add', n]);
  for (const n of Object.values(ns)) inNs(n, 'ip', 'link', 'set', 'lo', 'up');
  link(ns.client, 'eth0', '192.168.50.2/24', ns.node, 'c0', '192.168.50.1/24');
  link(ns.be1, 'eth0', '10.244.1.5/24', ns.node, 'b1', '10.244.1.1/24');
  link(ns.be2, 'eth0', '10.244.2.5/24', ns.node, 'b2', '10.244.2.1/24');
  inNs(ns.client, 'ip', 'route', 'add', 'default', 'via', '192.168.50.1');
  inNs(ns.be1, 'ip', 'route', 'add', 'default', 'via', '10.244.1.1');
  inNs(ns.be2, 'ip', 'route', 'add', 'default', 'via', '10.244.2.1');
  inNs(ns.node, 'sysctl', '-qw', 'net.ipv4.ip_forward=1');
  // Like any node, a default route (not back out of the client's link, which would earn an
  // ICMP redirect): without one the kernel answers "net unreachable" for an endpoint-less
  // ClusterIP before the filter rules (and their REJECT) are ever reached.
  inNs(ns.node, 'ip', 'route', 'add', 'default', 'via', '10.244.1.5');
}

function load(mode: 'iptables' | 'nftables', node: string): void {
  if (mode === 'iptables') {
    sh(
      ['ip', 'netns', 'exec', node, 'iptables-restore', '--noflush'],
      renderIptables(model(), opts),
    );
    sh(['ip', 'netns', 'exec', node, 'sh', '-e'], renderJumpCommands());
  } else {
    sh(['ip', 'netns', 'exec', node, 'nft', '-f', '-'], renderNftables(model(), opts));
  }
}

describe.each(['iptables', 'nftables'] as const)('rendered %s rules in a real kernel', (mode) => {
  const P = `ktr-${process.pid}-${mode[0]}`;
  const ns: Names = { client: `${P}-c`, node: `${P}-n`, be1: `${P}-b1`, be2: `${P}-b2` };
  const servers: ChildProcess[] = [];

  beforeAll(() => {
    topology(ns);
    load(mode, ns.node);
    return startServers(ns, servers, '0.0.0.0');
  });

  afterAll(() => {
    for (const p of servers) if (p.pid !== undefined) spawnSync('kill', [String(p.pid)]);
    for (const n of Object.values(ns)) spawnSync('ip', ['netns', 'del', n]);
  });

  it('DNATs the ClusterIP to both endpoints and masquerades an off-cluster client', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 40 && seen.size < 2; i++) seen.add(connect(ns.client, '10.96.0.10', 80));
    expect([...seen].sort()).toEqual(['be1 10.244.1.1', 'be2 10.244.2.1']);
  });

  it('keeps a pod source address, but masquerades a pod reaching itself (hairpin)', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 40 && seen.size < 2; i++) seen.add(connect(ns.be2, '10.96.0.10', 80));
    expect([...seen].sort()).toEqual(['be1 10.244.2.5', 'be2 10.244.2.1']);
  });

  it('serves the NodePort on the node address', () => {
    expect(connect(ns.client, '192.168.50.1', 30080)).toMatch(/^be[12] 10\.244\.[12]\.1$/);
  });

  it('refuses connections to a Service without endpoints at once', () => {
    expect(connect(ns.client, '10.96.0.99', 80)).toBe('ECONNREFUSED');
  });
});

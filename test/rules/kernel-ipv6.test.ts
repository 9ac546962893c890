// The rendered IPv6 rules doing their job in a real kernel, once per mode (ip6tables-restore
// plus the jump commands through ip6tables; nft -f of the ip6 table): the IPv6 twin of
// kernel.test.ts. Topology, all network namespaces created (and removed) here, named
// <lab prefix>r6-<pid>-<mode initial>-:
//
//   client fd00:50::2 ──veth── fd00:50::1 node fd00:10:244:1::1 ──veth── fd00:10:244:1::5 be1 :8080
//                                             fd00:10:244:2::1 ──veth── fd00:10:244:2::5 be2 :8080
//
// The node gets the rendered rules and nothing else. Each backend answers with its name and
// the source address it saw, so DNAT, load spreading, masquerade (a client outside the pod
// CIDR, hairpin) and REJECT are all observed on real IPv6 packets.

import { type ChildProcess, spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB_PREFIX } from '../../src/lab/topology.ts';
import { renderIptables } from '../../src/rules/iptables.ts';
import { renderJumpCommands } from '../../src/rules/jumps.ts';
import { renderNftables } from '../../src/rules/nftables.ts';
import { ep, makeService, makeSlice, port, resolve, slicePort } from './builders.ts';
import { connect, inNs, link, type Names, sh, startServers } from './kernel-ns.ts';

function model() {
  const services = [
    makeService('default', 'web', (s) => {
      s.type = 'NodePort';
      s.clusterIPs = ['fd00:10:96::a'];
      s.ports = [port({ name: 'http', port: 80, targetPort: 8080, nodePort: 30080 })];
    }),
    makeService('default', 'empty', (s) => {
      s.clusterIPs = ['fd00:10:96::63'];
      s.ports = [port({ port: 80 })];
    }),
  ];
  const slice = {
    ...makeSlice(
      'default',
      'web',
      [ep('fd00:10:244:1::5'), ep('fd00:10:244:2::5')],
      [slicePort('http', 8080)],
    ),
    addressType: 'IPv6' as const,
  };
  return resolve(services, [slice]);
}

const opts = {
  ipFamily: 'IPv6' as const,
  clusterCIDR: 'fd00:10:244::/48',
  nodeName: 'node-1',
  nodeIPs: ['fd00:50::1'],
  nfacct: false,
  serviceCIDRs: ['fd00:10:96::/112'],
};

function topology(ns: Names): void {
  for (const n of Object.values(ns)) sh(['ip', 'netns', 'add', n]);
  for (const n of Object.values(ns)) inNs(n, 'ip', 'link', 'set', 'lo', 'up');
  link(ns.client, 'eth0', 'fd00:50::2/64', ns.node, 'c0', 'fd00:50::1/64');
  link(ns.be1, 'eth0', 'fd00:10:244:1::5/64', ns.node, 'b1', 'fd00:10:244:1::1/64');
  link(ns.be2, 'eth0', 'fd00:10:244:2::5/64', ns.node, 'b2', 'fd00:10:244:2::1/64');
  inNs(ns.client, 'ip', '-6', 'route', 'add', 'default', 'via', 'fd00:50::1');
  inNs(ns.be1, 'ip', '-6', 'route', 'add', 'default', 'via', 'fd00:10:244:1::1');
  inNs(ns.be2, 'ip', '-6', 'route', 'add', 'default', 'via', 'fd00:10:244:2::1');
  inNs(ns.node, 'sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1');
  // As in kernel.test.ts: a default route, so an endpoint-less ClusterIP reaches the REJECT.
  inNs(ns.node, 'ip', '-6', 'route', 'add', 'default', 'via', 'fd00:10:244:1::5');
}

function load(mode: 'iptables' | 'nftables', node: string): void {
  if (mode === 'iptables') {
    const rules = renderIptables(model(), opts);
    sh(['ip', 'netns', 'exec', node, 'ip6tables-restore', '--test', '--noflush'], rules);
    sh(['ip', 'netns', 'exec', node, 'ip6tables-restore', '--noflush'], rules);
    sh(['ip', 'netns', 'exec', node, 'sh', '-e'], renderJumpCommands('ip6tables'));
  } else {
    const table = renderNftables(model(), opts);
    sh(['ip', 'netns', 'exec', node, 'nft', '-c', '-f', '-'], table);
    sh(['ip', 'netns', 'exec', node, 'nft', '-f', '-'], table);
  }
}

describe.each(['iptables', 'nftables'] as const)(
  'rendered IPv6 %s rules in a real kernel',
  (mode) => {
    const P = `${LAB_PREFIX}r6-${process.pid}-${mode[0]}`;
    const ns: Names = { client: `${P}-c`, node: `${P}-n`, be1: `${P}-b1`, be2: `${P}-b2` };
    const servers: ChildProcess[] = [];

    beforeAll(() => {
      topology(ns);
      load(mode, ns.node);
      return startServers(ns, servers, '::');
    });

    afterAll(() => {
      for (const p of servers) if (p.pid !== undefined) spawnSync('kill', [String(p.pid)]);
      for (const n of Object.values(ns)) spawnSync('ip', ['netns', 'del', n]);
    });

    it('the kernel holds the rules as rendered (ip6tables-save / nft list name the VIP)', () => {
      const listed =
        mode === 'iptables'
          ? inNs(ns.node, 'ip6tables-save', '-t', 'nat')
          : inNs(ns.node, 'nft', 'list', 'table', 'ip6', 'kube-proxy');
      expect(listed).toContain('fd00:10:96::a');
      expect(listed).toMatch(
        mode === 'iptables'
          ? /--to-destination \[fd00:10:244:1::5\]:8080/
          : /dnat (ip6 )?to \[fd00:10:244:1::5\]:8080/,
      );
    });

    it('DNATs the ClusterIP to both endpoints and masquerades an off-cluster client', () => {
      const seen = new Set<string>();
      for (let i = 0; i < 40 && seen.size < 2; i++)
        seen.add(connect(ns.client, 'fd00:10:96::a', 80));
      expect([...seen].sort()).toEqual(['be1 fd00:10:244:1::1', 'be2 fd00:10:244:2::1']);
    });

    it('keeps a pod source address, but masquerades a pod reaching itself (hairpin)', () => {
      const seen = new Set<string>();
      for (let i = 0; i < 40 && seen.size < 2; i++) seen.add(connect(ns.be2, 'fd00:10:96::a', 80));
      expect([...seen].sort()).toEqual(['be1 fd00:10:244:2::5', 'be2 fd00:10:244:2::1']);
    });

    it('serves the NodePort on the node address', () => {
      expect(connect(ns.client, 'fd00:50::1', 30080)).toMatch(/^be[12] fd00:10:244:[12]::1$/);
    });

    it('refuses connections to a Service without endpoints at once', () => {
      expect(connect(ns.client, 'fd00:10:96::63', 80)).toBe('ECONNREFUSED');
    });
  },
);

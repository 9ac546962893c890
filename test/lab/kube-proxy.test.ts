// The lab's kernel data planes: the rulesets kube-proxy would write for the lab's manifests
// (iptables and nftables), the conntrack sysctls it computes, and (root) that nft accepts the
// nftables table and the sysctls land — or say why not — in a throwaway namespace.
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  conntrackSysctls,
  nodeIptablesRules,
  nodeNftablesRules,
  setConntrackSysctls,
} from '../../src/lab/kube-proxy.ts';
import { renderStaticView } from '../../src/lab/control-plane.ts';
import { LAB_PREFIX, loadTopology } from '../../src/lab/topology.ts';

const t = loadTopology(join(import.meta.dirname, '../../lab/topology.yaml'));
const node2 = t.nodes.find((n) => n.name === 'node2')!;
// What the control plane would write for the lab's manifests (the data planes' input).
const view = mkdtempSync(join(tmpdir(), 'kubetun-view-'));
beforeAll(() => renderStaticView(t, view));

describe('kube-proxy rules for the lab', () => {
  it('computes nf_conntrack_max as max(32768 x nCPU, 131072) and the TCP timeouts', () => {
    const get = (n: number) => Object.fromEntries(conntrackSysctls(n));
    expect(get(1)['net.netfilter.nf_conntrack_max']).toBe(131072);
    expect(get(8)['net.netfilter.nf_conntrack_max']).toBe(262144);
    expect(get(2)['net.netfilter.nf_conntrack_tcp_timeout_established']).toBe(86400);
    expect(get(2)['net.netfilter.nf_conntrack_tcp_timeout_close_wait']).toBe(3600);
  });

  it("writes nftables dispatch for every lab ClusterIP, affinity for sticky, and rejects the rest of a ClusterIP's ports", () => {
    const nft = nodeNftablesRules(t, node2, view);
    for (const e of ['10.96.0.10 . tcp . 80', '10.96.0.53 . udp . 53', '10.96.0.40 . tcp . 80'])
      expect(nft).toContain(e);
    expect(nft).toContain('10.96.0.30 . tcp . 80'); // no endpoints: in @no-endpoint-services
    expect(nft).toMatch(/cluster-ips-check ip daddr @cluster-ips reject/);
    expect(nft).toMatch(/update @affinity-/);
    expect(nft).toContain('dnat to 10.244.2.2:8080');
  });

  it('writes iptables rules with the node as local-endpoint owner and recent-match affinity', () => {
    const ipt = nodeIptablesRules(t, node2, view);
    expect(ipt).toContain('--to-destination 10.244.2.2:8080');
    expect(ipt).toMatch(/-m recent --name KUBE-SEP-\w+ --rcheck --seconds 10800 --reap/);
    expect(ipt).toContain('"default/empty:http has no endpoints"');
  });
});

describe('kernel data plane in a namespace (root)', () => {
  const ns = `${LAB_PREFIX}kptest`;
  beforeAll(() => {
    spawnSync('ip', ['netns', 'del', ns]);
    expect(spawnSync('ip', ['netns', 'add', ns]).status).toBe(0);
  });
  afterAll(() => {
    spawnSync('ip', ['netns', 'del', ns]);
  });

  it('loads the nftables table with nft -f', () => {
    const r = spawnSync('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], {
      input: nodeNftablesRules(t, node2, view),
      encoding: 'utf8',
    });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const list = spawnSync(
      'ip',
      ['netns', 'exec', ns, 'nft', 'list', 'map', 'ip', 'kube-proxy', 'service-ips'],
      { encoding: 'utf8' },
    );
    expect(list.stdout).toContain('10.96.0.10 . tcp . 80 : goto service-');
  });

  it('sets the per-namespace conntrack timeouts and reports nf_conntrack_max as set, higher or skipped', () => {
    const lines = setConntrackSysctls(ns);
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(/^net\.netfilter\.nf_conntrack_max (= \d+|not set \(wanted \d+)/);
    expect(lines[1]).toMatch(/nf_conntrack_tcp_timeout_established = 86400/);
    const read = (k: string) =>
      spawnSync('ip', ['netns', 'exec', ns, 'sysctl', '-n', k], { encoding: 'utf8' }).stdout.trim();
    expect(read('net.netfilter.nf_conntrack_tcp_timeout_established')).toBe('86400');
    expect(read('net.netfilter.nf_conntrack_tcp_timeout_close_wait')).toBe('3600');
    expect(setConntrackSysctls(ns)[1]).toMatch(/\(already\)$/);
  });
});

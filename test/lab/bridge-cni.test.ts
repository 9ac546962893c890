// The bridge CNI layout (topology `cni: bridge`, flannel's and the bridge plugin's), end to end
// under kubetun (root): every pod veth is a port of its node's cni0, which holds the gateway as
// 10.244.N.1/24; pods have <ip>/24 and no host routes exist. kubetun finds the pod CIDR's
// connected route on cni0 and hooks the bridge's ports (src/node/discover.ts), so the basic
// Service checks pass as on the per-pod-route layout:
//
//   ClusterIP web 10.96.0.10:80 from pod-a (node1) and pod-c (node2): every backend answers;
//     a backend on the same bridge sees the client's own address (its reply crosses the bridge
//     port to port, caught on the port's ingress), a client that lands on itself is hairpinned
//     (masqueraded to its gateway, cni0's address)
//   NodePort web-np 30080 from the external client to node1: pod-a (local) or pod-d (remote),
//     masqueraded to a node address as kube-proxy does for policy Cluster
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { labCtl } from '../../src/lab/ctl.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import type { LabState } from '../../src/lab/state.ts';
import { loadTopology, POD_BRIDGE } from '../../src/lab/topology.ts';
import { curlMany } from './curl.ts';

const ROOT = join(import.meta.dirname, '../..');
const dir = mkdtempSync(join(tmpdir(), 'kt-bridge-cni-'));
const TOPOLOGY = join(dir, 'topology.yaml');
writeFileSync(
  TOPOLOGY,
  readFileSync(join(ROOT, 'lab/topology.yaml'), 'utf8')
    .replace(/^manifests: manifests\b/m, `manifests: ${join(ROOT, 'lab/manifests')}`)
    .replace(/^clusterCidr:/m, 'cni: bridge\nclusterCidr:'),
);
const t = loadTopology(TOPOLOGY);
const node = (name: string) => t.nodes.find((n) => n.name === name)!;
const pod = (name: string) => t.nodes.flatMap((n) => n.pods).find((p) => p.name === name)!;
const TRIES = 40; // 3 backends: the chance one is never picked is 3 * (2/3)^40 ≈ 3e-7

function inNs(ns: string, argv: string[]): string {
  const r = spawnSync('ip', ['netns', 'exec', ns, ...argv], { encoding: 'utf8', timeout: 60_000 });
  return r.stdout;
}

let state: LabState;

describe('bridge CNI layout under kubetun', () => {
  beforeAll(async () => {
    await labDown({ topology: TOPOLOGY });
    state = await labUp({ topology: TOPOLOGY, mode: 'kubetun' });
  }, 300_000);

  afterAll(async () => {
    await labDown({ topology: TOPOLOGY });
    rmSync(dir, { recursive: true, force: true });
  }, 120_000);

  it('joins the pods to cni0 (gateway /24 on the bridge, no host routes) and kubetun hooks its ports', async () => {
    const n1 = node('node1');
    const addr = JSON.parse(inNs(n1.ns, ['ip', '-j', '-4', 'addr', 'show', 'dev', POD_BRIDGE]));
    expect(
      addr[0].addr_info.map(
        (a: { local: string; prefixlen: number }) => `${a.local}/${a.prefixlen}`,
      ),
    ).toEqual([`${n1.gateway}/24`]);
    const ports = JSON.parse(inNs(n1.ns, ['ip', '-j', 'link', 'show', 'master', POD_BRIDGE]));
    const portNames = ports.map((l: { ifname: string }) => l.ifname).sort();
    expect(portNames).toEqual(expect.arrayContaining(['veth-pod-a', 'veth-pod-b']));
    expect(inNs(n1.ns, ['ip', '-4', 'route', 'show', `${pod('pod-a').ip}/32`]).trim()).toBe('');
    const sock = state.processes.find((p) => p.role === 'kubetun' && p.name === 'node1')!
      .ctlSocket!;
    // pods the kubelet adds after the agent started are found by the rescan (2 s)
    let hooked: string[] = [];
    for (let i = 0; i < 20; i++) {
      hooked = (await labCtl<{ podIfaces: string[] }>(sock, { cmd: 'status' })).podIfaces;
      if (portNames.every((p: string) => hooked.includes(p))) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(hooked.sort()).toEqual(portNames);
  });

  it.each([
    ['pod-a', 'node1'],
    ['pod-c', 'node2'],
  ])('ClusterIP web from %s (%s): every backend answers, same bridge and across nodes', (from) => {
    const client = pod(from);
    const gw = node(client.node).gateway;
    const answers = curlMany(client.ns, 'http://10.96.0.10:80/whoami', TRIES);
    const seen = new Set<string>();
    for (const a of answers) {
      const [who, , peer] = a.split(' ');
      seen.add(who!);
      // landing on itself is hairpinned to the gateway; any other backend sees the client
      expect({ a, peer }).toEqual({ a, peer: who === from ? gw : client.ip });
    }
    expect([...seen].sort()).toEqual(['pod-a', 'pod-b', 'pod-c']);
  });

  it('IPv6 ClusterIP web-dual from pod-d (node2): every backend answers from its IPv6 address, seeing the client', () => {
    const client = pod('pod-d');
    // the dual-stack topology on cni0: <gateway6>/64 on the bridge, <ip6>/64 in the pods
    expect(inNs(node('node2').ns, ['ip', '-6', 'addr', 'show', 'dev', POD_BRIDGE])).toContain(
      `inet6 ${node('node2').gateway6}/64`,
    );
    const answers = curlMany(client.ns, 'http://[fd00:10:96::10]:80/whoami', TRIES);
    const seen = new Set<string>();
    for (const a of answers) {
      const [who, ip, peer] = a.split(' ');
      seen.add(who!);
      expect({ a, ip, peer }).toEqual({ a, ip: pod(who!).ip6, peer: client.ip6 });
    }
    expect([...seen].sort()).toEqual(['pod-a', 'pod-b', 'pod-c']);
  });

  it('NodePort web-np on node1 from the external client: local and remote backend, masqueraded', () => {
    const n1 = node('node1');
    const answers = curlMany(t.clients[0]!.ns, `http://${n1.ip}:30080/whoami`, 20);
    const seen = new Set<string>();
    for (const a of answers) {
      const [who, , peer] = a.split(' ');
      seen.add(who!);
      // pod-a on node1 sees node1's gateway (cni0), pod-d on node2 sees node1's IP
      expect({ a, peer }).toEqual({ a, peer: who === 'pod-a' ? n1.gateway : n1.ip });
    }
    expect([...seen].sort()).toEqual(['pod-a', 'pod-d']);
  });
});

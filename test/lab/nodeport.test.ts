// NodePort, LoadBalancer, externalTrafficPolicy and hairpin on the namespace lab with kubetun
// on every node (root). The lab's prefix follows KUBETUN_LAB_PREFIX, so this can run beside
// another lab: `KUBETUN_LAB_PREFIX=kn- npx vitest run test/lab/nodeport.test.ts`.
//
//   client 172.30.0.100 ── node1 172.30.0.11 (pod-a, pod-b) ── node2 172.30.0.12 (pod-c, pod-d)
//   web-np     NodePort 30080/TCP, 30053/UDP, Cluster  -> pod-a (node1), pod-d (node2)
//   web-local  NodePort 30081/TCP, Local, health 32081 -> pod-d (node2 only)
//   web-lb     LB 172.30.0.200:80, ranges 172.30.0.100/32 (admits the client)
//   web-lb-deny LB 172.30.0.201:80, ranges 192.0.2.0/24 (refuses it)
//   web        ClusterIP 10.96.0.10:80 -> pod-a, pod-b, pod-c (hairpin for pod-a/pod-b/pod-c)
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { labCtl } from '../../src/lab/ctl.ts';
import { nodePortDemo } from '../../src/lab/demo/nodeport.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import type { LabState } from '../../src/lab/state.ts';
import { allPods, loadTopology } from '../../src/lab/topology.ts';
import { ANSWER_S, curlMany, DROPPED_S } from './curl.ts';

const ROOT = join(import.meta.dirname, '../..');
const TOPOLOGY = join(ROOT, 'lab/topology.yaml');
const UDPQ = join(ROOT, 'lab/servers/udpq.mjs');
const t = loadTopology(TOPOLOGY);
const client = t.clients[0]!;
const [node1, node2] = t.nodes as [(typeof t.nodes)[0], (typeof t.nodes)[0]];
const podByIp = new Map(allPods(t).map((p) => [p.ip, p]));
const TRIES = 24; // 2 backends: both seen with probability 1 - 2 * 2^-24

function sh(ns: string, script: string): string {
  const r = spawnSync('ip', ['netns', 'exec', ns, 'sh', '-c', script], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  return r.stdout;
}

/** n curls of /whoami, each a new connection: "<pod> <pod ip> <peer>" or "curl exit N". */
function whoami(ns: string, url: string, n: number, limitS = ANSWER_S): string[] {
  return curlMany(ns, `${url}/whoami`, n, limitS);
}

/** pod -> set of peers it saw */
function seen(answers: string[]): Record<string, string[]> {
  const out: Record<string, Set<string>> = {};
  for (const a of answers) {
    const [pod, , peer] = a.split(' ');
    const set = out[pod!] ?? new Set<string>();
    set.add(peer ?? '');
    out[pod!] = set;
  }
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, [...v].sort()]));
}

/** The address MASQUERADE on `node` gives a flow to `podIp`: the gateway for its own pods. */
function natAddr(node: (typeof t.nodes)[0], podIp: string): string {
  return podByIp.get(podIp)!.node === node.name ? node.gateway : node.ip;
}

// ---- the behaviour, asked the same way of kubetun and of the kernel with kube-proxy's rules

function expectNodePortEachNode(): void {
  for (const node of [node1, node2]) {
    const got = seen(whoami(client.ns, `http://${node.ip}:30080`, TRIES));
    expect(got).toEqual({
      'pod-a': [natAddr(node, '10.244.1.2')],
      'pod-d': [natAddr(node, '10.244.2.3')],
    });
  }
}

function expectPodToNodePort(): void {
  const podD = allPods(t).find((p) => p.name === 'pod-d')!;
  const got = seen(whoami(podD.ns, `http://${node1.ip}:30080`, TRIES));
  expect(got).toEqual({ 'pod-a': [node1.gateway], 'pod-d': [node1.ip] });
}

/** Local: client IP kept via node2; node1 (no endpoints) drops; node1's pods reach all. */
function expectLocalPolicy(): void {
  const got = seen(whoami(client.ns, `http://${node2.ip}:30081`, 4));
  expect(got).toEqual({ 'pod-d': [client.ip] });
  expect(whoami(client.ns, `http://${node1.ip}:30081`, 1, DROPPED_S)).toEqual(['curl exit 28']);
  const podA = allPods(t).find((p) => p.name === 'pod-a')!;
  expect(seen(whoami(podA.ns, `http://${node1.ip}:30081`, 4))).toEqual({ 'pod-d': [podA.ip] });
}

function expectLoadBalancer(): void {
  const got = seen(whoami(client.ns, 'http://172.30.0.200', TRIES));
  expect(got).toEqual({ 'pod-a': [node1.gateway], 'pod-d': [node1.ip] });
  expect(whoami(client.ns, 'http://172.30.0.201', 1, DROPPED_S)).toEqual(['curl exit 28']);
}

function expectHairpin(): void {
  for (const name of ['pod-a', 'pod-b', 'pod-c']) {
    const pod = allPods(t).find((p) => p.name === name)!;
    const node = t.nodes.find((n) => n.name === pod.node)!;
    const got = seen(whoami(pod.ns, 'http://10.96.0.10', 40));
    expect(Object.keys(got).sort()).toEqual(['pod-a', 'pod-b', 'pod-c']);
    expect(got[name]).toEqual([node.gateway]);
  }
}

async function upWithLbRoutes(mode: 'kubetun' | 'iptables'): Promise<LabState> {
  await labDown({ topology: TOPOLOGY });
  const st = await labUp({ topology: TOPOLOGY, mode });
  // A cloud load balancer would send its ingress IPs to a node: here a route via node1.
  for (const lb of ['172.30.0.200', '172.30.0.201']) {
    sh(client.ns, `ip route replace ${lb}/32 via ${node1.ip}`);
  }
  return st;
}

let state: LabState;

function sock(node: string): string {
  return state.processes.find((p) => p.role === 'kubetun' && p.name === node)!.ctlSocket!;
}

async function counter(node: string, name: string): Promise<number> {
  const r = await labCtl<{ counters: Record<string, number> }>(sock(node), { cmd: 'counters' });
  return r.counters[name] ?? 0;
}

/** Each agent's drop counters and its TUN's kernel-side drops: why a connection was lost. */
async function dropReport(): Promise<string> {
  const lines: string[] = [];
  for (const node of [node1, node2]) {
    const r = await labCtl<{ counters: Record<string, number> }>(sock(node.name), {
      cmd: 'counters',
    }).catch((err: Error) => ({ counters: { [`unreachable: ${err.message}`]: 0 } }));
    const drops = Object.entries(r.counters).filter(([k, v]) => k.startsWith('DROP_') && v > 0);
    const link = sh(node.ns, 'ip -s link show kt0').replace(/\s+/g, ' ').trim();
    lines.push(`${node.name}: ${drops.map(([k, v]) => `${k}=${v}`).join(' ') || 'no drops'}; ${link}`);
  }
  return lines.join('\n');
}

describe('NodePort, LoadBalancer and hairpin through kubetun', () => {
  beforeAll(async () => {
    state = await upWithLbRoutes('kubetun');
  }, 120_000);

  // A lost connection says where it was lost: the drop counters, in the log of the failed run.
  beforeEach(({ onTestFailed }) => {
    onTestFailed(async () => console.log(`after the failure:\n${await dropReport()}`));
  });

  afterAll(async () => {
    await labDown({ topology: TOPOLOGY });
  });

  it('reaches backends on both nodes through the NodePort of each node, source masqueraded to that node', () => {
    expectNodePortEachNode();
  });

  it('serves the UDP NodePort from both backends', () => {
    const out = sh(client.ns, `${process.execPath} ${UDPQ} ${node2.ip} 30053 ${TRIES} 1000`);
    const pods = new Set(
      out
        .trim()
        .split('\n')
        .map((l) => l.split(' ')[0]),
    );
    expect([...pods].sort()).toEqual(['pod-a', 'pod-d']);
  });

  it('serves the NodePort to pods too (pod -> node IP:30080), masqueraded (policy Cluster)', () => {
    expectPodToNodePort();
  });

  it('externalTrafficPolicy Local: the client IP reaches the pod via the node with endpoints, the other node drops', async () => {
    const before = await counter('node1', 'DROP_ETP_NO_LOCAL_ENDPOINTS');
    expectLocalPolicy();
    expect(await counter('node1', 'DROP_ETP_NO_LOCAL_ENDPOINTS')).toBeGreaterThan(before);
  });

  it('answers the health-check node port 200 with local endpoints and 503 without', () => {
    const get = (ip: string) =>
      sh(client.ns, `curl -s -i -m 2 http://${ip}:32081/`).replace(/\r/g, '');
    const n2 = get(node2.ip);
    expect(n2).toMatch(/^HTTP\/1\.1 200 /);
    expect(n2).toMatch(/^X-Load-Balancing-Endpoint-Weight: 1$/im);
    expect(n2).toContain(
      '{"service":{"namespace":"default","name":"web-local"},"localEndpoints":1,"serviceProxyHealthy":true}',
    );
    const n1 = get(node1.ip);
    expect(n1).toMatch(/^HTTP\/1\.1 503 /);
    expect(n1).not.toMatch(/X-Load-Balancing-Endpoint-Weight/i);
    expect(n1).toContain('"localEndpoints":0');
  });

  it('admits the client to a LoadBalancer IP inside its source ranges and refuses it outside', async () => {
    const before = await counter('node1', 'DROP_SOURCE_RANGE');
    expectLoadBalancer();
    expect(await counter('node1', 'DROP_SOURCE_RANGE')).toBeGreaterThan(before);
  });

  it('lets a backend pod reach itself through its ClusterIP (hairpin, masqueraded to its gateway)', () => {
    expectHairpin();
  });

  it('reserves the SNAT port range on every node', () => {
    for (const n of t.nodes) {
      expect(sh(n.ns, 'cat /proc/sys/net/ipv4/ip_local_reserved_ports')).toContain('61440-62463');
    }
  });

  it('shows source and destination at every hop in the nodeport demo (Cluster, then Local)', async () => {
    const r = await nodePortDemo({ topology: TOPOLOGY, out: () => {} });
    const c = r.cluster;
    const b = c.backend!;
    expect(b.node).not.toBe(c.entry.name);
    expect(c.peerSeen).toBe(c.entry.ip);
    const [atClient, atUplink] = [0, 1].map((k) => c.hops[k]!.lines.join('\n'));
    const e = c.entry.ip.replace(/\./g, '\\.');
    expect(atClient).toMatch(new RegExp(`${client.ip}\\.\\d+ > ${e}\\.30080: Flags \\[S\\]`));
    expect(atClient).toMatch(new RegExp(`${e}\\.30080 > ${client.ip}\\.\\d+: Flags \\[S\\.\\]`));
    expect(atUplink).toMatch(new RegExp(`${e}\\.\\d+ > ${b.ip}\\.8080: Flags \\[S\\]`));
    const podHop = c.hops.find((h) => h.where.includes(`(${b.name})`))!.lines.join('\n');
    expect(podHop).toMatch(new RegExp(`${e}\\.\\d+ > ${b.ip}\\.8080: Flags \\[S\\]`));
    const l = r.local;
    expect(l.peerSeen).toBe(client.ip);
    const localPod = l.hops.find((h) => h.where.includes(`(${l.backend!.name})`))!.lines.join('\n');
    expect(localPod).toContain(`${client.ip}.`);
    expect(localPod).toContain(` > ${l.backend!.ip}.8080: Flags [S]`);
    expect(r.localOther.curlExit).toBe(28);
  });

  // Each steering piece switched off in turn (last: the lab is torn down afterwards).
  it("needs the uplink endpoint table for remote backends' replies to the node's SNAT ports", () => {
    // pref 7701 or 7711, whichever holds it (steer-endpoints.ts rebuild alternates)
    sh(node1.ns, 'tc filter del dev eth0 ingress pref 7701');
    sh(node1.ns, 'tc filter del dev eth0 ingress pref 7711');
    const got = whoami(client.ns, `http://${node1.ip}:30080`, 10, DROPPED_S); // both seen: p = 1 - 2^-9
    // pod-a (local, masqueraded to the gateway) still answers; pod-d's replies to node1's SNAT
    // ports now reach node1's own stack instead of kubetun and the connection never completes.
    expect(new Set(got.map((a) => a.split(' ')[0]))).toEqual(new Set(['pod-a', 'curl']));
  });

  it('needs the uplink NodePort redirect', () => {
    sh(node2.ns, 'tc filter del dev eth0 ingress pref 7702');
    expect(whoami(client.ns, `http://${node2.ip}:30080`, 2)).toEqual([
      'curl exit 7',
      'curl exit 7',
    ]);
  });
});

// The reference: the kernel with kube-proxy's iptables rules on the same topology and
// manifests. The masquerade addresses, the client IP under Local, the drops: what kubetun matches.
describe('the same checks with kube-proxy iptables rules on every node (the reference)', () => {
  beforeAll(async () => {
    await upWithLbRoutes('iptables');
  }, 120_000);

  afterAll(async () => {
    await labDown({ topology: TOPOLOGY });
  });

  it('NodePort via each node, masqueraded to the entry node', () => expectNodePortEachNode());
  it('pod -> NodePort', () => expectPodToNodePort());
  it('externalTrafficPolicy Local', () => expectLocalPolicy());
  it('LoadBalancer source ranges', () => expectLoadBalancer());
  it('hairpin', () => expectHairpin());
});

// Root test: an IPv6 ClusterIP served live by `kubetun run --service-cidr-v6` on a real TUN
// (steering.ts, the IPv6 part). Its own namespaces, prefixed `k6-<pid>-`, all removed after:
// topo6.ts's node, pods and remote node.
//
// Service web, dual-stack: 10.96.0.10 and fd00:10:96::10, port 80/TCP → 8080 (HTTP) and
// 53/UDP → 5353 (a datagram answered with the backend's name), one IPv4 and one IPv6
// EndpointSlice (be1, be2). Service far, IPv6 only: fd00:10:96::30 → the remote pod. Each IPv6
// hook is switched off while the agent runs to show the IPv6 VIP fails without it, and a
// SIGUSR2 restart hands the IPv6 TUN and steering to the next agent as they are. Needs python3
// (a UDP flow that keeps its socket, a raw ICMPv6 Packet Too Big).
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ctlRequest } from '../../src/node/ctl.ts';
import { CIDR6, type Exec, MIRRED, PODS, REMOTE_POD6, Topo6 } from './topo6.ts';
import { running, waitFor } from './wait.ts';

const t = new Topo6(`k6-${process.pid}-`);
const PREFIX = t.prefix;
const socket = t.socket;
const exec = t.exec.bind(t);
const must = t.must.bind(t);
const VIP6 = 'fd00:10:96::10';
const VIP4 = '10.96.0.10';
const VIP6_FAR = 'fd00:10:96::30';
const BACKENDS = PODS.filter((p) => p.name !== 'client');

const ep = (ip: string) => `  - {addresses: [${ip}], conditions: {ready: true}, nodeName: node1}`;
const SLICE_PORTS =
  'ports: [{name: http, port: 8080, protocol: TCP}, {name: dns, port: 5353, protocol: UDP}]';
const MANIFESTS = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: ${VIP4}
  clusterIPs: [${VIP4}, ${VIP6}]
  selector: {app: web}
  ports:
    - {name: http, port: 80, targetPort: 8080, protocol: TCP}
    - {name: dns, port: 53, targetPort: 5353, protocol: UDP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-v4, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
${SLICE_PORTS}
endpoints:
${BACKENDS.map((b) => ep(b.ip)).join('\n')}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-v6, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv6
${SLICE_PORTS}
endpoints:
${BACKENDS.map((b) => ep(b.ip6)).join('\n')}
---
apiVersion: v1
kind: Service
metadata: {name: far, namespace: default}
spec:
  ipFamilies: [IPv6]
  clusterIP: ${VIP6_FAR}
  selector: {app: far}
  ports:
    - {name: http, port: 80, targetPort: 8080, protocol: TCP}
    - {name: dns, port: 53, targetPort: 5353, protocol: UDP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: far-v6, namespace: default, labels: {kubernetes.io/service-name: far}}
addressType: IPv6
${SLICE_PORTS}
endpoints:
  - {addresses: [${REMOTE_POD6}], conditions: {ready: true}, nodeName: node2}
`;

/** HTTP on :8080 and UDP on :5353 (both families), answering the backend's name. */
const SERVER = `const name = process.argv[1];
let up = 0;
const ready = () => { if (++up === 2) process.stdout.write('up\\n'); };
require('http').createServer((q, s) => s.end(name)).listen(8080, '::', ready);
const u = require('dgram').createSocket({ type: 'udp6', ipv6Only: false });
// 'big': 3000 bytes more, fragmented by the backend's kernel (MTU 1500)
u.on('message', (m, r) => u.send(String(m) === 'big' ? name + '.'.repeat(3000) : name, r.port, r.address));
u.bind(5353, '::', ready);`;

/**
 * One UDP request to [argv1]:argv2; prints the answer and its source address, exits 1 without
 * one in 2 s. The socket is not connected: a reply the agent did not reverse-NAT (from the
 * backend's own address) would be read too, and shows in the source.
 */
const UDP_CLIENT = `const u = require('dgram').createSocket('udp6');
u.on('message', (m, r) => { process.stdout.write(m + ' from ' + r.address); process.exit(0); });
u.send(process.argv[3] ?? 'who', Number(process.argv[2]), process.argv[1]);
setTimeout(() => process.exit(1), 2000);`;

let agent: ChildProcess;
let forwardingBefore = '';

const counters = () => t.counters();
const curl = (from: string, url: string, family = '-6') =>
  exec(from, ['curl', family, '-s', '--max-time', '2', url], 10_000);
const viaVip6 = (from = 'client') => curl(from, `http://[${VIP6}]/`);
const udpVip6 = (from = 'client', msg = 'who', vip = VIP6) =>
  exec(from, [process.execPath, '-e', UDP_CLIENT, vip, '53', msg], 10_000);

/** A UDP flow from port argv3 to [argv1]:53, its socket kept open argv2 s (PMTU updates need it). */
const UDP_FLOW = `import socket, sys, time
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(('::', int(sys.argv[3])))
s.settimeout(3)
s.sendto(b'who', (sys.argv[1], 53))
print(s.recvfrom(100)[0].decode(), flush=True)
time.sleep(float(sys.argv[2]))`;

/**
 * An ICMPv6 Packet Too Big (MTU 1280) from argv1 (a router: no endpoint) to argv2, quoting the
 * DNATed packet argv2:argv4 > [argv3]:5353, as the path to the backend would send it.
 */
const PTB = `import socket, struct, sys
src, client, backend, port = sys.argv[1:5]
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.bind((src, 0))
a = lambda x: socket.inet_pton(socket.AF_INET6, x)
udp = struct.pack('!HHHH', int(port), 5353, 11, 0) + b'who'
ip6 = struct.pack('!IHBB', 0x60000000, len(udp), 17, 63) + a(client) + a(backend)
s.sendto(struct.pack('!BBHI', 2, 0, 0, 1280) + ip6 + udp, (client, 0))`;

/** The IPv6 reply rule (steer-replies.ts): marked replies looked up in table 7700, into kt0. */
const RULE6 = ['pref', '7700', 'fwmark', '0x2000/0x2000', 'lookup', '7700'];

/** `probe` with the IPv6 reply rule deleted (put back after): replies of flows to pods escape. */
function withoutRule6<T>(probe: () => T): T {
  must('node', 'ip', '-6', 'rule', 'del', ...RULE6);
  try {
    return probe();
  } finally {
    must('node', 'ip', '-6', 'rule', 'add', ...RULE6);
  }
}

/** Switch something off, show the IPv6 VIP fails, switch it back on, show it works again. */
function breaksWithout(off: () => void, on: () => void, from = 'client'): void {
  off();
  let r: Exec;
  try {
    r = viaVip6(from);
  } finally {
    on();
  }
  expect(r.status).not.toBe(0);
  expect(viaVip6(from).out).toMatch(/^be[12]$/);
}

beforeAll(async () => {
  t.setup(MANIFESTS);
  forwardingBefore = must('node', 'sysctl', '-n', 'net.ipv6.conf.all.forwarding').trim();
  const servers = [...BACKENDS.map((b) => b.name), 'remote'];
  await Promise.all(servers.map((b) => t.startServer(b, SERVER)));
  agent = await t.startAgent();
}, 120_000);

afterAll(() => t.teardown(), 60_000);

describe('kubetun run --service-cidr-v6', () => {
  it('takes a pod to both backends through the IPv6 ClusterIP (TCP)', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 40 && seen.size < 2; i++) {
      const r = viaVip6();
      expect(r.status, r.err).toBe(0);
      seen.add(r.out);
    }
    expect([...seen].sort()).toEqual(['be1', 'be2']);
  });

  it('answers a UDP request to the IPv6 ClusterIP from a backend', () => {
    const r = udpVip6();
    expect(r.status, r.err).toBe(0);
    expect(r.out).toMatch(new RegExp(`^be[12] from ${VIP6}$`));
  });

  it("reverse-NATs a backend's fragmented UDP reply: marked whole, after the kernel reassembles it", () => {
    const big = new RegExp(`^be[12]\\.{3000} from ${VIP6}$`);
    expect(udpVip6('client', 'big').out).toMatch(big);
    expect(withoutRule6(() => udpVip6('client', 'big')).out).not.toMatch(big);
    expect(udpVip6('client', 'big').out).toMatch(big);
  });

  it('routes the replies of translated flows into the TUN by their conntrack mark (ip -6 rule)', () => {
    breaksWithout(
      () => must('node', 'ip', '-6', 'rule', 'del', ...RULE6),
      () => must('node', 'ip', '-6', 'rule', 'add', ...RULE6),
    );
  });

  it("serves the node's own traffic to the IPv6 ClusterIP (route to the TUN)", () => {
    const r = viaVip6('node');
    expect(r.status, r.err).toBe(0);
    expect(r.out).toMatch(/^be[12]$/);
  });

  it('still serves the IPv4 ClusterIP of the same Service', () => {
    expect(curl('client', `http://${VIP4}/`, '-4').out).toMatch(/^be[12]$/);
  });

  it('gives no answer to ping -6 of the ClusterIP (as IPv4 ClusterIPs)', async () => {
    const before = (await counters()).DROP_ECHO_TO_VIP ?? 0;
    const r = exec('client', ['ping', '-6', '-c', '2', '-W', '1', VIP6]);
    expect(r.status).not.toBe(0);
    expect(r.out).toMatch(/0 received/);
    expect((await counters()).DROP_ECHO_TO_VIP).toBeGreaterThan(before);
  });

  it('translates its flows in the agent, and no ND, MLD or router traffic reaches it', async () => {
    const c = await counters();
    expect(c.TX_DNAT_NEW).toBeGreaterThan(0);
    expect(c.TX_REVNAT).toBeGreaterThan(0);
    expect(c.PASS_ND_MLD ?? 0).toBe(0);
    const lls = must('node', 'ip', '-6', 'addr', 'show', 'dev', 'kt0');
    expect(lls).not.toMatch(/inet6/);
    expect(must('node', 'sysctl', '-n', 'net.ipv6.conf.kt0.disable_ipv6').trim()).toBe('0');
  });

  it("takes a pod's packets to the IPv6 VIP by the block filter (pref 7725), before routing", () => {
    // the route alone would carry them too, routed twice (one hop more than the kernel's DNAT
    // spends): the filter is what takes them, and the two together are what the VIP needs
    const hits = () => {
      const out = must('node', 'tc', '-s', 'filter', 'show', 'block', '7700', 'pref', '7725');
      return Number(/Sent \d+ bytes (\d+) pkt/.exec(out)?.[1] ?? -1);
    };
    const before = hits();
    expect(viaVip6().out).toMatch(/^be[12]$/);
    expect(hits()).toBeGreaterThan(before);
    const at = ['block', '7700', 'pref', '7725'];
    const filter = ['protocol', 'ipv6', 'u32', 'match', 'ip6', 'dst', CIDR6, ...MIRRED];
    const route = [CIDR6, 'dev', 'kt0'];
    breaksWithout(
      () => {
        must('node', 'tc', 'filter', 'del', ...at);
        must('node', 'ip', '-6', 'route', 'del', ...route);
      },
      () => {
        must('node', 'tc', 'filter', 'add', ...at, ...filter);
        must('node', 'ip', '-6', 'route', 'add', ...route);
      },
    );
  });

  it('fails without the IPv6 service route for node-originated traffic', () => {
    breaksWithout(
      () => must('node', 'ip', '-6', 'route', 'del', CIDR6, 'dev', 'kt0'),
      () => must('node', 'ip', '-6', 'route', 'add', CIDR6, 'dev', 'kt0'),
      'node',
    );
  });

  it('SIGUSR2 stops for a restart; the next agent takes over the IPv6 TUN and steering', async () => {
    const { pid } = (await ctlRequest(socket, { cmd: 'status' })) as { pid: number };
    const code = new Promise<number | null>((r) => agent.once('exit', (c) => r(c)));
    agent.kill('SIGUSR2');
    expect(await code).toBe(0);
    expect(must('node', 'ip', '-6', 'route', 'show', CIDR6)).toContain('kt0');
    agent = await t.startAgent();
    const s = (await ctlRequest(socket, { cmd: 'status' })) as { tookOverPid: number };
    expect(s.tookOverPid).toBe(pid);
    expect(must('node', 'sysctl', '-n', 'net.ipv6.conf.kt0.disable_ipv6').trim()).toBe('0');
    expect(viaVip6().out).toMatch(/^be[12]$/);
    expect(udpVip6().out).toMatch(new RegExp(`^be[12] from ${VIP6}$`));
  });

  it('takes a pod to an IPv6 backend on another node, its replies steered on the uplink', () => {
    const r = curl('client', `http://[${VIP6_FAR}]/`);
    expect(r.status, r.err).toBe(0);
    expect(r.out).toBe('remote');
  });

  it("reverse-NATs a remote backend's fragmented UDP reply (marked after reassembly)", () => {
    const big = new RegExp(`^remote\\.{3000} from ${VIP6_FAR}$`);
    expect(udpVip6('client', 'big', VIP6_FAR).out).toMatch(big);
    expect(withoutRule6(() => udpVip6('client', 'big', VIP6_FAR)).out).not.toMatch(big);
    expect(udpVip6('client', 'big', VIP6_FAR).out).toMatch(big);
  });

  it("translates a router's Packet Too Big about a flow to a remote backend (RELATED: marked)", async () => {
    const ptb = (port: string) => {
      const argv = [
        'netns',
        'exec',
        `${PREFIX}client`,
        'python3',
        '-c',
        UDP_FLOW,
        VIP6_FAR,
        '2',
        port,
      ];
      const flow = spawn('ip', argv, { stdio: ['ignore', 'pipe', 'inherit'] });
      t.adopt(flow);
      return new Promise<string>((resolve) => {
        flow.stdout!.once('data', (d) => {
          const router = 'fd00:250::3';
          must('remote', 'python3', '-c', PTB, router, PODS[0].ip6, REMOTE_POD6, port);
          resolve(String(d).trim());
        });
        flow.once('exit', () => resolve(''));
      });
    };
    const route = () => must('client', 'ip', '-6', 'route', 'get', VIP6_FAR);
    const flush = () => must('client', 'ip', '-6', 'route', 'flush', 'cache');
    expect(await ptb('40123')).toBe('remote');
    await waitFor(() => /mtu 1280/.test(route()), 'the VIP learnt MTU 1280');
    flush();
    must('node', 'ip', '-6', 'rule', 'del', ...RULE6);
    try {
      // the flow's own replies escape too: its first answer must come before the rule goes
      expect(await ptb('40124')).toBe('remote');
      await sleep(500);
      expect(route()).not.toMatch(/mtu 1280/);
    } finally {
      must('node', 'ip', '-6', 'rule', 'add', ...RULE6);
    }
  });

  it("fails without the uplink's IPv6 endpoint table: the node's own flows to remote backends", () => {
    // not masqueraded (no --node-ip-v6): the reply comes to the node's own IPv6 address, local
    expect(curl('node', `http://[${VIP6_FAR}]/`).out).toBe('remote');
    for (const p of ['7721', '7731']) {
      exec('node', ['tc', 'filter', 'del', 'dev', 'eth0', 'ingress', 'pref', p]);
    }
    expect(curl('node', `http://[${VIP6_FAR}]/`).status).not.toBe(0);
    expect(curl('client', `http://[${VIP6_FAR}]/`).out).toBe('remote'); // pods: the mark's
  });

  it("fails without the block's IPv6 endpoint table: the node's own flows to local backends", () => {
    expect(viaVip6('node').out).toMatch(/^be[12]$/);
    for (const p of ['7720', '7730']) {
      exec('node', ['tc', 'filter', 'del', 'block', '7700', 'pref', p]);
    }
    expect(viaVip6('node').status).not.toBe(0);
    expect(viaVip6().out).toMatch(/^be[12]$/);
  });

  it('removes its IPv6 route, filters and forwarding switch on SIGTERM', async () => {
    agent.kill('SIGTERM');
    await waitFor(() => !running(agent.pid!), 'the agent to exit');
    expect(must('node', 'ip', '-6', 'route', 'show', CIDR6).trim()).toBe('');
    expect(must('node', 'tc', 'qdisc', 'show')).not.toContain('clsact');
    expect(must('node', 'sysctl', '-n', 'net.ipv6.conf.all.forwarding').trim()).toBe(
      forwardingBefore,
    );
  });
});

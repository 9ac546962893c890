// Root test: IPv6 NodePorts, masquerade and external IPs served live by `kubetun run
// --service-cidr-v6 --node-ip-v6` (steering.ts prefs 7722-7724). topo6.ts's node (uplink
// fd00:250::2, pods be1 and be2, the remote node with pod fd00:244:2::10), namespaces prefixed
// `k6n-<pid>-`, plus a client outside the cluster, one router further:
//
//   ns ext fd00:251::9 ─eth0══ext0 fd00:251::1─ ns remote (forwarding) ─eth0══eth0─ ns node
//
// the node routes fd00:251::/64 via the remote node; the remote node routes the external IP's
// fd00:260::/64 via the node. IPv6-only Services (a backend answers its name and the peer
// address it sees):
//
//   np     NodePort 30080/TCP 30053/UDP, externalIPs fd00:260::100   be1 (node1), remote (node2)
//   npl    NodePort 30081/TCP, externalTrafficPolicy: Local           be2 (node1), remote (node2)
//   npfar  NodePort 30082/TCP                                         remote (node2)
//
// Each new filter is switched off while the agent runs to show its traffic fails without it;
// SIGTERM removes them all. Everything started here is killed by PID, every namespace removed.
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_DATAPATH_CONFIG as DP } from '../../src/datapath/state/config.ts';
import { keyMatch } from '../../src/node/steer-endpoints.ts';
import { NODEPORT_KEYS } from '../../src/node/steering.ts';
import { MIRRED, NODE_IP6, PODS, REMOTE_NODE_IP6, REMOTE_POD6, Topo6 } from './topo6.ts';
import { running, waitFor } from './wait.ts';

const t = new Topo6(`k6n-${process.pid}-`);
/** an HTTP GET with a Destination Options header on every packet (test/fixtures/http-opts.py) */
const HTTP_OPTS = new URL('../fixtures/http-opts.py', import.meta.url).pathname;
const EXT = 'fd00:251::9';
const EXTERNAL_IP = 'fd00:260::100';
const [, BE1, BE2] = PODS;

const ep = (ip: string, node: string) =>
  `  - {addresses: [${ip}], conditions: {ready: true}, nodeName: ${node}}`;
const SLICE_PORTS =
  'ports: [{name: http, port: 8080, protocol: TCP}, {name: dns, port: 5353, protocol: UDP}]';
const svc = (name: string, vip: string, extra: string, ports: string) => `apiVersion: v1
kind: Service
metadata: {name: ${name}, namespace: default}
spec:
  type: NodePort
  ipFamilies: [IPv6]
  clusterIP: ${vip}
  selector: {app: ${name}}
${extra}  ports:
${ports}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ${name}-v6, namespace: default, labels: {kubernetes.io/service-name: ${name}}}
addressType: IPv6
${SLICE_PORTS}
endpoints:
`;
const http = (np: number) =>
  `    - {name: http, port: 80, targetPort: 8080, nodePort: ${np}, protocol: TCP}\n`;
const dns = (np: number) =>
  `    - {name: dns, port: 53, targetPort: 5353, nodePort: ${np}, protocol: UDP}\n`;
const MANIFESTS = [
  svc('np', 'fd00:10:96::40', `  externalIPs: [${EXTERNAL_IP}]\n`, http(30080) + dns(30053)) +
    [ep(BE1.ip6, 'node1'), ep(REMOTE_POD6, 'node2')].join('\n'),
  svc('npl', 'fd00:10:96::41', '  externalTrafficPolicy: Local\n', http(30081)) +
    [ep(BE2.ip6, 'node1'), ep(REMOTE_POD6, 'node2')].join('\n'),
  svc('npfar', 'fd00:10:96::42', '', http(30082)) + ep(REMOTE_POD6, 'node2'),
].join('\n---\n');

/** HTTP :8080 and UDP :5353 (IPv6), answering "<name> <the peer address it sees>". */
const SERVER = `const name = process.argv[1];
let up = 0;
const ready = () => { if (++up === 2) process.stdout.write('up\\n'); };
require('http').createServer((q, s) => s.end(name + ' ' + q.socket.remoteAddress)).listen(8080, '::', ready);
const u = require('dgram').createSocket('udp6');
u.on('message', (m, r) => u.send(name + ' ' + r.address, r.port, r.address));
u.bind(5353, '::', ready);`;

/** One UDP request to [argv1]:argv2 (socket not connected); prints "answer from <source>". */
const UDP_CLIENT = `const u = require('dgram').createSocket('udp6');
u.on('message', (m, r) => { process.stdout.write(m + ' from ' + r.address); process.exit(0); });
u.send('who', Number(process.argv[2]), process.argv[1]);
setTimeout(() => process.exit(1), 2000);`;

const curl = (from: string, host: string, port: number) =>
  t.exec(from, ['curl', '-6', '-s', '--max-time', '2', `http://[${host}]:${port}/`], 10_000);
const udp = (from: string, host: string, port: number) =>
  t.exec(from, [process.execPath, '-e', UDP_CLIENT, host, String(port)], 10_000);

/** The distinct answers of `n` requests (each must succeed): "<backend> <peer>"..., sorted. */
function answers(n: number, ask: () => { status: number | null; out: string; err: string }) {
  const seen = new Set<string>();
  for (let i = 0; i < n; i++) {
    const r = ask();
    expect(r.status, r.err).toBe(0);
    seen.add(r.out);
  }
  return [...seen].sort();
}

let agent: ChildProcess;

/** Deletes `pref` at `at`, runs `probe` (must fail), puts the filter back, `probe` passes again. */
function breaksWithout(
  at: string[],
  filters: string[][],
  probe: () => { status: number | null; out: string },
): void {
  t.must('node', 'tc', 'filter', 'del', ...at);
  let r: { status: number | null; out: string };
  try {
    r = probe();
  } finally {
    for (const f of filters) {
      t.must('node', 'tc', 'filter', 'add', ...at, 'protocol', 'ipv6', 'u32', ...f, ...MIRRED);
    }
  }
  expect(r.status, r.out).not.toBe(0);
  expect(probe().status).toBe(0);
}

/** The u32 matches steering.ts installs for (value, mask) dport keys to ip, TCP/UDP/SCTP. */
const dportKeys = (ip: string, keys: readonly (readonly [number, number])[]) =>
  ['6', '17', '132'].flatMap((p) =>
    keys.map(([v, m]) => [
      ...['match', 'ip6', 'dst', `${ip}/128`, 'match', 'ip6', 'protocol', p, '0xff'],
      ...['match', 'ip6', 'dport', `0x${v.toString(16)}`, `0x${m.toString(16)}`],
    ]),
  );

beforeAll(async () => {
  t.setup(MANIFESTS);
  // the outside client, one router (the remote node) further
  t.addNs('ext');
  t.veth('remote', 'ext0', 'ext');
  const remote = (...a: string[]) => t.must('remote', ...a);
  remote('sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1');
  remote('ip', '-6', 'addr', 'add', 'fd00:251::1/64', 'dev', 'ext0', 'nodad');
  remote('ip', 'link', 'set', 'ext0', 'up');
  remote('ip', '-6', 'route', 'add', 'fd00:260::/64', 'via', NODE_IP6);
  // the remote pod answers masqueraded UDP from its one address, as a pod would (its socket is
  // on ::, and the on-link route to the node would pick the underlay address)
  remote('ip', '-6', 'route', 'add', `${NODE_IP6}/128`, 'dev', 'eth0', 'src', REMOTE_POD6);
  const ext = (...a: string[]) => t.must('ext', ...a);
  ext('ip', 'link', 'set', 'lo', 'up');
  ext('ip', '-6', 'addr', 'add', `${EXT}/64`, 'dev', 'eth0', 'nodad');
  ext('ip', 'link', 'set', 'eth0', 'up');
  ext('ip', '-6', 'route', 'add', 'default', 'via', 'fd00:251::1');
  t.must('node', 'ip', '-6', 'route', 'add', 'fd00:251::/64', 'via', REMOTE_NODE_IP6);
  await Promise.all(['be1', 'be2', 'remote'].map((b) => t.startServer(b, SERVER)));
  agent = await t.startAgent(['--node-ip-v6', NODE_IP6]);
}, 120_000);

afterAll(() => t.teardown(), 60_000);

describe('kubetun run --node-ip-v6: IPv6 NodePorts and masquerade', () => {
  it('takes an outside client to [node IPv6]:NodePort, to the local and the remote backend, masqueraded to the node IPv6', () => {
    const seen = answers(30, () => curl('ext', NODE_IP6, 30080));
    expect(seen).toEqual([`be1 ${NODE_IP6}`, `remote ${NODE_IP6}`]);
  });

  it('serves UDP on the IPv6 NodePort, the answer from [node IPv6]:NodePort', () => {
    const seen = answers(16, () => udp('ext', NODE_IP6, 30053));
    expect(seen).toEqual([
      `be1 ${NODE_IP6} from ${NODE_IP6}`,
      `remote ${NODE_IP6} from ${NODE_IP6}`,
    ]);
  });

  it('keeps the client address with externalTrafficPolicy: Local (local endpoint only)', () => {
    expect(answers(10, () => curl('ext', NODE_IP6, 30081))).toEqual([`be2 ${EXT}`]);
  });

  it("serves the node's pods and the node itself on its IPv6 NodePort (block pref 7722, lo)", () => {
    const pod = curl('client', NODE_IP6, 30082);
    expect(pod.status, pod.err).toBe(0);
    expect(pod.out).toBe(`remote ${NODE_IP6}`);
    const node = curl('node', NODE_IP6, 30082);
    expect(node.status, node.err).toBe(0);
    expect(node.out).toBe(`remote ${NODE_IP6}`);
    const keys = dportKeys(NODE_IP6, NODEPORT_KEYS);
    breaksWithout(['block', '7700', 'pref', '7722'], keys, () => curl('client', NODE_IP6, 30082));
  });

  it('serves an IPv6 external IP arriving on the uplink (pref 7724), masqueraded', () => {
    const seen = answers(20, () => curl('ext', EXTERNAL_IP, 80));
    expect(seen).toEqual([`be1 ${NODE_IP6}`, `remote ${NODE_IP6}`]);
    const keys = [['match', 'ip6', 'dst', `${EXTERNAL_IP}/128`]];
    breaksWithout(['dev', 'eth0', 'ingress', 'pref', '7724'], keys, () =>
      curl('ext', EXTERNAL_IP, 80),
    );
  });

  it('fails without the uplink IPv6 NodePort filter (pref 7722)', () => {
    const keys = dportKeys(NODE_IP6, NODEPORT_KEYS);
    breaksWithout(['dev', 'eth0', 'ingress', 'pref', '7722'], keys, () =>
      curl('ext', NODE_IP6, 30082),
    );
  });

  it("fails without the uplink's IPv6 endpoint table (pref 7721/7731): a remote backend's replies to the node's SNAT port", async () => {
    const up = ['dev', 'eth0', 'ingress'];
    for (const p of ['7721', '7731']) t.exec('node', ['tc', 'filter', 'del', ...up, 'pref', p]);
    let r: { status: number | null; out: string };
    try {
      r = curl('ext', NODE_IP6, 30082);
    } finally {
      // remote's replies to the node's IPv6 address, as the table's entry and guard match them
      const guard = ['match', 'ip6', 'dst', `${NODE_IP6}/128`];
      const entry = [...guard, ...keyMatch(`${REMOTE_POD6}/6/8080`)];
      t.must(
        'node',
        'tc',
        'filter',
        'add',
        ...up,
        'pref',
        '7721',
        'protocol',
        'ipv6',
        'u32',
        ...entry,
        ...MIRRED,
      );
    }
    expect(r.status, r.out).not.toBe(0);
    expect(curl('ext', NODE_IP6, 30082).status).toBe(0);
    const c = await t.counters();
    expect(c.TX_REVSNAT).toBeGreaterThan(0);
  });

  it('serves a NodePort connection with a Destination Options header (pref 7727); not without it', () => {
    const opts = () => t.exec('ext', ['python3', HTTP_OPTS, NODE_IP6, '30082'], 10_000);
    expect(opts().out).toBe(`remote ${NODE_IP6}`);
    const at = ['dev', 'eth0', 'ingress', 'pref', '7727'];
    t.must('node', 'tc', 'filter', 'del', ...at);
    let r: { status: number | null; out: string };
    try {
      r = opts(); // the SYN bypasses the NodePort keys and meets the node's own stack: refused
    } finally {
      for (const x of ['44', '0', '43', '60']) {
        const m = ['match', 'ip6', 'dst', `${NODE_IP6}/128`, 'match', 'ip6', 'protocol', x, '0xff'];
        t.must('node', 'tc', 'filter', 'add', ...at, 'protocol', 'ipv6', 'u32', ...m, ...MIRRED);
      }
    }
    expect(r.status, r.out).not.toBe(0);
    expect(opts().out).toBe(`remote ${NODE_IP6}`);
  });

  it('SIGUSR2 stops for a restart; the next agent serves the IPv6 NodePort as it was', async () => {
    const code = new Promise<number | null>((r) => agent.once('exit', (c) => r(c)));
    agent.kill('SIGUSR2');
    expect(await code).toBe(0);
    agent = await t.startAgent(['--node-ip-v6', NODE_IP6]);
    const seen = answers(30, () => curl('ext', NODE_IP6, 30080));
    expect(seen).toEqual([`be1 ${NODE_IP6}`, `remote ${NODE_IP6}`]);
  });

  it('removes its IPv6 NodePort, SNAT and external-IP filters on SIGTERM', async () => {
    const prefs = () => t.must('node', 'tc', 'filter', 'show', 'dev', 'eth0', 'ingress');
    expect(prefs()).toContain('pref 7722 '); // NodePorts
    expect(prefs()).toMatch(/pref 77[23]1 /); // the endpoint table (either pref of its pair)
    const reserved = t.must('node', 'sysctl', '-n', 'net.ipv4.ip_local_reserved_ports').trim();
    expect(reserved).toContain(`${DP.snat6PortMin}-${DP.snat6PortMax}`);
    agent.kill('SIGTERM');
    await waitFor(() => !running(agent.pid!), 'the agent to exit');
    expect(t.must('node', 'tc', 'qdisc', 'show')).not.toContain('clsact');
    expect(t.must('node', 'sysctl', '-n', 'net.ipv4.ip_local_reserved_ports').trim()).toBe('');
    expect(curl('ext', NODE_IP6, 30080).status).not.toBe(0);
  });
});

// Root test: the IPv6 cluster CIDR and IPv6 health-check node ports of `kubetun run
// --service-cidr-v6 --node-ip-v6` (issue 19). topo6.ts's node (uplink fd00:250::2, pods client,
// be1, be2 in fd00:244:1::/64, the remote node with pod fd00:244:2::10), namespaces prefixed
// `k6b-<pid>-`, plus a client outside the cluster, one router further (as v6-nodeport.test.ts):
//
//   ns ext fd00:251::9 ─eth0══ext0 fd00:251::1─ ns remote (forwarding) ─eth0══eth0─ ns node
//
// The agent runs with kube-proxy's dual-stack --cluster-cidr 10.244.0.0/16,fd00:244::/32.
// Services (a backend answers its name and the peer address it sees):
//
//   cip    ClusterIP fd00:10:96::50                                be1 (node1)
//   npl    LoadBalancer eTP=Local, IPv6, NodePort 30091, hc 32091  be2 (node1), remote (node2)
//   dual   LoadBalancer eTP=Local, dual-stack, hc 32092            IPv4: be1, be2; IPv6: be1, remote
//   far    LoadBalancer eTP=Local, IPv6, hc 32093                  remote (node2)
//
// kube-proxy's masquerade decisions with an IPv6 cluster CIDR: an outside client's IPv6
// ClusterIP flow is masqueraded to the node's IPv6 address, a pod's is not; a pod reaching an
// eTP=Local NodePort gets every endpoint (the short-circuit), an outside client only the local
// one. A restart without the IPv6 CIDR shows both turn back. The health-check node ports answer
// on [node IPv6]:port with the IPv6 local count, on the IPv4 node IP with the IPv4 count, and an
// IPv6-only service is not served on IPv4 (kube-proxy's per-family servers). Everything started
// here is killed by PID, every namespace removed.
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CIDR6, NODE_IP, NODE_IP6, PODS, REMOTE_NODE_IP6, REMOTE_POD6, Topo6 } from './topo6.ts';

const t = new Topo6(`k6b-${process.pid}-`);
const EXT = 'fd00:251::9';
const [CLIENT, BE1, BE2] = PODS;
const DUAL = ['--cluster-cidr', '10.244.0.0/16,fd00:244::/32'];

const ep = (ip: string, node: string) =>
  `  - {addresses: [${ip}], conditions: {ready: true}, nodeName: ${node}}`;
const slice = (name: string, family: 'IPv4' | 'IPv6', eps: string[]) => `---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ${name}-${family}, namespace: default, labels: {kubernetes.io/service-name: ${name}}}
addressType: ${family}
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
${eps.join('\n')}
`;
const lb = (name: string, vips: string[], np: number, hc: number) => `---
apiVersion: v1
kind: Service
metadata: {name: ${name}, namespace: default}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  healthCheckNodePort: ${hc}
  ipFamilyPolicy: ${vips.length > 1 ? 'RequireDualStack' : 'SingleStack'}
  ipFamilies: [${vips.map((v) => (v.includes(':') ? 'IPv6' : 'IPv4')).join(', ')}]
  clusterIP: ${vips[0]}
  clusterIPs: [${vips.join(', ')}]
  selector: {app: ${name}}
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: ${np}, protocol: TCP}]
`;
const MANIFESTS = [
  `apiVersion: v1
kind: Service
metadata: {name: cip, namespace: default}
spec:
  ipFamilies: [IPv6]
  clusterIP: fd00:10:96::50
  selector: {app: cip}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
`,
  slice('cip', 'IPv6', [ep(BE1.ip6, 'node1')]),
  lb('npl', ['fd00:10:96::51'], 30091, 32091),
  slice('npl', 'IPv6', [ep(BE2.ip6, 'node1'), ep(REMOTE_POD6, 'node2')]),
  lb('dual', ['10.96.0.52', 'fd00:10:96::52'], 30092, 32092),
  slice('dual', 'IPv4', [ep(BE1.ip, 'node1'), ep(BE2.ip, 'node1')]),
  slice('dual', 'IPv6', [ep(BE1.ip6, 'node1'), ep(REMOTE_POD6, 'node2')]),
  lb('far', ['fd00:10:96::53'], 30093, 32093),
  slice('far', 'IPv6', [ep(REMOTE_POD6, 'node2')]),
].join('');

/** HTTP :8080 on ::, answering "<name> <the peer address it sees>". */
const SERVER = `const name = process.argv[1];
require('http').createServer((q, s) => s.end(name + ' ' + q.socket.remoteAddress))
  .listen(8080, '::', () => process.stdout.write('up\\n'));`;

const url = (host: string, port: number) =>
  host.includes(':') ? `http://[${host}]:${port}/` : `http://${host}:${port}/`;
const curl = (from: string, host: string, port: number) =>
  t.exec(from, ['curl', '-s', '--max-time', '3', url(host, port)], 10_000);

/** The distinct answers of `n` requests (each must succeed), sorted. */
function answers(n: number, from: string, host: string, port: number): string[] {
  const seen = new Set<string>();
  for (let i = 0; i < n; i++) {
    const r = curl(from, host, port);
    expect(r.status, `${from} -> ${url(host, port)}: ${r.err}`).toBe(0);
    seen.add(r.out);
  }
  return [...seen].sort();
}

/** A health-check node port's answer: "<status> <localEndpoints>", or "fail" (not served). */
function health(from: string, host: string, port: number): string {
  const r = t.exec(from, ['curl', '-s', '--max-time', '3', '-w', ' %{http_code}', url(host, port)]);
  if (r.status !== 0) return 'fail';
  const [body, code] = [
    r.out.slice(0, r.out.lastIndexOf(' ')),
    r.out.slice(r.out.lastIndexOf(' ') + 1),
  ];
  return `${code} ${(JSON.parse(body) as { localEndpoints: number }).localEndpoints}`;
}

/** `f()` until it returns `want` (the servers follow the sync once a second), else its last. */
async function eventually(f: () => string, want: string): Promise<string> {
  let got = '';
  for (let i = 0; i < 40 && got !== want; i++) {
    got = f();
    if (got !== want) await new Promise((r) => setTimeout(r, 250));
  }
  return got;
}

let agent: ChildProcess;

beforeAll(async () => {
  t.setup(MANIFESTS);
  t.addNs('ext');
  t.veth('remote', 'ext0', 'ext');
  const remote = (...a: string[]) => t.must('remote', ...a);
  remote('sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1');
  remote('ip', '-6', 'addr', 'add', 'fd00:251::1/64', 'dev', 'ext0', 'nodad');
  remote('ip', 'link', 'set', 'ext0', 'up');
  // the outside client reaches the service range through the node (kube-proxy's masquerade
  // case: an off-cluster client routed to the ClusterIPs)
  remote('ip', '-6', 'route', 'add', CIDR6, 'via', NODE_IP6);
  remote('ip', '-6', 'route', 'add', `${NODE_IP6}/128`, 'dev', 'eth0', 'src', REMOTE_POD6);
  const ext = (...a: string[]) => t.must('ext', ...a);
  ext('ip', 'link', 'set', 'lo', 'up');
  ext('ip', '-6', 'addr', 'add', `${EXT}/64`, 'dev', 'eth0', 'nodad');
  ext('ip', 'link', 'set', 'eth0', 'up');
  ext('ip', '-6', 'route', 'add', 'default', 'via', 'fd00:251::1');
  t.must('node', 'ip', '-6', 'route', 'add', 'fd00:251::/64', 'via', REMOTE_NODE_IP6);
  await Promise.all(['be1', 'be2', 'remote'].map((b) => t.startServer(b, SERVER)));
  agent = await t.startAgent(['--node-ip-v6', NODE_IP6, ...DUAL]);
}, 120_000);

afterAll(() => t.teardown(), 60_000);

describe('kubetun run --cluster-cidr v4,v6: IPv6 masquerade decisions as kube-proxy', () => {
  it("masquerades an outside client's IPv6 ClusterIP flow to the node IPv6, not a pod's", () => {
    expect(answers(5, 'ext', 'fd00:10:96::50', 80)).toEqual([`be1 ${NODE_IP6}`]);
    expect(answers(5, 'client', 'fd00:10:96::50', 80)).toEqual([`be1 ${CLIENT.ip6}`]);
  });

  it('gives a pod every endpoint of an eTP=Local NodePort; an outside client the local one', () => {
    expect(answers(20, 'client', NODE_IP6, 30091)).toEqual([
      `be2 ${CLIENT.ip6}`,
      `remote ${CLIENT.ip6}`,
    ]);
    expect(answers(10, 'ext', NODE_IP6, 30091)).toEqual([`be2 ${EXT}`]);
  });
});

describe('IPv6 health-check node ports (--node-ip-v6)', () => {
  it('answers on [node IPv6]:port with the IPv6 local count, to an outside client and the node', async () => {
    expect(await eventually(() => health('ext', NODE_IP6, 32091), '200 1')).toBe('200 1');
    expect(health('node', NODE_IP6, 32091)).toBe('200 1');
    expect(health('ext', NODE_IP6, 32093)).toBe('503 0');
  });

  it('a dual-stack service: each family its own count, on its own node address', async () => {
    expect(await eventually(() => health('ext', NODE_IP6, 32092), '200 1')).toBe('200 1');
    expect(health('node', NODE_IP, 32092)).toBe('200 2');
  });

  it('an IPv6-only service has no health-check node port on the IPv4 node IP', () => {
    expect(health('node', NODE_IP, 32091)).toBe('fail');
    expect(health('node', NODE_IP, 32093)).toBe('fail');
  });
});

describe('without the IPv6 cluster CIDR (a restart with --cluster-cidr 10.244.0.0/16)', () => {
  it('neither masquerades the outside client nor short-circuits the pod', async () => {
    const code = new Promise<number | null>((r) => agent.once('exit', (c) => r(c)));
    agent.kill('SIGUSR2');
    expect(await code).toBe(0);
    agent = await t.startAgent(['--node-ip-v6', NODE_IP6, '--cluster-cidr', '10.244.0.0/16']);
    expect(answers(5, 'ext', 'fd00:10:96::50', 80)).toEqual([`be1 ${EXT}`]);
    expect(answers(10, 'client', NODE_IP6, 30091)).toEqual([`be2 ${CLIENT.ip6}`]);
  });
});

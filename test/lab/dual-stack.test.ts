// The dual-stack lab (root, issue 19 point 5): lab/topology.yaml's ipv6 block gives nodes, the
// client and pods IPv6 addresses; the control plane gives web-dual (PreferDualStack) its IPv6
// ClusterIP and an IPv6 EndpointSlice from the Pods' status.podIPs; `curl -6` to that VIP
// answers from every pod and `ping -6` gets no reply, `curl -6` from the external client to a
// NodePort on each node's IPv6 address answers from every pod of web-np (masqueraded to the
// node) and web-local keeps the client's address (eTP Local), and path MTU discovery works
// through an IPv6 VIP (Packet Too Big, then the same datagram fragmented and answered) — with
// kubetun and with kube-proxy's IPv6 proxier in iptables (ip6tables) and nftables (table ip6)
// mode; the curl-vs-ping demo says so; every IPv6 `lab compare` twin is SAME against both kernel
// modes, or a documented difference. Offline first: the same manifests on an IPv4-only
// topology, and the allocator's IPv6 ClusterIPs.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Store } from '../../src/cluster/store.ts';
import type { Service } from '../../src/cluster/types.ts';
import { labSwitchMode } from '../../src/lab/compare/mode.ts';
import { type CompareReport, labCompare } from '../../src/lab/compare/run.ts';
import { formatReport } from '../../src/lab/compare/report.ts';
import { familyRefusal, findScenarios, SCENARIOS } from '../../src/lab/compare/scenarios.ts';
import { renderStaticView } from '../../src/lab/control-plane.ts';
import { curlVsPing } from '../../src/lab/demo/curl-vs-ping.ts';
import { requireIpv6 } from '../../src/lab/demo/ensure-lab.ts';
import { longConnectionsDemo } from '../../src/lab/demo/long-connections.ts';
import { nodePortDemo } from '../../src/lab/demo/nodeport.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import { readLabServices } from '../../src/lab/manifests.ts';
import { VIEW_DIR } from '../../src/lab/state.ts';
import { LAB_PREFIX, loadTopology, parseTopology } from '../../src/lab/topology.ts';

const ROOT = join(import.meta.dirname, '../..');
const VIP6 = 'fd00:10:96::10';
/** udp-echo's IPv6 ClusterIP (lab/manifests/udp-echo.yaml): pod-b, pod-d */
const UDP_ECHO6 = 'fd00:10:96::36';
const BACKENDS = ['pod-a', 'pod-b', 'pod-c']; // app=web
const t = loadTopology(join(ROOT, 'lab/topology.yaml'));

function inNs(target: string, argv: string[], timeout = 20_000) {
  const r = spawnSync('ip', ['netns', 'exec', LAB_PREFIX + target, ...argv], {
    encoding: 'utf8',
    timeout,
  });
  return { status: r.status, out: r.stdout ?? '', err: r.stderr ?? '' };
}

/** UDP to [ip]:53 from pod-d; the answer ("<pod> <ip6>") or "timeout". */
const UDP6 = `const u = require('dgram').createSocket('udp6');
u.on('message', (m) => { console.log(String(m)); process.exit(0); });
u.send('who', 53, process.argv[1]);
setTimeout(() => { console.log('timeout'); process.exit(1); }, 2000);`;

/** curl -6 and UDP to the IPv6 VIP until every backend answered (≤ 40 each); ping -6. */
function serveIpv6(): { tcp: Set<string>; udp: Set<string>; pingReceived: number } {
  const tcp = new Set<string>();
  const udp = new Set<string>();
  for (let i = 0; i < 40 && tcp.size < BACKENDS.length; i++) {
    const r = inNs('pod-d', ['curl', '-6', '-sS', '-m', '3', `http://[${VIP6}]:80/`]);
    expect(r.status, r.err).toBe(0);
    tcp.add(r.out.trim());
  }
  for (let i = 0; i < 40 && udp.size < BACKENDS.length; i++) {
    const r = inNs('pod-d', [process.execPath, '-e', UDP6, VIP6]);
    expect(r.out.trim()).not.toBe('timeout');
    udp.add(r.out.trim());
  }
  const ping = inNs('pod-d', ['ping', '-6', '-n', '-c', '2', '-i', '0.2', '-W', '1', VIP6]);
  const m = /(\d+) received/.exec(ping.out);
  return { tcp, udp, pingReceived: Number(m?.[1] ?? -1) };
}

/** curl -6 from the external client; "<pod> <ip6> <peer>" or the error. */
function whoami6(host: string, port: number) {
  return inNs('client', ['curl', '-6', '-sS', '-m', '2', `http://[${host}]:${port}/whoami`]);
}

/**
 * IPv6 NodePorts from the external client: web-np (eTP Cluster; pod-a, pod-d) on each node's
 * IPv6 address until both pods answered (≤ 30 tries), as "<node>: <pod> <pod ip6> <peer>"; and
 * web-local (eTP Local; pod-d on node2) on each node, its answer or curl's exit status.
 */
function nodePorts6(): { cluster: Set<string>; local: string[] } {
  const cluster = new Set<string>();
  for (const n of t.nodes) {
    const seen = new Set<string>();
    for (let i = 0; i < 30 && seen.size < 2; i++) {
      const r = whoami6(n.ip6!, 30080);
      expect(r.status, `${n.name}: ${r.err}`).toBe(0);
      seen.add(r.out.trim().split(' ')[0]!);
      cluster.add(`${n.name}: ${r.out.trim()}`);
    }
  }
  const local = t.nodes.map((n) => {
    const r = whoami6(n.ip6!, 30081);
    return `${n.name}: ${r.status === 0 ? r.out.trim() : `curl exit ${r.status}`}`;
  });
  return { cluster, local };
}

/** What nodePorts6 must see: every web-np pod through each node, masqueraded to that node. */
function expectNodePorts6(r: ReturnType<typeof nodePorts6>): void {
  const pod = (name: string) => t.nodes.flatMap((n) => n.pods).find((p) => p.name === name)!;
  const [a, d] = [pod('pod-a'), pod('pod-d')];
  expect([...r.cluster].sort()).toEqual(
    t.nodes.flatMap((n) => [
      `${n.name}: pod-a ${a.ip6} ${n.ip6}`,
      `${n.name}: pod-d ${d.ip6} ${n.ip6}`,
    ]),
  );
  // eTP Local: node1 has no endpoint (the SYN is dropped: curl times out), node2's keeps the
  // client's address
  expect(r.local).toEqual(['node1: curl exit 28', `node2: pod-d ${d.ip6} ${t.clients[0]!.ip6}`]);
}

/**
 * Path MTU discovery through udp-echo's IPv6 VIP, from pod-a with pod-d's node-side veth at
 * 1280: a 1400-byte datagram that lands on pod-d draws a Packet Too Big, which must reach pod-a
 * about the VIP (reverse-NATed) so that pod-a learns the path MTU and sends the same datagram
 * again in fragments, which pod-d answers. Tries source ports until one lands on pod-d (pod-b's
 * veth takes 1400: it answers the first datagram). Returns both answers and the learnt MTU.
 */
const PMTU6 = `const dgram = require('dgram');
const vip = process.argv[1];
(async () => {
  for (let port = 20000; port < 20030; port++) {
    const s = dgram.createSocket('udp6');
    await new Promise((r) => s.bind(port, r));
    const ask = () => new Promise((res) => {
      const t = setTimeout(() => res('timeout'), 1500);
      s.once('message', (m) => { clearTimeout(t); res(String(m).split('\\n')[0]); });
      s.send(Buffer.alloc(1400, 'x'), 53, vip);
    });
    const first = await ask();
    if (first !== 'timeout') { s.close(); continue; }
    console.log(JSON.stringify({ first, second: await ask() }));
    process.exit(0);
  }
  console.log(JSON.stringify({ first: 'never landed on pod-d' }));
  process.exit(1);
})();`;

function pmtu6(): { first: string; second?: string; mtu?: string } {
  // both ends of pod-d's veth, as a link has one MTU: a veth drops what its peer cannot take,
  // and pod-d's answer (the datagram echoed back whole) must leave in fragments too
  const mtu = (v: string) => {
    inNs('node2', ['ip', 'link', 'set', 'veth-pod-d', 'mtu', v]);
    inNs('pod-d', ['ip', 'link', 'set', 'eth0', 'mtu', v]);
  };
  inNs('pod-a', ['ip', '-6', 'route', 'flush', 'cache']);
  mtu('1280');
  try {
    const r = inNs('pod-a', [process.execPath, '-e', PMTU6, UDP_ECHO6], 120_000);
    const route = inNs('pod-a', ['ip', '-6', 'route', 'get', UDP_ECHO6]).out;
    return { ...JSON.parse(r.out || '{}'), mtu: /\bmtu (\d+)/.exec(route)?.[1] };
  } finally {
    mtu('1500');
    inNs('pod-a', ['ip', '-6', 'route', 'flush', 'cache']);
  }
}

/** pmtu6 as it must be: Packet Too Big learnt (1280), then pod-d answered the fragments. */
function expectPmtu6(r: ReturnType<typeof pmtu6>): void {
  const d = t.nodes.flatMap((n) => n.pods).find((p) => p.name === 'pod-d')!;
  expect(r).toEqual({ first: 'timeout', second: `pod-d ${d.ip6}`, mtu: '1280' });
}

/** "<pod> <its IPv6 address>" for every backend: the answers came from the pods' IPv6 side. */
const answers6 = BACKENDS.map((name) => {
  const p = t.nodes.flatMap((n) => n.pods).find((x) => x.name === name)!;
  return `${name} ${p.ip6}`;
}).sort();

describe('dual-stack control plane (offline)', () => {
  it('reads the ipv6 block and podCidrV6, naming the field of a mistake', () => {
    const text = readFileSync(join(ROOT, 'lab/topology.yaml'), 'utf8');
    expect(t.nodes.map((n) => [n.ip6, n.gateway6])).toEqual([
      ['fd00:172:30::b', 'fd00:10:244:1::1'],
      ['fd00:172:30::c', 'fd00:10:244:2::1'],
    ]);
    expect(t.clients[0]!.ip6).toBe('fd00:172:30::64');
    const bad = (from: string, to: string) => () =>
      parseTopology(text.replace(from, to), '/x/topology.yaml');
    expect(bad('    podCidrV6: fd00:10:244:2::/64\n', '')).toThrow(
      '/x/topology.yaml: node node2: podCidrV6: missing',
    );
    expect(bad('podCidrV6: fd00:10:244:2::/64', 'podCidrV6: fd00:99::/64')).toThrow(
      'is not inside ipv6.clusterCidr fd00:10:244::/56',
    );
    expect(bad('serviceCidr: fd00:10:96::/112', 'serviceCidr: 10.97.0.0/16')).toThrow(
      'ipv6: serviceCidr: "10.97.0.0/16" is not an IPv6 CIDR',
    );
  });

  it('leaves web-dual single-stack on an IPv4-only topology, and refuses the IPv6 twins there', async () => {
    const vagrant = loadTopology(join(ROOT, 'lab/vagrant-topology.yaml'));
    const dir = mkdtempSync(join(tmpdir(), 'kubetun-dual-'));
    try {
      const refused: string[] = [];
      await renderStaticView(vagrant, dir, (m) => refused.push(m));
      expect(refused).toEqual([]);
      const items = JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')).items as Service[];
      const svc = items.find((o) => o.kind === 'Service' && o.metadata.name === 'web-dual')!;
      expect(svc.spec.clusterIPs).toEqual(['10.96.0.16']);
      expect(svc.spec.ipFamilyPolicy).toBe('SingleStack');
      expect(readLabServices(dir, 'IPv6')).toEqual([]);
      const [v6] = findScenarios(['clusterip-tcp-v6']);
      expect(familyRefusal(v6!, vagrant)).toMatch(/no ipv6 block/);
      expect(familyRefusal(v6!, t)).toBeUndefined();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('allocates, holds and releases IPv6 ClusterIPs; RequireDualStack needs an IPv6 range', () => {
    const svc = (name: string, spec: object) => ({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace: 'default' },
      spec: { selector: { app: name }, ports: [{ port: 80 }], ...spec },
    });
    const dual = new Store({ serviceCidr: '10.96.0.0/16', serviceCidrV6: 'fd00:10:96::/112' });
    const a = dual.apply(svc('a', { ipFamilyPolicy: 'PreferDualStack' }), 'a.yaml');
    expect('object' in a && (a.object as Service).spec.clusterIPs?.[1]).toMatch(
      /^fd00:10:96::[0-9a-f]+$/,
    );
    expect((a as { object: Service }).object.spec.ipFamilies).toEqual(['IPv4', 'IPv6']);
    const b = dual.apply(
      svc('b', { ipFamilyPolicy: 'RequireDualStack', clusterIPs: ['10.96.0.20', VIP6] }),
      'b.yaml',
    );
    expect((b as { object: Service }).object.spec.clusterIPs).toEqual(['10.96.0.20', VIP6]);
    const c = dual.apply(
      svc('c', { ipFamilyPolicy: 'PreferDualStack', clusterIPs: ['10.96.0.21', VIP6] }),
      'c.yaml',
    );
    expect(JSON.stringify(c)).toContain('provided IP is already allocated');
    dual.remove('Service', 'default', 'b');
    const d = dual.apply(
      svc('d', { ipFamilyPolicy: 'PreferDualStack', clusterIPs: ['10.96.0.22', VIP6] }),
      'd.yaml',
    );
    expect((d as { object: Service }).object.spec.clusterIPs).toEqual(['10.96.0.22', VIP6]);
    const single = new Store({ serviceCidr: '10.96.0.0/16' });
    const e = single.apply(svc('e', { ipFamilyPolicy: 'RequireDualStack' }), 'e.yaml');
    expect(JSON.stringify(e)).toContain('the lab is IPv4-only');
  });
});

describe(`the dual-stack lab (lab prefix ${LAB_PREFIX})`, () => {
  beforeAll(async () => {
    await labUp({ mode: 'kubetun' });
  }, 180_000);
  afterAll(async () => {
    await labDown();
  }, 120_000);

  it('gives pods, nodes and the client IPv6 addresses and routes, and web-dual an IPv6 slice', () => {
    const addr = inNs('pod-a', ['ip', '-6', 'addr', 'show', 'dev', 'eth0']).out;
    expect(addr).toContain('inet6 fd00:10:244:1::2/128');
    expect(inNs('pod-a', ['ip', '-6', 'route', 'show', 'default']).out).toMatch(
      /^default via fe80::1 dev eth0/,
    );
    expect(inNs('node1', ['ip', '-6', 'route']).out).toMatch(
      /fd00:10:244:2::\/64 via fd00:172:30::c dev eth0/,
    );
    // the client reaches a pod on node2 over IPv6 (host-gw), and the pod sees its IPv6 address
    const who = inNs('client', [
      'curl',
      '-6',
      '-sS',
      '-m',
      '3',
      'http://[fd00:10:244:2::2]:8080/whoami',
    ]);
    expect(who.out.trim()).toBe('pod-c fd00:10:244:2::2 fd00:172:30::64');
    // IPv4 answers are unchanged: the IPv4 address and an IPv4 peer
    const who4 = inNs('client', ['curl', '-sS', '-m', '3', 'http://10.244.2.2:8080/whoami']);
    expect(who4.out.trim()).toBe('pod-c 10.244.2.2 172.30.0.100');
    const svc = readLabServices(VIEW_DIR, 'IPv6').find((s) => s.name === 'web-dual')!;
    expect(svc.clusterIP).toBe(VIP6);
    const http = svc.ports.find((p) => p.protocol === 'TCP')!;
    expect(http.endpoints.map((e) => `${e.targetName} ${e.ip}`).sort()).toEqual(answers6);
    const v4 = readLabServices(VIEW_DIR).find((s) => s.name === 'web-dual')!;
    expect(v4.clusterIP).toBe('10.96.0.16');
  });

  it('serves the IPv6 ClusterIP from every pod with kubetun; ping -6 gets no reply', () => {
    const r = serveIpv6();
    expect([...r.tcp].sort()).toEqual(answers6);
    expect([...r.udp].sort()).toEqual(answers6);
    expect(r.pingReceived).toBe(0);
  }, 120_000);

  it("serves IPv6 NodePorts on each node's IPv6 address with kubetun, and PMTU discovery through an IPv6 VIP", () => {
    expectNodePorts6(nodePorts6());
    expectPmtu6(pmtu6());
  }, 180_000);

  it('shows the NodePort and long-connections demos over IPv6 (--ipv6)', async () => {
    const [node1, node2] = t.nodes as [(typeof t.nodes)[0], (typeof t.nodes)[0]];
    const client = t.clients[0]!;
    const lines: string[] = [];
    const np = await nodePortDemo({ ipv6: true, out: (x) => lines.push(x) });
    // Cluster through node1, a backend on node2: masqueraded to node1's IPv6 address, seen on
    // node1's uplink as the SYN to the pod
    expect([np.cluster.entry.name, np.cluster.backend?.node, np.cluster.peerSeen]).toEqual([
      'node1',
      'node2',
      node1.ip6,
    ]);
    const uplink = np.cluster.hops.find((h) => h.where === 'node1 uplink eth0')!.lines.join('\n');
    expect(uplink).toMatch(
      new RegExp(`IP6 ${node1.ip6}\\.\\d+ > ${np.cluster.backend!.ip6}\\.8080: Flags \\[S\\]`),
    );
    // Local: node2 keeps the client's IPv6 address; node1 (no endpoint) drops it
    expect([np.local.entry.name, np.local.backend?.name, np.local.peerSeen]).toEqual([
      'node2',
      'pod-d',
      client.ip6,
    ]);
    expect(np.localOther.curlExit).toBe(28);
    expect(lines.join('\n')).toContain(`$ curl -6 http://[${node2.ip6}]:30081/whoami`);
    const lc = await longConnectionsDemo({ ipv6: true, out: () => {} });
    expect(lc.url).toBe(`http://[${VIP6}]:80/`);
    // one connection, one backend for all 100 requests; new connections spread over web's pods
    expect([lc.keepAliveSockets, Object.values(lc.keepAlive)]).toEqual([1, [100]]);
    expect(Object.keys(lc.newConnections).length).toBeGreaterThan(1);
    for (const pod of Object.keys(lc.newConnections)) expect(BACKENDS).toContain(pod);
    // an IPv4-only topology has no IPv6 demo: one line saying so
    const v4only = loadTopology(join(ROOT, 'lab/vagrant-topology.yaml'));
    expect(() => requireIpv6(v4only, 'nodeport')).toThrow(/--ipv6: .* has no ipv6 block/);
  }, 180_000);

  for (const mode of ['iptables', 'nftables'] as const) {
    it(`serves it, the IPv6 NodePorts and PMTU the same with kube-proxy's IPv6 proxier in ${mode} mode`, async () => {
      await labSwitchMode(mode);
      try {
        if (mode === 'iptables')
          expect(
            inNs('node2', ['ip6tables', '-w', '-t', 'nat', '-S', 'KUBE-SERVICES']).out,
          ).toContain(`${VIP6}/128`);
        else expect(inNs('node2', ['nft', 'list', 'tables']).out).toContain('table ip6 kube-proxy');
        const r = serveIpv6();
        expect([...r.tcp].sort()).toEqual(answers6);
        expect([...r.udp].sort()).toEqual(answers6);
        expect(r.pingReceived).toBe(0);
        expectNodePorts6(nodePorts6());
        expectPmtu6(pmtu6());
      } finally {
        await labSwitchMode('kubetun');
      }
    }, 180_000);
  }

  it('shows curl -6 answering and ping -6 unanswered in the curl-vs-ping demo, in every mode', async () => {
    for (const mode of ['kubetun', 'iptables', 'nftables'] as const) {
      const lines: string[] = [];
      const r = await curlVsPing({ mode, out: (s) => lines.push(s) });
      expect(r.ipv6, mode).toBeDefined();
      expect([r.ipv6!.vip, r.ipv6!.httpCode, r.ipv6!.pingReceived], mode).toEqual([VIP6, 200, 0]);
      expect(r.ipv6!.pingSent, mode).toBeGreaterThan(0);
      expect(BACKENDS, mode).toContain(r.ipv6!.backend?.name);
      expect(lines.join('\n'), mode).toContain(`$ curl -6 http://[${VIP6}]:80/`);
    }
  }, 300_000);

  for (const kernel of ['iptables', 'nftables'] as const) {
    it(`finds every IPv6 lab compare twin SAME against ${kernel} mode, or a documented difference`, async () => {
      const twins = SCENARIOS.filter((x) => x.family === 'IPv6');
      const r: CompareReport = await labCompare(twins, { kernel });
      const report = formatReport(r);
      const one = (name: string) => r.results.find((x) => x.name === name)!;
      const client = (name: string) => one(name).points.find((p) => p.point.endsWith('(client)'))!;
      const differ = ['ping-vip-v6', 'no-endpoints-v6', 'unknown-port-v6'];
      expect(
        r.results.map((x) => `${x.name}: ${x.verdict}`),
        report,
      ).toEqual(
        twins.map((x) => `${x.name}: ${differ.includes(x.name) ? 'expected-difference' : 'same'}`),
      );
      for (const name of ['clusterip-tcp-v6', 'udp-v6']) {
        // the client talked to the IPv6 VIP and heard back from it
        expect(client(name).a.some((p) => p.dst === VIP6)).toBe(true);
        expect(client(name).a.some((p) => p.src === VIP6)).toBe(true);
      }
      expect(client('clusterip-tcp-v6').a.length).toBeGreaterThanOrEqual(8); // handshake … close
      const ping = one('ping-vip-v6');
      expect(ping.expected).toContain(kernel === 'nftables' ? 'type 1 code 4' : 'type 1 code 3');
      // no echo reply in either plane; kubetun's side is the echo requests alone (dropped)
      const sides = (name: string) => ({
        [one(name).runs[0].mode]: client(name).a,
        [one(name).runs[1].mode]: client(name).b,
      });
      const pings = sides('ping-vip-v6');
      for (const pkts of Object.values(pings)) expect(pkts.some((p) => p.src === VIP6)).toBe(false);
      expect(pings.kubetun!.map((p) => /icmp6 type 128 /.test(p.text))).toEqual([true, true]);
      expect(pings[kernel]!.some((p) => / icmp6 type 1 /.test(p.text))).toBe(true);
      // a rejected connect: kubetun's ICMPv6 port unreachable fails it at once; the kernel's
      // first one arrives inside connect() (a soft error), so its SYN goes twice
      const rejects =
        kernel === 'nftables' ? ['no-endpoints-v6', 'unknown-port-v6'] : ['no-endpoints-v6'];
      for (const name of rejects) {
        expect(one(name).expected, name).toContain('IPV6_RECVERR');
        const side = sides(name);
        expect(
          side.kubetun!.map((p) => p.loose),
          name,
        ).toEqual(side[kernel]!.slice(0, 2).map((p) => p.loose));
        expect(
          side.kubetun!.map((p) => p.text.replace(/^.*?: /, '').split(' about')[0]),
          name,
        ).toEqual([
          'tcp [S] seq 0 len 0 <mss 1440,sackOK,TS,nop,wscale 10> ttl 64',
          'icmp6 type 1 code 4',
        ]);
      }
      if (kernel === 'iptables')
        expect(one('unknown-port-v6').expected).toMatch(/^ip6tables mode has no rule/);
      // the NodePort twins: masqueraded to node1's IPv6 address (eTP Cluster), the client's
      // address kept (eTP Local), as the backends' veths show
      const atBackend = (name: string) =>
        one(name)
          .points.filter((p) => / veth$/.test(p.point))
          .flatMap((p) => p.a);
      expect(atBackend('nodeport-v6').some((p) => p.src === t.nodes[0]!.ip6)).toBe(true);
      expect(atBackend('nodeport-v6').some((p) => p.src === t.clients[0]!.ip6)).toBe(false);
      expect(atBackend('nodeport-local-v6').some((p) => p.src === t.clients[0]!.ip6)).toBe(true);
      // PMTU: the Packet Too Big reached pod-a from the VIP, quoting the VIP (reverse-NATed)
      expect(
        client('icmp-frag-needed-v6').a.map((p) => p.text.replace(/eph\d+/g, 'eph')),
      ).toContain(
        `${UDP_ECHO6} > fd00:10:244:1::2: icmp6 type 2 code 0 about [fd00:10:244:1::2.eph > ${UDP_ECHO6}.53 udp] ttl 63`,
      );
      // stale UDP: the same source port reached pod-d, then pod-b, in both planes
      for (const run of one('udp-stale-endpoint-v6').runs)
        expect(
          run.attempts.every((a) => a.ok),
          `${run.mode}: ${run.attempts[0]?.output}`,
        ).toBe(true);
      for (const run of one('hairpin-v6').runs) expect(run.backend, run.mode).toBe('pod-a');
      // affinity held in both planes: 20 connections, one backend
      for (const run of one('session-affinity-v6').runs)
        expect(new Set(run.attempts.map((a) => a.backend)).size, run.mode).toBe(1);
    }, 900_000);
  }
});

// The dual-stack lab (root, issue 19 point 5): lab/topology.yaml's ipv6 block gives nodes, the
// client and pods IPv6 addresses; the control plane gives web-dual (PreferDualStack) its IPv6
// ClusterIP and an IPv6 EndpointSlice from the Pods' status.podIPs; `curl -6` to that VIP
// answers from every pod and `ping -6` gets no reply, with kubetun and with kube-proxy's IPv6
// proxier in iptables (ip6tables) and nftables (table ip6) mode; the curl-vs-ping demo says so;
// the IPv6 `lab compare` twins are SAME against both kernel modes. Offline first: the same
// manifests on an IPv4-only topology, and the allocator's IPv6 ClusterIPs.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Store } from '../../src/cluster/store.ts';
import type { Service } from '../../src/cluster/types.ts';
import { labSwitchMode } from '../../src/lab/compare/mode.ts';
import { type CompareReport, labCompare } from '../../src/lab/compare/run.ts';
import { familyRefusal, findScenarios } from '../../src/lab/compare/scenarios.ts';
import { renderStaticView } from '../../src/lab/control-plane.ts';
import { curlVsPing } from '../../src/lab/demo/curl-vs-ping.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import { readLabServices } from '../../src/lab/manifests.ts';
import { VIEW_DIR } from '../../src/lab/state.ts';
import { LAB_PREFIX, loadTopology, parseTopology } from '../../src/lab/topology.ts';

const ROOT = join(import.meta.dirname, '../..');
const VIP6 = 'fd00:10:96::10';
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

  for (const mode of ['iptables', 'nftables'] as const) {
    it(`serves it the same with kube-proxy's IPv6 proxier in ${mode} mode`, async () => {
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
    it(`finds the IPv6 lab compare twins SAME against ${kernel} mode, ping -6 a documented difference`, async () => {
      const names = ['clusterip-tcp-v6', 'udp-v6', 'ping-vip-v6'];
      const r: CompareReport = await labCompare(findScenarios(names), { kernel });
      const client = (name: string) =>
        r.results.find((s) => s.name === name)!.points.find((p) => p.point.endsWith('(client)'))!;
      for (const name of ['clusterip-tcp-v6', 'udp-v6']) {
        expect(`${name}: ${r.results.find((s) => s.name === name)!.verdict}`).toBe(`${name}: same`);
        // the client talked to the IPv6 VIP and heard back from it
        expect(client(name).a.some((p) => p.dst === VIP6)).toBe(true);
        expect(client(name).a.some((p) => p.src === VIP6)).toBe(true);
      }
      expect(client('clusterip-tcp-v6').a.length).toBeGreaterThanOrEqual(8); // handshake … close
      const ping = r.results.find((s) => s.name === 'ping-vip-v6')!;
      expect(ping.verdict).toBe('expected-difference');
      expect(ping.expected).toContain(kernel === 'nftables' ? 'type 1 code 4' : 'type 1 code 3');
      // no echo reply in either plane; kubetun's side is the echo requests alone (dropped)
      const sides = {
        [ping.runs[0].mode]: client('ping-vip-v6').a,
        [ping.runs[1].mode]: client('ping-vip-v6').b,
      };
      for (const pkts of Object.values(sides)) expect(pkts.some((p) => p.src === VIP6)).toBe(false);
      expect(sides.kubetun!.map((p) => /icmp6 type 128 /.test(p.text))).toEqual([true, true]);
      expect(sides[kernel]!.some((p) => / icmp6 type 1 /.test(p.text))).toBe(true);
    }, 600_000);
  }
});

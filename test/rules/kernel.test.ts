// The rendered iptables rules doing their job in a real kernel. Topology, all network
// namespaces created (and removed) here, names prefixed ktr-<pid>-:
//
//   client 192.168.50.2 ──veth── 192.168.50.1 node 10.244.1.1 ──veth── 10.244.1.5 be1 :8080
//                                              10.244.2.1 ──veth── 10.244.2.5 be2 :8080
//
// The node gets `kubetun rules` output (iptables-restore + jump commands), nothing else. The
// client (and a pod) connect to the ClusterIP, the NodePort and an endpoint-less Service; each
// backend answers with its name and the source address it saw, so DNAT, load spreading,
// masquerade (client outside the pod CIDR, hairpin) and REJECT are all observed on real packets.

import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderIptables } from '../../src/rules/iptables.ts';
import { renderJumpCommands } from '../../src/rules/jumps.ts';
import { ep, makeService, makeSlice, port, resolve, slicePort } from './builders.ts';

const P = `ktr-${process.pid}`;
const NS = { client: `${P}-c`, node: `${P}-n`, be1: `${P}-b1`, be2: `${P}-b2` };
const servers: ChildProcess[] = [];

const sh = (cmd: string[], input?: string) =>
  execFileSync(cmd[0], cmd.slice(1), { input, encoding: 'utf8' });
const inNs = (ns: string, ...cmd: string[]) => sh(['ip', 'netns', 'exec', ns, ...cmd]);

function link(a: string, aIf: string, aIp: string, b: string, bIf: string, bIp: string): void {
  sh(['ip', 'link', 'add', aIf, 'netns', a, 'type', 'veth', 'peer', 'name', bIf, 'netns', b]);
  inNs(a, 'ip', 'addr', 'add', aIp, 'dev', aIf);
  inNs(b, 'ip', 'addr', 'add', bIp, 'dev', bIf);
  inNs(a, 'ip', 'link', 'set', aIf, 'up');
  inNs(b, 'ip', 'link', 'set', bIf, 'up');
}

function rules(): string {
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
  return renderIptables(resolve(services, [slice]), {
    clusterCIDR: '10.244.0.0/16',
    nodeName: 'node-1',
    nodeIPs: ['192.168.50.1'],
    nfacct: false,
  });
}

/** Connect from a namespace (the client by default); the backend's answer, or the error code. */
function connect(ip: string, port: number, from = NS.client): string {
  const js = `const s=require('net').connect(${port},'${ip}');let d='';s.on('data',c=>d+=c);s.on('end',()=>{console.log(d);});s.on('error',e=>console.log(e.code));s.setTimeout(3000,()=>{console.log('TIMEOUT');s.destroy();});`;
  return inNs(from, process.execPath, '-e', js).trim();
}

beforeAll(() => {
  for (const ns of Object.values(NS)) sh(['ip', 'netns', 'add', ns]);
  for (const ns of Object.values(NS)) inNs(ns, 'ip', 'link', 'set', 'lo', 'up');
  link(NS.client, 'eth0', '192.168.50.2/24', NS.node, 'c0', '192.168.50.1/24');
  link(NS.be1, 'eth0', '10.244.1.5/24', NS.node, 'b1', '10.244.1.1/24');
  link(NS.be2, 'eth0', '10.244.2.5/24', NS.node, 'b2', '10.244.2.1/24');
  inNs(NS.client, 'ip', 'route', 'add', 'default', 'via', '192.168.50.1');
  inNs(NS.be1, 'ip', 'route', 'add', 'default', 'via', '10.244.1.1');
  inNs(NS.be2, 'ip', 'route', 'add', 'default', 'via', '10.244.2.1');
  inNs(NS.node, 'sysctl', '-qw', 'net.ipv4.ip_forward=1');
  // Like any node, a default route: without one the kernel answers "net unreachable" for an
  // endpoint-less ClusterIP before the FORWARD chain (and its REJECT) is ever reached.
  inNs(NS.node, 'ip', 'route', 'add', 'default', 'via', '10.244.1.5');
  sh(['ip', 'netns', 'exec', NS.node, 'iptables-restore', '--noflush'], rules());
  sh(['ip', 'netns', 'exec', NS.node, 'sh', '-e'], renderJumpCommands());
  for (const [ns, name] of [
    [NS.be1, 'be1'],
    [NS.be2, 'be2'],
  ]) {
    const js = `require('net').createServer(s=>s.end('${name} '+s.remoteAddress)).listen(8080,'0.0.0.0',()=>console.log('up'))`;
    const p = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', js], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    servers.push(p);
  }
  return Promise.all(servers.map((p) => new Promise((ok) => p.stdout?.once('data', ok))));
});

afterAll(() => {
  for (const p of servers) if (p.pid !== undefined) spawnSync('kill', [String(p.pid)]);
  for (const ns of Object.values(NS)) spawnSync('ip', ['netns', 'del', ns]);
});

describe('rendered iptables rules in a real kernel', () => {
  it('DNATs the ClusterIP to both endpoints and masquerades an off-cluster client', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 40 && seen.size < 2; i++) seen.add(connect('10.96.0.10', 80));
    expect([...seen].sort()).toEqual(['be1 10.244.1.1', 'be2 10.244.2.1']);
  });

  it('keeps a pod source address, but masquerades a pod reaching itself (hairpin)', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 40 && seen.size < 2; i++) seen.add(connect('10.96.0.10', 80, NS.be2));
    expect([...seen].sort()).toEqual(['be1 10.244.2.5', 'be2 10.244.2.1']);
  });

  it('serves the NodePort on the node address', () => {
    expect(connect('192.168.50.1', 30080)).toMatch(/^be[12] 10\.244\.[12]\.1$/);
  });

  it('refuses connections to a Service without endpoints at once', () => {
    expect(connect('10.96.0.99', 80)).toBe('ECONNREFUSED');
  });
});

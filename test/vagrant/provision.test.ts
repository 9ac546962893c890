// The Vagrant lab's provisioning, proven without VMs (root): two fresh network namespaces stand
// in for the node VMs, joined by a veth as Vagrant's private network joins them (eth1,
// 192.168.56.0/24), and each runs the entry point the Vagrantfile's node.sh runs —
// `kubetun lab provision-node --topology lab/vagrant-topology.yaml --node N` — minus --systemd
// (pod servers and kubetun start in the background instead). nsenter --net moves only the
// network namespace, as a VM has its own network but the provisioner still sees the machine's
// filesystem (/run/netns, where it creates the pod namespaces).
//
//   <p>node1: eth1 192.168.56.11 ══ eth1 192.168.56.12 :<p>node2      <p> = "vm-" + LAB_PREFIX
//     veth-pod-a/b ══ <p>pod-a/b          veth-pod-c/d ══ <p>pod-c/d
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { labCtl } from '../../src/lab/ctl.ts';
import { isAlive } from '../../src/lab/procs.ts';
import type { NodeRecord } from '../../src/lab/provision.ts';
import { LAB_PREFIX, loadTopology } from '../../src/lab/topology.ts';

const ROOT = join(import.meta.dirname, '../..');
const TOPOLOGY = join(ROOT, 'lab/vagrant-topology.yaml');
/** The VM stand-ins' own prefix, derived from LAB_PREFIX but not starting with it: a lab test
 * running beside this one lists every namespace that starts with LAB_PREFIX as its own. */
const P = `vm-${LAB_PREFIX}`;
const VM = { node1: `${P}node1`, node2: `${P}node2` } as const;
type NodeName = keyof typeof VM;
// A fresh state directory, so the stand-ins' sockets and records are theirs alone.
const RUN_DIR = mkdtempSync(join(tmpdir(), 'kubetun-vagrant-'));
const ENV = {
  ...process.env,
  KUBETUN_LAB_PREFIX: P,
  KUBETUN_LAB_DIR: join(RUN_DIR, 'lab'),
  KUBETUN_CTL_DIR: join(RUN_DIR, 'ctl'),
};
const t = loadTopology(TOPOLOGY);
const WEB_URL = 'http://10.96.0.10:80/';

function run(argv: string[], timeout = 60_000) {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout, env: ENV });
  return { out: r.stdout ?? '', err: r.stderr ?? '', status: r.status ?? -1 };
}

/** The Vagrantfile's entry point, in the stand-in VM's network namespace. */
function provisionNode(node: NodeName, extra: string[] = []) {
  return run(
    ['nsenter', `--net=/run/netns/${VM[node]}`, process.execPath, join(ROOT, 'bin/kubetun.mjs')]
      .concat(['lab', 'provision-node', '--topology', TOPOLOGY, '--node', node, '--nodes', '2'])
      .concat(extra),
    90_000,
  );
}

const inNs = (ns: string, argv: string[]) => run(['ip', 'netns', 'exec', ns, ...argv], 20_000);
const curl = (ns: string, url: string) => inNs(ns, ['curl', '-sS', '-m', '3', url]).out;
const record = (node: NodeName) =>
  JSON.parse(readFileSync(join(ENV.KUBETUN_LAB_DIR, `node-${node}.json`), 'utf8')) as NodeRecord;
const netns = () =>
  run(['ip', 'netns', 'list'])
    .out.split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter((n) => n.startsWith(P));

function teardown(): void {
  for (const node of ['node1', 'node2'] as const) {
    if (netns().includes(VM[node])) provisionNode(node, ['--down']);
  }
  for (const ns of netns()) run(['ip', 'netns', 'del', ns]);
}

beforeAll(() => {
  teardown();
  for (const ns of Object.values(VM)) {
    run(['ip', 'netns', 'add', ns]);
    run(['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
  }
  // The private network: one wire, eth1 at both ends (Vagrant's second NIC).
  run(
    ['ip', '-n', VM.node1, 'link', 'add', 'eth1', 'type', 'veth', 'peer', 'name', 'eth1'].concat([
      'netns',
      VM.node2,
    ]),
  );
  for (const [node, ns] of Object.entries(VM)) {
    const ip = t.nodes.find((n) => n.name === node)!.ip;
    run(['ip', '-n', ns, 'addr', 'add', `${ip}/24`, 'dev', 'eth1']);
    run(['ip', '-n', ns, 'link', 'set', 'eth1', 'up']);
  }
  for (const node of ['node1', 'node2'] as const) {
    const r = provisionNode(node);
    if (r.status !== 0) throw new Error(`provision-node ${node} failed:\n${r.err}`);
  }
}, 200_000);

afterAll(() => {
  teardown();
  rmSync(RUN_DIR, { recursive: true, force: true });
}, 60_000);

describe('kubetun lab provision-node in a stand-in for a Vagrant VM', () => {
  it('makes the pods namespaces joined to the node, routes them, and routes the other node over eth1', () => {
    expect(netns().sort()).toEqual(
      [...Object.values(VM), ...['pod-a', 'pod-b', 'pod-c', 'pod-d'].map((p) => P + p)].sort(),
    );
    const routes = run(['ip', '-n', VM.node1, '-4', 'route', 'show']).out;
    expect(routes).toContain('10.244.1.2 dev veth-pod-a');
    expect(routes).toContain('10.244.2.0/24 via 192.168.56.12 dev eth1');
    expect(routes).toMatch(/10\.96\.0\.0\/16 dev kt0 .*src 192\.168\.56\.11/);
    expect(inNs(VM.node1, ['sysctl', '-n', 'net.ipv4.conf.veth-pod-b.proxy_arp']).out).toBe('1\n');
  });

  it('reaches its pods from the node, and the other node`s pods across the private network', () => {
    for (const p of t.nodes.slice(0, 2).flatMap((n) => n.pods)) {
      expect(curl(VM.node1, `http://${p.ip}:8080/`)).toBe(`${p.name} ${p.ip}\n`);
    }
  });

  it('routes pod to pod across the nodes', () => {
    expect(curl(`${P}pod-a`, 'http://10.244.2.3:8080/')).toBe('pod-d 10.244.2.3\n');
    expect(curl(`${P}pod-d`, 'http://10.244.1.3:8080/')).toBe('pod-b 10.244.1.3\n');
  });

  it('answers the web service through its VIP from every backend, same node and across', () => {
    // 40 new connections from pod-d (node2): missing one of 3 backends has p ≈ 3·(2/3)^40.
    const script = `for i in $(seq 40); do curl -sS -m 2 ${WEB_URL} || echo "curl exit $?"; done`;
    const answers = inNs(`${P}pod-d`, ['sh', '-c', script]).out.trim().split('\n');
    expect(new Set(answers.map((a) => a.split(' ')[0]))).toEqual(
      new Set(['pod-a', 'pod-b', 'pod-c']),
    );
  });

  it('runs kubetun with the pod veths it found by route and the uplink it found by the node IP', async () => {
    const rec = record('node1');
    const agent = rec.processes.find((p) => p.role === 'kubetun')!;
    expect(agent.argv).toEqual(expect.arrayContaining(['--uplink', 'eth1']));
    const s = await labCtl<{ podIfaces: string[] }>(agent.ctlSocket!, { cmd: 'status' });
    expect(s.podIfaces).toEqual(['veth-pod-a', 'veth-pod-b']);
  });

  it('converges when provisioned again: old processes gone, the node works with new ones', () => {
    const before = record('node2').processes;
    const r = provisionNode('node2');
    expect(r.status).toBe(0);
    for (const p of before) expect(isAlive(p)).toBe(false);
    expect(record('node2').processes.every((p) => isAlive(p))).toBe(true);
    expect(curl(`${P}pod-c`, 'http://10.244.1.2:8080/')).toBe('pod-a 10.244.1.2\n');
    expect(curl(`${P}pod-c`, WEB_URL)).toMatch(/^pod-[abc] 10\.244\./);
  });

  it('refuses a node the topology does not have, or one whose IP is not on this machine', () => {
    const nope = provisionNode('node1', ['--node', 'node9']);
    expect(nope.status).toBe(1);
    expect(nope.err).toContain('node node9: no such node (known: node1, node2)');
    const r = run(
      [
        'nsenter',
        `--net=/run/netns/${VM.node1}`,
        process.execPath,
        join(ROOT, 'bin/kubetun.mjs'),
      ].concat(['lab', 'provision-node', '--topology', TOPOLOGY, '--node', 'node2']),
    );
    expect(r.status).toBe(1);
    expect(r.err).toContain('node node2: ip: 192.168.56.12 is on no interface of this machine');
  });

  it('--down removes the pods, routes, processes and record, and leaves the VM as it was', () => {
    const procs = record('node1').processes;
    expect(provisionNode('node1', ['--down']).status).toBe(0);
    for (const p of procs) expect(isAlive(p)).toBe(false);
    expect(netns().filter((n) => /pod-[ab]$/.test(n))).toEqual([]);
    const routes = run(['ip', '-n', VM.node1, '-4', 'route', 'show']).out;
    expect(routes.trim()).toBe(
      '192.168.56.0/24 dev eth1 proto kernel scope link src 192.168.56.11',
    );
    expect(run(['ip', '-n', VM.node1, '-o', 'link', 'show']).out).not.toMatch(/veth-pod|kt0/);
    expect(existsSync(join(ENV.KUBETUN_LAB_DIR, 'node-node1.json'))).toBe(false);
  });
});

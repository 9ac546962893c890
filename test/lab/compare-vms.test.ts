// `lab compare --vms` without VMs (root): network namespaces stand in for the VMs, as in
// test/vagrant/provision.test.ts — node1, node2 and the client on one wire as Vagrant's private
// network joins them (eth1, 192.168.56.0/24), the nodes provisioned by the Vagrantfile's entry
// point `kubetun lab provision-node --topology lab/vagrant-topology.yaml` (in the background
// instead of --systemd), the client given lab/provision/client.sh's routes — and the
// comparison reaches them the way it reaches VMs: only through a route, here `nsenter --net=…`
// instead of `ssh … sudo`. The VM lab's namespace names ("@node1", "vm-kv-pod-d@node2") exist
// nowhere on this machine, so any command that bypassed the route would fail. Every scenario
// that runs on VMs gives the namespace lab's verdicts against iptables mode, ClusterIP TCP and
// UDP against nftables mode too; a kubetun that skips reverse NAT is caught.
//
//   <p>wire: br0 ─┬─ eth1 <p>node1 192.168.56.11 ─ veth-pod-a/b ══ <p>pod-a/b   <p> = "vm-" +
//                 ├─ eth1 <p>node2 192.168.56.12 ─ veth-pod-c/d ══ <p>pod-c/d         LAB_PREFIX
//                 └─ eth1 <p>client 192.168.56.100
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatReport } from '../../src/lab/compare/report.ts';
import { type CompareReport, labCompare } from '../../src/lab/compare/run.ts';
import { findScenarios, SCENARIOS } from '../../src/lab/compare/scenarios.ts';
import { openVmLab, type VmLab } from '../../src/lab/compare/vm-lab.ts';
import type { Machines } from '../../src/lab/machines.ts';
import { LAB_PREFIX, loadTopology } from '../../src/lab/topology.ts';
import { listNetns } from '../../src/sh.ts';

const ROOT = join(import.meta.dirname, '../..');
const TOPOLOGY = join(ROOT, 'lab/vagrant-topology.yaml');
const KUBETUN = [process.execPath, join(ROOT, 'bin/kubetun.mjs')];
/** The stand-ins' prefix: derived from LAB_PREFIX, not starting with it (provision.test.ts). */
const P = `vm-${LAB_PREFIX}`;
const NODES = ['node1', 'node2'] as const;
const MACHINES = [...NODES, 'client'] as const;
const RUN_DIR = mkdtempSync(join(tmpdir(), 'kubetun-vm-compare-'));
/** What the stand-ins were provisioned with: their own prefix and state directories. */
const MACHINE_ENV = [
  `KUBETUN_LAB_PREFIX=${P}`,
  `KUBETUN_LAB_DIR=${join(RUN_DIR, 'lab')}`,
  `KUBETUN_CTL_DIR=${join(RUN_DIR, 'ctl')}`,
];
const t = loadTopology(TOPOLOGY);

function run(argv: string[], timeout = 60_000) {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout });
  return { out: r.stdout ?? '', err: r.stderr ?? '', status: r.status ?? -1 };
}

/** A command on a stand-in machine: its network namespace, its lab's environment. */
const onMachine = (host: string, argv: readonly string[]) => [
  'nsenter',
  `--net=/run/netns/${P}${host}`,
  '--',
  'env',
  ...MACHINE_ENV,
  ...argv,
];

/** The route to the stand-ins, counting what went through it. */
const routed = new Map<string, number>();
const machines: Machines = {
  node: process.execPath,
  run: (host, argv) => {
    routed.set(host, (routed.get(host) ?? 0) + 1);
    return onMachine(host, argv);
  },
  open: () => {},
  close: () => {},
};

const provisionNode = (node: string, extra: string[] = []) =>
  run(
    onMachine(node, [...KUBETUN, 'lab', 'provision-node', '--topology', TOPOLOGY]).concat([
      '--node',
      node,
      '--nodes',
      '2',
      ...extra,
    ]),
    120_000,
  );
const agentStatus = (node: string) => provisionNode(node, ['--agent', 'status']).out.trim();
const netns = () => listNetns().filter((n) => n.startsWith(P));

function teardown(): void {
  for (const node of NODES) if (netns().includes(P + node)) provisionNode(node, ['--down']);
  for (const ns of netns()) run(['ip', 'netns', 'del', ns]);
}

let lab: VmLab;
const log: string[] = [];
const say = (m: string) => log.push(m);

beforeAll(async () => {
  teardown();
  const wire = `${P}wire`;
  for (const ns of [wire, ...MACHINES.map((m) => P + m)]) {
    run(['ip', 'netns', 'add', ns]);
    run(['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
  }
  run(['ip', '-n', wire, 'link', 'add', 'br0', 'type', 'bridge']);
  run(['ip', '-n', wire, 'link', 'set', 'br0', 'up']);
  for (const m of MACHINES) {
    const ip = [...t.nodes, ...t.clients].find((n) => n.name === m)!.ip;
    const peer = ['peer', 'name', 'eth1', 'netns', P + m];
    run(['ip', '-n', wire, 'link', 'add', `w-${m}`, 'type', 'veth', ...peer]);
    run(['ip', '-n', wire, 'link', 'set', `w-${m}`, 'master', 'br0', 'up']);
    run(['ip', '-n', P + m, 'addr', 'add', `${ip}/24`, 'dev', 'eth1']);
    run(['ip', '-n', P + m, 'link', 'set', 'eth1', 'up']);
  }
  // lab/provision/client.sh: each node's pod CIDR via that node
  for (const n of t.nodes.slice(0, 2))
    run(['ip', '-n', `${P}client`, 'route', 'add', n.podCidr, 'via', n.ip]);
  for (const node of NODES) {
    const r = provisionNode(node);
    if (r.status !== 0) throw new Error(`provision-node ${node} failed:\n${r.err}`);
  }
  lab = await openVmLab({
    machines,
    hosts: [...MACHINES],
    prefix: P,
    kubetun: KUBETUN,
    remoteTopology: TOPOLOGY,
    slowness: 1,
    name: 'the stand-in VMs',
    progress: say,
  });
}, 300_000);

afterAll(() => {
  delete process.env.KUBETUN_TEST_SKIP_REVNAT;
  lab?.close();
  teardown();
  rmSync(RUN_DIR, { recursive: true, force: true });
}, 120_000);

function verdicts(r: CompareReport): Record<string, string> {
  return Object.fromEntries(r.results.map((s) => [s.name, s.verdict]));
}

/** clusterip-tcp and udp: one backend in both planes, a whole connection, answered datagrams. */
function expectTcpAndUdp(r: CompareReport): void {
  const report = formatReport(r);
  const tcp = r.results.find((s) => s.name === 'clusterip-tcp')!;
  expect(tcp.verdict, report).toBe('same');
  expect(tcp.runs[0].backend).toBe(tcp.runs[1].backend);
  const client = tcp.points.find((p) => p.point.endsWith('(client)'))!;
  expect(client.point).toBe('pod-d veth (client)');
  expect(client.a.length, report).toBeGreaterThanOrEqual(8); // handshake, request, response, close
  // pod-d (node2) to a backend on node1 crosses both uplinks; to pod-c (node2), neither
  const across = tcp.runs[0].backend !== 'pod-c';
  for (const name of ['node1 eth1', 'node2 eth1']) {
    const up = tcp.points.find((p) => p.point === name)!;
    expect(up.a.length > 0, `${name}: ${up.a.length} packets\n${report}`).toBe(across);
  }
  const udp = r.results.find((s) => s.name === 'udp')!;
  expect(udp.verdict, report).toBe('same');
  expect(udp.runs.map((x) => x.attempts[x.kept[0]!]!.ok)).toEqual([true, true]);
}

describe(`lab compare on stand-ins for the VMs (prefix ${P})`, () => {
  it('sees the machines as a lab: namespaces by machine, uplinks found over the route, kubetun running', () => {
    expect(lab.mode()).toBe('kubetun');
    const [n1, n2] = lab.topology.nodes;
    expect([n1!.ns, n1!.uplink, n2!.ns]).toEqual(['@node1', 'eth1', '@node2']);
    expect(n2!.pods.map((p) => p.ns)).toEqual([`${P}pod-c@node2`, `${P}pod-d@node2`]);
    expect(lab.topology.clients.map((c) => [c.ns, c.uplink])).toEqual([['@client', 'eth1']]);
    expect(Object.keys(lab.clocks())).toEqual(['node1', 'node2', 'client']);
  });

  it("switches a node to kube-proxy's iptables rules and back through its provisioning", async () => {
    await lab.switchMode('iptables', say, false);
    expect(NODES.map(agentStatus)).toEqual(['stopped', 'stopped']);
    const nat = run(onMachine('node1', ['iptables', '-w', '-t', 'nat', '-S', 'KUBE-SERVICES']));
    expect(nat.out).toContain('10.96.0.10/32');
    // kubetun's steering went with it: no TUN, no service route through it
    expect(run(onMachine('node1', ['ip', '-o', 'link', 'show'])).out).not.toMatch(/kt0/);
    expect(run(onMachine('node1', ['ip', 'route', 'show', '10.96.0.0/16'])).out).toMatch(
      /dev eth1/,
    );
    const curl = (ns: string) =>
      run(['ip', 'netns', 'exec', ns, 'curl', '-sS', '-m', '3', 'http://10.96.0.10/']).out;
    expect(curl(`${P}pod-d`)).toMatch(/^pod-[abc] 10\.244\./);
    await lab.switchMode('kubetun', say, false);
    expect(NODES.map(agentStatus)).toEqual(['running', 'running']);
    expect(run(onMachine('node1', ['iptables', '-w', '-t', 'nat', '-S'])).out).not.toContain(
      'KUBE-SERVICES',
    );
    expect(curl(`${P}pod-d`)).toMatch(/^pod-[abc] 10\.244\./);
  }, 300_000);

  it('finds kubetun faithful to kube-proxy iptables mode in every scenario that runs on VMs', async () => {
    routed.clear();
    const scenarios = SCENARIOS.filter((x) => !lab.cannotRun(x));
    expect(SCENARIOS.filter((x) => lab.cannotRun(x)).map((x) => x.name)).toEqual([
      'udp-stale-endpoint',
    ]);
    const r = await labCompare(scenarios, { kernel: 'iptables', lab, progress: say });
    const report = formatReport(r);
    // the namespace lab's verdicts (test/lab/compare.test.ts, compare-order.test.ts)
    for (const s of r.results) {
      expect(`${s.name}: ${s.verdict}`, report).not.toBe(`${s.name}: different`);
      if (s.verdict === 'expected-difference') expect(s.expected).toBeTruthy();
    }
    const v = verdicts(r);
    for (const name of ['clusterip-tcp', 'udp', 'etp-local-no-endpoint', 'lb-source-range'])
      expect(`${name}: ${v[name]}`, report).toBe(`${name}: same`);
    expect(r.results.find((x) => x.name === 'unknown-port')!.expected).toMatch(
      /iptables mode has no rule/,
    );
    expectTcpAndUdp(r);
    // the external client is a machine of its own: captured on its uplink there
    const np = r.results.find((x) => x.name === 'nodeport')!;
    expect(np.points[0]!.point).toBe('client eth1 (client)');
    expect(np.points[0]!.a.length, report).toBeGreaterThanOrEqual(8);
    // everything went through the route: switches, captures, clients on every machine
    for (const m of MACHINES) expect(routed.get(m), m).toBeGreaterThan(10);
    expect(r.lab).toBe('the stand-in VMs');
    expect(Object.keys(r.clocks ?? {})).toEqual([...MACHINES]);
    expect(report).toMatch(
      /^kubetun vs kube-proxy \(iptables mode\) on the stand-in VMs, 12 scenarios\nclocks \(capturing machine minus this one\): node1 [+-]\d+\.\d{3} s ± \d+\.\d ms, node2/,
    );
    expect(lab.mode()).toBe('kubetun'); // left as found
  }, 900_000);

  it('finds kubetun the same as kube-proxy nftables mode in ClusterIP TCP and UDP', async () => {
    const r = await labCompare(findScenarios(['clusterip-tcp', 'udp']), {
      kernel: 'nftables',
      lab,
      progress: say,
    });
    expect(verdicts(r), formatReport(r)).toEqual({ 'clusterip-tcp': 'same', udp: 'same' });
    expectTcpAndUdp(r);
    expect(lab.mode()).toBe('kubetun');
  }, 600_000);

  it('catches a kubetun that skips reverse NAT, at the client veth', async () => {
    process.env.KUBETUN_TEST_SKIP_REVNAT = '1'; // inherited by the agents the switch starts
    let r: CompareReport;
    try {
      r = await labCompare(findScenarios(['clusterip-tcp']), { kernel: 'iptables', lab });
    } finally {
      delete process.env.KUBETUN_TEST_SKIP_REVNAT;
    }
    expect(verdicts(r)).toEqual({ 'clusterip-tcp': 'different' });
    const client = r.results[0]!.points.find((p) => p.point.endsWith('(client)'))!;
    expect(client.firstDiff).toBe(1); // the SYN-ACK
    expect(client.b[1]!.src).not.toBe('10.96.0.10');
    await lab.switchMode('kubetun', say, true); // agents without the hook again
  }, 600_000);
});

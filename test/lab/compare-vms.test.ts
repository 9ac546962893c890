// `lab compare --vms` without VMs (root): stand-ins for the VMs (vm-standins.ts: network
// namespaces provisioned by `kubetun lab provision-node` as the VMs are) reached the way the
// comparison reaches VMs — only through a route, here `nsenter --net=…` instead of `ssh … sudo`.
// Every scenario that runs on VMs gives the namespace lab's verdicts against iptables mode,
// ClusterIP TCP and UDP against nftables mode too; a kubetun that skips reverse NAT is caught.
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatReport } from '../../src/lab/compare/report.ts';
import { type CompareReport, labCompare } from '../../src/lab/compare/run.ts';
import { findScenarios, SCENARIOS } from '../../src/lab/compare/scenarios.ts';
import { openVmLab, type VmLab } from '../../src/lab/compare/vm-lab.ts';
import {
  agentStatus,
  MACHINES,
  machines,
  NODES,
  onMachine,
  P,
  RUN_DIR,
  routed,
  run,
  STANDIN_SIDE,
  standInsDown,
  standInsUp,
} from './vm-standins.ts';

let lab: VmLab;
const log: string[] = [];
const say = (m: string) => log.push(m);

beforeAll(async () => {
  standInsUp();
  lab = await openVmLab({
    machines,
    hosts: [...MACHINES],
    side: STANDIN_SIDE,
    slowness: 1,
    name: 'the stand-in VMs',
    progress: say,
  });
}, 300_000);

afterAll(() => {
  delete process.env.KUBETUN_TEST_SKIP_REVNAT;
  lab?.close();
  standInsDown();
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
    // the VM lab's topology is IPv4-only (no ipv6 block): the IPv6 twins cannot run there
    expect(SCENARIOS.filter((x) => lab.cannotRun(x)).map((x) => x.name)).toEqual([
      'udp-stale-endpoint',
      ...SCENARIOS.filter((x) => x.family === 'IPv6').map((x) => x.name),
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

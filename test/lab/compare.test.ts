// `lab compare` end to end (root): one lab, switched between data planes in place. Every
// scenario compared with kube-proxy's nftables and iptables rules, kernel first and kubetun
// first, finds no undocumented difference (session affinity aside: it is reported, whatever it
// is); a kubetun that skips reverse NAT (test hook KUBETUN_TEST_SKIP_REVNAT) is caught at the
// client's veth; `lab mode` swaps the data plane without touching the namespaces; the HTML report
// loads in headless Chromium without script errors and shows one ladder per plane and point.
// The IPv4 scenarios: their IPv6 twins are test/lab/dual-stack.test.ts's.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderHtml } from '../../src/lab/compare/html.ts';
import { curlVsPing } from '../../src/lab/demo/curl-vs-ping.ts';
import { labSwitchMode } from '../../src/lab/compare/mode.ts';
import { formatReport } from '../../src/lab/compare/report.ts';
import { type CompareReport, labCompare } from '../../src/lab/compare/run.ts';
import { findScenarios, SCENARIOS } from '../../src/lab/compare/scenarios.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import { isAlive } from '../../src/lab/procs.ts';
import { readState } from '../../src/lab/state.ts';
import { LAB_PREFIX } from '../../src/lab/topology.ts';
import { dumpDom, pngStats, requireChromium, screenshot } from './chromium.ts';

/** The IPv4 scenarios (the IPv6 twins run in test/lab/dual-stack.test.ts). */
const IPV4 = SCENARIOS.filter((s) => s.family === undefined);

const BASIC = [
  'clusterip-tcp',
  'udp',
  'ping-vip',
  'no-endpoints',
  'unknown-port',
  'nodeport',
  'nodeport-local',
  'hairpin',
];

function nsOut(ns: string, argv: string[]): string {
  return spawnSync('ip', ['netns', 'exec', ns, ...argv], { encoding: 'utf8' }).stdout ?? '';
}

function verdicts(r: CompareReport): Record<string, string> {
  return Object.fromEntries(r.results.map((s) => [s.name, s.verdict]));
}

/** Every basic scenario the same or a documented difference; the kernel's affinity held. */
function expectFaithful(r: CompareReport): void {
  for (const s of r.results.filter((x) => BASIC.includes(x.name))) {
    expect(`${s.name}: ${s.verdict}`, formatReport(r)).not.toBe(`${s.name}: different`);
    if (s.verdict === 'expected-difference') expect(s.expected).toBeTruthy();
  }
  const tcp = r.results.find((s) => s.name === 'clusterip-tcp')!;
  expect(tcp.verdict).toBe('same');
  expect(tcp.runs[0].backend).toBe(tcp.runs[1].backend);
  const client = tcp.points.find((p) => p.point.endsWith('(client)'))!;
  expect(client.a.length).toBeGreaterThanOrEqual(8); // handshake, request, response, close
  // stale UDP: in both planes the datagram after the endpoint change reached the new endpoint
  const stale = r.results.find((s) => s.name === 'udp-stale-endpoint')!;
  expect(stale.verdict, formatReport(r)).toBe('same');
  for (const run of stale.runs)
    expect(
      run.attempts.map((a) => [a.ok, a.output]),
      run.mode,
    ).toEqual([[true, expect.stringMatching(/^before: pod-d .*: pod-b /)]]);
  const sticky = r.results.find((s) => s.name === 'session-affinity')!;
  const kernelRun = sticky.runs.find((x) => x.mode !== 'kubetun')!;
  expect(new Set(kernelRun.attempts.map((a) => a.backend)).size).toBe(1);
  expect(kernelRun.attempts.every((a) => a.ok)).toBe(true);
}

describe(`lab compare (lab prefix ${LAB_PREFIX})`, () => {
  beforeAll(async () => {
    await labUp({ mode: 'kubetun' });
  }, 180_000);
  afterAll(async () => {
    delete process.env.KUBETUN_TEST_SKIP_REVNAT;
    await labDown();
  }, 120_000);

  it('switches the running lab between data planes without rebuilding it', async () => {
    const before = readState()!;
    const servers = before.processes.filter((p) => p.role === 'server');
    const node = before.namespaces.find((n) => n.endsWith('node1'))!;
    const lines: string[] = [];
    await labSwitchMode('nftables', (m) => lines.push(m));
    expect(nsOut(node, ['nft', 'list', 'tables'])).toContain('table ip kube-proxy');
    expect(readState()!.processes.some((p) => p.role === 'kubetun')).toBe(false);
    expect(lines.some((l) => /nf_conntrack_tcp_timeout_established = 86400/.test(l))).toBe(true);
    expect(
      nsOut(node, ['sysctl', '-n', 'net.netfilter.nf_conntrack_tcp_timeout_close_wait']).trim(),
    ).toBe('3600');
    await labSwitchMode('iptables');
    expect(nsOut(node, ['nft', 'list', 'tables'])).not.toContain('table ip kube-proxy');
    expect(nsOut(node, ['iptables', '-w', '-t', 'nat', '-S', 'KUBE-SERVICES'])).toContain(
      '10.96.0.10/32',
    );
    await labSwitchMode('kubetun');
    const after = readState()!;
    expect(after.mode).toBe('kubetun');
    expect(nsOut(node, ['iptables', '-w', '-t', 'nat', '-S'])).not.toContain('KUBE-SERVICES');
    expect(after.processes.filter((p) => p.role === 'kubetun').every((p) => isAlive(p))).toBe(true);
    // the same pod servers (same PIDs): nothing was rebuilt
    expect(servers.every((s) => isAlive(s))).toBe(true);
  }, 180_000);

  it('shows the kernel evidence of each kernel mode in the curl-vs-ping demo', async () => {
    await labSwitchMode('nftables');
    const n = await curlVsPing({ mode: 'nftables', out: () => {} });
    expect([n.vipHttpCode, n.vipPingReceived]).toEqual([200, 0]);
    expect(n.natPath![0]).toMatch(/^map service-ips: 10\.96\.0\.10 \. tcp \. 80 : goto service-/);
    expect(n.natPath!.join('\n')).toContain(`dnat to ${n.backend!.ip}:8080`);
    expect(n.natIcmpRules!.join('\n')).toContain('reject');
    expect(n.kernelCt![0]).toMatch(
      new RegExp(`dst=10\\.96\\.0\\.10 sport=\\d+ dport=80 src=${n.backend!.ip}`),
    );
    await labSwitchMode('iptables');
    const i = await curlVsPing({ mode: 'iptables', out: () => {} });
    expect(i.vipHttpCode).toBe(200);
    // the KUBE-SERVICES entry counted the curl's SYN: pkts 1 (or more), bytes > 0
    expect(i.natCounters![1]).toMatch(/^\s*[1-9]\d*\s+[1-9]\d*\s+KUBE-SVC-\w+/);
    await labSwitchMode('kubetun');
  }, 180_000);

  it('finds kubetun faithful to kube-proxy nftables mode, kernel first', async () => {
    const r = await labCompare(IPV4, { kernel: 'nftables' });
    expectFaithful(r);
    expect(verdicts(r)['unknown-port']).toBe('expected-difference'); // the ICMP error's source
    expect(readState()!.mode).toBe('kubetun'); // left as found
  }, 600_000);

  it('finds kubetun faithful to kube-proxy iptables mode, kubetun first', async () => {
    const r = await labCompare(IPV4, { kernel: 'iptables', kubetunFirst: true });
    expectFaithful(r);
    expect(r.results.find((s) => s.name === 'unknown-port')!.expected).toMatch(
      /iptables mode has no rule/,
    );
  }, 600_000);

  it('catches a kubetun that skips reverse NAT, at the client veth, packet by packet', async () => {
    process.env.KUBETUN_TEST_SKIP_REVNAT = '1';
    let r: CompareReport;
    try {
      r = await labCompare(findScenarios(['clusterip-tcp', 'udp']), { kernel: 'nftables' });
    } finally {
      delete process.env.KUBETUN_TEST_SKIP_REVNAT;
    }
    expect(verdicts(r)).toEqual({ 'clusterip-tcp': 'different', udp: 'different' });
    expect(r.differences).toBe(2);
    const client = r.results[0]!.points.find((p) => p.point.endsWith('(client)'))!;
    expect(client.same).toBe(false);
    expect(client.firstDiff).toBe(1); // the SYN-ACK
    expect(client.b[1]!.src).not.toBe('10.96.0.10');
    // the CLI says so with its exit status
    await labSwitchMode('kubetun', undefined, { reinstall: true });
    const cli = spawnSync(
      process.execPath,
      [join(import.meta.dirname, '../../bin/kubetun.mjs'), 'lab', 'compare', 'clusterip-tcp'],
      {
        encoding: 'utf8',
        env: { ...process.env, KUBETUN_TEST_SKIP_REVNAT: '1' },
        timeout: 300_000,
      },
    );
    expect(cli.status, cli.stderr).toBe(1);
    expect(cli.stdout, cli.stderr).toContain('clusterip-tcp: DIFFERENT');
  }, 600_000);

  it('writes an HTML report that loads in headless Chromium without errors, one ladder per plane and point', async () => {
    const r = await labCompare(findScenarios(['clusterip-tcp', 'no-endpoints', 'ping-vip']), {
      kernel: 'nftables',
    });
    const dir = mkdtempSync(join(tmpdir(), 'kubetun-compare-'));
    try {
      const file = join(dir, 'report.html');
      writeFileSync(file, renderHtml(r));
      const dom = dumpDom(dir, file);
      expect(dom).toContain('data-loaded="yes"');
      expect(/<pre id="errors"><\/pre>/.test(dom)).toBe(true);
      const ladders =
        r.results.flatMap((s) => s.points.filter((p) => p.a.length + p.b.length > 0)).length * 2;
      expect(dom).toContain(`data-diagrams="${ladders}"`);
      for (const s of r.results)
        expect(dom).toContain(`<section class="scenario ${s.verdict}" id="${s.name}">`);
      // the lab drawn first, every capture point of the run marked, columns named by role
      for (const n of ['node1', 'node2', 'pod-a', 'pod-d'])
        expect(dom).toMatch(new RegExp(`id="(node|pod)-${n}"`));
      expect(dom).toContain('data-at="pod:pod-d"');
      expect(dom).toContain('>VIP web<');
      const shot = pngStats(screenshot(dir, file, 'shot.png'));
      expect(shot.png).toBe(true);
      expect(shot.idat).toBeGreaterThan(60_000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 600_000);
});

// Chromium comes from the bootstrap (scripts/bootstrap.sh --test), never from a test; without
// it the HTML test fails saying so rather than being skipped.
beforeAll(requireChromium);

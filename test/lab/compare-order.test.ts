// `lab compare` isolates its scenarios (root): every scenario run forwards and then backwards
// against kube-proxy's iptables rules gives the same verdicts and the same packets at every
// capture point. Before isolation, ping-vip after unknown-port was DIFFERENT: unknown-port's
// late ICMP host unreachable (it waits out ARP on the uplink) landed in ping-vip's capture.
// The IPv4 scenarios: an IPv6 twin captures only IPv6 (and its own port block), so it cannot
// take an IPv4 scenario's packets nor they its; the twins run in test/lab/dual-stack.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatReport } from '../../src/lab/compare/report.ts';
import { type CompareReport, labCompare } from '../../src/lab/compare/run.ts';
import { SCENARIOS } from '../../src/lab/compare/scenarios.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import { readLabServices } from '../../src/lab/manifests.ts';
import { VIEW_DIR } from '../../src/lab/state.ts';
import { LAB_PREFIX } from '../../src/lab/topology.ts';

/**
 * Per scenario: the verdict; for scenarios without a backend choice (rejects, drops, ping) also
 * each capture point's packet counts — elsewhere the target backend is each run's random pick,
 * so which hops see packets may legitimately differ between runs.
 */
function evidence(r: CompareReport): Record<string, string> {
  const fixed = new Set(SCENARIOS.filter((s) => s.choice === 'none').map((s) => s.name));
  return Object.fromEntries(
    r.results.map((s) => [
      s.name,
      [
        s.verdict,
        ...(fixed.has(s.name)
          ? s.points.map((p) => `${p.point}: ${p.a.length}/${p.b.length}`)
          : []),
      ].join('\n'),
    ]),
  );
}

describe(`lab compare scenario isolation (lab prefix ${LAB_PREFIX})`, () => {
  beforeAll(async () => {
    await labUp({ mode: 'kubetun' });
  }, 180_000);
  afterAll(async () => {
    await labDown();
  }, 120_000);

  it('covers at least 12 scenarios, each with its own client ports', () => {
    expect(SCENARIOS.length).toBeGreaterThanOrEqual(12);
    for (const name of [
      'etp-local-no-endpoint',
      'icmp-frag-needed',
      'lb-source-range',
      'udp-stale-endpoint',
    ])
      expect(SCENARIOS.map((s) => s.name)).toContain(name);
  });

  it('gives the same verdicts forwards and backwards', async () => {
    const services = JSON.stringify(readLabServices(VIEW_DIR));
    const ipv4 = SCENARIOS.filter((s) => s.family === undefined);
    const forwards = await labCompare(ipv4, { kernel: 'iptables' });
    const backwards = await labCompare([...ipv4].reverse(), { kernel: 'iptables' });
    expect(evidence(backwards), formatReport(backwards)).toEqual(evidence(forwards));
    // udp-stale-endpoint changed endpoints and put them back: the lab's Services as they were
    expect(JSON.stringify(readLabServices(VIEW_DIR))).toBe(services);
    // the dropped and refused ones saw their own packets, at the client and the node
    const one = (name: string) => forwards.results.find((s) => s.name === name)!;
    for (const name of ['etp-local-no-endpoint', 'lb-source-range']) {
      const client = one(name).points.find((p) => p.point.endsWith('(client)'))!;
      expect(client.a.length, formatReport(forwards)).toBeGreaterThanOrEqual(2);
      expect(one(name).verdict).toBe('same');
    }
    // stale UDP: the same source port reached pod-d, then (entry flushed) pod-b, in both planes
    for (const r of [forwards, backwards]) {
      const stale = r.results.find((s) => s.name === 'udp-stale-endpoint')!;
      expect(stale.verdict, formatReport(r)).toBe('same');
      for (const run of stale.runs)
        expect(
          run.attempts.every((a) => a.ok),
          `${run.mode}: ${run.attempts[0]?.output}`,
        ).toBe(true);
      const pod = (name: string) => stale.points.find((p) => p.point === `${name} veth`)!;
      expect([pod('pod-d').a.length, pod('pod-b').a.length], formatReport(r)).toEqual([2, 2]);
    }
    // frag-needed: the client got the ICMP error quoting the VIP, in both planes
    const frag = one('icmp-frag-needed').points.find((p) => p.point.endsWith('(client)'))!;
    for (const side of [frag.a, frag.b])
      expect(side.map((p) => p.text).join('\n'), formatReport(forwards)).toMatch(
        /icmp unreachable need to frag .*about \[10\.244\.1\.2\.eph\d+ > 10\.96\.0\.54\.53 udp\]/,
      );
  }, 1_200_000);
});

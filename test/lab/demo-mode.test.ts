// `lab demo curl-vs-ping --mode nftables` on a lab running kubetun (root): the demo switches the
// running lab in place (the same pod servers, by PID), shows the kernel's evidence, and switches
// it back to kubetun afterwards; its "why" names the ICMP error its capture shows.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { curlVsPing } from '../../src/lab/demo/curl-vs-ping.ts';
import { labShow } from '../../src/lab/show/show.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import { isAlive } from '../../src/lab/procs.ts';
import { readState } from '../../src/lab/state.ts';
import { LAB_PREFIX } from '../../src/lab/topology.ts';

describe(`lab demo --mode switches in place and back (lab prefix ${LAB_PREFIX})`, () => {
  beforeAll(async () => {
    await labUp({ mode: 'kubetun' });
  }, 180_000);
  afterAll(async () => {
    await labDown();
  }, 120_000);

  it('runs curl-vs-ping in nftables mode on the kubetun lab, then gives the lab its mode back', async () => {
    const before = readState()!;
    const servers = before.processes.filter((p) => p.role === 'server');
    const progress: string[] = [];
    const lines: string[] = [];
    const r = await curlVsPing({
      mode: 'nftables',
      out: (l) => lines.push(l),
      progress: (m) => progress.push(m),
    });
    expect(progress.join('\n')).toContain('switching it to nftables for this demo');
    expect(progress.join('\n')).not.toMatch(/rebuild|bringing the lab up/);
    expect(r.mode).toBe('nftables');
    expect(r.vipHttpCode).toBe(200);
    expect(r.natIcmpRules!.join('\n')).toContain('reject');
    // the evidence: the echo is answered with an ICMP error, and the why says exactly that
    const errors = r.clientCapture.filter((l) => /ICMP .*unreachable/.test(l));
    expect(errors.length, r.clientCapture.join('\n')).toBeGreaterThan(0);
    const text = lines.join('\n');
    expect(text).toContain(`the ${errors.length} ICMP error(s) above`);
    expect(text).not.toContain('neither translated nor answered');
    const after = readState()!;
    expect(after.mode).toBe('kubetun');
    expect(after.processes.filter((p) => p.role === 'kubetun').every((p) => isAlive(p))).toBe(true);
    expect(servers.every((s) => isAlive(s))).toBe(true);
  }, 300_000);

  it('names the backend pod in kubetun’s conntrack line', async () => {
    const lines: string[] = [];
    const r = await curlVsPing({ mode: 'kubetun', out: (l) => lines.push(l) });
    expect(r.backend).toBeDefined();
    expect(lines.join('\n')).toMatch(
      new RegExp(
        `backend ${r.backend!.name} \\(${r.backend!.ip.replace(/\./g, '\\.')}:8080, slot #\\d+\\)`,
      ),
    );
  }, 300_000);

  it('lab show draws each node with the counters its kubetun reports', async () => {
    const s = await labShow({ flow: 'pod-d→web' });
    expect(s.drawing.mode).toBe('kubetun');
    for (const n of s.drawing.nodes) {
      const names = n.counters.map(([k]) => k);
      expect(names, JSON.stringify(n.counters)).toContain('AGENT_PACKETS');
    }
    // the curls above were DNATed on pod-d's node: its counters say so
    const node2 = s.drawing.nodes.find((n) => n.name === 'node2')!;
    expect(node2.counters.some(([k, v]) => /DNAT/.test(k) && Number(v) > 0)).toBe(true);
    expect(s.flow!.verdict).toBe('delivered');
  }, 60_000);
});

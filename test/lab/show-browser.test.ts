// Both HTML pages in a real browser (headless Chromium): the `lab show` page with a flow and the
// `lab compare` report, built offline from the default lab and fixed packets. Each loads, holds
// the drawing (every node and pod), and screenshots to a PNG with real content in it.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderHtml } from '../../src/lab/compare/html.ts';
import { normaliseRun } from '../../src/lab/compare/normalise.ts';
import type { Pkt } from '../../src/lab/compare/packets.ts';
import { judge, type ScenarioRun } from '../../src/lab/compare/run.ts';
import { SCENARIOS } from '../../src/lab/compare/scenarios.ts';
import { renderStaticViewSync } from '../../src/lab/control-plane.ts';
import { DEFAULT_TOPOLOGY } from '../../src/lab/lab.ts';
import { traceFlow } from '../../src/lab/show/flow.ts';
import { labDrawing } from '../../src/lab/show/model.ts';
import { renderShowPage } from '../../src/lab/show/show.ts';
import { loadTopology } from '../../src/lab/topology.ts';
import { loadManifests, resolveServicePorts } from '../../src/manifests/index.ts';
import { dumpDom, pngStats, requireChromium, screenshot } from './chromium.ts';

const t = loadTopology(DEFAULT_TOPOLOGY);
const dir = mkdtempSync(join(tmpdir(), 'kubetun-pages-'));
const ports = resolveServicePorts(loadManifests(renderStaticViewSync(t, join(dir, 'view'))));
const drawing = labDrawing(t, ports, { mode: 'nftables' });
const pods = t.nodes.flatMap((n) => n.pods.map((p) => p.name));

beforeAll(requireChromium);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function pkt(
  src: string,
  dst: string,
  sport: number,
  dport: number,
  flags: string,
  seq: number,
): Pkt {
  const base = { tUs: 0, proto: 'tcp' as const, ttl: 64, ipId: 1, df: true, ipCsumOk: true };
  return { ...base, src, dst, sport, dport, flags, seq, ack: 0, win: 64240, opts: '', len: 0 };
}

/** pod-d's handshake with web's VIP at its veth and pod-c's; rst: the backend answers RST. */
function run(mode: ScenarioRun['mode'], rst: boolean): ScenarioRun {
  const [d, c, vip] = ['10.244.2.3', '10.244.2.2', '10.96.0.10'];
  const last = rst ? 'R.' : '.';
  const client = [
    pkt(d, vip, 40001, 80, 'S', 1),
    pkt(vip, d, 80, 40001, 'S.', 9),
    pkt(d, vip, 40001, 80, last, 2),
  ];
  const backend = [
    pkt(d, c, 40001, 8080, 'S', 1),
    pkt(c, d, 8080, 40001, 'S.', 9),
    pkt(d, c, 40001, 8080, last, 2),
  ];
  return {
    mode,
    attempts: [{ ok: true, output: 'pod-c', backend: 'pod-c' }],
    kept: [0],
    backend: 'pod-c',
    points: normaliseRun([
      { name: 'pod-d veth (client)', packets: client },
      { name: 'pod-c veth', packets: backend },
    ]),
    captures: [
      { at: { kind: 'pod', name: 'pod-d' }, label: 'pod-d veth (client)' },
      { at: { kind: 'pod', name: 'pod-c' }, label: 'pod-c veth' },
      { at: { kind: 'node', name: 'node2' }, label: 'node2 eth0' },
    ],
  };
}

function check(file: string, name: string) {
  const dom = dumpDom(dir, file);
  expect(dom).toContain('data-loaded="yes"');
  for (const n of t.nodes) expect(dom).toContain(`id="node-${n.name}"`);
  for (const p of pods) expect(dom).toContain(`id="pod-${p}"`);
  const stats = pngStats(screenshot(dir, file, name));
  expect(stats.png).toBe(true);
  expect([stats.width, stats.height]).toEqual([1400, 1800]);
  // A blank page of this size compresses to a few KB; the drawings take far more.
  expect(stats.idat).toBeGreaterThan(60_000);
  return dom;
}

describe('the HTML pages in headless Chromium', () => {
  it('lab show: the topology with a flow drawn over it', () => {
    const file = join(dir, 'show.html');
    const flow = traceFlow(drawing, ports, 'client→web-np@pod-d');
    writeFileSync(file, renderShowPage({ drawing, ports, flow }));
    const dom = check(file, 'show.png');
    expect(dom.match(/data-role="hop"/g)).toHaveLength(flow.hops.length);
  }, 120_000);

  it('lab compare: the report opens with the drawing and its capture points', () => {
    const same = judge(SCENARIOS[0]!, 'nftables', run('nftables', false), run('kubetun', false));
    const bad = judge(SCENARIOS[0]!, 'nftables', run('nftables', false), run('kubetun', true));
    const file = join(dir, 'compare.html');
    writeFileSync(
      file,
      renderHtml({
        kernel: 'nftables',
        normalisations: ['x'],
        results: [same, { ...bad, name: 'broken' }],
        differences: 1,
        drawing,
      }),
    );
    const dom = check(file, 'compare.png');
    expect(dom.match(/data-role="capture"/g)).toHaveLength(3);
    expect(dom).toContain('<pre id="errors"></pre>');
    expect(dom).toContain('>VIP web<');
  }, 120_000);
});

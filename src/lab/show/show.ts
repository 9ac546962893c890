// `kubetun lab show [--html FILE] [--open] [--flow pod-a→web]`: a picture of the lab as one
// self-contained HTML page around an SVG (src/lab/show/svg.ts) — the topology from the lab's
// state, the Services and where their endpoints live from the control plane's view (the files
// the data planes load; with no lab up, the view the topology and manifests give), and each
// node's counters asked of its running data plane. Works without a lab (nothing to count then).
import { spawnSync } from 'node:child_process';
import { loadManifests, resolveServicePorts } from '../../manifests/index.ts';
import type { ResolvedServicePort } from '../../model.ts';
import { labCtl } from '../ctl.ts';
import { DEFAULT_TOPOLOGY } from '../lab.ts';
import { isAlive } from '../procs.ts';
import { inNs } from '../../sh.ts';
import { type LabState, readState } from '../state.ts';
import { servedView } from '../status.ts';
import { loadTopology, type Topology } from '../topology.ts';
import { type FlowPath, traceFlow } from './flow.ts';
import { type LabDrawing, labDrawing } from './model.ts';
import { escapeXml, renderTopologySvg } from './svg.ts';

export interface LabShow {
  drawing: LabDrawing;
  flow?: FlowPath;
  ports: ResolvedServicePort[];
}

/** Counters a picture can hold: the busiest few, zeros left out. */
const SHOWN_REASONS = 5;

export async function labShow(opts: { topology?: string; flow?: string } = {}): Promise<LabShow> {
  const state = readState();
  const t = loadTopology(state?.topologyFile ?? opts.topology ?? DEFAULT_TOPOLOGY);
  const ports = resolveServicePorts(loadManifests(servedView(t)));
  const up = state?.phase === 'up';
  const counters = up ? await nodeCounters(t, state) : new Map();
  const drawing = labDrawing(t, ports, { mode: up ? state.mode : '', counters });
  const flow = opts.flow ? traceFlow(drawing, ports, opts.flow) : undefined;
  return { drawing, flow, ports };
}

/** kubetun: packets and the busiest reasons; a kernel mode: the node's conntrack entries. */
async function nodeCounters(
  t: Topology,
  state: LabState,
): Promise<Map<string, [string, number | string][]>> {
  const out = new Map<string, [string, number | string][]>();
  await Promise.all(
    t.nodes.map(async (n) => {
      const agent = state.processes.find((p) => p.role === 'kubetun' && p.name === n.name);
      if (agent?.ctlSocket && isAlive(agent)) {
        try {
          const r = await labCtl<{
            counters: Record<string, number>;
            agent: Record<string, number>;
          }>(agent.ctlSocket, { cmd: 'counters' }, 2000);
          out.set(n.name, agentLines(r));
        } catch (err) {
          out.set(n.name, [['control socket', (err as Error).message.slice(0, 60)]]);
        }
        return;
      }
      if (state.mode === 'iptables' || state.mode === 'nftables') {
        const argv = inNs(n.ns, ['conntrack', '-C']);
        const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout: 5000 });
        const count = Number(r.stdout.trim());
        out.set(n.name, [['kernel conntrack entries', Number.isFinite(count) ? count : '?']]);
      }
    }),
  );
  return out;
}

function agentLines(r: {
  counters: Record<string, number>;
  agent: Record<string, number>;
}): [string, number][] {
  const agent = Object.entries(r.agent ?? {}).filter(([k]) => /packets/i.test(k));
  const reasons = Object.entries(r.counters ?? {})
    .filter(([, v]) => v > 0)
    .sort((a, b) => b[1] - a[1])
    .slice(0, SHOWN_REASONS);
  return [...agent.slice(0, 2), ...reasons];
}

const CSS = `
body{font:14px/1.4 system-ui,sans-serif;margin:1em 1.5em;color:#222}
h1{font-size:1.3em;margin:.2em 0 .6em}
svg.topology{display:block;width:100%;height:auto;border:1px solid #d0d7de;border-radius:6px}
table{border-collapse:collapse;margin-top:1em;font:12px ui-monospace,monospace}
td,th{border:1px solid #d0d7de;padding:.25em .6em;text-align:left}
.changed{color:#cf4a00;font-weight:600}
`;

/** The page: the drawing, then the flow's hops as a table (the same data, copyable). */
export function renderShowPage(s: LabShow): string {
  const rows = (s.flow?.hops ?? [])
    .map(
      (h, i) =>
        `<tr><td>${i + 1}</td><td>${escapeXml(h.what)}</td><td>${escapeXml(h.before)}</td><td${h.before !== h.after ? ' class="changed"' : ''}>${escapeXml(h.after)}</td></tr>`,
    )
    .join('\n');
  const table = s.flow
    ? `<h2>${escapeXml(s.flow.spec)}: ${escapeXml(s.flow.verdict)}</h2><p>${escapeXml(s.flow.summary)}</p>
<table><tr><th>#</th><th>hop</th><th>before</th><th>after</th></tr>
${rows}</table>`
    : '';
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kubetun lab: ${escapeXml(s.drawing.title)}</title>
<style>${CSS}</style></head>
<body data-loaded="yes">
<h1>kubetun lab ${escapeXml(s.drawing.title)}${s.drawing.mode ? ` (${escapeXml(s.drawing.mode)})` : ' (not up: the topology and manifests)'}</h1>
${renderTopologySvg(s.drawing, { flow: s.flow })}
${table}
</body></html>
`;
}

/** The flow as text, for the terminal. */
export function formatFlow(f: FlowPath): string {
  const lines = [`${f.spec}: ${f.verdict} — ${f.summary}`];
  f.hops.forEach((h, i) => {
    lines.push(`  ${String(i + 1).padStart(2)}. ${h.what}`);
    lines.push(h.before === h.after ? `      ${h.before}` : `      ${h.before}  =>  ${h.after}`);
  });
  return lines.join('\n');
}

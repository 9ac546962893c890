// `lab compare --html`: one self-contained page (inline CSS and SVG, no external assets). It
// opens with a drawing of the lab (src/lab/show/svg.ts) with every capture point numbered, then
// per scenario, per capture point where either plane saw packets, the two planes' ladder
// diagrams side by side across the page: hosts as columns named by their role (pod-d, VIP web,
// node2; src/lab/show/model.ts) with the address under it, packets as arrows labelled with
// ports and flags. From the first differing packet on, a real difference is red and an expected
// (documented) one amber, so a deliberate difference never looks like a failure.
// A tiny inline script records script errors into #errors and marks the page loaded, so a
// headless browser's DOM dump shows whether it rendered cleanly.
import { addressRoles } from '../show/model.ts';
import { type CaptureMark, escapeXml as esc, renderTopologySvg } from '../show/svg.ts';
import type { PointDiff } from './diff.ts';
import type { NPkt } from './normalise.ts';
import type { CompareReport, ScenarioResult } from './run.ts';

const MAX_ROWS = 60;
const COL_W = 170;
const ROW_H = 26;
const TOP = 48;
const BLUE = '#1f6feb';
const RED = '#cf222e';
const AMBER = '#bf8700';

const CSS = `
body{font:14px/1.4 system-ui,sans-serif;margin:1em 1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em}
.same{color:#1a7f37}.different{color:#cf222e}.expected-difference{color:#9a6700}
.scenario.different{border-left:6px solid #cf222e;padding-left:.8em}
.scenario.expected-difference{border-left:6px solid #d4a72c;padding-left:.8em}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1em;align-items:start}
.run{border:1px solid #ddd;padding:.5em;border-radius:6px;min-width:0}
.run svg{width:100%;height:auto}
svg.topology{width:100%;height:auto;border:1px solid #d0d7de;border-radius:6px}
.legend span{display:inline-block;margin-right:1.2em}.legend i{display:inline-block;width:2em;height:.3em;vertical-align:middle;margin-right:.4em}
.run h4{margin:.2em 0 .4em}
.point{margin:.8em 0 .2em;font-weight:600}
svg text{font:11px ui-monospace,monospace}
.note{color:#555}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto;font-size:12px}
`;

const SCRIPT = `
window.__errors=[];
window.onerror=function(m){window.__errors.push(String(m));var e=document.getElementById('errors');if(e)e.textContent=window.__errors.join('\\n');};
window.addEventListener('load',function(){document.body.setAttribute('data-loaded','yes');
document.body.setAttribute('data-diagrams',String(document.querySelectorAll('svg.ladder').length));});
`;

export function renderHtml(r: CompareReport): string {
  const summary = r.results
    .map(
      (s) =>
        `<li><a href="#${esc(s.name)}">${esc(s.name)}</a>: <b class="${s.verdict}">${s.verdict}</b></li>`,
    )
    .join('');
  const roles = r.drawing ? addressRoles(r.drawing) : new Map<string, string>();
  const body = r.results.map((s) => renderScenario(s, r.kernel, roles)).join('\n');
  const norms = r.normalisations.map((n) => `<li>${esc(n)}</li>`).join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kubetun vs kube-proxy (${r.kernel})</title>
<style>${CSS}</style><script>${SCRIPT}</script></head>
<body>
<h1>kubetun vs kube-proxy (${esc(r.kernel)} mode)</h1>
${r.drawing ? `${renderTopologySvg(r.drawing, { captures: allCaptures(r) })}\n<p class="note">Red circles: the capture points (tcpdump on that interface, in both planes); hover one for its name.</p>` : ''}
<p class="legend"><span><i style="background:${BLUE}"></i>same in both planes</span><span><i style="background:${AMBER}"></i>expected (documented) difference</span><span><i style="background:${RED}"></i>real difference</span></p>
<ul>${summary}</ul>
<p>${r.differences} scenario(s) differ.</p>
<h3>Normalised (legitimately random, ignored)</h3><ul>${norms}</ul>
${body}
<pre id="errors"></pre>
</body></html>
`;
}

/** Every capture point any scenario used, once, in order of first use. */
function allCaptures(r: CompareReport): CaptureMark[] {
  const seen = new Map<string, CaptureMark>();
  for (const s of r.results)
    for (const c of s.captures ?? []) {
      const key = `${c.at.kind}:${c.at.name}`;
      if (!seen.has(key)) seen.set(key, c);
    }
  return [...seen.values()];
}

function renderScenario(s: ScenarioResult, kernel: string, roles: Map<string, string>): string {
  const [a, b] = s.runs;
  const parts = [
    `<section class="scenario ${s.verdict}" id="${esc(s.name)}"><h2>${esc(s.name)}: <span class="${s.verdict}">${s.verdict}</span></h2>`,
    `<p>${esc(s.title)}</p>`,
  ];
  if (s.expected) parts.push(`<p class="note">Deliberate: ${esc(s.expected)}</p>`);
  if (s.note && s.verdict !== 'same') parts.push(`<p class="note">Note: ${esc(s.note)}</p>`);
  const runLine = (run: typeof a) =>
    `${run.mode}${run.backend ? `, backend ${run.backend}` : ''}: ${run.attempts[run.kept[0] ?? 0]?.output.split('\n')[0] ?? ''}`;
  parts.push(`<p class="note">${esc(runLine(a))}<br>${esc(runLine(b))}</p>`);
  const shown = s.points.filter((p) => p.a.length + p.b.length > 0);
  for (const p of shown) {
    const state = p.same
      ? 'same'
      : p.deliberate || s.verdict === 'expected-difference'
        ? `expected difference from packet ${p.firstDiff + 1}`
        : `differs from packet ${p.firstDiff + 1}`;
    parts.push(`<div class="point">${esc(p.point)} — ${esc(state)}</div><div class="pair">`);
    const expected = s.verdict === 'expected-difference';
    parts.push(renderRun(p, 'a', a.mode === 'kubetun' ? 'kubetun' : kernel, roles, expected));
    parts.push(renderRun(p, 'b', b.mode, roles, expected));
    parts.push('</div>');
  }
  if (shown.length === 0)
    parts.push('<p class="note">No packets at any capture point in either plane.</p>');
  parts.push('</section>');
  return parts.join('\n');
}

function renderRun(
  p: PointDiff,
  side: 'a' | 'b',
  label: string,
  roles: Map<string, string>,
  expected: boolean,
): string {
  const pkts = side === 'a' ? p.a : p.b;
  return `<div class="run"><h4>${esc(label)} (${pkts.length} packets)</h4>${ladder(pkts, p, roles, expected)}</div>`;
}

/**
 * Columns: the hosts in the order they first appear, named by role with the address below;
 * one arrow per packet. expected: the scenario's verdict is a documented difference, so its
 * differing packets are amber even where the packets differ in more than an ICMP error's source.
 */
export function ladder(
  pkts: NPkt[],
  d: PointDiff,
  roles: Map<string, string> = new Map(),
  expected = false,
): string {
  const hosts: string[] = [];
  for (const p of pkts) for (const h of [p.src, p.dst]) if (!hosts.includes(h)) hosts.push(h);
  if (hosts.length === 0) hosts.push('(no packets)');
  const rows = pkts.slice(0, MAX_ROWS);
  // At least four columns wide, hosts centred: a ladder fills half the page at about 1:1.
  const w = Math.max(hosts.length, 4) * COL_W;
  const left = (w - hosts.length * COL_W) / 2;
  const h = TOP + rows.length * ROW_H + 20;
  const x = (host: string) => left + hosts.indexOf(host) * COL_W + COL_W / 2;
  const out = [
    `<svg class="ladder" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${w} ${h}"">`,
    '<defs><marker id="ah" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>',
  ];
  hosts.forEach((host) => {
    const role = roles.get(host);
    out.push(
      `<text x="${x(host)}" y="16" text-anchor="middle" font-weight="bold" class="role">${esc(role ?? host)}</text>`,
    );
    if (role)
      out.push(`<text x="${x(host)}" y="30" text-anchor="middle" fill="#555">${esc(host)}</text>`);
    out.push(
      `<line x1="${x(host)}" y1="36" x2="${x(host)}" y2="${h - 6}" stroke="#999" stroke-dasharray="3,3"/>`,
    );
  });
  rows.forEach((p, i) => {
    const y = TOP + i * ROW_H;
    const color = !d.same && i >= d.firstDiff ? (d.deliberate || expected ? AMBER : RED) : BLUE;
    const x1 = x(p.src);
    const x2 = x(p.dst);
    out.push(
      `<line x1="${x1}" y1="${y}" x2="${x2}" y2="${y + 10}" stroke="${color}" stroke-width="1.6" marker-end="url(#ah)"><title>${esc(p.text)}</title></line>`,
    );
    out.push(
      `<text x="${(x1 + x2) / 2}" y="${y - 2}" text-anchor="middle" fill="${color}">${esc(p.label)}</text>`,
    );
  });
  if (pkts.length > MAX_ROWS)
    out.push(`<text x="4" y="${h - 4}">… ${pkts.length - MAX_ROWS} more packets</text>`);
  out.push('</svg>');
  return out.join('');
}

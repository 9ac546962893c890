// `lab compare --html`: one self-contained page (inline CSS and SVG, no external assets). Per
// scenario, per capture point where either plane saw packets, the two planes' ladder diagrams
// side by side: hosts (addresses) as columns, packets as arrows labelled with ports and flags.
// The first differing packet and everything after it is red; deliberate differences are amber.
// A tiny inline script records script errors into #errors and marks the page loaded, so a
// headless browser's DOM dump shows whether it rendered cleanly.
import type { PointDiff } from './diff.ts';
import type { NPkt } from './normalise.ts';
import type { CompareReport, ScenarioResult } from './run.ts';

const esc = (s: string) =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

const MAX_ROWS = 60;
const COL_W = 150;
const ROW_H = 26;
const TOP = 40;

const CSS = `
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em}
.same{color:#1a7f37}.different{color:#cf222e}.expected-difference{color:#9a6700}
.pair{display:flex;gap:1.5em;flex-wrap:wrap;align-items:flex-start}
.run{border:1px solid #ddd;padding:.5em;border-radius:6px}
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
  const body = r.results.map((s) => renderScenario(s, r.kernel)).join('\n');
  const norms = r.normalisations.map((n) => `<li>${esc(n)}</li>`).join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kubetun vs kube-proxy (${r.kernel})</title>
<style>${CSS}</style><script>${SCRIPT}</script></head>
<body>
<h1>kubetun vs kube-proxy (${esc(r.kernel)} mode)</h1>
<ul>${summary}</ul>
<p>${r.differences} scenario(s) differ.</p>
<h3>Normalised (legitimately random, ignored)</h3><ul>${norms}</ul>
${body}
<pre id="errors"></pre>
</body></html>
`;
}

function renderScenario(s: ScenarioResult, kernel: string): string {
  const [a, b] = s.runs;
  const parts = [
    `<section class="scenario" id="${esc(s.name)}"><h2>${esc(s.name)}: <span class="${s.verdict}">${s.verdict}</span></h2>`,
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
      : p.deliberate
        ? 'deliberate difference'
        : `differs from packet ${p.firstDiff + 1}`;
    parts.push(`<div class="point">${esc(p.point)} — ${esc(state)}</div><div class="pair">`);
    parts.push(renderRun(p, 'a', a.mode === 'kubetun' ? 'kubetun' : kernel));
    parts.push(renderRun(p, 'b', b.mode));
    parts.push('</div>');
  }
  if (shown.length === 0)
    parts.push('<p class="note">No packets at any capture point in either plane.</p>');
  parts.push('</section>');
  return parts.join('\n');
}

function renderRun(p: PointDiff, side: 'a' | 'b', label: string): string {
  const pkts = side === 'a' ? p.a : p.b;
  return `<div class="run"><h4>${esc(label)} (${pkts.length} packets)</h4>${ladder(pkts, p)}</div>`;
}

/** Columns: the addresses in the order they first appear; one arrow per packet. */
export function ladder(pkts: NPkt[], d: PointDiff): string {
  const hosts: string[] = [];
  for (const p of pkts) for (const h of [p.src, p.dst]) if (!hosts.includes(h)) hosts.push(h);
  if (hosts.length === 0) hosts.push('(no packets)');
  const rows = pkts.slice(0, MAX_ROWS);
  const w = Math.max(hosts.length, 2) * COL_W;
  const h = TOP + rows.length * ROW_H + 20;
  const x = (host: string) => hosts.indexOf(host) * COL_W + COL_W / 2;
  const out = [
    `<svg class="ladder" xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">`,
    '<defs><marker id="ah" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>',
  ];
  hosts.forEach((host) => {
    out.push(
      `<text x="${x(host)}" y="16" text-anchor="middle" font-weight="bold">${esc(host)}</text>`,
    );
    out.push(
      `<line x1="${x(host)}" y1="24" x2="${x(host)}" y2="${h - 6}" stroke="#999" stroke-dasharray="3,3"/>`,
    );
  });
  rows.forEach((p, i) => {
    const y = TOP + i * ROW_H;
    const color = !d.same && i >= d.firstDiff ? (d.deliberate ? '#bf8700' : '#cf222e') : '#1f6feb';
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

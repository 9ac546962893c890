// One SVG drawing of the lab, used by `lab show` and at the top of the `lab compare` report:
//
//          [client 172.30.0.100]
//                 │ eth0 ◉                          ◉ = a capture point (numbered)
//   ══════════════╧═════ underlay br0 ══════════════════
//        │ eth0 ◉ node1 IP                  │ eth0 ◉
//   ┌────┴─────────────────────┐   ┌────────┴───────────┐
//   │ node1 172.30.0.11        │   │ node2 …            │
//   │ counters …               │   │                    │
//   │  │veth ◉    │veth        │   │                    │
//   │ [pod-a]    [pod-b]       │   │ [pod-c]   [pod-d]  │
//   └──────────────────────────┘   └────────────────────┘
//     [web 10.96.0.10] [web-np …]   Services, lines to the pods their endpoints live on
//
// A flow (src/lab/show/flow.ts) is drawn over it as numbered hops, with its addresses before
// and after each hop in a table underneath. The SVG scales to the page width (viewBox); every
// element carries an id (node-<name>, pod-<name>, client-<name>, svc-<name>) and data-role, so
// tests and a reader's browser search can find it.
import type { FlowPath, HopAt } from './flow.ts';
import type { DrawPod, LabDrawing } from './model.ts';

export const escapeXml = (s: string) =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** A capture point to mark: on a pod's veth, a node's uplink or a client's uplink. */
export interface CaptureMark {
  at: HopAt;
  label: string;
}

export interface SvgOptions {
  captures?: CaptureMark[];
  flow?: FlowPath;
  /** the drawing's coordinate width (it scales to the page anyway) */
  width?: number;
}

const M = 20;
const CLIENT_W = 200;
const POD_H = 64;
const SVC_W = 280;
const SVC_H = 52;
const LINE = 15;
const COLOURS = ['#1f6feb', '#8250df', '#bf3989', '#1a7f37', '#9a6700', '#0a7ea4', '#cf4a00'];

interface Box {
  x: number;
  y: number;
  w: number;
  h: number;
}

/** Where everything goes: computed once, drawn by the functions below. */
interface Layout {
  w: number;
  clients: Map<string, Box>;
  busY: number;
  nodes: Map<string, Box>;
  pods: Map<string, Box>;
  services: Map<string, Box>;
  h: number;
}

function layout(d: LabDrawing, width: number): Layout {
  const clients = new Map<string, Box>();
  const cw = (width - 2 * M) / Math.max(d.clients.length, 1);
  d.clients.forEach((c, i) => {
    clients.set(c.name, { x: M + i * cw + (cw - CLIENT_W) / 2, y: 44, w: CLIENT_W, h: 50 });
  });
  const busY = 140;
  const gap = 24;
  const nw = (width - 2 * M - gap * (d.nodes.length - 1)) / Math.max(d.nodes.length, 1);
  const counterLines = Math.max(0, ...d.nodes.map((n) => n.counters.length));
  const podTop = 60 + counterLines * LINE + 50;
  const nodeH = podTop + POD_H + 16;
  const nodes = new Map<string, Box>();
  const pods = new Map<string, Box>();
  d.nodes.forEach((n, i) => {
    const box = { x: M + i * (nw + gap), y: busY + 60, w: nw, h: nodeH };
    nodes.set(n.name, box);
    const mine = d.pods.filter((p) => p.node === n.name);
    const pw = Math.min(170, (nw - 16) / Math.max(mine.length, 1) - 12);
    const step = (nw - 16) / Math.max(mine.length, 1);
    mine.forEach((p, j) => {
      pods.set(p.name, {
        x: box.x + 8 + j * step + (step - pw) / 2,
        y: box.y + podTop,
        w: pw,
        h: POD_H,
      });
    });
  });
  const svcTop = busY + 60 + nodeH + 70;
  const perRow = Math.max(1, Math.floor((width - 2 * M + 16) / (SVC_W + 16)));
  const services = new Map<string, Box>();
  d.services.forEach((s, i) => {
    services.set(s.name, {
      x: M + (i % perRow) * (SVC_W + 16),
      y: svcTop + Math.floor(i / perRow) * (SVC_H + 16),
      w: SVC_W,
      h: SVC_H,
    });
  });
  const rows = Math.ceil(d.services.length / perRow);
  return { w: width, clients, busY, nodes, pods, services, h: svcTop + rows * (SVC_H + 16) + 10 };
}

const text = (x: number, y: number, s: string, attrs = '') =>
  `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}"${attrs ? ` ${attrs}` : ''}>${escapeXml(s)}</text>`;
const rect = (b: Box, attrs: string) =>
  `<rect x="${b.x.toFixed(1)}" y="${b.y.toFixed(1)}" width="${b.w.toFixed(1)}" height="${b.h.toFixed(1)}" rx="6" ${attrs}/>`;
const line = (x1: number, y1: number, x2: number, y2: number, attrs: string) =>
  `<line x1="${x1.toFixed(1)}" y1="${y1.toFixed(1)}" x2="${x2.toFixed(1)}" y2="${y2.toFixed(1)}" ${attrs}/>`;

/** The lab as one SVG element (no XML prolog: it is inlined into HTML pages). */
export function renderTopologySvg(d: LabDrawing, o: SvgOptions = {}): string {
  const L = layout(d, o.width ?? 1200);
  const onPath = new Set((o.flow?.hops ?? []).map((h) => `${h.at.kind}:${h.at.name}`));
  const hot = (kind: string, name: string) => onPath.has(`${kind}:${name}`);
  const flowRows = o.flow ? o.flow.hops.length * 2 * LINE + 3 * LINE : 0;
  const h = L.h + flowRows;
  const out = [
    `<svg class="topology" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${L.w} ${h}" width="100%" role="img" aria-label="lab topology">`,
    '<style>text{font:12px ui-monospace,Menlo,monospace;fill:#222}.t{font-weight:bold;font-size:13px}.s{font-size:11px;fill:#555}.cap text{fill:#fff;font-size:10px;font-weight:bold}</style>',
    text(M, 22, `${d.title}${d.mode ? ` — data plane: ${d.mode}` : ''}`, 'class="t"'),
  ];
  out.push(...drawUnderlay(d, L), ...drawClients(d, L, hot), ...drawNodes(d, L, hot));
  out.push(...drawServices(d, L, o.flow));
  if (o.captures) out.push(...drawCaptures(d, L, o.captures));
  if (o.flow) out.push(...drawFlow(L, o.flow));
  out.push('</svg>');
  return out.join('\n');
}

function drawUnderlay(d: LabDrawing, L: Layout): string[] {
  return [
    `<g id="underlay" data-role="underlay">`,
    line(M, L.busY, L.w - M, L.busY, 'stroke="#57606a" stroke-width="6"'),
    text(L.w - M, L.busY - 8, `underlay br0 ${d.underlayCidr}`, 'text-anchor="end" class="s"'),
    '</g>',
  ];
}

function drawClients(d: LabDrawing, L: Layout, hot: (k: string, n: string) => boolean): string[] {
  const out: string[] = [];
  for (const c of d.clients) {
    const b = L.clients.get(c.name)!;
    const cx = b.x + b.w / 2;
    out.push(`<g id="client-${escapeXml(c.name)}" data-role="client">`);
    out.push(line(cx, b.y + b.h, cx, L.busY, 'stroke="#57606a" stroke-width="2"'));
    out.push(text(cx + 6, b.y + b.h + 18, c.uplink, 'class="s"'));
    out.push(
      rect(
        b,
        `fill="#fff8c5" stroke="${hot('client', c.name) ? '#cf4a00' : '#9a6700'}" stroke-width="${hot('client', c.name) ? 3 : 1.5}"`,
      ),
    );
    out.push(text(cx, b.y + 20, `${c.name} (external client)`, 'text-anchor="middle" class="t"'));
    out.push(text(cx, b.y + 38, c.ip, 'text-anchor="middle"'));
    out.push('</g>');
  }
  return out;
}

function drawNodes(d: LabDrawing, L: Layout, hot: (k: string, n: string) => boolean): string[] {
  const out: string[] = [];
  for (const n of d.nodes) {
    const b = L.nodes.get(n.name)!;
    const cx = b.x + b.w / 2;
    const on = hot('node', n.name);
    out.push(`<g id="node-${escapeXml(n.name)}" data-role="node">`);
    out.push(line(cx, L.busY, cx, b.y, 'stroke="#57606a" stroke-width="2"'));
    out.push(text(cx + 6, L.busY + 22, `${n.uplink} ${n.ip}`, 'class="s"'));
    out.push(
      rect(
        b,
        `fill="#f6f8fa" stroke="${on ? '#cf4a00' : '#57606a'}" stroke-width="${on ? 3 : 1.5}"`,
      ),
    );
    out.push(text(b.x + 10, b.y + 20, `${n.name}  ${n.ip}`, 'class="t"'));
    out.push(text(b.x + 10, b.y + 38, `pod CIDR ${n.podCidr}, gateway ${n.gateway}`, 'class="s"'));
    n.counters.forEach(([k, v], i) => {
      out.push(text(b.x + 10, b.y + 60 + i * LINE, `${k}: ${v}`, 'class="s" data-role="counter"'));
    });
    for (const p of d.pods.filter((x) => x.node === n.name)) out.push(...drawPod(p, L, hot));
    out.push('</g>');
  }
  return out;
}

function drawPod(p: DrawPod, L: Layout, hot: (k: string, n: string) => boolean): string[] {
  const b = L.pods.get(p.name)!;
  const cx = b.x + b.w / 2;
  const on = hot('pod', p.name);
  const fill = p.fromView ? '#eaeef2' : '#ddf4ff';
  return [
    `<g id="pod-${escapeXml(p.name)}" data-role="pod">`,
    line(cx, b.y - 34, cx, b.y, 'stroke="#0969da" stroke-width="1.5"'),
    p.hostIf ? text(cx + 5, b.y - 20, p.hostIf, 'class="s"') : '',
    rect(b, `fill="${fill}" stroke="${on ? '#cf4a00' : '#0969da'}" stroke-width="${on ? 3 : 1.2}"`),
    text(cx, b.y + 22, p.name, 'text-anchor="middle" class="t"'),
    text(cx, b.y + 40, p.ip, 'text-anchor="middle"'),
    p.fromView ? text(cx, b.y + 56, '(from the view)', 'text-anchor="middle" class="s"') : '',
    '</g>',
  ].filter((s) => s !== '');
}

/** Fits a line into a box of w pixels (11px monospace is ~6.7px a character). */
const clip = (s: string, w: number) => {
  const n = Math.floor((w - 16) / 6.7);
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
};

/** Service boxes under the nodes, with a line to every pod one of their endpoints is. */
function drawServices(d: LabDrawing, L: Layout, flow: FlowPath | undefined): string[] {
  const out: string[] = [];
  const flowSvc = flow?.spec.split(/→|->/)[1]?.split(/[:@/]/)[0];
  d.services.forEach((s, i) => {
    const b = L.services.get(s.name)!;
    const colour = COLOURS[i % COLOURS.length]!;
    const faint = flowSvc !== undefined && s.name !== flowSvc;
    out.push(`<g id="svc-${escapeXml(s.name)}" data-role="service" opacity="${faint ? 0.35 : 1}">`);
    for (const e of s.endpoints) {
      const pb = L.pods.get(e.pod);
      if (!pb) continue;
      const dash = e.ready ? '' : ' stroke-dasharray="4,3"';
      out.push(
        line(
          b.x + b.w / 2,
          b.y,
          pb.x + pb.w / 2,
          pb.y + pb.h,
          `stroke="${colour}" stroke-width="1.2" opacity="0.4"${dash}`,
        ),
      );
    }
    out.push(rect(b, `fill="#fff" stroke="${colour}" stroke-width="1.5"`));
    out.push(text(b.x + 8, b.y + 17, `${s.name} (${s.type})`, `class="t" fill="${colour}"`));
    const addr = [s.clusterIP, ...s.external].filter(Boolean).join(' ');
    out.push(text(b.x + 8, b.y + 32, clip(`${addr} ${s.ports.join(',')}`, b.w), 'class="s"'));
    const eps = s.endpoints.map((e) => `${e.pod}@${e.node ?? '?'}`).join(' ');
    out.push(text(b.x + 8, b.y + 46, clip(eps ? `→ ${eps}` : '→ no endpoints', b.w), 'class="s"'));
    out.push('</g>');
  });
  return out;
}

/** Capture marks sit on the link they capture: a pod's veth, a node's or client's uplink. */
function drawCaptures(d: LabDrawing, L: Layout, caps: CaptureMark[]): string[] {
  const out = ['<g class="captures">'];
  caps.forEach((c, i) => {
    const p = capturePos(d, L, c.at);
    if (!p) return;
    out.push(
      `<g class="cap" data-role="capture" data-at="${escapeXml(`${c.at.kind}:${c.at.name}`)}"><title>${escapeXml(c.label)}</title>`,
      `<circle cx="${p.x.toFixed(1)}" cy="${p.y.toFixed(1)}" r="9" fill="#cf222e"/>`,
      text(p.x, p.y + 3.5, String(i + 1), 'text-anchor="middle"'),
      '</g>',
    );
  });
  out.push('</g>');
  return out;
}

function capturePos(d: LabDrawing, L: Layout, at: HopAt): { x: number; y: number } | undefined {
  if (at.kind === 'pod') {
    const b = L.pods.get(at.name);
    return b && { x: b.x + b.w / 2, y: b.y - 10 };
  }
  if (at.kind === 'node') {
    const b = L.nodes.get(at.name);
    return b && { x: b.x + b.w / 2, y: L.busY + 36 };
  }
  if (at.kind === 'client') {
    const b = L.clients.get(at.name);
    return b && { x: b.x + b.w / 2, y: (b.y + b.h + L.busY) / 2 };
  }
  return d.nodes.length ? { x: L.w / 2, y: L.busY } : undefined;
}

const sameAt = (a: HopAt, b: HopAt) => a.kind === b.kind && a.name === b.name;

/** A hop's badge: on a node's header, at a pod's or client's top-left corner. */
function corner(L: Layout, at: HopAt, c: { x: number; y: number }): { x: number; y: number } {
  const b =
    at.kind === 'pod'
      ? L.pods.get(at.name)
      : at.kind === 'client'
        ? L.clients.get(at.name)
        : undefined;
  return b ? { x: b.x + 12, y: b.y + 12 } : c;
}

/** Where the path passes an element: a node's header, the middle of a pod or client. */
function centre(L: Layout, at: HopAt): { x: number; y: number } {
  const b =
    at.kind === 'pod'
      ? L.pods.get(at.name)
      : at.kind === 'node'
        ? L.nodes.get(at.name)
        : at.kind === 'client'
          ? L.clients.get(at.name)
          : undefined;
  if (b && at.kind === 'node') return { x: b.x + b.w / 2, y: b.y + 30 };
  if (b) return { x: b.x + b.w / 2, y: b.y + b.h / 2 };
  return { x: L.w / 2, y: L.busY };
}

/**
 * The flow: a path through the hops' elements, numbered. The way between nodes runs down their
 * uplinks and along the underlay bar; hops at the same element sit side by side.
 */
function drawFlow(L: Layout, f: FlowPath): string[] {
  const line: { x: number; y: number }[] = [];
  const badges: { x: number; y: number }[] = [];
  f.hops.forEach((h, i) => {
    const prev = line[line.length - 1];
    if (h.at.kind === 'underlay') {
      const next = f.hops[i + 1];
      const to = next ? centre(L, next.at) : { x: L.w / 2, y: L.busY };
      const from = prev ?? to;
      line.push({ x: from.x, y: L.busY }, { x: to.x, y: L.busY });
      badges.push({ x: (from.x + to.x) / 2, y: L.busY });
      return;
    }
    const c = centre(L, h.at);
    const same = i > 0 && sameAt(f.hops[i - 1]!.at, h.at);
    const last = badges[badges.length - 1];
    line.push(c);
    badges.push(same && last ? { x: last.x + 26, y: last.y } : corner(L, h.at, c));
  });
  const colour = f.verdict === 'delivered' ? '#cf4a00' : '#cf222e';
  const out = [
    `<g class="flow" data-role="flow" data-verdict="${f.verdict}">`,
    `<polyline points="${line.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' ')}" fill="none" stroke="${colour}" stroke-width="3" stroke-dasharray="8,4" opacity="0.85"/>`,
  ];
  badges.forEach((p, i) => {
    out.push(
      `<g class="hop" data-role="hop"><circle cx="${p.x.toFixed(1)}" cy="${p.y.toFixed(1)}" r="10" fill="${colour}"/>`,
      text(p.x, p.y + 4, String(i + 1), 'text-anchor="middle" style="fill:#fff;font-weight:bold"'),
      '</g>',
    );
  });
  let y = L.h + LINE;
  out.push(text(M, y, `flow ${f.spec}: ${f.summary}`, 'class="t"'));
  f.hops.forEach((h, i) => {
    y += LINE * 2;
    out.push(text(M, y - LINE / 2, `${i + 1}. ${h.what}`));
    const changed = h.before !== h.after;
    out.push(
      text(
        M + 24,
        y + LINE / 2,
        changed ? `${h.before}   ⇒   ${h.after}` : h.before,
        `class="s"${changed ? ` style="fill:${colour}"` : ''}`,
      ),
    );
  });
  out.push('</g>');
  return out;
}

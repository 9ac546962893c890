// `kubetun lab demo long-connections`: why L4 load balancing spreads connections, not requests.
// A client pod sends 100 HTTP requests over one keep-alive connection: the service's backend is
// chosen once, when the connection's first packet creates its conntrack entry, so all 100 land
// on one pod. Then 100 requests each on a new connection: each is a new flow, a new choice,
// spread over the endpoints (kube-proxy issue: long-lived gRPC/HTTP2 connections pin clients).
//
//   pod-d ══ one connection, 100 requests ══▶ 10.96.0.10:80 ──▶ pod-? (all of them)
//   pod-d ── 100 connections, 1 request each ─▶ 10.96.0.10:80 ──▶ pod-a / pod-b / pod-c
//
// With --ipv6 (-6), on a dual-stack lab: the same over IPv6, to a dual-stack Service's IPv6
// ClusterIP (default web-dual [fd00:10:96::10]:80, web's pods): IPv6 conntrack pins the
// connection the same way.
import { loadManifests, resolveServicePorts } from '../../manifests/index.ts';
import { familyOfIP, type IPFamily } from '../../model.ts';
import type { Progress } from '../lab.ts';
import { LabError } from '../error.ts';
import { inNs, sh } from '../../sh.ts';
import { type LabState, VIEW_DIR } from '../state.ts';
import { allPods, loadTopology } from '../topology.ts';
import { requireIpv6, withLabMode } from './ensure-lab.ts';

export interface LongConnectionsReport {
  from: string;
  url: string;
  /** answers per backend pod over one keep-alive connection */
  keepAlive: Record<string, number>;
  /** answers per backend pod, one new connection each */
  newConnections: Record<string, number>;
  /** local ports the keep-alive requests used (1 when the connection was really reused) */
  keepAliveSockets: number;
}

export interface LongConnectionsOptions {
  topology?: string;
  /** the service to ask, namespace/name (default: default/web; IPv6: default/web-dual) */
  service?: string;
  /** over IPv6: the service's IPv6 ClusterIP (a dual-stack lab) */
  ipv6?: boolean;
  requests?: number;
  progress?: Progress;
  out?: (s: string) => void;
}

// Runs inside the client pod's namespace. curl given the same URL n times on one command line
// reuses its connection (HTTP/1.1 keep-alive); -w prints the local port after each body, so
// the report can show that it really was one connection. (Node's http.Agent would not do:
// it honours the pod server's 1 s Keep-Alive hint by dropping idle sockets at once.)
function clientScript(url: string, n: number): string {
  const urls = Array.from({ length: n }, () => `'${url}'`).join(' ');
  return [
    `curl -sS -m 60 -w 'port=%{local_port}\\n' ${urls} | sed 's/^/keep /'`,
    `for i in $(seq ${n}); do curl -sS -m 2 -w 'port=%{local_port}\\n' '${url}' | sed 's/^/new /'; done`,
  ].join('\n');
}

/** Lines "keep|new <pod> <ip>" (the body) and "keep|new port=<local port>" into counts. */
function tally(text: string): Omit<LongConnectionsReport, 'from' | 'url'> {
  const keepAlive: Record<string, number> = {};
  const newConnections: Record<string, number> = {};
  const ports = new Set<string>();
  for (const line of text.split('\n')) {
    const [kind, what] = line.trim().split(/\s+/);
    const m = kind === 'keep' ? keepAlive : kind === 'new' ? newConnections : undefined;
    if (!m || !what) continue;
    if (what.startsWith('port=')) {
      if (kind === 'keep') ports.add(what);
    } else m[what] = (m[what] ?? 0) + 1;
  }
  return { keepAlive, newConnections, keepAliveSockets: ports.size };
}

export async function longConnectionsDemo(
  opts: LongConnectionsOptions = {},
): Promise<LongConnectionsReport> {
  const out = opts.out ?? ((s: string) => process.stdout.write(`${s}\n`));
  return withLabMode(opts.topology, 'kubetun', opts.progress, (state) =>
    longConnectionsDemoIn(state, opts, out),
  );
}

async function longConnectionsDemoIn(
  state: LabState,
  opts: LongConnectionsOptions,
  out: (s: string) => void,
): Promise<LongConnectionsReport> {
  const t = loadTopology(state.topologyFile);
  const family: IPFamily = opts.ipv6 ? 'IPv6' : 'IPv4';
  if (opts.ipv6) requireIpv6(t, 'long-connections');
  const want = opts.service ?? (opts.ipv6 ? 'default/web-dual' : 'default/web');
  // the service's ports as that family's data plane sees them: its ClusterIP and endpoints
  const rsp = resolveServicePorts(loadManifests(VIEW_DIR), { family }).find(
    (p) => `${p.service.namespace}/${p.service.name}` === want && p.port.protocol === 'TCP',
  );
  const what = opts.ipv6 ? 'dual-stack TCP ClusterIP service' : 'TCP ClusterIP service';
  if (!rsp) throw new LabError(`the lab manifests have no ${what} ${want}`);
  const vip = rsp.service.clusterIPs.find((ip) => familyOfIP(ip) === family)!;
  const backends = new Set(rsp.endpoints.map((e) => e.ip));
  // A client that is not itself a backend, so every request crosses the service.
  const from = allPods(t).find((p) => !backends.has(opts.ipv6 ? p.ip6! : p.ip));
  if (!from) throw new LabError(`every lab pod is a backend of ${want}; no client left`);
  const url = `http://${opts.ipv6 ? `[${vip}]` : vip}:${rsp.port.port}/`;
  const n = opts.requests ?? 100;
  opts.progress?.(
    `${from.name}: ${n} requests on one connection, then ${n} connections, to ${url}`,
  );
  const text = sh(inNs(from.ns, ['sh', '-c', clientScript(url, n)]), { timeoutMs: 120_000 });
  const report = { from: from.name, url, ...tally(text) };
  printReport(out, report, n);
  return report;
}

function printReport(out: (s: string) => void, r: LongConnectionsReport, n: number): void {
  const pods = [...new Set([...Object.keys(r.keepAlive), ...Object.keys(r.newConnections)])].sort();
  out(`${r.from} -> ${r.url}`);
  out(
    `${'backend'.padEnd(10)} ${`1 connection x ${n}`.padStart(20)} ${`${n} connections`.padStart(18)}`,
  );
  for (const p of pods) {
    out(
      `${p.padEnd(10)} ${String(r.keepAlive[p] ?? 0).padStart(20)} ${String(r.newConnections[p] ?? 0).padStart(18)}`,
    );
  }
  out('');
  out(
    r.keepAliveSockets === 1
      ? 'One connection: the backend is picked once, at the first packet, and conntrack keeps it;'
      : `(the keep-alive client used ${r.keepAliveSockets} connections)`,
  );
  out('new connections: each is a new flow and a new pick. L4 balances connections, not requests.');
}

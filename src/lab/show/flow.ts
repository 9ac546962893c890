// `lab show --flow pod-a→web`: the path one new connection takes through the lab, hop by hop,
// with its addresses before and after each hop — what kube-proxy's rules (or kubetun, which
// must do the same) do to it: DNAT to an endpoint, masquerade where kube-proxy masquerades, drop
// where it drops. Worked out from the control plane's view (the same resolved service ports the
// data planes load) and kube-proxy's endpoint selection (src/endpoints/select.ts), not asked of
// a running agent: the picture holds for every data plane mode.
//
//   pod → ClusterIP        DNAT on the pod's node; masquerade to the node's gateway when the
//                          endpoint is the client itself (hairpin)
//   pod/client → NodePort, DNAT on the node addressed (LB and external IPs: the node the client
//   LB or external IP      routes them to, node 1 here); externalTrafficPolicy Cluster
//                          masquerades (to the gateway when the endpoint is local, else the node
//                          IP); Local keeps the client address and, from outside, drops when the
//                          node has no ready local endpoint; loadBalancerSourceRanges drop others
//   pod/client → pod       routed, no translation
import { UsageError } from '../../errors.ts';
import { selectPortEndpoints } from '../../endpoints/select.ts';
import { ipInCidr } from '../../manifests/ip.ts';
import { familyOfIP, type ResolvedEndpoint, type ResolvedServicePort } from '../../model.ts';
import type { DrawNode, LabDrawing } from './model.ts';

/** Where a hop happens, by drawing element. */
export interface HopAt {
  kind: 'pod' | 'node' | 'client' | 'underlay';
  name: string;
}

export interface Hop {
  at: HopAt;
  /** what happens here, e.g. "DNAT (kubetun on node1)" or "routed via eth0" */
  what: string;
  before: string;
  after: string;
}

export interface FlowPath {
  spec: string;
  /** the sentence under the drawing: which endpoint was drawn and why */
  summary: string;
  hops: Hop[];
  verdict: 'delivered' | 'dropped' | 'refused';
}

interface Tuple {
  src: string;
  sport: string;
  dst: string;
  dport: number;
  proto: string;
}

const fmt = (t: Tuple) => `${t.src}:${t.sport} → ${t.dst}:${t.dport} ${t.proto}`;

/** The flow syntax: SRC→DST[:PORT|/PROTO][@ENDPOINT-POD]; "->" works as the arrow too. */
export function parseFlowSpec(spec: string): {
  from: string;
  to: string;
  port?: number;
  proto?: string;
  via?: string;
} {
  const m =
    /^\s*([^\s→>-][^\s→]*?)\s*(?:→|->)\s*([^@\s:/]+)(?::(\d+))?(?:\/(tcp|udp))?(?:@(\S+))?\s*$/i.exec(
      spec,
    );
  if (!m)
    throw new UsageError(
      `--flow "${spec}": expected SOURCE→DESTINATION, e.g. pod-a→web, client→web-np:30080, pod-d→web@pod-c`,
    );
  return {
    from: m[1]!,
    to: m[2]!,
    port: m[3] ? Number(m[3]) : undefined,
    proto: m[4]?.toUpperCase(),
    via: m[5],
  };
}

/** Who translates on a node, in the words of the lab's mode. */
function translator(mode: string, node: string): string {
  if (mode === 'kubetun') return `kubetun on ${node}`;
  if (mode === 'iptables' || mode === 'nftables') return `kube-proxy ${mode} rules on ${node}`;
  return `the data plane on ${node}`;
}

export function traceFlow(
  d: LabDrawing,
  ports: readonly ResolvedServicePort[],
  spec: string,
): FlowPath {
  const f = parseFlowSpec(spec);
  const pod = d.pods.find((p) => p.name === f.from);
  const client = d.clients.find((c) => c.name === f.from);
  if (!pod && !client)
    throw new UsageError(
      `--flow: no pod or client named "${f.from}" (known: ${[...d.pods, ...d.clients].map((x) => x.name).join(', ')})`,
    );
  const path = new PathBuilder(d, spec);
  const srcIp = (pod ?? client)!.ip;
  const send = (t: Tuple) =>
    pod
      ? path.hop(
          { kind: 'pod', name: pod.name },
          `${pod.name} sends it over its veth to ${pod.node}`,
          t,
        )
      : path.hop(
          { kind: 'client', name: client!.name },
          `${client!.name} sends it out of ${client!.uplink}`,
          t,
        );
  const direct = d.pods.find((p) => p.name === f.to);
  if (direct) {
    const t = {
      src: srcIp,
      sport: 'eph',
      dst: direct.ip,
      dport: f.port ?? 8080,
      proto: f.proto ?? 'TCP',
    };
    send(t);
    path.travel(pod?.node, direct.node, t);
    path.deliver(direct.name, direct.node, pod?.node === direct.node, t);
    return path.done(`${f.from} to ${direct.name} directly: routed, no translation`, 'delivered');
  }
  const r = findPort(ports, d, f);
  const svc = r.service;
  const t: Tuple = {
    src: srcIp,
    sport: 'eph',
    dst: r.entry.ip,
    dport: r.entry.port,
    proto: r.port.protocol,
  };
  const entry = d.nodes.find((n) => n.name === (r.entry.node ?? pod?.node)) ?? d.nodes[0]!;
  const name = `${svc.name} ${r.entry.ip}:${r.entry.port}/${r.port.protocol}`;
  send(t);
  path.travel(pod?.node, entry.name, t);
  const external = r.entry.kind !== 'clusterIP';
  const local = external && svc.externalTrafficPolicy === 'Local';
  // kube-proxy: an external client of a Local service reaches only this node's endpoints; a
  // pod's traffic to it is short-circuited to every endpoint.
  const sel = selectPortEndpoints(r, { nodeName: entry.name });
  const eligible = local && client ? sel.local : sel.cluster;
  // the ranges of the client's family: kube-proxy's proxier of that family sees no others
  const ranges = svc.loadBalancerSourceRanges.filter((c) => familyOfIP(c) === familyOfIP(srcIp));
  const denied =
    r.entry.kind === 'lb' && ranges.length > 0 && !ranges.some((c) => ipInCidr(srcIp, c));
  const who = translator(d.mode, entry.name);
  if (denied || eligible.length === 0) {
    const why = denied
      ? `${srcIp} is outside loadBalancerSourceRanges ${ranges.join(', ')}: dropped`
      : local && client
        ? `externalTrafficPolicy Local and ${entry.name} has no ready local endpoint: dropped`
        : `no endpoints: rejected (ICMP port unreachable to ${srcIp})`;
    path.hop(
      { kind: 'node', name: entry.name },
      `${who}: ${why}`,
      t,
      null,
      denied || local ? '(dropped)' : '(rejected)',
    );
    return path.done(`${f.from} to ${name}: ${why}`, denied || local ? 'dropped' : 'refused');
  }
  const ep = f.via
    ? eligible.find((e) => nameOf(d, e) === f.via)
    : pick(d, eligible, srcIp, entry.name);
  if (!ep)
    throw new UsageError(
      `--flow: ${f.via} is not an eligible endpoint of ${svc.name} (eligible: ${eligible.map((e) => nameOf(d, e)).join(', ')})`,
    );
  const epNode = d.pods.find((p) => p.ip === ep.ip)?.node ?? ep.nodeName ?? entry.name;
  const after: Tuple = { ...t, dst: ep.ip, dport: ep.port };
  const hairpin = ep.ip === srcIp;
  const notes = ['DNAT'];
  if (hairpin || (external && !local)) {
    // MASQUERADE takes the address of the interface the packet leaves by.
    after.src = epNode === entry.name ? entry.gateway : entry.ip;
    if (external) after.sport = 'snat-port';
    notes.push(
      `masquerade to ${after.src}${hairpin ? ' (hairpin: the endpoint is the client)' : ''}`,
    );
  }
  path.hop({ kind: 'node', name: entry.name }, `${who}: ${notes.join(' + ')}`, t, after);
  path.travel(entry.name, epNode, after);
  path.deliver(nameOf(d, ep), epNode, epNode === entry.name, after);
  const others =
    eligible.length > 1
      ? `; one of ${eligible.length} eligible endpoints (${eligible.map((e) => nameOf(d, e)).join(', ')}), chosen per connection`
      : '';
  return path.done(
    `${f.from} to ${name}, drawn to ${nameOf(d, ep)} on ${epNode}${others}`,
    'delivered',
  );
}

/** Collects hops; travel() adds the underlay and the arriving node, deliver() the last leg. */
class PathBuilder {
  private readonly hops: Hop[] = [];
  constructor(
    private readonly d: LabDrawing,
    private readonly spec: string,
  ) {}

  hop(at: HopAt, what: string, before: Tuple, after: Tuple | null = before, end = ''): void {
    this.hops.push({ at, what, before: fmt(before), after: after ? fmt(after) : end });
  }

  /** from undefined: an external client, already on the underlay */
  travel(from: string | undefined, to: string, t: Tuple): void {
    if (from === to) return;
    const dst = this.d.nodes.find((n) => n.name === to)!;
    if (from) this.hop({ kind: 'node', name: from }, `${from} routes it out of its uplink`, t);
    const how = from ? `host-gw route via ${dst.ip}` : `to ${dst.name} ${dst.ip}`;
    this.hop({ kind: 'underlay', name: 'underlay' }, `underlay bridge: ${how}`, t);
  }

  deliver(pod: string, node: string, sameNode: boolean, t: Tuple): void {
    if (!sameNode) this.hop({ kind: 'node', name: node }, `${node} routes it to ${pod}'s veth`, t);
    this.hop({ kind: 'pod', name: pod }, `${pod} receives it`, t);
  }

  done(summary: string, verdict: FlowPath['verdict']): FlowPath {
    return { spec: this.spec, summary, hops: this.hops, verdict };
  }
}

function nameOf(d: LabDrawing, e: ResolvedEndpoint): string {
  return d.pods.find((p) => p.ip === e.ip)?.name ?? e.targetName ?? e.ip;
}

/**
 * Deterministic for a picture, and the most telling path: an endpoint on another node than the
 * one translating, else one that is not the client itself, else the first.
 */
function pick(d: LabDrawing, eps: ResolvedEndpoint[], src: string, node: string): ResolvedEndpoint {
  const nodeOf = (e: ResolvedEndpoint) => d.pods.find((p) => p.ip === e.ip)?.node ?? e.nodeName;
  return eps.find((e) => nodeOf(e) !== node) ?? eps.find((e) => e.ip !== src) ?? eps[0]!;
}

interface Entry {
  kind: 'clusterIP' | 'nodePort' | 'lb' | 'external';
  ip: string;
  port: number;
  /** the node the packet enters at (NodePort: the node addressed; LB/external: node 1) */
  node?: string;
}

/** The Service port and the address the flow uses: a pod's ClusterIP first, a client's way in. */
function findPort(
  ports: readonly ResolvedServicePort[],
  d: LabDrawing,
  f: ReturnType<typeof parseFlowSpec>,
): ResolvedServicePort & { entry: Entry } {
  // The destination may be an address (to pick the node of a NodePort): any of the Service's.
  const byIp = /^\d+\.\d+\.\d+\.\d+$/.test(f.to);
  const mine = ports.filter(
    (r) => byIp || r.service.name === f.to || `${r.service.namespace}/${r.service.name}` === f.to,
  );
  if (mine.length === 0)
    throw new UsageError(
      `--flow: no pod or Service named "${f.to}" (Services: ${[...new Set(ports.map((r) => r.service.name))].join(', ')})`,
    );
  const fromClient = d.clients.some((c) => c.name === f.from);
  for (const r of mine) {
    if (f.proto && r.port.protocol !== f.proto) continue;
    const s = r.service;
    const cluster: Entry = { kind: 'clusterIP', ip: s.clusterIPs[0] ?? '', port: r.port.port };
    const node0 = d.nodes[0]!.name;
    const outside: Entry[] = [
      ...s.loadBalancerIPs.map((ip) => ({
        kind: 'lb' as const,
        ip,
        port: r.port.port,
        node: node0,
      })),
      ...s.externalIPs.map((ip) => ({
        kind: 'external' as const,
        ip,
        port: r.port.port,
        node: node0,
      })),
      ...(r.port.nodePort ? d.nodes.map((n) => nodePortEntry(n, r.port.nodePort)) : []),
    ];
    // From outside, a Local service is drawn through a node that has a local endpoint.
    if (fromClient && s.externalTrafficPolicy === 'Local')
      outside.sort((a, b) => Number(hasLocal(r, b.node)) - Number(hasLocal(r, a.node)));
    const cands = fromClient ? [...outside, cluster] : [cluster, ...outside];
    const hit = cands.find(
      (c) => (f.port === undefined || c.port === f.port) && (!byIp || c.ip === f.to),
    );
    if (hit) return { ...r, entry: hit };
  }
  if (byIp)
    throw new UsageError(`--flow: no Service answers on ${f.to}${f.port ? `:${f.port}` : ''}`);
  const list = mine.map(
    (r) => `${r.port.port}${r.port.nodePort ? `:${r.port.nodePort}` : ''}/${r.port.protocol}`,
  );
  throw new UsageError(`--flow: ${f.to} has no such port (ports: ${list.join(', ')})`);
}

function hasLocal(r: ResolvedServicePort, node: string | undefined): boolean {
  return r.endpoints.some((e) => e.ready && e.nodeName === node);
}

function nodePortEntry(n: DrawNode, nodePort: number): Entry {
  return { kind: 'nodePort', ip: n.ip, port: nodePort, node: n.name };
}

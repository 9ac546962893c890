// `kubetun lab demo nodeport`: the external client curls a NodePort and tcpdump shows the
// addresses at every hop — on the client's link, on the entry node's uplink, and on the
// backend pod's veth — first with externalTrafficPolicy Cluster (web-np :30080, through the
// node that does not host the chosen backend: DNAT and MASQUERADE), then with Local
// (web-local :30081: only the node with endpoints serves, and the pod sees the client's IP).
//
//   client ──▶ node1:30080 ─DNAT+SNAT─▶ uplink ──▶ node2 ──▶ pod-d:8080   (src node1:snatPort)
//   client ◀── node1:30080 ◀─revSNAT── uplink ◀── node2 ◀── pod-d:8080
//   client ──▶ node2:30081 ─DNAT─▶ pod-d:8080 (src client, kept)    node1:30081 ─▶ dropped
//
// With --ipv6 (-6), on a dual-stack lab: the same over IPv6, `curl -6` to the NodePorts on the
// nodes' IPv6 addresses (the same ports of the same dual-stack Services), masqueraded to the
// node's IPv6 address with policy Cluster, the client's IPv6 address kept with Local.
import { writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadManifests, resolveServicePorts } from '../../manifests/index.ts';
import type { IPFamily, ResolvedServicePort } from '../../model.ts';
import type { Progress } from '../lab.ts';
import { readLog, startInNs, stopProcess, waitForLog } from '../procs.ts';
import { LabError } from '../error.ts';
import { inNs, shTry } from '../../sh.ts';
import { LOG_DIR, type LabProcess, type LabState, VIEW_DIR } from '../state.ts';
import { allPods, type LabNode, type LabPod, loadTopology, type Topology } from '../topology.ts';
import { requireIpv6, withLabMode } from './ensure-lab.ts';

export interface HopCapture {
  where: string;
  lines: string[];
}

export interface NodePortRun {
  policy: 'Cluster' | 'Local';
  family: IPFamily;
  url: string;
  entry: LabNode;
  /** the pod that answered and the source address it saw (empty when the curl failed) */
  backend?: LabPod;
  peerSeen: string;
  curlExit: number;
  hops: HopCapture[];
}

export interface NodePortReport {
  cluster: NodePortRun;
  local: NodePortRun;
  /** Local through the node without endpoints: the curl fails (dropped) */
  localOther: NodePortRun;
}

export interface NodePortDemoOptions {
  topology?: string;
  progress?: Progress;
  out?: (s: string) => void;
  /** over IPv6: the NodePorts on the nodes' IPv6 addresses (a dual-stack lab) */
  ipv6?: boolean;
}

const MAX_TRIES = 12;

export async function nodePortDemo(opts: NodePortDemoOptions = {}): Promise<NodePortReport> {
  const out = opts.out ?? ((s: string) => process.stdout.write(`${s}\n`));
  const family: IPFamily = opts.ipv6 ? 'IPv6' : 'IPv4';
  return withLabMode(opts.topology, 'kubetun', opts.progress, (state) =>
    nodePortDemoIn(state, family, out),
  );
}

async function nodePortDemoIn(
  state: LabState,
  family: IPFamily,
  out: (s: string) => void,
): Promise<NodePortReport> {
  const t = loadTopology(state.topologyFile);
  if (family === 'IPv6') requireIpv6(t, 'nodeport');
  const ports = resolveServicePorts(loadManifests(VIEW_DIR), { family });
  const cl = findNodePort(ports, 'Cluster', family);
  const lo = findNodePort(ports, 'Local', family);
  const homes = (r: ResolvedServicePort) => new Set(r.endpoints.map((e) => e.nodeName));
  // Cluster: enter through node1 and retry until the backend chosen sits on another node.
  const entry = t.nodes[0]!;
  const hop = (policy: 'Cluster' | 'Local', at: LabNode, nodePort: number) => ({
    t,
    policy,
    family,
    entry: at,
    nodePort,
  });
  const cluster = await runHop(
    hop('Cluster', entry, cl.port.nodePort),
    (r) => r.backend?.node !== entry.name,
  );
  const localHome = t.nodes.find((n) => homes(lo).has(n.name)) ?? t.nodes[0]!;
  const localAway = t.nodes.find((n) => !homes(lo).has(n.name));
  const local = await runHop(hop('Local', localHome, lo.port.nodePort), () => true);
  const localOther = localAway
    ? await runHop(hop('Local', localAway, lo.port.nodePort), () => true, 1)
    : local;
  const report = { cluster, local, localOther };
  printReport(out, t, report);
  return report;
}

function findNodePort(
  ports: ResolvedServicePort[],
  policy: 'Cluster' | 'Local',
  family: IPFamily,
): ResolvedServicePort {
  // NodePort services first; a LoadBalancer's node ports serve the same way (web-local is one:
  // the apiserver gives healthCheckNodePort only to LoadBalancers with policy Local)
  const candidates = ports.filter(
    (p) =>
      p.port.protocol === 'TCP' &&
      p.port.nodePort > 0 &&
      (p.service.type === 'NodePort' || p.service.type === 'LoadBalancer') &&
      p.service.externalTrafficPolicy === policy &&
      p.endpoints.length > 0,
  );
  const r = candidates.find((p) => p.service.type === 'NodePort') ?? candidates[0];
  if (!r)
    throw new LabError(
      `the lab manifests have no ${family === 'IPv6' ? 'dual-stack ' : ''}TCP NodePort service with policy ${policy}`,
    );
  return r;
}

/** One NodePort curl: the policy, the address family, the node entered and its port. */
interface Hop {
  t: Topology;
  policy: 'Cluster' | 'Local';
  family: IPFamily;
  entry: LabNode;
  nodePort: number;
}

/** A host's address of the family (its IPv6 one on a dual-stack lab). */
function addressOf(h: { ip: string; ip6?: string }, family: IPFamily): string {
  return family === 'IPv6' ? h.ip6! : h.ip;
}

async function runHop(
  h: Hop,
  done: (r: NodePortRun) => boolean,
  tries = MAX_TRIES,
): Promise<NodePortRun> {
  const { t, policy, family, entry, nodePort } = h;
  const client = t.clients[0]!;
  const v6 = family === 'IPv6';
  const url = `http://${v6 ? `[${entry.ip6}]` : entry.ip}:${nodePort}/whoami`;
  const curl = ['curl', ...(v6 ? ['-6'] : []), '-sS', '-m', '2'];
  const caps = await startCaptures(t, entry, nodePort);
  let run: NodePortRun = { policy, family, url, entry, peerSeen: '', curlExit: -1, hops: [] };
  let lport = 0;
  for (let k = 0; k < tries; k++) {
    const r = shTry(inNs(client.ns, [...curl, '-w', '\n%{local_port}', url]));
    const lines = r.out.trimEnd().split('\n');
    lport = Number(lines.pop()) || 0;
    const [pod, , peer] = (lines[0] ?? '').split(' ');
    const backend = allPods(t).find((p) => p.name === pod);
    run = { ...run, backend, peerSeen: peer ?? '', curlExit: r.status };
    if (done(run)) break;
  }
  await sleep(300); // tcpdump prints the last packets
  await Promise.all(caps.map((c) => stopProcess(c.proc, 1000)));
  run.hops = caps.map((c) => ({
    where: c.where,
    lines: flowLines(readLog(c.proc.log), lport, run),
  }));
  return run;
}

interface Cap {
  where: string;
  pod?: LabPod;
  proc: LabProcess;
}

/** tcpdump on the client's link, the entry node's uplink, and every pod's veth (filtered later). */
async function startCaptures(t: Topology, entry: LabNode, nodePort: number): Promise<Cap[]> {
  const client = t.clients[0]!;
  const http = t.httpPort;
  const points: { where: string; ns: string; dev: string; filter: string; pod?: LabPod }[] = [
    {
      where: `client ${client.name} ${client.uplink}`,
      ns: client.ns,
      dev: client.uplink,
      filter: `tcp port ${nodePort}`,
    },
    {
      where: `${entry.name} uplink ${entry.uplink}`,
      ns: entry.ns,
      dev: entry.uplink,
      filter: `tcp and (port ${nodePort} or port ${http})`,
    },
    ...allPods(t).map((p) => ({
      where: `${p.node} ${p.hostIf} (${p.name})`,
      ns: t.nodes.find((n) => n.name === p.node)!.ns,
      dev: p.hostIf,
      filter: `tcp port ${http}`,
      pod: p,
    })),
  ];
  const caps = points.map((p, k) => {
    const log = `${LOG_DIR}/demo-nodeport-${k}.log`;
    writeFileSync(log, '');
    const argv = ['tcpdump', '--immediate-mode', '-n', '-l', '-i', p.dev, p.filter];
    return { where: p.where, pod: p.pod, proc: startInNs('capture', `np${k}`, p.ns, argv, log) };
  });
  try {
    await Promise.all(caps.map((c) => waitForLog(c.proc, /listening on/, 10_000)));
  } catch (err) {
    await Promise.all(caps.map((c) => stopProcess(c.proc, 500)));
    throw err;
  }
  return caps;
}

/**
 * The handshake of the last curl at one capture point: SYN and SYN-ACK lines that belong to
 * it (the client's port, or the masqueraded source the backend saw).
 */
function flowLines(log: string, lport: number, run: NodePortRun): string[] {
  // tcpdump: "IP a.port > b.port: ..." (IPv6: "IP6 ...")
  const pkts = log.split('\n').filter((l) => / IP6? /.test(l) && /Flags \[S\.?\]/.test(l));
  const peer = run.peerSeen;
  const pod = run.backend ? addressOf(run.backend, run.family) : '';
  const natPort = natPortOf(pkts, peer, pod);
  return pkts
    .filter(
      (l) =>
        l.includes(`.${lport} `) ||
        l.includes(`.${lport}:`) ||
        (natPort !== '' &&
          (l.includes(`${peer}.${natPort} `) || l.includes(`${peer}.${natPort}:`))),
    )
    .map((l) =>
      l
        .replace(/, win \d+/, '')
        .replace(/, options \[[^\]]*\]/, '')
        .replace(/, length 0$/, ''),
    );
}

function natPortOf(pkts: string[], peer: string, pod: string): string {
  if (!peer || !pod) return '';
  const re = new RegExp(
    `IP6? ${peer.replace(/\./g, '\\.')}\\.(\\d+) > ${pod.replace(/\./g, '\\.')}\\.\\d+: Flags \\[S\\]`,
  );
  for (const l of pkts) {
    const m = re.exec(l);
    if (m) return m[1]!;
  }
  return '';
}

function printReport(out: (s: string) => void, t: Topology, r: NodePortReport): void {
  const c = t.clients[0]!;
  const v6 = r.cluster.family === 'IPv6';
  out(
    `NodePort demo${v6 ? ' over IPv6' : ''}: external client ${c.name} ${addressOf(c, r.cluster.family)}`,
  );
  printRun(
    out,
    r.cluster,
    'kube-proxy masquerades NodePort traffic with policy Cluster: the pod answers the node, the node answers the client',
  );
  printRun(
    out,
    r.local,
    "policy Local: only this node's endpoints, no SNAT: the pod sees the client itself",
  );
  if (r.localOther !== r.local) {
    printRun(
      out,
      r.localOther,
      'policy Local through a node without endpoints: dropped (DROP_ETP_NO_LOCAL_ENDPOINTS); a load balancer checks the health-check node port and skips this node',
    );
  }
}

function printRun(out: (s: string) => void, r: NodePortRun, why: string): void {
  out('');
  out(`== externalTrafficPolicy ${r.policy}: $ curl ${r.family === 'IPv6' ? '-6 ' : ''}${r.url}`);
  out(
    r.backend
      ? `   answered by ${r.backend.name} ${addressOf(r.backend, r.family)} on ${r.backend.node}; the pod saw the source ${r.peerSeen}`
      : `   no answer (curl exit ${r.curlExit})`,
  );
  for (const h of r.hops) {
    if (h.lines.length === 0) continue;
    out(`   tcpdump on ${h.where}:`);
    for (const l of h.lines.slice(0, 4)) out(`     ${l}`);
  }
  out(`   ${why}`);
}

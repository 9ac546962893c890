// `kubetun lab demo curl-vs-ping`: "curl works, ping doesn't" on a ClusterIP, with the evidence
// beside it — kubetun's conntrack entry for the curl (or, with --mode iptables, the kernel's
// entry and the kube-proxy nat rules the SYN walked), tcpdump on both pods' veths (VIP on the
// client side, pod IP on the backend side), and the counter of dropped echoes.
//
//   pod-d ──veth-pod-d──▶ node2 kubetun: SYN to 10.96.0.10:80 matches a service → DNAT → pod-c
//   pod-d ──veth-pod-d──▶ node2 kubetun: ICMP echo to 10.96.0.10 matches nothing → dropped
//
// On a dual-stack lab (a topology with an ipv6 block) the same client then does it over IPv6:
// `curl -6` to a dual-stack Service's IPv6 ClusterIP (web-dual fd00:10:96::10) answers from a
// pod's IPv6 address, `ping -6` to it gets no echo reply — in kubetun's and the kernel's modes.
import { mkdirSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { DROP_ECHO_TO_VIP, REASON_NAMES } from '../../datapath/state/reasons.ts';
import { labCtl } from '../ctl.ts';
import type { Progress } from '../lab.ts';
import { type LabService, readLabServices } from '../manifests.ts';
import { readLog, startInNs, stopProcess, waitForLog } from '../procs.ts';
import { LabError } from '../error.ts';
import { inNs, shTry } from '../../sh.ts';
import { LOG_DIR, type LabProcess, type LabState, VIEW_DIR } from '../state.ts';
import { allPods, type LabPod, loadTopology, type Topology } from '../topology.ts';
import { withLabMode } from './ensure-lab.ts';
import { kernelEvidence, printKernelEvidence } from './kernel-evidence.ts';

export const ECHO_DROP_REASON = REASON_NAMES[DROP_ECHO_TO_VIP]!;

export interface CtTuple {
  src: string;
  dst: string;
  sport: number;
  dport: number;
}

export interface CtEntry {
  proto: string | number;
  state: string | number;
  expiresInSec: number;
  orig: CtTuple;
  reply: CtTuple;
  backendId: number;
  packets: number;
  bytes: number;
}

export type DemoMode = 'kubetun' | 'iptables' | 'nftables';

export interface CurlVsPingReport {
  mode: DemoMode;
  client: LabPod;
  vip: string;
  port: number;
  /** HTTP status of the curl to the VIP (0 if it failed) */
  vipHttpCode: number;
  /** the pod that answered, from its reply body */
  backend?: LabPod;
  vipPingReceived: number;
  vipPingSent: number;
  directHttpCode: number;
  directPingReceived: number;
  clientCapture: string[];
  backendCapture: string[];
  /** kubetun: its conntrack entry for the curl and its dropped-echo counter */
  ct?: CtEntry;
  echoDrops?: { before: number; after: number };
  /** iptables: the kernel's conntrack lines for the curl, the nat rules the SYN walked, and
   * the nat rules that could match ICMP to the VIP (none) */
  kernelCt?: string[];
  natPath?: string[];
  natIcmpRules?: string[];
  /** iptables: the VIP's nat rules with their packet/byte counters */
  natCounters?: string[];
  /** a dual-stack lab: the same curl and ping over IPv6, to a dual-stack Service's IPv6 VIP */
  ipv6?: CurlVsPing6;
}

export interface CurlVsPing6 {
  service: string;
  vip: string;
  port: number;
  httpCode: number;
  /** the pod that answered, and the address it answered from (its IPv6 one) */
  backend?: LabPod;
  body: string;
  pingSent: number;
  pingReceived: number;
  pingSummary: string;
  curlError: string;
}

const PINGS = 3;

export interface CurlVsPingOptions {
  topology?: string;
  /** whose data plane to show: kubetun's (default) or the kernel's with kube-proxy's rules */
  mode?: DemoMode;
  progress?: Progress;
  out?: (s: string) => void;
}

export async function curlVsPing(opts: CurlVsPingOptions = {}): Promise<CurlVsPingReport> {
  const out = opts.out ?? ((s: string) => process.stdout.write(`${s}\n`));
  const mode = opts.mode ?? 'kubetun';
  return withLabMode(opts.topology, mode, opts.progress, (state) => curlVsPingIn(state, out, mode));
}

async function curlVsPingIn(
  state: LabState,
  out: (s: string) => void,
  mode: NonNullable<CurlVsPingOptions['mode']>,
): Promise<CurlVsPingReport> {
  const t = loadTopology(state.topologyFile);
  const svc = pickService(readLabServices(VIEW_DIR));
  const port = svc.ports.find((p) => p.protocol === 'TCP')!;
  const backendIps = new Set(port.endpoints.map((e) => e.ip));
  const client = allPods(t).find((p) => !backendIps.has(p.ip)) ?? allPods(t)[0]!;
  const node = t.nodes.find((n) => n.name === client.node)!;
  const sock = state.processes.find((p) => p.role === 'kubetun' && p.name === node.name)?.ctlSocket;
  if (mode === 'kubetun' && !sock)
    throw new LabError(`no kubetun control socket recorded for ${node.name}`);
  const backends = allPods(t).filter((p) => backendIps.has(p.ip));

  const caps = await startCaptures(t, client, backends);
  const dropsBefore = sock ? await echoDrops(sock) : 0;
  const vipCurl = curl(client, `http://${svc.clusterIP}:${port.port}/`);
  const backend = allPods(t).find((p) => vipCurl.body.startsWith(`${p.name} `));
  const evidence: Partial<CurlVsPingReport> = {};
  if (sock && vipCurl.localPort)
    evidence.ct = await findCt(sock, client.ip, vipCurl.localPort, svc.clusterIP);
  if (mode !== 'kubetun') {
    const flow = { src: client.ip, sport: vipCurl.localPort, vip: svc.clusterIP, port: port.port };
    Object.assign(evidence, kernelEvidence(mode, node.ns, { ...flow, backendIp: backend?.ip }));
  }
  const vipPing = ping(client, svc.clusterIP);
  if (sock) evidence.echoDrops = { before: dropsBefore, after: await echoDrops(sock) };
  await captureCaughtUp(caps.get(client.name)!, svc.clusterIP, vipPing.sent);
  await Promise.all([...caps.values()].map((c) => stopProcess(c, 1000)));
  const direct = backend ?? backends[0]!;
  const directCurl = curl(client, `http://${direct.ip}:${t.httpPort}/`);
  const directPing = ping(client, direct.ip);
  if (t.ipv6) evidence.ipv6 = overIpv6(t, client);

  const report: CurlVsPingReport = {
    mode,
    client,
    vip: svc.clusterIP,
    port: port.port,
    vipHttpCode: vipCurl.code,
    backend,
    vipPingReceived: vipPing.received,
    vipPingSent: vipPing.sent,
    directHttpCode: directCurl.code,
    directPingReceived: directPing.received,
    clientCapture: packetLines(caps.get(client.name)!),
    backendCapture: backend ? packetLines(caps.get(backend.name)!) : [],
    ...evidence,
  };
  printReport(out, t, svc, report, { vipCurl, vipPing, directCurl, directPing, direct });
  return report;
}

function pickService(services: LabService[], prefer = 'web', family = 'IPv4'): LabService {
  const withEndpoints = services.filter((s) =>
    s.ports.some((p) => p.protocol === 'TCP' && p.endpoints.length > 0),
  );
  const svc = withEndpoints.find((s) => s.name === prefer) ?? withEndpoints[0];
  if (!svc)
    throw new LabError(`the lab manifests have no ${family} TCP service with endpoints to curl`);
  return svc;
}

/** `curl -6` and `ping -6` from the client to a dual-stack Service's IPv6 ClusterIP. */
function overIpv6(t: Topology, client: LabPod): CurlVsPing6 {
  const svc = pickService(readLabServices(VIEW_DIR, 'IPv6'), 'web-dual', 'IPv6');
  const port = svc.ports.find((p) => p.protocol === 'TCP')!;
  const c = curl(client, `http://[${svc.clusterIP}]:${port.port}/`, '-6');
  const p = ping(client, svc.clusterIP, '-6');
  return {
    service: `${svc.namespace}/${svc.name}`,
    vip: svc.clusterIP,
    port: port.port,
    httpCode: c.code,
    backend: allPods(t).find((x) => c.body.startsWith(`${x.name} `)),
    body: c.body.trim(),
    pingSent: p.sent,
    pingReceived: p.received,
    pingSummary: p.summary,
    curlError: c.code === 200 ? '' : `curl exit ${c.exit}: ${c.err}`,
  };
}

/** tcpdump on the node-side veth of the client and of every possible backend. */
async function startCaptures(
  t: Topology,
  client: LabPod,
  backends: LabPod[],
): Promise<Map<string, LabProcess>> {
  const caps = new Map<string, LabProcess>();
  mkdirSync(LOG_DIR, { recursive: true });
  for (const p of [client, ...backends]) {
    if (caps.has(p.name)) continue;
    const node = t.nodes.find((n) => n.name === p.node)!;
    const filter =
      p === client ? `host ${client.ip} and (tcp or icmp)` : `tcp and host ${client.ip}`;
    // --immediate-mode: without it TPACKET_V3 holds packets up to a second, and the last ones
    // would be lost when the capture is stopped right after the pings.
    const argv = ['tcpdump', '--immediate-mode', '-n', '-l', '-i', p.hostIf, filter];
    const log = `${LOG_DIR}/demo-tcpdump-${p.hostIf}.log`;
    writeFileSync(log, ''); // this run's packets only
    caps.set(p.name, startInNs('capture', p.name, node.ns, argv, log));
  }
  try {
    await Promise.all([...caps.values()].map((c) => waitForLog(c, /listening on/, 10_000)));
  } catch (err) {
    await Promise.all([...caps.values()].map((c) => stopProcess(c, 500)));
    throw err;
  }
  return caps;
}

/** Waits (up to 2 s) until tcpdump has printed the last ping, so stopping it loses nothing. */
async function captureCaughtUp(cap: LabProcess, vip: string, pings: number): Promise<void> {
  const echo = `> ${vip}: ICMP echo request`;
  for (let waited = 0; waited < 2000; waited += 20) {
    if (readLog(cap.log).split(echo).length - 1 >= pings) break;
    await sleep(20);
  }
  await sleep(50); // the other captures saw their last packets before this one's last ping
}

/** tcpdump's packet lines, without TCP options and window (noise for this story). */
function packetLines(cap: LabProcess): string[] {
  return readLog(cap.log)
    .split('\n')
    .filter((l) => / IP /.test(l))
    .map((l) => l.replace(/, win \d+/, '').replace(/, options \[[^\]]*\]/, ''));
}

interface CurlResult {
  code: number;
  body: string;
  localPort: number;
  exit: number;
  err: string;
}

function curl(pod: LabPod, url: string, family?: '-6'): CurlResult {
  const r = shTry(
    inNs(pod.ns, [
      'curl',
      ...(family ? [family] : []),
      '-sS',
      '-m',
      '5',
      '-w',
      '\n%{http_code} %{local_port}',
      url,
    ]),
  );
  const lines = r.out.trimEnd().split('\n');
  const [code, lport] = (lines.pop() ?? '').split(' ');
  return {
    code: Number(code) || 0,
    body: lines.join('\n'),
    localPort: Number(lport) || 0,
    exit: r.status,
    err: r.err.trim(),
  };
}

function ping(
  pod: LabPod,
  ip: string,
  family?: '-6',
): { sent: number; received: number; summary: string } {
  const argv = ['ping', ...(family ? [family] : []), '-n', '-c', String(PINGS), '-i', '0.2'];
  const r = shTry(inNs(pod.ns, [...argv, '-W', '1', ip]));
  const summary = r.out.split('\n').find((l) => /packets transmitted/.test(l)) ?? r.err.trim();
  const m = /(\d+) packets transmitted, (\d+) received/.exec(summary);
  return { sent: Number(m?.[1] ?? 0), received: Number(m?.[2] ?? 0), summary };
}

async function echoDrops(sock: string): Promise<number> {
  const r = await labCtl<{ counters: Record<string, number> }>(sock, { cmd: 'counters' });
  return r.counters?.[ECHO_DROP_REASON] ?? 0;
}

async function findCt(
  sock: string,
  src: string,
  sport: number,
  vip: string,
): Promise<CtEntry | undefined> {
  const r = await labCtl<{ entries: CtEntry[] }>(sock, { cmd: 'ct' });
  return (r.entries ?? []).find(
    (e) => e.orig.src === src && e.orig.sport === sport && e.orig.dst === vip,
  );
}

interface Raw {
  vipCurl: CurlResult;
  vipPing: { summary: string };
  directCurl: CurlResult;
  directPing: { summary: string };
  direct: LabPod;
}

function printReport(
  out: (s: string) => void,
  t: Topology,
  svc: LabService,
  r: CurlVsPingReport,
  raw: Raw,
): void {
  printSteps(out, t, svc, r, raw);
  out('');
  printEvidence(out, r, raw);
  out('');
  printWhy(out, r);
}

function printSteps(
  out: (s: string) => void,
  t: Topology,
  svc: LabService,
  r: CurlVsPingReport,
  raw: Raw,
): void {
  const where = (p: LabPod) => `${p.name} ${p.ip} on ${p.node}`;
  const failed = (c: CurlResult) => `   FAILED (curl exit ${c.exit}): ${c.err}`;
  out(
    `curl vs ping: service ${svc.namespace}/${svc.name} ClusterIP ${r.vip}:${r.port}, from pod ${where(r.client)}`,
  );
  out('');
  out(`1. curl the ClusterIP:   $ curl http://${r.vip}:${r.port}/`);
  out(
    r.vipHttpCode === 200
      ? `   HTTP 200, answered by ${r.backend ? where(r.backend) : raw.vipCurl.body.trim()}`
      : failed(raw.vipCurl),
  );
  out(`2. ping the ClusterIP:   $ ping -c ${PINGS} ${r.vip}`);
  out(`   ${raw.vipPing.summary}`);
  out(
    `3. the pod directly:     $ curl http://${raw.direct.ip}:${t.httpPort}/   and   $ ping -c ${PINGS} ${raw.direct.ip}`,
  );
  out(
    r.directHttpCode === 200
      ? `   HTTP 200, ${raw.directCurl.body.trim()}`
      : failed(raw.directCurl),
  );
  out(`   ${raw.directPing.summary}`);
  const v6 = r.ipv6;
  if (!v6) return;
  out(
    `4. the same over IPv6, to ${v6.service}'s IPv6 ClusterIP:   $ curl -6 http://[${v6.vip}]:${v6.port}/   and   $ ping -6 -c ${PINGS} ${v6.vip}`,
  );
  out(
    v6.httpCode === 200
      ? `   HTTP 200, answered by ${v6.backend ? `${v6.backend.name} from ${v6.body.split(' ')[1]} on ${v6.backend.node}` : v6.body}`
      : `   FAILED (${v6.curlError})`,
  );
  out(`   ${v6.pingSummary}`);
}

function printEvidence(out: (s: string) => void, r: CurlVsPingReport, raw: Raw): void {
  const c = r.client;
  out('Evidence');
  if (r.mode === 'kubetun') printKubetunCt(out, r, raw);
  else printKernelEvidence(out, r.mode, r.client.node, r);
  const show = (lines: string[]) => {
    for (const l of lines.length ? lines.slice(0, 6) : ['(no packets)']) out(`    ${l}`);
  };
  out(`- tcpdump on ${c.node} ${c.hostIf} (client side): the client talks to the VIP ${r.vip}`);
  show(r.clientCapture.filter((l) => / [^ ]+\.\d+ > [^ ]+\.\d+: Flags/.test(l)));
  if (r.backend) {
    const b = r.backend;
    out(
      `- tcpdump on ${b.node} ${b.hostIf} (backend side): the same flow arrives for the pod IP ${b.ip}`,
    );
    show(r.backendCapture);
  }
  out(
    `- tcpdump on ${c.node} ${c.hostIf}: the pings to the VIP go out and no echo reply comes back`,
  );
  show(r.clientCapture.filter((l) => /ICMP/.test(l)));
  if (r.echoDrops) {
    const { before, after } = r.echoDrops;
    out(
      `- kubetun counter ${ECHO_DROP_REASON} on ${c.node}: ${after} (+${after - before} during this demo)`,
    );
  } else if (r.mode === 'nftables') {
    out(`- nftables mode rejects anything else sent to a ClusterIP (so ping gets errors):`);
    for (const l of r.natIcmpRules ?? []) out(`    ${l}`);
  } else {
    const n = r.natIcmpRules?.length ?? 0;
    out(
      `- nat rules for ${r.vip} that an ICMP packet could match: ${n === 0 ? 'none (every one says -p tcp or -p udp)' : n}`,
    );
  }
}

function printKubetunCt(out: (s: string) => void, r: CurlVsPingReport, raw: Raw): void {
  out(`- kubetun's conntrack entry for the curl on ${r.client.node} (ctl "ct"):`);
  if (!r.ct) {
    out(`    none found for ${r.client.ip}:${raw.vipCurl.localPort} -> ${r.vip}:${r.port}`);
    return;
  }
  const tup = (x: CtTuple) => `${x.src}:${x.sport} -> ${x.dst}:${x.dport}`;
  const e = r.ct;
  out(
    `    ${String(e.proto).toLowerCase()} ${e.state}  expires in ${e.expiresInSec}s  backend ${backendName(r, e.reply.src)} (${e.reply.src}:${e.reply.sport}, slot #${e.backendId})  ${e.packets} packets ${e.bytes} bytes`,
  );
  out(`    orig   ${tup(e.orig)}     (what the client sent: to the VIP)`);
  out(`    reply  ${tup(e.reply)}     (what the backend sends back: from its pod IP)`);
}

/**
 * What became of the echo requests, in the words of the evidence printed above: the ICMP errors
 * the client's capture shows (nftables mode rejects; iptables mode routes the echo on and the
 * node reports the next hop unreachable), or — none seen — kubetun's drop counter or silence.
 */
export function echoFate(r: CurlVsPingReport): string[] {
  const errors = r.clientCapture.filter((l) => /ICMP .*unreachable/.test(l));
  if (errors.length > 0) {
    // tcpdump: "IP 10.244.2.1 > 10.244.2.3: ICMP host 10.96.0.10 unreachable, length 92"
    const what = /: (ICMP [^,]*)/.exec(errors[0]!)?.[1] ?? 'ICMP unreachable';
    const from = /IP (\S+) > /.exec(errors[0]!)?.[1] ?? 'the node';
    const why =
      r.mode === 'nftables'
        ? "kube-proxy's nftables rules reject everything else sent to a ClusterIP"
        : 'the node routed the echo on, found no next hop for it, and said so';
    return [
      `the ${errors.length} ICMP error(s) above ("${what}", from ${from}) answer it instead of`,
      `an echo reply: ${why}.`,
    ];
  }
  if (r.echoDrops && r.echoDrops.after > r.echoDrops.before)
    return [
      `kubetun drops it at the node and counts it (${ECHO_DROP_REASON} +${r.echoDrops.after - r.echoDrops.before} above): no answer at all.`,
    ];
  return ['nothing answers it: the capture above shows the requests and no reply or error.'];
}

/** The pod behind a conntrack entry's backend address (the reply comes from it). */
function backendName(r: CurlVsPingReport, ip: string): string {
  return r.backend?.ip === ip ? r.backend.name : ip;
}

/** The explanation, as the seed articles give it (ClusterIP as a "phantom IP"). */
function printWhy(out: (s: string) => void, r: CurlVsPingReport): void {
  const who =
    r.mode === 'kubetun' ? "kubetun's service map only holds" : "kube-proxy's nat rules only match";
  out('Why');
  out(`  A ClusterIP is a "phantom IP": no interface owns ${r.vip} and no process listens on it;`);
  out(`  ${who} the service's IP + protocol + port, so the TCP SYN to ${r.vip}:${r.port}`);
  out('  matched, was DNATed to a pod and tracked in conntrack, which turns the replies back into');
  out('  the VIP. An ICMP echo has no port and matches no service entry, so it is not translated:');
  for (const l of echoFate(r)) out(`  ${l}`);
  out('  So ping a pod IP, and test a service with curl or nc on its port, never with ping.');
  out('');
  out('Try it yourself (the lab stays up):');
  out(`  node bin/kubetun.mjs lab exec ${r.client.name} -- curl -s http://${r.vip}:${r.port}/`);
  out(`  node bin/kubetun.mjs lab exec ${r.client.name} -- ping -c 3 ${r.vip}`);
  if (r.ipv6) {
    out(
      `  node bin/kubetun.mjs lab exec ${r.client.name} -- curl -6 -s http://[${r.ipv6.vip}]:${r.ipv6.port}/`,
    );
    out(`  node bin/kubetun.mjs lab exec ${r.client.name} -- ping -6 -c 3 ${r.ipv6.vip}`);
  }
  const other = r.mode === 'kubetun' ? 'iptables' : 'kubetun';
  out(`  node bin/kubetun.mjs lab demo curl-vs-ping --mode ${other}     (the same with ${other})`);
  out('  node bin/kubetun.mjs lab status        node bin/kubetun.mjs lab down');
}

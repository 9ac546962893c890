// End-to-end benchmark on the namespace lab: the same traffic through kubetun and through the
// kernel with kube-proxy's iptables rules (`lab up --mode iptables`), at 10 and at 10k services,
// beside the kernel routing alone (`none`: the direct-path baseline, no VIP). Prints figures
// and ratios; asserts nothing. Needs root, python3, iperf3 and a C compiler.
//
//   npm run bench:e2e [-- --quick] [-- --conns N] [-- --services N] [-- --prefix kb-]
//                     [-- --json FILE] [-- --modes none,iptables,kubetun,kubetun-no-offload]
//
// Modes run in the order given, kernel modes first by default: the paced flood of a later mode
// is paced at the rate the kernel path (iptables) delivered in the same run.
//   1. new-connection latency, p50/p99: connect + tiny HTTP GET + close with SO_LINGER 0 (RST),
//      N in a row from pod-a (node1), to a one-endpoint VIP and directly to that pod (node2);
//      at the small set also over IPv6 (the VIP's IPv6 ClusterIP, the pod's IPv6 address: the
//      bench lab is dual-stack, the kernel mode loads kube-proxy's IPv6 rules beside)
//   2. one-stream iperf3 throughput, VIP vs direct (pod-a -> pod-x on the other node)
//   3. a bounded UDP flood through a VIP into a sink, unpaced (as fast as send() goes) and paced
//      (`floodPaced`) at the rate iptables delivered; in kubetun mode the TUN's packets/s read
//      from each agent's control socket (counters before/after)
//   4. CPU seconds per GB of the VIP stream: the whole machine's busy time (all tenants: say the
//      load) and, in kubetun modes, the agents' own
//
// The lab it builds is its own: prefix `kb-` (namespaces, state dir, control sockets), so it
// never touches the default `kt-` lab. It is taken down at the end, on error and on Ctrl-C.
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import {
  BENCH_POD,
  CLIENT_POD,
  FLOOD_PORT,
  FLOOD_VIP,
  HTTP_PORT,
  IPERF_PORT,
  IPERF_VIP,
  LAT_POD,
  LAT_VIP,
  LAT_VIP6,
  growScenario,
  type Scenario,
  shrinkScenario,
  UDP_PORT,
  writeScenario,
} from './bench-e2e/manifests.ts';
import {
  buildFlood,
  connLatency,
  type Flood,
  iperf,
  type Latency,
  machine,
  machineCpuSec,
  NsProcess,
  processCpuSec,
  nsRun,
  type Throughput,
  udpFlood,
} from './bench-e2e/measure.ts';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    prefix: { type: 'string', default: 'kb-' },
    conns: { type: 'string' },
    services: { type: 'string' },
    modes: { type: 'string', default: 'none,iptables,kubetun' },
    json: { type: 'string' },
  },
});
// Before the lab modules load: they read the prefix once, at import.
process.env.KUBETUN_LAB_PREFIX = args.prefix;
const lab = await import('../src/lab/lab.ts');
const { readState, VIEW_DIR, writeState } = await import('../src/lab/state.ts');
const { VIEW_FILE } = await import('../src/cluster/store.ts');
const { labCtl } = await import('../src/lab/ctl.ts');
const { LAB_PREFIX, loadTopology } = await import('../src/lab/topology.ts');
const { API_SOCKET, apiCall } = await import('../src/lab/api.ts');
const { nodeIptablesRules } = await import('../src/lab/kube-proxy.ts');
const { inNs, sh, shTry } = await import('../src/sh.ts');
const { renderJumpCommands } = await import('../src/rules/jumps.ts');

type Mode = 'none' | 'iptables' | 'kubetun' | 'kubetun-no-offload';
const KNOWN_MODES: readonly Mode[] = ['none', 'iptables', 'kubetun', 'kubetun-no-offload'];
const isKubetun = (m: Mode) => m === 'kubetun' || m === 'kubetun-no-offload';
const QUICK = args.quick;
const CONNS = Number(args.conns ?? (QUICK ? 300 : 2000));
/** untimed connections first: the JIT of a freshly started agent and echo server warms up */
const WARMUP = Math.min(400, Math.max(20, Math.round(CONNS / 5)));
const BIG = Number(args.services ?? (QUICK ? 2000 : 10_000));
/** the small set: at least this many services (more if the lab ships more of its own) */
const SMALL = 10;
const MODES = args.modes.split(',').filter((m): m is Mode => KNOWN_MODES.includes(m as Mode));
const IPERF_SEC = QUICK ? 2 : 5;
const FLOOD_COUNT = QUICK ? 200_000 : 1_000_000;
/** TUN counter sampling period during the flood */
const SAMPLE_MS = 100;
/** the lab's view must have been still this long before a measurement, waited for this long */
const VIEW_QUIET_MS = 3000;
const VIEW_SETTLE_MS = 60_000;

const t0 = Date.now();
const say = (msg: string) =>
  process.stderr.write(`[${((Date.now() - t0) / 1000).toFixed(1).padStart(5)}s] ${msg}\n`);
const ns = (pod: string) => `${LAB_PREFIX}${pod}`;

interface ScaleResult {
  services: number;
  /** lab up (small) or the resync to the big set */
  syncSec: number;
  /** none mode: no VIP */
  vip?: Latency;
  direct: Latency;
  /** the same over IPv6 (the small set only): the dual-stack latency service, pod-d's IPv6 */
  vip6?: Latency;
  direct6?: Latency;
  iperfVip?: Throughput;
  iperfDirect?: Throughput;
  /** CPU seconds per GB of the VIP stream (direct in none mode) */
  cpu?: CpuPerGb;
  flood?: FloodResult;
  /** paced at the rate iptables delivered unpaced in this run */
  floodPaced?: FloodResult & { pps: number };
}
interface CpuPerGb {
  /** the whole machine's busy seconds per GB received (every tenant of a shared machine) */
  machine: number;
  /** the kubetun agents' own seconds per GB (kubetun modes) */
  agents?: number;
}
interface FloodResult extends Flood {
  /** per node, kubetun mode only: TUN packets read / written during the flood */
  tun?: Record<
    string,
    { rx: number; tx: number; rxPps?: number; txPps?: number; kernelDrops: number }
  >;
}
const results: Partial<Record<Mode, ScaleResult[]>> = {};
const started: NsProcess[] = [];

/** the generated manifests and topology, removed by cleanup */
let tmp: string | undefined;
let cleaning: Promise<void> | undefined;
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    for (const p of started) await p.stop();
    say(`taking the ${LAB_PREFIX} lab down`);
    await lab.labDown({ progress: (m) => say(`lab: ${m}`) }).catch((err: Error) => {
      say(`lab down failed: ${err.message}`);
    });
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  })();
  return cleaning;
}
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    say(`${sig}: stopping`);
    void cleanup().then(() => process.exit(130));
  });
}

/** pod-x serves the benchmark: a kubetun/pause Pod (no server of its own), iperf3 on the HTTP port. */
async function prepareBenchPod(): Promise<void> {
  const server = new NsProcess(ns(BENCH_POD.name), [
    'iperf3',
    '-s',
    '-p',
    String(HTTP_PORT),
    '--forceflush',
  ]);
  started.push(server);
  await server.waitFor(/listening/i, 5000);
}

/**
 * Until the lab's view has not changed for VIEW_QUIET_MS (at most VIEW_SETTLE_MS): Pods turn
 * Ready after `lab up` returns (readiness probes), and each change makes every data plane sync
 * again — the agents reload, the kernel modes restore — which must not fall into a measurement.
 * On a loaded machine the DNS Pods' probes flap and the view may never settle: said, not fatal.
 */
async function settleView(mode: Mode): Promise<void> {
  const file = join(VIEW_DIR, VIEW_FILE);
  const t = Date.now();
  let changes = -1;
  let last = -1;
  while (Date.now() - t < VIEW_SETTLE_MS) {
    const m = statSync(file, { throwIfNoEntry: false })?.mtimeMs ?? 0;
    if (m !== last) {
      changes++;
      last = m;
    }
    if (Date.now() - m >= VIEW_QUIET_MS) {
      say(
        `${mode}: the view is still (${changes} changes in ${((Date.now() - t) / 1000).toFixed(1)} s)`,
      );
      return;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  say(
    `${mode}: the view still changes after ${VIEW_SETTLE_MS / 1000} s (${changes} changes): measuring anyway`,
  );
}

interface LatencySet {
  vip?: Latency;
  direct: Latency;
  vip6?: Latency;
  direct6?: Latency;
}

/**
 * connlat.py to the VIP and directly to its endpoint — and, with `v6`, the same over IPv6 —
 * one connection per target in turn (none mode: the direct ones only).
 */
async function latencySet(mode: Mode, services: number, v6: boolean): Promise<LatencySet> {
  const want: [keyof LatencySet, string][] = [];
  if (mode !== 'none') want.push(['vip', `${LAT_VIP}:80`]);
  want.push(['direct', `${LAT_POD.ip}:${HTTP_PORT}`]);
  if (v6 && mode !== 'none') want.push(['vip6', `[${LAT_VIP6}]:80`]);
  if (v6) want.push(['direct6', `[${LAT_POD.ip6}]:${HTTP_PORT}`]);
  const targets = want.map(([, t]) => t);
  say(`${mode} @ ${services} services: ${CONNS} connections each to ${targets.join(', ')}`);
  const got = await connLatency(ns(CLIENT_POD.name), targets, CONNS, WARMUP);
  const out = {} as LatencySet;
  want.forEach(([k, t], i) => {
    const l = got[i];
    if (!l) throw new Error('connlat.py answered no figures');
    out[k] = l;
    say(`  ${k} (${t}): p50 ${l.p50} µs p99 ${l.p99} µs`);
    if (l.errors > 0) say(`  ${k}: ${l.errors} failed: ${JSON.stringify(l.errorKinds)}`);
  });
  return out;
}

/** The agents' pids (kubetun modes), for their CPU time. */
function agentPids(): number[] {
  return (readState()?.processes ?? []).filter((p) => p.role === 'kubetun').map((p) => p.pid);
}

/** One iperf3 stream with the CPU it cost: machine-wide and the agents'. */
async function iperfCpu(ip: string, port: number): Promise<[Throughput, CpuPerGb]> {
  const pids = agentPids();
  const m0 = machineCpuSec();
  const a0 = processCpuSec(pids);
  const t = await iperf(ns(CLIENT_POD.name), ip, port, IPERF_SEC);
  const gb = t.bytes / 1e9;
  const cpu: CpuPerGb = { machine: (machineCpuSec() - m0) / gb };
  if (pids.length > 0) cpu.agents = (processCpuSec(pids) - a0) / gb;
  return [t, cpu];
}

async function throughputPair(mode: Mode): Promise<[Throughput | undefined, Throughput, CpuPerGb]> {
  say(`${mode}: iperf3 ${IPERF_SEC}s one stream, direct ${BENCH_POD.ip}:${HTTP_PORT}`);
  const [direct, dcpu] = await iperfCpu(BENCH_POD.ip, HTTP_PORT);
  if (mode === 'none') {
    say(`  direct ${direct.gbps.toFixed(2)} Gbit/s, ${direct.retransmits} retransmits`);
    return [undefined, direct, dcpu];
  }
  say(`${mode}: iperf3 ${IPERF_SEC}s one stream, VIP ${IPERF_VIP}:${IPERF_PORT}`);
  const [vip, cpu] = await iperfCpu(IPERF_VIP, IPERF_PORT);
  say(`  direct ${direct.gbps.toFixed(2)} Gbit/s; VIP ${vip.gbps.toFixed(2)} Gbit/s`);
  return [vip, direct, cpu];
}

interface TunCount {
  at: number;
  rx: number;
  tx: number;
}

/** Each agent's TUN packet counters, from its control socket. */
async function tunCounts(): Promise<Record<string, TunCount>> {
  const out: Record<string, TunCount> = {};
  for (const p of readState()?.processes ?? []) {
    if (p.role !== 'kubetun' || !p.ctlSocket) continue;
    const c = await labCtl<{ tun: { rxPackets: number; txPackets: number } }>(p.ctlSocket, {
      cmd: 'counters',
    });
    out[p.name] = { at: performance.now() / 1000, rx: c.tun.rxPackets, tx: c.tun.txPackets };
  }
  return out;
}

/** Packets the kernel could not queue to a TUN reader that lagged (the device's tx_dropped). */
async function tunDrops(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const n of ['node1', 'node2']) {
    const file = `/sys/class/net/${lab.LAB_TUN}/statistics/tx_dropped`;
    out[n] = Number((await nsRun(ns(n), ['cat', file])).trim());
  }
  return out;
}

/**
 * The reader's sustained rate: over the samples taken while the counter was still moving (after
 * the first packet, before the last), so idle time around the flood does not dilute it.
 */
function busyRate(samples: TunCount[], key: 'rx' | 'tx'): number | undefined {
  if (samples.length < 2) return undefined;
  const first = samples[0]![key];
  const last = samples[samples.length - 1]![key];
  const busy = samples.filter((x) => x[key] > first && x[key] < last);
  if (busy.length < 2) return undefined;
  const a = busy[0]!;
  const b = busy[busy.length - 1]!;
  return (b[key] - a[key]) / (b.at - a.at);
}

async function flood(mode: Mode, bin: string, pps = 0): Promise<FloodResult> {
  const pace = pps > 0 ? `paced at ${kpps(pps)}` : 'unpaced';
  say(
    `${mode}: UDP flood ${pace}, ${FLOOD_COUNT} datagrams of 64 B to VIP ${FLOOD_VIP}:${FLOOD_PORT}`,
  );
  const kubetun = isKubetun(mode);
  const drops0 = kubetun ? await tunDrops() : {};
  const samples: Record<string, TunCount>[] = kubetun ? [await tunCounts()] : [];
  let done = false;
  const sampler = (async () => {
    while (kubetun && !done) {
      await new Promise((r) => setTimeout(r, SAMPLE_MS));
      samples.push(await tunCounts());
    }
  })();
  const f: FloodResult = await udpFloodVip(bin, pps).finally(() => {
    done = true;
  });
  await sampler;
  if (kubetun) {
    samples.push(await tunCounts());
    const drops1 = await tunDrops();
    f.tun = {};
    for (const node of Object.keys(samples[0]!)) {
      const s = samples.map((x) => x[node]!);
      const [a, b] = [s[0]!, s[s.length - 1]!];
      f.tun[node] = {
        rx: b.rx - a.rx,
        tx: b.tx - a.tx,
        rxPps: busyRate(s, 'rx'),
        txPps: busyRate(s, 'tx'),
        kernelDrops: (drops1[node] ?? 0) - (drops0[node] ?? 0),
      };
    }
  }
  const offered = f.sent / f.sendSec;
  const delivered = f.recvSec > 0 ? f.received / f.recvSec : 0;
  say(
    `  offered ${kpps(offered)}, delivered ${kpps(delivered)} (${f.received}/${f.sent} received)`,
  );
  for (const [node, t] of Object.entries(f.tun ?? {}))
    say(`  TUN ${node}: read ${t.rx} at ${kpps(t.rxPps)}, written ${t.tx} at ${kpps(t.txPps)}`);
  return f;
}

function udpFloodVip(bin: string, pps: number): Promise<Flood> {
  return udpFlood(
    bin,
    { ns: ns(CLIENT_POD.name), ip: FLOOD_VIP, port: FLOOD_PORT },
    { ns: ns(BENCH_POD.name), port: UDP_PORT },
    FLOOD_COUNT,
    undefined,
    pps,
  );
}

/** The rate the kernel path delivered unpaced in this run (iptables), if it ran. */
function kernelRate(): number | undefined {
  const f = results.iptables?.[0]?.flood;
  return f && f.recvSec > 0 ? f.received / f.recvSec : undefined;
}

const kpps = (pps: number | undefined) =>
  pps === undefined ? '? kpps' : `${(pps / 1000).toFixed(0)} kpps`;

/**
 * The lab's control plane applies the grown manifests dir (its addon manager) and writes the
 * view every data plane reads before it answers; the kubetun agents then reload it.
 */
async function syncControlPlane(): Promise<void> {
  await apiCall('POST', '/resync', { force: false, prune: false }, API_SOCKET, 600_000);
}

/** Services each agent's tracker holds (headless and proxy-name-labelled ones are not served). */
async function agentServices(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const p of (readState()?.processes ?? []).filter((x) => x.role === 'kubetun')) {
    const r = await labCtl<{ services: number; error?: string }>(
      p.ctlSocket!,
      { cmd: 'reload' },
      600_000,
    );
    if (r.error) throw new Error(`kubetun on ${p.name}: reload: ${r.error}`);
    out[p.name] = r.services;
  }
  return out;
}

/** kubetun: every agent has reloaded the grown view (its watch may have started already). */
async function growKubetun(before: Record<string, number>, added: number): Promise<void> {
  const after = await agentServices();
  for (const [node, n] of Object.entries(after))
    if (n !== (before[node] ?? 0) + added)
      throw new Error(`kubetun on ${node} holds ${n} services, not ${before[node]} + ${added}`);
}

/**
 * The kernel: the control plane's own kube-proxy sync stands aside (`switching`, as for `lab
 * mode`) while the whole ruleset for the grown view is restored and kube-proxy's jumps from the
 * built-in chains are ensured again: the state kube-proxy reaches when it starts on a node with
 * 10k services. Not the control plane's `--noflush` restore, as a live kube-proxy sync does:
 * over an existing ruleset that took iptables-nft 1.8.9 464 s per node here (10 -> 10k
 * services), against ~3 s for a flushing restore of the same input. Returns the rules per node,
 * as iptables-save lists them afterwards.
 */
async function growIptables(): Promise<Record<string, number>> {
  const st = readState()!;
  writeState({ ...st, switching: true });
  try {
    await syncControlPlane();
    const t = loadTopology(st.topologyFile);
    for (const n of t.nodes) {
      const input = nodeIptablesRules(t, n);
      sh(inNs(n.ns, ['iptables-restore', '-w', '--counters']), { input, timeoutMs: 300_000 });
      sh(inNs(n.ns, ['sh', '-c', renderJumpCommands('iptables')]));
    }
    const out: Record<string, number> = {};
    for (const n of t.nodes) {
      const text = await nsRun(n.ns, ['iptables-save'], 300_000);
      out[n.name] = text.split('\n').filter((l) => l.startsWith('-A ')).length;
    }
    return out;
  } finally {
    writeState({ ...readState()!, switching: undefined });
  }
}

async function runMode(mode: Mode, sc: Scenario, bin?: string): Promise<ScaleResult[]> {
  shrinkScenario(sc);
  say(`lab up --mode ${mode} with ${sc.services} services`);
  let u0 = Date.now();
  await lab.labUp({
    topology: sc.topology,
    mode: isKubetun(mode) ? 'kubetun' : mode === 'none' ? 'none' : 'iptables',
    noOffload: mode === 'kubetun-no-offload',
    progress: (m) => say(`lab: ${m}`),
  });
  await prepareBenchPod();
  const upSec = (Date.now() - u0) / 1000;
  await settleView(mode);
  const small: ScaleResult = {
    services: sc.services,
    syncSec: upSec,
    ...(await latencySet(mode, sc.services, true)),
  };
  [small.iperfVip, small.iperfDirect, small.cpu] = await throughputPair(mode);
  if (bin && mode !== 'none') {
    small.flood = await flood(mode, bin);
    const pps = kernelRate();
    if (pps) small.floodPaced = { ...(await flood(mode, bin, pps)), pps };
  }
  const out = [small];
  if (BIG > sc.services && mode !== 'none') {
    const before = isKubetun(mode) ? await agentServices() : {};
    const { probe, added } = growScenario(sc, BIG);
    const how = isKubetun(mode) ? 'the agents reload the view' : 'iptables-restore';
    say(`${mode}: growing to ${BIG} services in place (lab control plane, then ${how})`);
    u0 = Date.now();
    if (isKubetun(mode)) {
      await syncControlPlane();
      await growKubetun(before, added);
    } else {
      for (const [node, n] of Object.entries(await growIptables())) say(`  ${node}: ${n} rules`);
    }
    const syncSec = (Date.now() - u0) / 1000;
    await settleView(mode);
    const [check] = await connLatency(ns(CLIENT_POD.name), [`${probe}:80`], 3, 0);
    if (!check || check.errors > 0)
      throw new Error(`${mode}: the last filler VIP ${probe} does not answer`);
    out.push({ services: BIG, syncSec, ...(await latencySet(mode, BIG, false)) });
  }
  for (const p of started.splice(0)) await p.stop();
  // down before the next mode shrinks the dir: a live control plane would prune 10k Services
  // and sync the data plane again while the next `lab up` tears it down
  say(`${mode}: lab down`);
  await lab.labDown({ progress: (m) => say(`lab: ${m}`) });
  return out;
}

// ---- report ----------------------------------------------------------------------------------

const f1 = (n: number | undefined) => (n === undefined ? '-' : n.toFixed(1));
const f2 = (n: number | undefined) => (n === undefined ? '-' : n.toFixed(2));
const ratio = (a: number | undefined, b: number | undefined) =>
  a === undefined || b === undefined || b === 0 ? '-' : `${(a / b).toFixed(2)}x`;
const row = (cells: string[], widths: number[]) =>
  cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');

function latencyTable(): string[] {
  const w = [9, 9, 10, 10, 10, 10, 11, 11, 7];
  const lines = [
    `new-connection latency, µs (connect + GET / + response + RST close; ${CONNS} in a row, one at a time)`,
    row(
      ['mode', 'services', 'direct p50', 'p99', 'VIP p50', 'p99', 'VIP/dir p50', 'p99', 'errors'],
      w,
    ),
  ];
  for (const m of MODES) {
    for (const r of results[m] ?? []) {
      const cells = [m, String(r.services), f1(r.direct.p50), f1(r.direct.p99), f1(r.vip?.p50)];
      cells.push(f1(r.vip?.p99), ratio(r.vip?.p50, r.direct.p50), ratio(r.vip?.p99, r.direct.p99));
      lines.push(row([...cells, String((r.vip?.errors ?? 0) + r.direct.errors)], w));
    }
  }
  const k = results.kubetun ?? [];
  const i = results.iptables ?? [];
  for (let s = 0; s < Math.min(k.length, i.length); s++) {
    const a = k[s]!;
    const b = i[s]!;
    lines.push(
      `kubetun/kernel @ ${a.services} services: VIP p50 ${ratio(a.vip?.p50, b.vip?.p50)}, p99 ${ratio(a.vip?.p99, b.vip?.p99)}; direct p50 ${ratio(a.direct.p50, b.direct.p50)}, p99 ${ratio(a.direct.p99, b.direct.p99)}`,
    );
  }
  lines.push('', `the same over IPv6 (${LAT_VIP6}, pod-d ${LAT_POD.ip6}), small set`);
  lines.push(
    row(
      ['mode', 'services', 'direct p50', 'p99', 'VIP p50', 'p99', 'VIP/dir p50', 'p99', 'errors'],
      w,
    ),
  );
  for (const m of MODES) {
    const r = results[m]?.[0];
    if (!r?.direct6) continue;
    const cells = [m, String(r.services), f1(r.direct6.p50), f1(r.direct6.p99), f1(r.vip6?.p50)];
    cells.push(
      f1(r.vip6?.p99),
      ratio(r.vip6?.p50, r.direct6.p50),
      ratio(r.vip6?.p99, r.direct6.p99),
    );
    lines.push(row([...cells, String((r.vip6?.errors ?? 0) + r.direct6.errors)], w));
  }
  const [k6, i6] = [results.kubetun?.[0], results.iptables?.[0]];
  if (k6?.vip6 && i6?.vip6)
    lines.push(
      `kubetun/kernel IPv6: VIP p50 ${ratio(k6.vip6.p50, i6.vip6.p50)}, p99 ${ratio(k6.vip6.p99, i6.vip6.p99)}; direct p50 ${ratio(k6.direct6?.p50, i6.direct6?.p50)}`,
    );
  const base = results.none?.[0]?.direct.p50;
  for (const m of MODES) {
    const r = results[m]?.[0];
    if (m !== 'none' && r && base !== undefined)
      lines.push(`${m}/none direct p50 @ ${r.services} services: ${ratio(r.direct.p50, base)}`);
  }
  for (const m of MODES) {
    const rs = results[m] ?? [];
    if (rs.length < 2) continue;
    const [a, b] = [rs[0]!, rs[rs.length - 1]!];
    lines.push(
      `${m}: ${b.services} vs ${a.services} services: VIP p50 ${ratio(b.vip?.p50, a.vip?.p50)}, p99 ${ratio(b.vip?.p99, a.vip?.p99)}; lab up ${a.syncSec.toFixed(1)} s, resync to ${b.services} ${b.syncSec.toFixed(1)} s`,
    );
  }
  return lines;
}

function throughputTable(): string[] {
  const w = [18, 8, 8, 8, 9, 8, 11, 11];
  const lines = [
    `one TCP stream, iperf3 ${IPERF_SEC} s, ${CLIENT_POD.name} (node1) -> ${BENCH_POD.name} (node2), Gbit/s; CPU s per GB of the VIP stream (direct for none)`,
    row(['mode', 'direct', 'VIP', 'VIP/dir', 'retr dir', 'VIP', 'cpu s/GB', 'agents s/GB'], w),
  ];
  for (const m of MODES) {
    const r = results[m]?.[0];
    if (!r?.iperfDirect) continue;
    const cells = [m, f2(r.iperfDirect.gbps), f2(r.iperfVip?.gbps)];
    cells.push(ratio(r.iperfVip?.gbps, r.iperfDirect.gbps), String(r.iperfDirect.retransmits));
    cells.push(String(r.iperfVip?.retransmits ?? '-'), f2(r.cpu?.machine), f2(r.cpu?.agents));
    lines.push(row(cells, w));
  }
  const i = results.iptables?.[0]?.iperfVip;
  for (const m of ['kubetun', 'kubetun-no-offload'] as const) {
    const k = results[m]?.[0]?.iperfVip;
    if (!k || !i) continue;
    const retr = ratio(k.retransmits, Math.max(i.retransmits, 1));
    lines.push(`${m}/kernel VIP: ${ratio(k.gbps, i.gbps)}, retransmits ${retr}`);
  }
  return lines;
}

function floodTable(): string[] {
  const lines = [
    `UDP flood: ${FLOOD_COUNT} datagrams of 64 B, one flow, ${CLIENT_POD.name} -> VIP ${FLOOD_VIP} -> ${BENCH_POD.name}`,
  ];
  for (const m of MODES) {
    const r = results[m]?.[0];
    for (const [what, f] of [
      ['unpaced', r?.flood],
      [`paced ${kpps(r?.floodPaced?.pps)}`, r?.floodPaced],
    ] as const) {
      if (!f) continue;
      const offered = f.sent / f.sendSec;
      const delivered = f.recvSec > 0 ? f.received / f.recvSec : 0;
      const loss = (100 * (f.sent - f.received)) / f.sent;
      lines.push(
        `${m.padEnd(18)} ${what.padEnd(16)} offered ${kpps(offered)}, delivered ${kpps(delivered)}, lost ${loss.toFixed(1)}%`,
      );
      floodTun(lines, f);
    }
  }
  return lines;
}

function floodTun(lines: string[], f: FloodResult): void {
  for (const [node, t] of Object.entries(f.tun ?? {})) {
    lines.push(
      `          TUN on ${node}: read ${t.rx} at ${kpps(t.rxPps)}, written ${t.tx} at ${kpps(t.txPps)}; ${t.kernelDrops} dropped by the kernel before the reader`,
    );
  }
}

// ---- main ------------------------------------------------------------------------------------

/** The commit measured, marked when the working tree differs from it. */
function gitDescribe(): string {
  const git = (...a: string[]) => shTry(['git', '-C', lab.REPO_ROOT, ...a]);
  const head = git('rev-parse', '--short', 'HEAD');
  if (!head.ok) return 'not a git checkout';
  const dirty = git('status', '--porcelain', '--untracked-files=no').out.trim() !== '';
  return `${head.out.trim()}${dirty ? ' (working tree modified)' : ''}`;
}

async function main(): Promise<void> {
  const m = await machine();
  m.commit = gitDescribe();
  console.log('kubetun end-to-end benchmark (namespace lab, prefix %s)', LAB_PREFIX);
  for (const [k, v] of Object.entries(m)) console.log(`  ${k.padEnd(9)} ${v}`);
  const dir = mkdtempSync(join(tmpdir(), 'kubetun-bench-e2e-'));
  tmp = dir;
  try {
    const sc = writeScenario(dir, join(lab.REPO_ROOT, 'lab/manifests'), SMALL);
    say(`manifests in ${dir}: ${sc.services} services, later ${BIG}`);
    console.log(
      `  run       ${QUICK ? 'quick' : 'full'}: ${CONNS} connections per target, ${sc.services} services (the lab's own, 3 of the benchmark's, filler) then ${BIG}, modes ${MODES.join(', ')}`,
    );
    const bin = await buildFlood(dir);
    if (!bin) say('no C compiler (cc): the UDP flood is skipped');
    for (const mode of MODES) results[mode] = await runMode(mode, sc, bin);
  } finally {
    await cleanup();
  }
  console.log('');
  for (const block of [latencyTable(), throughputTable(), floodTable()]) {
    console.log(block.join('\n'));
    console.log('');
  }
  console.log(`total ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  if (args.json) {
    writeFileSync(args.json, `${JSON.stringify({ machine: m, results }, null, 2)}\n`);
  }
}

try {
  await main();
} catch (err) {
  process.stderr.write(`bench-e2e: ${(err as Error).stack ?? err}\n`);
  process.exitCode = 1;
}

// Benchmark of the ClusterIP program (dpProcess) on one core: packets per second for packets of
// established flows (DNAT and reverse NAT) and for new flows, with 10 to 100k services, IPv4
// and IPv6 (scripts/bench/harness6.ts: the same scenarios with 128-bit addresses); bytes
// per conntrack flow and RSS with 1M flows; JS heap growth and GC count over a long mixed run
// (the "no allocation per packet" check). Prints a table; asserts nothing.
//
//   npm run bench:datapath [-- --quick] [-- --no-v8-tune] [-- --ring]
//   npm run bench:datapath -- --against REV [--rounds N] [--quick]   (A/B in one process:
//     this tree's program against REV's, alternating; see scripts/bench-ab.ts)
//     [--count instructions [--jobs N]] [--this REV2]   (and instructions per packet of each
//     side under callgrind, which the machine's load does not move: scripts/bench/count.ts)
//   npm run bench:datapath -- --ring --count instructions [--quick]   (the event ring off and
//     on, wall time then instructions per packet)
//
// The heap check needs global.gc: without it the script re-runs itself under
// `node --expose-gc --import tsx` (so the plain `tsx scripts/bench-datapath.ts` works too).

import { spawnSync } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { DEFAULT_DATAPATH_CONFIG } from '../src/datapath/state/config.ts';
import { createDatapath } from '../src/datapath/state/datapath.ts';
import { DpLoader } from '../src/loader/load.ts';
import { dpProcess } from '../src/datapath/program.ts';
import { dpTuneV8 } from '../src/datapath/tune.ts';
import { REASON_COUNT, REASON_NAMES } from '../src/datapath/state/reasons.ts';
import type { ResolvedServicePort } from '../src/model.ts';
import type { ConntrackMap } from '../src/maps/conntrack.ts';
import { ipv4FillCsum } from '../src/wire/ipv4.ts';
import { l4RewriteSrcPort, ipv4RewriteSrc } from '../src/wire/rewrite.ts';
import { makeDefaultService, makeReadyEndpoint } from '../test/fixtures/model.ts';
import { benchAgainst, refuse } from './bench-ab.ts';
import { datapathFor6, flowSet6, replySet6, synSet6 } from './bench/harness6.ts';
import { COUNT_DEFAULTS, countRing, valgrindMissing } from './bench/count.ts';
import {
  ACK,
  beOf,
  checkAll,
  clientOf,
  type Datapath,
  datapathFor,
  flowSet,
  mpps,
  NOW,
  packetSet,
  type PacketSet,
  PKT,
  RING_MODES,
  replySet,
  ringOn,
  runCopyOnly,
  runSet,
  SYN,
  sportOf,
  synSet,
  STRIDE,
  timeIt,
  vipOf,
  writeTcp,
} from './bench/harness.ts';

const gcFn = (globalThis as { gc?: () => void }).gc;
if (!gcFn && process.env.KUBETUN_BENCH_CHILD !== '1') {
  const script = fileURLToPath(import.meta.url);
  const r = spawnSync(
    process.execPath,
    ['--expose-gc', '--import', 'tsx', script, ...process.argv.slice(2)],
    { stdio: 'inherit', env: { ...process.env, KUBETUN_BENCH_CHILD: '1' } },
  );
  process.exit(r.status ?? 1);
}

const QUICK = process.argv.includes('--quick');
/** --ring: only the event ring's off/on figures (issue 20) */
const RING_ONLY = process.argv.includes('--ring');
/** --no-v8-tune: keep V8's default inlining budget (to see what dpTuneV8 buys) */
const TUNE = !process.argv.includes('--no-v8-tune');
/** --against REV: A/B of this tree's program against REV's (scripts/bench-ab.ts) */
const AGAINST = argValue('--against');
const AB_ROUNDS = Number(argValue('--rounds') ?? 9);
/** --count instructions: callgrind's instructions per packet beside the wall time */
const COUNT = argValue('--count');
/** --jobs N: callgrind processes at once (--count) */
const JOBS = Number(argValue('--jobs') ?? COUNT_DEFAULTS.jobs);
/** --this REV: side A of --against is REV instead of the working tree */
const THIS_REV = argValue('--this');
if (TUNE) dpTuneV8();
const SCALES = [10, 1_000, 10_000, 100_000];
/** tracked flows for the established-flow runs (same at every scale: only services vary) */
const FLOWS = 65_536;
const EST_PACKETS = QUICK ? 2_000_000 : 8_000_000;
/** new flows per batch (the conntrack is cleared between batches, untimed) */
const NEW_BATCH = QUICK ? 131_072 : 262_144;
const NEW_PACKETS = QUICK ? 500_000 : 2_000_000;
const CT_FILL = QUICK ? 200_000 : 1_000_000;
const MIX_PACKETS = QUICK ? 2_000_000 : 10_000_000;

function argValue(flag: string): string | undefined {
  const i = process.argv.indexOf(flag);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

// ---- output ----------------------------------------------------------------------------------

function progress(msg: string): void {
  process.stderr.write(`  … ${msg}\n`);
}
function fmt(n: number, digits = 2): string {
  return n.toFixed(digits);
}
function mib(bytes: number): string {
  return `${(bytes / 1048576).toFixed(1)} MiB`;
}

// ---- phases ----------------------------------------------------------------------------------

interface ScaleRow {
  services: number;
  dnat: number;
  revnat: number;
  newFlows: number;
  harnessNs: number;
}

/** One address family's scenarios: the same services and flows, its own maps and packets. */
interface Family {
  name: 'IPv4' | 'IPv6';
  datapathFor(services: number, ctCapacity: number): Datapath;
  flowSet(services: number, flows: number, flags: number): PacketSet;
  synSet(services: number, n: number): PacketSet;
  replySet(dp: Datapath, services: number, flows: number): PacketSet;
  ct(dp: Datapath): ConntrackMap;
}
const V4: Family = { name: 'IPv4', datapathFor, flowSet, synSet, replySet, ct: (dp) => dp.ct };
const V6: Family = {
  name: 'IPv6',
  datapathFor: datapathFor6,
  flowSet: flowSet6,
  synSet: synSet6,
  replySet: replySet6,
  ct: (dp) => dp.ct6,
};

function benchScale(
  services: number,
  ctCapacity = DEFAULT_DATAPATH_CONFIG.ctCapacity,
  fam = V4,
): ScaleRow {
  progress(`${fam.name}, ${services} services, conntrack capacity ${ctCapacity}: seeding maps`);
  const dp = fam.datapathFor(services, ctCapacity);
  const orig = fam.flowSet(services, FLOWS, ACK);
  runSet(dp, fam.flowSet(services, FLOWS, SYN), 1, NOW); // create the flows
  const reply = fam.replySet(dp, services, FLOWS);
  const rounds = Math.max(1, Math.round(EST_PACKETS / FLOWS));
  progress(`${fam.name}, ${services} services: ${rounds * FLOWS} established packets each way`);
  runSet(dp, orig, 2, NOW); // warm up
  runSet(dp, reply, 2, NOW);
  const harness = timeIt(() => runCopyOnly(orig, rounds));
  const d = timeIt(() => runSet(dp, orig, rounds, NOW));
  const r = timeIt(() => runSet(dp, reply, rounds, NOW));
  checkAll(dp, 'TX_DNAT', d.result, rounds * FLOWS);
  checkAll(dp, 'TX_REVNAT', r.result, rounds * FLOWS);
  const harnessNs = harness.ns / (rounds * FLOWS);
  const newFlows =
    ctCapacity === DEFAULT_DATAPATH_CONFIG.ctCapacity ? benchNewFlows(services, fam) : 0;
  return {
    services,
    dnat: mpps(rounds * FLOWS, d.ns - harness.ns),
    revnat: mpps(rounds * FLOWS, r.ns - harness.ns),
    newFlows,
    harnessNs,
  };
}

/**
 * The event ring (monitor/tap): established DNAT with nobody listening (the one branch), with a
 * subscriber whose filter matches nothing (filters run, nothing written), with one that takes
 * every event, and with tap's byte capture. Off and on alternate, 5 rounds each, the median
 * kept: on a shared machine a neighbour's burst then hits both sides alike.
 */
function benchRing(): { off: number; none: number; all: number; capture: number } {
  const services = 1000;
  const dp = datapathFor(services, DEFAULT_DATAPATH_CONFIG.ctCapacity);
  const orig = flowSet(services, FLOWS, ACK);
  runSet(dp, flowSet(services, FLOWS, SYN), 1, NOW);
  runSet(dp, orig, 2, NOW);
  const rounds = Math.max(1, Math.round(EST_PACKETS / FLOWS / 4));
  progress(`event ring: ${rounds * FLOWS} established packets x 4 modes x 5`);
  const harness = timeIt(() => runCopyOnly(orig, rounds)).ns;
  const res: number[][] = RING_MODES.map(() => []);
  for (let rep = 0; rep < 5; rep++) {
    RING_MODES.forEach((mode, m) => {
      const k = ringOn(dp, mode);
      const t = timeIt(() => runSet(dp, orig, rounds, NOW));
      dp.events.unsubscribe(k);
      checkAll(dp, 'TX_DNAT', t.result, rounds * FLOWS);
      res[m].push(mpps(rounds * FLOWS, t.ns - harness));
    });
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  const [off, none, all, capture] = res.map(median);
  return { off, none, all, capture };
}

function printRing(): void {
  const ring = benchRing();
  const pct = (x: number) => `${fmt(((x - ring.off) / ring.off) * 100, 1)}%`;
  console.log(
    `event ring, established DNAT, 1000 services (median of 5, off/on alternating): off ${fmt(ring.off)} Mpps; on, filter matching nothing ${fmt(ring.none)} Mpps (${pct(ring.none)}); on, every event ${fmt(ring.all)} Mpps (${pct(ring.all)}); on with tap capture ${fmt(ring.capture)} Mpps (${pct(ring.capture)})`,
  );
  console.log(
    `load average after the ring runs ${loadavg()
      .map((l) => l.toFixed(1))
      .join(
        ' ',
      )} on ${cpus().length} CPUs (a shared machine: compare off with on, not with other runs)`,
  );
}

function benchNewFlows(services: number, fam = V4): number {
  const dp = fam.datapathFor(services, NEW_BATCH * 2);
  const ps = fam.synSet(services, NEW_BATCH);
  const batches = Math.max(1, Math.round(NEW_PACKETS / NEW_BATCH));
  progress(`${fam.name}, ${services} services: ${batches * NEW_BATCH} new flows`);
  runSet(dp, ps, 1, NOW); // warm up
  let ns = 0;
  const harness = timeIt(() => runCopyOnly(ps, batches));
  for (let k = 0; k < batches; k++) {
    fam.ct(dp).clear();
    const t = timeIt(() => runSet(dp, ps, 1, NOW));
    checkAll(dp, 'TX_DNAT_NEW', t.result, NEW_BATCH);
    ns += t.ns;
  }
  return mpps(batches * NEW_BATCH, ns - harness.ns);
}

/** 1M flows in a conntrack sized for them: bytes per flow and what the process grows by. */
function benchCtMemory(): CtMemResult {
  gcFn?.();
  const rss0 = process.memoryUsage().rss;
  const dp = datapathFor(1000, CT_FILL);
  const one = new Uint8Array(2 * STRIDE);
  writeTcp(one, STRIDE, clientOf(0), vipOf(0), 1024, 80, SYN);
  progress(`filling conntrack with ${CT_FILL} flows`);
  for (let f = 0; f < CT_FILL; f++) {
    flowPacket(one, f);
    if (dpProcess(dp, one, 0, PKT, NOW) !== 1) {
      throw new Error(`bench: flow ${f} not created (${REASON_NAMES[dp.lastReason]})`);
    }
  }
  const rss = process.memoryUsage().rss;
  // Established packets over all those flows in random order: the conntrack no longer fits in
  // any cache, the worst case for the per-packet lookups.
  writeTcp(one, STRIDE, clientOf(0), vipOf(0), 1024, 80, ACK);
  const order = new Uint32Array(CT_FILL);
  for (let i = 0; i < CT_FILL; i++) order[i] = (Math.imul(i, 0x9e3779b1) >>> 0) % CT_FILL;
  progress(`${CT_FILL} established packets over ${CT_FILL} flows, random order`);
  const harness = timeIt(() => {
    let x = 0;
    for (let i = 0; i < CT_FILL; i++) x += flowPacket(one, order[i]);
    return x;
  });
  const t = timeIt(() => {
    let tx = 0;
    for (let i = 0; i < CT_FILL; i++) {
      flowPacket(one, order[i]);
      if (dpProcess(dp, one, 0, PKT, NOW) === 1) tx++;
    }
    return tx;
  });
  return {
    bytesPerFlow: dp.ct.bytesPerFlow(),
    rssDelta: (rss - rss0) / CT_FILL,
    rss,
    flows: dp.ct.size,
    estMpps: mpps(CT_FILL, t.ns - harness.ns),
    estTx: t.result,
  };
}

interface CtMemResult {
  bytesPerFlow: number;
  rssDelta: number;
  rss: number;
  flows: number;
  /** established DNAT over all the flows in random order */
  estMpps: number;
  estTx: number;
}

/** The template at one[STRIDE..] rewritten into flow f's packet at one[0..]. */
function flowPacket(one: Uint8Array, f: number): number {
  one.copyWithin(0, STRIDE, STRIDE + PKT);
  ipv4RewriteSrc(one, 0, clientOf(f));
  l4RewriteSrcPort(one, 0, sportOf(f));
  return one[15];
}

/**
 * A long mixed run (established both ways, new flows, rejects, pass, ping, malformed) with the
 * heap measured before and after and GCs counted during it: a per-packet allocation shows up
 * as young-generation growth and scavenges.
 */
async function benchHeap(): Promise<HeapResult> {
  const services = 1000;
  const dp = datapathFor(services, 1 << 21);
  const ps = packetSet(FLOWS, writeMixed);
  dp.cfg.icmpRatePerSec = 0; // measure the reject path, not the limiter
  runSet(dp, ps, 8, NOW); // warm up: every path optimised before the heap is watched
  const rounds = Math.max(4, Math.round(MIX_PACKETS / FLOWS / 4) * 4);
  let gcs = 0;
  const obs = new PerformanceObserver((list) => {
    // Scavenges only: they are what per-packet allocation causes (gc() forces major ones).
    for (const e of list.getEntries()) {
      const kind = (e as unknown as { detail?: { kind?: number } }).detail?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MINOR) gcs++;
    }
  });
  obs.observe({ entryTypes: ['gc'] });
  progress(`mixed run of ${rounds * FLOWS} packets in 4 segments, heap watched`);
  const heap = new Float64Array(5);
  gcFn?.();
  heap[0] = process.memoryUsage().heapUsed;
  const c0 = process.cpuUsage();
  for (let seg = 1; seg <= 4; seg++) {
    runSet(dp, ps, rounds / 4, NOW);
    heap[seg] = process.memoryUsage().heapUsed;
  }
  const cpu = process.cpuUsage(c0);
  gcFn?.();
  const retained = process.memoryUsage().heapUsed - heap[0];
  // GC entries are delivered asynchronously: let them arrive, then discount the one forced above.
  await new Promise((r) => setTimeout(r, 20));
  obs.disconnect();
  const mix: string[] = [];
  for (let r = 0; r < REASON_COUNT; r++) if (dp.counters[r] > 0) mix.push(REASON_NAMES[r]);
  progress(`mix: ${mix.join(', ')}`);
  return {
    packets: rounds * FLOWS,
    growth: [1, 2, 3, 4].map((k) => heap[k] - heap[k - 1]),
    retained,
    gcs,
    mpps: (rounds * FLOWS) / (cpu.user + cpu.system),
  };
}

interface HeapResult {
  packets: number;
  /** heapUsed growth per quarter of the run, no GC forced in between */
  growth: number[];
  retained: number;
  gcs: number;
  mpps: number;
}

/** Packet f of the mixed run: established, stray reply, unknown port, pass, ping, bad csum. */
function writeMixed(b: Uint8Array, off: number, f: number): void {
  const k = f % 8;
  const c = clientOf(f);
  const vip = vipOf(f % 1000);
  if (k <= 2) {
    writeTcp(b, off, c, vip, sportOf(f), 80, ACK); // established after the first round
  } else if (k === 3) {
    writeTcp(b, off, beOf(f % 1000, 0), c, 8080, sportOf(f), ACK); // reply of no flow: pass
  } else if (k === 4) {
    writeTcp(b, off, c, vip, sportOf(f), 443, SYN); // unknown port: reject
  } else if (k === 5) {
    writeTcp(b, off, c, 0x0af40101, sportOf(f), 80, ACK); // not a service: pass
  } else if (k === 6) {
    writeTcp(b, off, c, vip, sportOf(f), 80, ACK);
    b[off + 9] = 1; // turned into an ICMP echo request to the VIP: dropped
    b[off + 20] = 8;
    ipv4FillCsum(b, off);
  } else {
    writeTcp(b, off, c, vip, sportOf(f), 80, ACK);
    b[off + 10] ^= 0xff; // bad IPv4 header checksum: dropped
  }
}

/** Control-plane cost: DpLoader.load of n services from the model, then an identical resync. */
function benchLoad(n: number): { full: number; resync: number } {
  const dp = createDatapath({ svcCapacity: n * 5 + 16, beCapacity: n * 3 + 16 });
  const ports: ResolvedServicePort[] = [];
  for (let i = 0; i < n; i++) {
    const svc = makeDefaultService(`svc-${i}`, {
      namespace: 'bench',
      clusterIPs: [`10.96.${(i >>> 8) & 255}.${i & 255}`],
      ports: [{ name: 'http', protocol: 'TCP', port: 80, targetPort: 8080, nodePort: 0 }],
    });
    const endpoints = [0, 1, 2].map((k) =>
      makeReadyEndpoint(`10.${244 + k}.${(i >>> 8) & 255}.${i & 255}`, 8080),
    );
    ports.push({
      service: svc,
      port: svc.ports[0],
      servicePortName: `bench/svc-${i}:http`,
      endpoints,
    });
  }
  progress(`DpLoader.load with ${n} services`);
  new DpLoader(createDatapath({ svcCapacity: n * 5 + 16, beCapacity: n * 3 + 16 })).load(ports); // JIT warm-up
  const loader = new DpLoader(dp);
  const t0 = process.hrtime.bigint();
  loader.load(ports);
  const t1 = process.hrtime.bigint();
  loader.load(ports);
  const t2 = process.hrtime.bigint();
  return { full: Number(t1 - t0) / 1e6, resync: Number(t2 - t1) / 1e6 };
}

// ---- main ------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const t0 = Date.now();
  if (COUNT !== undefined) {
    if (COUNT !== 'instructions') {
      refuse(`--count ${COUNT}: the one count is 'instructions' (--count instructions)`);
    }
    if (AGAINST === undefined && !RING_ONLY) {
      refuse('--count instructions goes with --against REV or --ring');
    }
    const why = valgrindMissing();
    if (why) refuse(why);
  }
  if (!Number.isInteger(JOBS) || JOBS < 1) {
    refuse(`--jobs ${argValue('--jobs')}: give a whole number >= 1`);
  }
  if (!Number.isInteger(AB_ROUNDS) || AB_ROUNDS < 1) {
    refuse(`--rounds ${argValue('--rounds')}: give a whole number >= 1`);
  }
  if (THIS_REV !== undefined && AGAINST === undefined) refuse('--this REV goes with --against REV');
  if (AGAINST !== undefined) {
    await benchAgainst(AGAINST, {
      rounds: AB_ROUNDS,
      quick: QUICK,
      count: COUNT !== undefined,
      thisRev: THIS_REV,
      jobs: JOBS,
    });
    return;
  }
  console.log(
    `kubetun datapath benchmark${QUICK ? ' (--quick)' : ''}: node ${process.version}, ${cpus()[0]?.model ?? '?'}, one core`,
  );
  console.log(
    TUNE
      ? 'V8 tuned by dpTuneV8 (inlining budget raised; --no-v8-tune for the default)'
      : 'V8 default inlining budget (--no-v8-tune)',
  );
  console.log('goals: >= 5 Mpps established, >= 1 Mpps new flows, <= 64 B per conntrack flow');
  console.log(
    `load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')} on ${cpus().length} CPUs; rates are per CPU-second of this process\n`,
  );
  if (RING_ONLY) {
    printRing();
    if (COUNT !== undefined) await countRing(QUICK, JOBS);
    return;
  }
  const mem = benchCtMemory();
  const rows = SCALES.map((n) => benchScale(n));
  const rows6 = SCALES.map((n) => benchScale(n, DEFAULT_DATAPATH_CONFIG.ctCapacity, V6));
  // The conntrack's hash index is 8 B per entry of capacity, touched at random: past the CPU
  // caches every lookup is a cache (and TLB) miss, so the table size matters more than the
  // number of services.
  const caps = [131_072, 1_048_576, 4_194_304].map((c) => [c, benchScale(1000, c)] as const);
  console.log(
    `${FLOWS} tracked flows, conntrack capacity ${DEFAULT_DATAPATH_CONFIG.ctCapacity} (the default)`,
  );
  console.log(
    'family | services | established DNAT | established revNAT | new flows (SYN) | new flows vs IPv4 |',
  );
  console.log(
    '-------|---------:|-----------------:|-------------------:|----------------:|------------------:|',
  );
  for (const [fam, rs] of [
    ['IPv4', rows],
    ['IPv6', rows6],
  ] as const) {
    rs.forEach((r, k) => {
      const vs = fam === 'IPv4' ? '' : `${fmt(r.newFlows / rows[k]!.newFlows)}x`;
      console.log(
        `${fam}   | ${String(r.services).padStart(8)} | ${fmt(r.dnat).padStart(11)} Mpps | ${fmt(r.revnat).padStart(13)} Mpps | ${fmt(r.newFlows).padStart(10)} Mpps | ${vs.padStart(17)} |`,
      );
    });
  }
  console.log(
    `established, 1000 services, ${FLOWS} flows, by conntrack capacity (default ${DEFAULT_DATAPATH_CONFIG.ctCapacity}):`,
  );
  for (const [c, r] of caps) {
    console.log(
      `  capacity ${String(c).padStart(7)}: DNAT ${fmt(r.dnat)} Mpps, revNAT ${fmt(r.revnat)} Mpps`,
    );
  }
  const h = rows[0].harnessNs;
  console.log(
    `(per-packet restore copy of the harness, ${fmt(h, 1)} ns, measured and subtracted)\n`,
  );
  console.log(
    `conntrack, ${mem.flows} flows: established DNAT in random flow order ${fmt(mem.estMpps)} Mpps (${mem.estTx} TX)`,
  );
  console.log(
    `conntrack: ${fmt(mem.bytesPerFlow, 1)} B/flow of typed arrays; ${mem.flows} flows; RSS ${mib(mem.rss)} (grew ${fmt(mem.rssDelta, 1)} B/flow incl. maps and packet scratch); an IPv6 flow ${fmt(createDatapath({ ctCapacity: 1024 }).ct6.bytesPerFlow(), 1)} B of typed arrays (capacity 1024: the 32 B header spread over fewer entries)`,
  );
  printRing();
  const heap = await benchHeap();
  const g = heap.growth.map((b) => `${b >= 0 ? '+' : ''}${b}`).join(' / ');
  // A quarter with a scavenge in it shows a drop; the largest quarter bounds the allocation.
  const perPkt = Math.max(...heap.growth) / (heap.packets / 4);
  console.log(
    `heap over ${heap.packets} mixed packets (${fmt(heap.mpps)} Mpps): growth per quarter ${g} B, ${heap.retained} B retained after GC, ${heap.gcs} scavenges during the run (<= ${fmt(perPkt, 2)} B/packet)`,
  );
  const load = benchLoad(QUICK ? 2000 : 10_000);
  console.log(
    `control plane: DpLoader.load ${QUICK ? 2000 : 10_000} services x 3 endpoints: full ${fmt(load.full, 0)} ms, identical resync ${fmt(load.resync, 0)} ms`,
  );
  console.log(`\ntotal ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

await main();

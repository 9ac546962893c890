// The reliability soak (issue 18 point 7): what an independent probe of a bad day would try,
// on a lab of its own, printed as figures — it asserts nothing. Needs root (the lab), curl, and
// the optional `raw-socket` package for the injection (skipped, and said so, without it).
//
//   npm run soak [-- --quick] [-- --conns N] [-- --seconds T] [-- --fuzz N] [-- --only a,b]
//
//   fuzz       N mutated packets (10M; --quick 500k) of the mixed-traffic stream through the
//              program in this process: exceptions (must be 0), broken invariants, packets/s
//   inject     crafted malformed packets sent from pod-a through a raw socket (IP_HDRINCL)
//              toward a VIP: node1's counters by reason, the agent's PID unchanged
//   load       N concurrent connections for T seconds from pod-d to the web VIP: requests,
//              errors, p50/p99, the client's TCP retransmits, the TUNs' kernel-side drops
//   churn      the same load to the api VIP while `lab rollout restart deploy/api` replaces its
//              Pods: failed requests
//   kill       kill -9 of node1's agent mid-download (pod-a -> 10.96.0.81, paced): the same
//              connection finished? bytes right? the VIP's dark time (a probe every 50 ms)
//   ctfull     node1's agent with --ct-max 64, a pool of 48 established connections, then new
//              ones: established kept, new refused
//
// load and churn run again with kube-proxy's iptables rules in the kernel (`lab mode iptables`)
// in the same run; kill and ctfull have no kernel counterpart in a lab (kube-proxy's rules and
// the kernel's conntrack outlive kube-proxy; the kernel's table is the host's, shared).
// The lab's prefix is KUBETUN_LAB_PREFIX (default ks-); it is taken down at the end.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { patternChunks } from '../lab/servers/pattern.mjs';
import { dpProcess } from '../src/datapath/program.ts';
import { REASON_COUNT, REASON_NAMES, reasonIsDrop } from '../src/datapath/state/reasons.ts';
import { V_DROP, V_REPLY } from '../src/datapath/state/verdict.ts';
import { DEFAULT_RESTART_GRACE_MS } from '../src/node/failure.ts';
import {
  clockMs,
  damage,
  HIGH_ADDRS,
  lcg,
  MixedTraffic,
  mixedDatapath,
  OFF,
} from '../test/datapath/mixed-traffic.ts';
import { NsProcess } from './bench-e2e/measure.ts';
import { injectFromPod } from './soak/inject.ts';
import { injectionClasses } from './soak/packets.ts';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    conns: { type: 'string' },
    seconds: { type: 'string' },
    fuzz: { type: 'string' },
    only: { type: 'string' },
  },
});
process.env.KUBETUN_LAB_PREFIX ||= 'ks-';
const lab = await import('../src/lab/lab.ts');
const { readState } = await import('../src/lab/state.ts');
const { labCtl } = await import('../src/lab/ctl.ts');
const { restartAgent } = await import('../src/lab/agent.ts');
const { LAB_PREFIX } = await import('../src/lab/topology.ts');

const QUICK = args.quick;
const CONNS = Number(args.conns ?? (QUICK ? 100 : 1000));
const SECONDS = Number(args.seconds ?? (QUICK ? 5 : 30));
const FUZZ = Number(args.fuzz ?? (QUICK ? 500_000 : 10_000_000));
const INJECT_EACH = QUICK ? 50 : 500;
const DL_BYTES = (QUICK ? 16 : 40) * 1024 * 1024;
const ONLY = args.only ? new Set(args.only.split(',')) : undefined;
const want = (s: string) => !ONLY || ONLY.has(s);
const HERE = import.meta.dirname;
const ROOT = join(HERE, '..');
const WEB = 'http://10.96.0.10/';
const API = 'http://10.96.0.70/';
const GRACE_NOTE = `the default ${DEFAULT_RESTART_GRACE_MS / 1000} s`;

const t0 = Date.now();
const say = (m: string) =>
  process.stderr.write(`[${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s] ${m}\n`);
const out = (m: string) => process.stdout.write(`${m}\n`);
const ns = (pod: string) => `${LAB_PREFIX}${pod}`;
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const tmp = mkdtempSync(join(tmpdir(), 'kubetun-soak-'));

// ---- fuzz: in this process, no lab --------------------------------------------------------

function fuzz(n: number): void {
  const dp = mixedDatapath(7, 4096, HIGH_ADDRS);
  const t = new MixedTraffic(HIGH_ADDRS);
  const rnd = lcg(7);
  let exceptions = 0;
  let broken = 0;
  let first = '';
  const start = performance.now();
  for (let k = 0; k < n; k++) {
    let len = t.next(k);
    if (rnd(3) !== 0) len = damage(t.buf, len, rnd);
    dp.lastReason = -1;
    try {
      const v = dpProcess(dp, t.buf, OFF, len, clockMs(k));
      t.after(v);
      const okReason = dp.lastReason >= 0 && dp.lastReason < REASON_COUNT;
      const okDrop = v !== V_DROP || reasonIsDrop(dp.lastReason);
      const okOut = v === V_REPLY ? dp.outLen > 20 && dp.outLen <= dp.out.length : dp.outLen === 0;
      if (!(v >= 0 && v <= 3 && okReason && okDrop && okOut)) broken++;
    } catch (err) {
      exceptions++;
      first ||= `packet ${k}: ${(err as Error).stack}`;
    }
  }
  const sec = (performance.now() - start) / 1000;
  const top = [...dp.counters.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 6)
    .map(([i, c]) => `${REASON_NAMES[i]} ${c}`);
  out(
    `fuzz: ${n} mutated packets (2 in 3 damaged) in ${sec.toFixed(1)} s (${Math.round(n / sec)} pps)`,
  );
  out(`  exceptions ${exceptions}, broken invariants ${broken}; top reasons: ${top.join(', ')}`);
  if (first) out(`  first exception: ${first}`);
}

// ---- the lab ------------------------------------------------------------------------------

function cli(argv: string[], timeoutMs = 300_000): string {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin/kubetun.mjs'), ...argv], {
    encoding: 'utf8',
    timeout: timeoutMs,
  });
  if (r.status !== 0) throw new Error(`kubetun ${argv.join(' ')}: ${r.stderr.trim()}`);
  return r.stdout;
}

function agentSocket(node: string): string {
  const p = readState()?.processes.find((x) => x.role === 'kubetun' && x.name === node);
  if (!p?.ctlSocket) throw new Error(`no kubetun on ${node}`);
  return p.ctlSocket;
}

interface Counters {
  counters: Record<string, number>;
  tunKernel: { txDropped: number; rxDropped: number };
}
const counters = (node: string) => labCtl<Counters>(agentSocket(node), { cmd: 'counters' });

async function tunDrops(): Promise<number> {
  let n = 0;
  for (const node of ['node1', 'node2']) {
    const c = await counters(node);
    n += c.tunKernel.txDropped + c.tunKernel.rxDropped;
  }
  return n;
}

function retransmits(pod: string): number {
  const snmp = spawnSync('ip', ['netns', 'exec', ns(pod), 'cat', '/proc/net/snmp'], {
    encoding: 'utf8',
  }).stdout;
  const [head, vals] = snmp.split('\n').filter((l) => l.startsWith('Tcp:'));
  const i = head!.split(/\s+/).indexOf('RetransSegs');
  return Number(vals!.split(/\s+/)[i]);
}

interface LoadResult {
  requests: number;
  errors: number;
  kinds: Record<string, number>;
  p50: number;
  p99: number;
  max: number;
  /** the load process's own event-loop delay (ms): how far behind its sockets it fell */
  loopDelayP99: number;
  loopDelayMax: number;
}

const clientLag = (r: LoadResult) =>
  `client event-loop delay p99 ${r.loopDelayP99} ms, max ${r.loopDelayMax} ms`;

async function runLoad(url: string, during?: () => Promise<void>): Promise<LoadResult> {
  const p = new NsProcess(ns('pod-d'), [
    process.execPath,
    join(HERE, 'soak/load.mjs'),
    url,
    String(CONNS),
    String(SECONDS),
  ]);
  if (during) await during();
  await p.wait();
  return JSON.parse(p.out.trim().split('\n').pop()!) as LoadResult;
}

async function load(mode: string): Promise<void> {
  const rt = retransmits('pod-d');
  const drops = mode === 'kubetun' ? await tunDrops() : 0;
  const r = await runLoad(WEB);
  const kd = mode === 'kubetun' ? `${(await tunDrops()) - drops}` : 'n/a';
  out(
    `load [${mode}]: ${CONNS} connections x ${SECONDS} s: ${r.requests} requests, ${r.errors} errors ${JSON.stringify(r.kinds)}, p50 ${r.p50} ms, p99 ${r.p99} ms, max ${r.max} ms; retransmits ${retransmits('pod-d') - rt}; TUN kernel-side drops ${kd}; ${clientLag(r)}; load ${loadavg()}`,
  );
}

async function churn(mode: string): Promise<void> {
  const r = await runLoad(API, async () => {
    await sleep((SECONDS * 1000) / 4);
    cli(['lab', 'rollout', 'restart', 'deploy/api']);
  });
  out(
    `churn [${mode}]: rollout restart of deploy/api under ${CONNS} connections x ${SECONDS} s: ${r.requests} requests, ${r.errors} failed ${JSON.stringify(r.kinds)}, p99 ${r.p99} ms; ${clientLag(r)}; load ${loadavg()}`,
  );
}

/**
 * One class at a time, so every counter that moved is that class's (and the TUN's drops); pod-a's
 * gateway resolved before each (scripts/soak/inject.ts: a loopback source otherwise waits for it).
 */
async function inject(): Promise<void> {
  try {
    createRequire(import.meta.url)('raw-socket');
  } catch {
    out('inject: skipped — the optional raw-socket package is not installed (npm i raw-socket)');
    return;
  }
  const pid = (await labCtl<{ pid: number }>(agentSocket('node1'), { cmd: 'status' })).pid;
  const classes = injectionClasses();
  out(`inject: ${classes.length} classes x ${INJECT_EACH} from pod-a toward VIPs, through node1`);
  for (const c of classes) {
    const before = await counters('node1');
    const sent = await injectFromPod(ns('pod-a'), c.packet, INJECT_EACH);
    await sleep(300);
    const after = await counters('node1');
    const moved = Object.entries(after.counters)
      .map(([k, v]) => [k, v - (before.counters[k] ?? 0)] as const)
      .filter(([, d]) => d > 0)
      .sort((x, y) => y[1] - x[1])
      .map(([k, d]) => `${k} ${d}`);
    const tunDrop = after.tunKernel.txDropped - before.tunKernel.txDropped;
    out(
      `  ${c.name.padEnd(18)} ${sent}; counted: ${moved.join(', ') || 'nothing'}; TUN tx_dropped ${tunDrop} (expected: ${c.expect})`,
    );
  }
  const pidAfter = (await labCtl<{ pid: number }>(agentSocket('node1'), { cmd: 'status' })).pid;
  out(`  node1's agent PID ${pid === pidAfter ? 'unchanged' : `CHANGED ${pid} -> ${pidAfter}`}`);
}

function patternSha(n: number): string {
  const h = createHash('sha256');
  for (const chunk of patternChunks(n)) h.update(chunk);
  return h.digest('hex');
}

async function kill(): Promise<void> {
  const file = join(tmp, 'dl.bin');
  // the probe on node1 (pod-b), whose agent is killed
  const probe = new NsProcess(ns('pod-b'), [
    process.execPath,
    join(HERE, 'soak/probe.mjs'),
    WEB,
    '50',
  ]);
  const curl = new NsProcess(ns('pod-a'), [
    'curl',
    '-sS',
    '--max-time',
    '180',
    '--limit-rate',
    '4M',
    '-o',
    file,
    '-w',
    '%{http_code} %{size_download} %{num_connects}',
    `http://10.96.0.81/bytes?n=${DL_BYTES}`,
  ]);
  await sleep(2000);
  const before = await labCtl<{ pid: number }>(agentSocket('node1'), { cmd: 'status' });
  const killedAt = Date.now();
  process.kill(before.pid, 'SIGKILL');
  let back = 0;
  for (let i = 0; i < 1200 && !back; i++) {
    await sleep(50);
    const s = await labCtl<{ pid: number }>(agentSocket('node1'), { cmd: 'status' }, 200).catch(
      () => undefined,
    );
    if (s && s.pid !== before.pid) back = Date.now() - killedAt;
  }
  const code = await curl.wait();
  await probe.stop();
  const dark = JSON.parse(probe.out.trim().split('\n').pop() ?? '{}') as {
    darkMs?: number;
    failed?: number;
  };
  // -w's report ends curl's output (its error, if any, is before it: stderr is merged)
  const [, http, size, conns] = /(\d{3}) (\d+) (\d+)\s*$/.exec(curl.out) ?? ['', '000', '0', '0'];
  const sha = code === 0 ? createHash('sha256').update(readFileSync(file)).digest('hex') : '';
  const after = await labCtl<{ pid: number; tookOverPid: number; readyToForwardMs: number }>(
    agentSocket('node1'),
    { cmd: 'status' },
  );
  out(
    `kill [kubetun]: (restart grace ${GRACE_NOTE}) kill -9 of node1's agent 2 s into a ${DL_BYTES / 1048576} MiB paced download: curl exit ${code}, HTTP ${http}, ${size} bytes over ${conns} connection(s) — same connection finished: ${code === 0 && conns === '1' ? 'yes' : 'NO'}, bytes right: ${sha === patternSha(DL_BYTES) ? 'yes' : 'NO'}`,
  );
  out(
    `  agent back (supervisor) after ${back} ms, took over: ${after.tookOverPid === before.pid ? 'yes' : 'no'}, ready-to-forward ${after.readyToForwardMs} ms after its start; VIP dark ${dark.darkMs} ms (${dark.failed} probes failed); load ${loadavg()}`,
  );
}

async function ctfull(): Promise<void> {
  await restartAgent('node1', ['--ct-max', '64'], () => {});
  const pool = new NsProcess(ns('pod-a'), [
    process.execPath,
    join(ROOT, 'lab/servers/pool.mjs'),
    '10.96.0.81',
    '80',
    '48',
  ]);
  await pool.waitFor(/ready \d+/, 20_000);
  const opened = /ready (\d+)/.exec(pool.out)?.[1];
  let refused = 0;
  const tries = 20;
  for (let i = 0; i < tries; i++) {
    const r = spawnSync(
      'ip',
      [
        'netns',
        'exec',
        ns('pod-a'),
        'curl',
        '-s',
        '-o',
        '/dev/null',
        '--max-time',
        '2',
        'http://10.96.0.10/',
      ],
      { encoding: 'utf8' },
    );
    if (r.status !== 0) refused++;
  }
  await sleep(4000); // the pool's connections send a request every 2 s: any lost one reopens
  // "reopening (k/48 open)" after every close, a failed reconnect included: the least k is how
  // many established connections were left at the worst
  const opens = [...pool.out.matchAll(/reopening \((\d+)\/\d+ open\)/g)].map((m) => Number(m[1]));
  const worst = opens.length ? Math.min(...opens) : Number(opened);
  const c = (await counters('node1')).counters;
  await pool.stop();
  out(
    `ctfull [kubetun]: --ct-max 64, a pool of ${opened}/48 established connections: ${refused}/${tries} new connections refused (DROP_CT_FULL ${c.DROP_CT_FULL ?? 0}), established kept: ${worst}/${opened} at the worst (${opens.length} reconnect attempts)`,
  );
  await restartAgent('node1', [], () => {});
}

async function main(): Promise<void> {
  out(`soak: ${QUICK ? 'quick' : 'full'} run, lab ${LAB_PREFIX}, load ${loadavg()}`);
  if (want('fuzz')) fuzz(FUZZ);
  const labParts = ['inject', 'load', 'churn', 'kill', 'ctfull'].filter(want);
  if (labParts.length === 0) return;
  say(`lab up (${LAB_PREFIX})`);
  labBuilt = true;
  await lab.labUp({ mode: 'kubetun', progress: (m: string) => say(`lab: ${m}`) });
  for (const part of labParts) {
    say(part);
    try {
      await { inject, load: () => load('kubetun'), churn: () => churn('kubetun'), kill, ctfull }[
        part as 'kill'
      ]();
    } catch (err) {
      out(`${part}: failed to run — ${(err as Error).message}`);
    }
  }
  if (want('load') || want('churn')) {
    say('lab mode iptables');
    cli(['lab', 'mode', 'iptables']);
    if (want('load')) await load('iptables');
    if (want('churn')) await churn('iptables');
  }
}

let labBuilt = false;
try {
  await main();
} finally {
  if (labBuilt) {
    say(`taking the ${LAB_PREFIX} lab down`);
    await lab.labDown({}).catch((err: Error) => say(`lab down: ${err.message}`));
  }
  rmSync(tmp, { recursive: true, force: true });
}

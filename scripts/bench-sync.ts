// Control-plane cost at scale: 10k services with 3 endpoints each, then one EndpointSlice
// change. Prints figures; asserts nothing.
//
//   npx tsx scripts/bench-sync.ts [services=10000] [changes=200] [--no-iptables] [--from-sources]
//
// 1. tracker alone (update, checkout, resolve)
// 2. kubetun: time to load the maps from scratch (DpLoader.load), one slice change through
//    Proxier + datapathSync (a partial sync: DpLoader.update of the one service port), and the
//    process memory holding it all (the agent's datapath at default capacities included)
// 3. the agent's path end to end, in a process of its own (scripts/bench-sync-child.ts): N
//    Services and their slices as YAML in a directory → manifest worker (read, parse, validate;
//    the agent's all-or-nothing first load) → trackers → sliced map writes, timed from the start
//    to the first full sync (wall and the process's CPU time: on a shared machine the CPU time is
//    the steadier figure), and that process's RSS after it. It runs what the agent runs: the
//    esbuild bundle (build/js's manifest worker, the child's modules bundled the same way into
//    build/bench/), unless --from-sources (through tsx, as the tests do). Then, as root, the
//    agent itself on the same directory (agentBench: `kubetun run` in a scratch netns): when it
//    was ready and had its steering in, and its RSS over 20 s — what that process leaves out
// 4. kube-proxy's iptables mode, if iptables-restore is there and we are root: the same
//    services rendered by src/rules (renderIptables) and restored into a scratch network
//    namespace, in full, then kube-proxy's partial restore for one changed endpoint
//    (--noflush; KUBE-SERVICES and the other shared chains rewritten, only the changed service's
//    SVC/SEP chains written), with the ratios to kubetun's figures.

import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FakeClock } from '../src/control/clock.ts';
import { datapathSync } from '../src/control/datapath-sync.ts';
import { Proxier } from '../src/control/proxier.ts';
import { ChangeTracker } from '../src/control/tracker.ts';
import { createDatapath } from '../src/datapath/state/datapath.ts';
import { DpLoader } from '../src/loader/load.ts';
import type { EndpointSlice, ResolvedServicePort, Service } from '../src/model.ts';
import { renderIptables } from '../src/rules/iptables.ts';
import { AGENT_NODE_OPTIONS } from '../src/runtime.ts';
import { parseManifests } from '../src/manifests/parse.ts';
import { parseAllDocuments } from 'yaml';
import { makeDefaultService } from '../test/fixtures/model.ts';

const ARGS = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const N = Number(ARGS[0] ?? 10_000);
const CHANGES = Number(ARGS[1] ?? 200);
const IPTABLES = !process.argv.includes('--no-iptables');
const FROM_SOURCES = process.argv.includes('--from-sources');
/** the node the agent-like process is (a third of the endpoints are on it) */
const NODE = 'node-0';
const RESTORE_TIMEOUT_MS = 300_000;

function ip(base: number, i: number): string {
  return `${base >>> 24}.${(base >>> 16) & 255}.${((i >>> 8) + ((base >>> 8) & 255)) & 255}.${i & 255}`;
}

function service(i: number): Service {
  return makeDefaultService(`svc-${i}`, {
    namespace: 'bench',
    clusterIPs: [ip(0x0a600000, i)],
    ports: [{ name: 'http', protocol: 'TCP', port: 80, targetPort: 8080, nodePort: 0 }],
  });
}

function slice(i: number, gen = 0): EndpointSlice {
  const endpoints = [0, 1, 2].map((k) => ({
    addresses: [ip(0x0af40000 + (k << 20), (i + gen) & 0xffff)],
    conditions: { ready: true, serving: true, terminating: false },
    nodeName: `node-${k}`,
  }));
  return {
    namespace: 'bench',
    name: `svc-${i}-abcde`,
    serviceName: `svc-${i}`,
    addressType: 'IPv4',
    ports: [{ name: 'http', protocol: 'TCP', port: 8080 }],
    endpoints,
  };
}

function ms(t0: number): string {
  return `${(performance.now() - t0).toFixed(1)} ms`;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** The machine's load average now: every figure is printed beside it (a shared machine). */
function loadavg(): string {
  return readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
}

process.stdout.write(`building ${N} services and slices... (load average ${loadavg()})\n`);
const services = Array.from({ length: N }, (_, i) => service(i));
const slices = Array.from({ length: N }, (_, i) => slice(i));

// ---- tracker alone -------------------------------------------------------------------------
{
  const t = new ChangeTracker();
  let t0 = performance.now();
  for (const s of services) t.services.update(null, s);
  for (const s of slices) t.endpointSlices.update(null, s);
  process.stdout.write(`tracker: ${N} services + ${N} slices update()      ${ms(t0)}\n`);
  t0 = performance.now();
  const ch = t.checkout();
  process.stdout.write(
    `tracker: checkout (${ch.changedServicePorts.length} service ports)   ${ms(t0)}\n`,
  );
  t0 = performance.now();
  const all = t.resolveAll();
  process.stdout.write(`tracker: resolveAll (${all.length})                    ${ms(t0)}\n`);

  const times: number[] = [];
  for (let k = 0; k < CHANGES; k++) {
    const i = (k * 7919) % N;
    const s0 = performance.now();
    t.endpointSlices.update(slice(i, k), slice(i, k + 1));
    const c = t.checkout();
    t.resolve(c.changedServicePorts[0]);
    times.push(performance.now() - s0);
  }
  process.stdout.write(
    `tracker: one slice change at ${N} (update+checkout+resolve), median of ${CHANGES}: ${(median(times) * 1000).toFixed(0)} µs\n`,
  );
}

// ---- kubetun: maps from scratch, then one slice change through the real sync path ----------
const mem0 = process.memoryUsage();
const figures = { scratchMs: 0, changeMs: 0, dirMs: 0 };
let allPorts: ResolvedServicePort[] = [];
{
  const t = new ChangeTracker();
  for (const s of services) t.services.update(null, s);
  for (const s of slices) t.endpointSlices.update(null, s);
  t.checkout();
  allPorts = t.resolveAll();
  const fresh = createDatapath({ svcCapacity: 1 << 17, beCapacity: 1 << 17 });
  const t0 = performance.now();
  new DpLoader(fresh).load(allPorts);
  figures.scratchMs = performance.now() - t0;
  process.stdout.write(
    `kubetun: load ${N} services x 3 endpoints into empty maps (DpLoader.load)  ${figures.scratchMs.toFixed(1)} ms\n`,
  );
}
{
  const clock = new FakeClock();
  const dp = createDatapath({ svcCapacity: 1 << 17, beCapacity: 1 << 17 });
  // one write per sync (no slices, no turns of the event loop): the cost of the writes alone
  const sync = datapathSync(dp, {}, undefined, Number.POSITIVE_INFINITY);
  let programMs = 0;
  let synced = () => {};
  const p = new Proxier({
    clock,
    onSync: () => synced(),
    program: (req) => {
      const c0 = performance.now();
      const r = sync.program(req);
      programMs += performance.now() - c0;
      return r;
    },
  });
  let t0 = performance.now();
  for (const s of services) p.onServiceUpdate(null, s);
  for (const s of slices) p.onEndpointSliceUpdate(null, s);
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  const feedMs = performance.now() - t0;
  t0 = performance.now();
  // a checkout of this size runs in steps (turns.ts): the sync ends on a later turn
  const first = new Promise<void>((r) => {
    synced = r;
  });
  clock.advance(0);
  await first;
  await new Promise((r) => setImmediate(r)); // the runner marks the sync done after onSync
  process.stdout.write(
    `kubetun: initial sync via Proxier: events ${feedMs.toFixed(1)} ms, sync ${(performance.now() - t0).toFixed(1)} ms (program ${programMs.toFixed(1)} ms)\n`,
  );
  const total: number[] = [];
  const prog: number[] = [];
  for (let k = 0; k < Math.min(CHANGES, 100); k++) {
    const i = (k * 7919) % N;
    programMs = 0;
    clock.advance(2000); // past the min interval: every change is its own sync
    const s0 = performance.now();
    p.onEndpointSliceUpdate(slice(i, k), slice(i, k + 1));
    clock.advance(0);
    total.push(performance.now() - s0);
    prog.push(programMs);
    if (sync.last.full || sync.last.written !== 1)
      throw new Error('expected a one-port partial sync');
  }
  figures.changeMs = median(total);
  process.stdout.write(
    `kubetun: one slice change at ${N} -> maps updated: ${(median(total) * 1000).toFixed(0)} µs ` +
      `(partial sync; DpLoader.update ${(median(prog) * 1000).toFixed(0)} µs), medians of ${total.length}\n`,
  );
  const m = process.memoryUsage();
  const mb = (x: number) => `${(x / 1048576).toFixed(0)} MiB`;
  process.stdout.write(
    `kubetun: memory with ${N} services (tracker + two datapaths at default capacities): rss ${mb(m.rss)} ` +
      `(+${mb(m.rss - mem0.rss)} since the figures above), heap ${mb(m.heapUsed)}, typed arrays ${mb(m.arrayBuffers)}; ` +
      `maps of one datapath: ${mb(dp.svc.buffer.byteLength + dp.be.buffer.byteLength + dp.revnat.buffer.byteLength + dp.ct.buffer.byteLength + dp.aff.buffer.byteLength)}\n`,
  );
  p.stop();
}

// ---- one Service with many annotation keys (the probe's control-plane stall, issue 18) ------
// yaml's own duplicate-key check is quadratic in the keys of one mapping; the manifests parser
// checks each key once (src/manifests/parse.ts yamlValues) and refuses annotations over the
// apiserver's 256 KiB. Parse-to-refusal time of the probe's three files, beside yaml's check.
{
  const text = (keys: number) => {
    const lines = ['apiVersion: v1', 'kind: Service', 'metadata:', '  name: big', '  annotations:'];
    for (let i = 0; i < keys; i++) lines.push(`    example.com/key-${i}: "${'v'.repeat(80)}"`);
    return `${lines.join('\n')}\nspec: {clusterIP: 10.96.0.99, ports: [{port: 80}]}\n`;
  };
  for (const keys of [9_200, 18_300, 97_000]) {
    const t = text(keys);
    let t0 = performance.now();
    try {
      parseManifests(t, 'big.yaml');
    } catch {
      // refused: metadata.annotations too long
    }
    const ours = performance.now() - t0;
    let theirs = 'not run (quadratic: minutes)';
    if (keys < 20_000) {
      t0 = performance.now();
      for (const d of parseAllDocuments(t)) d.toJS();
      theirs = `${(performance.now() - t0).toFixed(0)} ms`;
    }
    process.stdout.write(
      `manifests: one Service, ${keys} annotation keys (${(t.length / 1e6).toFixed(1)} MB) -> refused in ${ours.toFixed(0)} ms; yaml's own unique-key check ${theirs}\n`,
    );
  }
}

// ---- the agent's path: a manifests directory into the maps, in a process of its own ---------
function manifestYaml(i: number): string {
  const s = service(i);
  const sl = slice(i);
  const eps = sl.endpoints
    .map(
      (e) =>
        `- addresses: [${e.addresses[0]}]\n  conditions: {ready: true}\n  nodeName: ${e.nodeName}`,
    )
    .join('\n');
  return `apiVersion: v1
kind: Service
metadata: {name: ${s.name}, namespace: bench}
spec:
  clusterIP: ${s.clusterIPs[0]}
  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ${sl.name}
  namespace: bench
  labels: {kubernetes.io/service-name: ${s.name}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints:
${eps}
`;
}

/**
 * The agent-like child as the agent runs: bundled (build/js must match the sources: rebuilt
 * here when not), or through tsx. Returns node's argv for it.
 */
async function childArgv(): Promise<string[]> {
  const src = fileURLToPath(new URL('./bench-sync-child.ts', import.meta.url));
  if (FROM_SOURCES) return [...process.execArgv, src];
  const repo = fileURLToPath(new URL('../', import.meta.url));
  const { bundleFresh, buildBundle, ESBUILD_NODE } = await import('./build-js.mjs');
  if (!bundleFresh()) {
    process.stdout.write('kubetun: build/js is older than the sources: rebuilding it\n');
    await buildBundle();
  }
  const { build } = await import('esbuild');
  const outdir = join(repo, 'build', 'bench');
  rmSync(outdir, { recursive: true, force: true });
  await build({
    absWorkingDir: repo,
    entryPoints: [{ in: src, out: 'bench-sync-child' }],
    ...ESBUILD_NODE,
    outdir,
    logLevel: 'warning',
  });
  return [join(outdir, 'bench-sync-child.mjs')];
}

async function dirBench(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'kubetun-bench-sync-'));
  try {
    const per = 1000; // Services per file, as a generated directory might hold them
    for (let f = 0; f * per < N; f++) {
      const docs: string[] = [];
      for (let i = f * per; i < Math.min(N, (f + 1) * per); i++) docs.push(manifestYaml(i + 1));
      writeFileSync(join(dir, `svc-${String(f).padStart(3, '0')}.yaml`), docs.join('---\n'));
    }
    const argv = await childArgv();
    // the agent's V8 options (src/runtime.ts), as the lab and the DaemonSet start it
    const r = spawnSync(
      process.execPath,
      ['--expose-gc', ...AGENT_NODE_OPTIONS, ...argv, dir, NODE],
      {
        encoding: 'utf8',
        maxBuffer: 1 << 24,
      },
    );
    const line = r.stdout.trim().split('\n').pop() ?? '';
    if (r.status !== 0 || !line.startsWith('{')) {
      const why = r.error?.message ?? `exit ${r.status}: ${r.stderr.slice(-400)}`;
      process.stdout.write(`kubetun: directory end to end failed: ${why}\n`);
      return;
    }
    const f = JSON.parse(line) as {
      ms: number;
      cpuMs: number;
      rss: number;
      heap: number;
      heapTotal: number;
      steps: Record<string, number>;
      bundled: boolean;
    };
    figures.dirMs = f.ms;
    const mib = (x: number) => `${(x / 1048576).toFixed(0)} MiB`;
    const how = f.bundled ? 'the bundle, as the agent runs' : 'the sources through tsx';
    const st = f.steps;
    process.stdout.write(
      `kubetun: ${N} services from a directory (YAML) into the maps, end to end (worker parse, sliced sync; ${how}) ` +
        `${f.ms.toFixed(0)} ms wall, ${f.cpuMs.toFixed(0)} ms CPU (goal 1000 ms) — first ports written (prefill) at ${st.prefill} ms, ` +
        `in the trackers at ${st['manifests loaded']} ms, checked out for the first full sync at ${st.checkedOut} ms; that agent-like process's RSS ${mib(f.rss)} (goal 150 MiB), ` +
        `heap ${mib(f.heap)} used of ${mib(f.heapTotal)}; load average ${loadavg()}\n`,
    );
    await agentBench(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
await dirBench();

/**
 * The agent itself on the same directory (root): `kubetun run` as the lab starts it (its V8
 * options, bin/kubetun.mjs) in a scratch network namespace with a veth for an uplink, no pod
 * attached. Prints when it was ready to forward and when steering was in (its own log), and its
 * RSS sampled for AGENT_SAMPLE_S seconds after that: what `ps` shows of an agent at N Services
 * — the agent-like process above leaves out the packet loop, the steering and the watchdog.
 * Ended by its PID (SIGTERM: it removes its steering), the namespace deleted.
 */
async function agentBench(dir: string): Promise<void> {
  if (process.getuid?.() !== 0) {
    process.stdout.write('kubetun agent: skipped (needs root: a scratch netns)\n');
    return;
  }
  const AGENT_SAMPLE_S = 20;
  const ns = `kl-bench-agent-${process.pid}`;
  const repo = fileURLToPath(new URL('../', import.meta.url));
  const sh = (...argv: string[]) => spawnSync('ip', ['netns', 'exec', ns, ...argv]);
  spawnSync('ip', ['netns', 'add', ns]);
  let child: ReturnType<typeof spawn> | undefined;
  try {
    sh('ip', 'link', 'set', 'lo', 'up');
    sh('ip', 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p');
    sh('ip', 'addr', 'add', '192.168.77.2/24', 'dev', 'eth0');
    sh('ip', 'link', 'set', 'eth0', 'up');
    sh('ip', 'link', 'set', 'eth0p', 'up');
    sh('ip', 'route', 'add', 'default', 'via', '192.168.77.1', 'dev', 'eth0');
    const argv = [
      ...AGENT_NODE_OPTIONS,
      join(repo, 'bin/kubetun.mjs'),
      'run',
      ...['--manifests', dir, '--node-name', NODE, '--node-ip', '192.168.77.2'],
      ...['--pod-cidr', '10.244.0.0/24', '--service-cidr', '10.96.0.0/12'],
      ...['--metrics-bind-address', '0', '--healthz-bind-address', '0'],
    ];
    const t0 = performance.now();
    const c = spawn('ip', ['netns', 'exec', ns, process.execPath, ...argv], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child = c;
    const seen: Record<string, number> = {};
    let ready: { readyToForwardMs?: number } = {};
    let err = '';
    c.stderr.on('data', (b: Buffer) => {
      err = (err + b.toString()).slice(-400);
    });
    let buf = '';
    c.stdout.on('data', (b: Buffer) => {
      buf += b.toString();
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          const o = JSON.parse(line) as { msg?: string; readyToForwardMs?: number };
          if (o.msg && seen[o.msg] === undefined) seen[o.msg] = performance.now() - t0;
          if (o.msg === 'kubetun node agent ready') ready = o;
        } catch {
          // not a log line
        }
      }
    });
    const deadline = performance.now() + 120_000;
    while (seen['kubetun node agent ready'] === undefined && c.exitCode === null) {
      if (performance.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    if (seen['kubetun node agent ready'] === undefined) {
      process.stdout.write(`kubetun agent: not ready (exit ${c.exitCode}): ${err.trim()}\n`);
      return;
    }
    // `ip netns exec` execs the agent: the child's pid is the agent's
    const rss: number[] = [];
    for (let k = 0; k < AGENT_SAMPLE_S / 2; k++) {
      await new Promise((r) => setTimeout(r, 2000));
      rss.push(rssOf(c.pid!));
    }
    const mib = (x: number) => `${(x / 1048576).toFixed(0)}`;
    process.stdout.write(
      `kubetun agent (kubetun run, ${N} services, scratch netns): manifests loaded at ${seen['manifests loaded']?.toFixed(0)} ms, ` +
        `first sync at ${seen.synced?.toFixed(0)} ms, ready to forward ${ready.readyToForwardMs?.toFixed(0)} ms after its start, ` +
        `steering installed at ${seen['steering installed']?.toFixed(0)} ms (from the spawn); ` +
        `RSS every 2 s for ${AGENT_SAMPLE_S} s after: ${rss.map(mib).join(' ')} MiB (goal 150 MiB); load average ${loadavg()}\n`,
    );
  } finally {
    if (child && child.exitCode === null) {
      const exited = new Promise((r) => child?.once('exit', r));
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
    }
    spawnSync('ip', ['netns', 'del', ns]);
  }
}

/** A process's resident set, bytes (/proc/PID/status VmRSS); 0 when it is gone. */
function rssOf(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

// ---- kube-proxy iptables mode: iptables-restore into a scratch netns ------------------------
function iptablesBench(): void {
  // The legacy backend when present: the nf_tables one took over 5 minutes here for the full
  // 10k-service restore, which would time the ruleset translation more than anything else.
  const legacy = spawnSync('iptables-legacy-restore', ['--version'], { encoding: 'utf8' });
  const bin = legacy.status === 0 ? 'iptables-legacy-restore' : 'iptables-restore';
  const have = legacy.status === 0 ? legacy : spawnSync(bin, ['--version'], { encoding: 'utf8' });
  if (have.status !== 0 || process.getuid?.() !== 0) {
    process.stdout.write('iptables: skipped (needs root and iptables-restore)\n');
    return;
  }
  const ns = `kl-bench-ipt-${process.pid}`;
  const run = (argv: string[], input?: string) =>
    spawnSync('ip', ['netns', 'exec', ns, ...argv], {
      input,
      encoding: 'utf8',
      maxBuffer: 1 << 28,
      timeout: RESTORE_TIMEOUT_MS,
    });
  const timed = (argv: string[], input: string) => {
    const t0 = performance.now();
    const r = run(argv, input);
    if (r.error)
      throw new Error(`${argv.join(' ')}: ${r.error.message} (${RESTORE_TIMEOUT_MS} ms)`);
    if (r.status !== 0) throw new Error(`${argv.join(' ')}: ${r.stderr.slice(0, 400)}`);
    return performance.now() - t0;
  };
  spawnSync('ip', ['netns', 'add', ns]);
  try {
    const opts = { nodeName: 'node-0', clusterCIDR: '10.244.0.0/16', nfacct: false };
    const full = renderIptables(allPorts, opts);
    const lines = full.split('\n').length;
    const fullMs = timed([bin, '--noflush'], full);
    const changed = allPorts.map((r) => r);
    const i = 4242 % changed.length;
    const old = changed[i]!;
    changed[i] = {
      ...old,
      endpoints: [...old.endpoints.slice(1), { ...old.endpoints[0]!, ip: '10.250.9.9' }],
    };
    const partial = partialRestore(
      renderIptables(changed, opts),
      renderIptables([changed[i]!], opts),
    );
    const partMs = timed([bin, '--noflush'], partial);
    process.stdout.write(
      `${bin} (${have.stdout.trim()}): full restore of ${N} services (${lines} lines) ${fullMs.toFixed(0)} ms ` +
        `= ${(fullMs / figures.scratchMs).toFixed(1)}x kubetun's map load; ` +
        `partial restore for one endpoint (${partial.split('\n').length} lines) ${partMs.toFixed(0)} ms ` +
        `= ${(partMs / figures.changeMs).toFixed(0)}x kubetun's partial sync; ` +
        `full restore / kubetun's directory end to end (${figures.dirMs.toFixed(0)} ms) = ${(fullMs / figures.dirMs).toFixed(1)}x\n`,
    );
  } finally {
    spawnSync('ip', ['netns', 'del', ns]);
  }
}

/**
 * kube-proxy's partial sync input: the shared chains (KUBE-SERVICES, KUBE-NODEPORTS, ...)
 * declared and rewritten whole, and of the per-service chains (SVC/SEP/EXT/FW/SVL) only the
 * changed service's; the others are neither declared nor written, so --noflush leaves them.
 */
function partialRestore(full: string, one: string): string {
  const perService = /^(?::|-A |-X )(KUBE-(?:SVC|SEP|EXT|FW|SVL)-[A-Z0-9]+)/;
  const mine = new Set<string>();
  for (const l of one.split('\n')) {
    const m = perService.exec(l);
    if (m) mine.add(m[1]!);
  }
  return full
    .split('\n')
    .filter((l) => {
      const m = perService.exec(l);
      return !m || mine.has(m[1]!);
    })
    .join('\n');
}

if (IPTABLES) iptablesBench();

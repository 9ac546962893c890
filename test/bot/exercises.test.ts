// The solution bot (root): every exercise in lab/exercises/ that this checkout can run is
// started, found unsolved by `check`, fixed with exactly the commands `solution` prints (run by
// bash, as a learner would paste them, `kubetun` on PATH), found solved, and reset — after which
// the lab is as it was before the exercise (files, store, processes, flags, traffic). Then the
// shortcuts the README lists: routing around the fault must not pass `check` even when traffic
// flows — by editing the lab's files and through the control plane's API (`lab delete`, `lab
// apply`) alike, switching the data plane to the kernel or off, rebuilding the lab.
//
// One lab for all of it (the exercise lab; its data plane switched in place when an exercise
// runs in a kernel mode). The first exercise goes through the CLI a learner uses (start, check
// --json, solution --json, list --json, reset); the others call the same functions in-process
// (src/lab/exercise/run.ts — what the CLI's actions call), which saves a CLI start-up per step.
// The fix commands always run through bash and the real CLI.
//
// Run beside other labs with a prefix: KUBETUN_LAB_PREFIX=e1- npx vitest run --config vitest.bot.config.ts
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Deployment, Pod, Service } from '../../src/cluster/types.ts';
import { labSwitchMode } from '../../src/lab/compare/mode.ts';
import { listObjects } from '../../src/lab/exercise/cluster.ts';
import {
  EX_MANIFESTS,
  EX_TOPOLOGY,
  ensureExerciseLab,
  pristineManifestsDir,
  readProgress,
} from '../../src/lab/exercise/lab.ts';
import {
  type CheckReport,
  exerciseCheck,
  exerciseList,
  exerciseReset,
  exerciseSolution,
  exerciseStart,
  missingFeatures,
  runFixCommand,
} from '../../src/lab/exercise/run.ts';
import { type Exercise, loadExercises } from '../../src/lab/exercise/spec.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import { isAlive } from '../../src/lab/procs.ts';
import { inNs } from '../../src/sh.ts';
import { readState } from '../../src/lab/state.ts';
import { allPods, loadTopology } from '../../src/lab/topology.ts';

const ROOT = join(import.meta.dirname, '../..');
const t = loadTopology(join(ROOT, 'lab/topology.yaml'));
const quiet = () => {};

function kubetun(args: string[]): { out: string; err: string; status: number } {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin/kubetun.mjs'), ...args], {
    encoding: 'utf8',
    timeout: 240_000,
  });
  return { out: r.stdout, err: r.stderr, status: r.status ?? -1 };
}

type Checked = CheckReport & { status: number };

/** `exercise check` in-process, with the exit status the CLI gives it. */
async function check(answers: string[] = []): Promise<Checked> {
  const r = await exerciseCheck(answers);
  return { ...r, status: r.solved ? 0 : 1 };
}

/** `exercise check --json` through the CLI. */
function checkCli(): Checked {
  const r = kubetun(['lab', 'exercise', 'check', '--json']);
  return { ...(JSON.parse(r.out) as CheckReport), status: r.status };
}

function failing(r: CheckReport): string[] {
  return r.items.filter((i) => !i.ok).map((i) => `${i.title}: ${i.detail}`);
}

function curl(ns: string, url: string): string {
  const argv = inNs(ns, ['curl', '-sS', '-m', '3', url]);
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout: 10_000 });
  return r.status === 0 ? r.stdout.split(' ')[0]! : `fail ${r.status}`;
}

/** What "the lab as before" means: objects (files and store), processes, flags, traffic. */
async function fingerprint() {
  const s = readState()!;
  const files = (d: string) =>
    readdirSync(d)
      .filter((f) => f.endsWith('.yaml'))
      .sort()
      .map((f) => `${f}:${readFileSync(join(d, f), 'utf8')}`);
  const svcs = (await listObjects<Service>('Service')).map(
    (x) =>
      `${x.metadata.namespace}/${x.metadata.name} ${x.spec.type ?? 'ClusterIP'} ${x.spec.clusterIP} ${JSON.stringify(x.spec.ports)} ${JSON.stringify(x.spec.selector ?? {})} ${x.spec.sessionAffinity ?? 'None'} ${x.spec.externalTrafficPolicy ?? ''}`,
  );
  const deploys = (await listObjects<Deployment>('Deployment')).map(
    (d) =>
      `${d.metadata.namespace}/${d.metadata.name} x${d.spec.replicas} ${JSON.stringify(d.spec.template.spec)}`,
  );
  const pods = (await listObjects<Pod>('Pod')).filter((p) => !p.metadata.deletionTimestamp);
  const [pod0] = allPods(t);
  return {
    topology: s.topologyFile,
    createdAt: s.createdAt,
    mode: s.mode,
    objects: JSON.stringify(files(EX_MANIFESTS)) === JSON.stringify(files(pristineManifestsDir())),
    services: svcs.sort(),
    deployments: deploys.sort(),
    pods: pods.length,
    roles: s.processes.map((p) => `${p.role}/${p.name}`).sort(),
    alive: s.processes.every((p) => isAlive(p)),
    flags: Object.values(s.agentFlags ?? {}).flat(),
    web: allPods(t).map((p) => curl(p.ns, 'http://10.96.0.10/').startsWith('pod-')),
    // --vip-echo is off again: the VIP does not answer ping
    ping:
      spawnSync('ip', inNs(pod0!.ns, ['ping', '-c', '1', '-W', '1', '10.96.0.10']).slice(1))
        .status === 0,
  };
}

type Fingerprint = Awaited<ReturnType<typeof fingerprint>>;

/** The lab settles after a reset (terminating Pods go, agents reload): a few tries. */
async function settledFingerprint(want: Fingerprint): Promise<Fingerprint> {
  let got = await fingerprint();
  for (let i = 0; i < 40 && JSON.stringify(got) !== JSON.stringify(want); i++) {
    await sleep(1500);
    got = await fingerprint();
  }
  return got;
}

/**
 * Runs the fix commands as the solution prints them; every one must exit 0. They are what a
 * learner types: kubetun and shell tools, never the lab's insides (node, tsx, ip netns, src/).
 */
function applyFix(fix: string[]): void {
  for (const cmd of fix) {
    expect(cmd, 'a fix uses kubetun and shell tools only').not.toMatch(
      /\b(npx|node|tsx|nsenter)\b|\bip netns\b|\bsrc\//,
    );
    const r = runFixCommand(cmd);
    expect(r.status, `${cmd}\n${r.out}`).toBe(0);
  }
}

const runnable = loadExercises().filter((e) => missingFeatures(e).length === 0);
const [viaCli, ...inProcess] = runnable;
const timings: string[] = [];
/** What check said before and after each fix (printed at the end: the bot's own evidence). */
const evidence: string[] = [];

/** Seconds per phase of one exercise, for the timings line at the end. */
function phases() {
  let last = Date.now();
  const parts: string[] = [];
  return {
    mark(what: string) {
      parts.push(`${what} ${((Date.now() - last) / 1000).toFixed(1)}`);
      last = Date.now();
    },
    done: (name: string) => timings.push(`${name}: ${parts.join(', ')} s`),
  };
}

let before: Fingerprint;

beforeAll(async () => {
  // The exercise lab in its normal state; each exercise then changes only what it needs.
  await ensureExerciseLab('kubetun', quiet);
  await exerciseReset(quiet);
  before = await fingerprint();
  expect(before.web.every(Boolean), 'the normal lab serves web from every pod').toBe(true);
  expect(before.ping, 'a VIP does not answer ping by default').toBe(false);
}, 300_000);

afterAll(async () => {
  console.log(`solution bot evidence:\n  ${evidence.join('\n  ')}`);
  console.log(
    `solution bot timings (load ${readFileSync('/proc/loadavg', 'utf8').trim()}):\n  ${timings.join('\n  ')}`,
  );
  await labDown();
}, 180_000);

describe('the solution bot: start, check fails, the printed fix, check passes, reset', () => {
  it('every exercise this checkout can run is in the bot', () => {
    expect(runnable.length).toBeGreaterThanOrEqual(12);
    expect(runnable.map((e) => e.name)).toEqual(
      exerciseList()
        .filter((e) => e.waitsOn.length === 0)
        .map((e) => e.name),
    );
  });

  it(`${viaCli!.name}, through the CLI a learner uses`, async () => {
    const p = phases();
    const e = viaCli!;
    const start = kubetun(['lab', 'exercise', 'start', e.name]);
    expect(start.status, start.err).toBe(0);
    expect(start.out).toContain(e.symptom.split('\n')[0]!);
    p.mark('start');
    const broken = checkCli();
    expect(broken.status, 'check exits non-zero while unsolved').toBe(1);
    expect(failing(broken).length).toBeGreaterThan(0);
    p.mark('check');
    const sol = JSON.parse(kubetun(['lab', 'exercise', 'solution', '--json']).out) as {
      fix: string[];
    };
    expect(sol.fix).toEqual(e.solution.fix);
    applyFix(sol.fix);
    p.mark('solution+fix');
    const fixed = checkCli();
    expect(failing(fixed), 'every check holds after the fix').toEqual([]);
    expect(fixed.status).toBe(0);
    const list = JSON.parse(kubetun(['lab', 'exercise', 'list', '--json']).out) as {
      name: string;
      done: boolean;
    }[];
    expect(list.find((x) => x.name === e.name)?.done).toBe(true);
    p.mark('check+list');
    const reset = kubetun(['lab', 'exercise', 'reset']);
    expect(reset.status, reset.err).toBe(0);
    p.mark('reset');
    expect(await settledFingerprint(before)).toEqual(before);
    p.mark('settle');
    p.done(`${e.name} (CLI)`);
  }, 400_000);

  it.each(inProcess.map((e) => [e.name, e] as const))(
    '%s',
    async (name: string, e: Exercise) => {
      const p = phases();
      await exerciseStart(name, undefined, quiet);
      p.mark('start');
      const broken = await check();
      expect(broken.status, 'check exits non-zero while unsolved').toBe(1);
      expect(failing(broken).length).toBeGreaterThan(0);
      evidence.push(`${name} at start: ${failing(broken).join(' | ')}`);
      p.mark('check');
      expect(exerciseSolution().solution.fix).toEqual(e.solution.fix);
      applyFix(e.solution.fix);
      p.mark('fix');
      const fixed = await check();
      expect(failing(fixed), 'every check holds after the fix').toEqual([]);
      evidence.push(`${name} fixed: ${fixed.items.map((i) => i.detail).join(' | ')}`);
      expect(exerciseList().find((x) => x.name === name)?.done).toBe(true);
      p.mark('check');
      await exerciseReset(quiet);
      p.mark('reset');
      expect(await settledFingerprint(before)).toEqual(before);
      p.mark('settle');
      p.done(name);
    },
    400_000,
  );
});

describe('shortcuts are refused', () => {
  const fault = 'dataplane-down';
  const startFault = () => exerciseStart(fault, undefined, quiet);
  const webFlows = (r: CheckReport) => r.items.find((i) => i.title.includes('reaches web'))?.ok;

  it('switching the data plane to the kernel: traffic flows, check refuses', async () => {
    await startFault();
    await labSwitchMode('iptables', quiet);
    const r = await check();
    expect(r.status).toBe(1);
    expect(webFlows(r), 'traffic does flow: the refusal is the guard').toBe(true);
    expect(failing(r).join('\n')).toMatch(/now runs mode iptables/);
    await exerciseReset(quiet);
    expect(readState()!.mode).toBe('kubetun');
  }, 300_000);

  it('turning the data plane off (mode none): check refuses', async () => {
    await startFault();
    await labSwitchMode('none', quiet);
    const r = await check();
    expect(r.status).toBe(1);
    expect(failing(r).join('\n')).toMatch(/now runs mode none/);
    await exerciseReset(quiet);
    expect(await settledFingerprint(before)).toEqual(before);
  }, 300_000);

  const webDirect = `apiVersion: v1
kind: Service
metadata: { name: web-direct, namespace: default }
spec:
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  ports: [{ name: http, protocol: TCP, port: 80, targetPort: 8080 }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-direct-1
  namespace: default
  labels: { kubernetes.io/service-name: web-direct }
addressType: IPv4
ports: [{ name: http, protocol: TCP, port: 8080 }]
endpoints:
  - addresses: [10.244.1.2]
    conditions: { ready: true }
    nodeName: node1
    targetRef: { kind: Pod, namespace: default, name: pod-a }
`;

  /** check until the web traffic item holds (the data planes take the new objects in). */
  async function checkOnceWebFlows(): Promise<Checked> {
    let r = await check();
    for (let i = 0; i < 10 && !webFlows(r); i++) {
      await sleep(1000);
      r = await check();
    }
    return r;
  }

  /** web-direct carries the traffic, and check refuses it for what it is. */
  async function refusedThoughWebFlows(): Promise<void> {
    const r = await checkOnceWebFlows();
    expect(webFlows(r), 'traffic flows').toBe(true);
    expect(r.status).toBe(1);
    const why = failing(r).join('\n');
    expect(why).toMatch(/default\/web-direct was not there at start/);
    expect(why).toMatch(/default\/web was deleted/);
  }

  /** reset puts the store back as the files say: web-direct pruned, web with its ClusterIP. */
  async function resetRestoresWeb(): Promise<void> {
    await exerciseReset(quiet);
    const svcs = await listObjects<Service>('Service', 'default');
    expect(svcs.map((x) => x.metadata.name)).not.toContain('web-direct');
    expect(svcs.find((x) => x.metadata.name === 'web')?.spec.clusterIP).toBe('10.96.0.10');
    expect(await settledFingerprint(before)).toEqual(before);
  }

  it('in the files: deleting the Service and pointing a new one at a pod IP — traffic flows, check refuses', async () => {
    await startFault();
    expect(kubetun(['lab', 'agent', 'restart', 'node2']).status).toBe(0);
    rmSync(join(EX_MANIFESTS, 'web.yaml'));
    writeFileSync(join(EX_MANIFESTS, 'web-direct.yaml'), webDirect);
    await refusedThoughWebFlows();
    await resetRestoresWeb();
    expect(readdirSync(EX_MANIFESTS)).not.toContain('web-direct.yaml');
  }, 300_000);

  it('through the API: lab delete svc web, lab apply a Service at a pod IP — traffic flows, check refuses', async () => {
    await exerciseStart('selector-typo', undefined, quiet);
    expect(kubetun(['lab', 'delete', 'svc', 'web']).status).toBe(0);
    const dir = mkdtempSync(join(tmpdir(), 'kt-shortcut-'));
    writeFileSync(join(dir, 'web-direct.yaml'), webDirect);
    const ap = kubetun(['lab', 'apply', '-f', join(dir, 'web-direct.yaml')]);
    rmSync(dir, { recursive: true, force: true });
    expect(ap.out, ap.err).toContain('service/web-direct created');
    await refusedThoughWebFlows();
    await resetRestoresWeb();
  }, 300_000);

  // last: it rebuilds the lab
  it('rebuilding the lab instead of finding the fault: the exercise survives, check refuses', async () => {
    await startFault();
    const active = readProgress().active;
    expect(active?.name).toBe(fault);
    await labUp({ topology: EX_TOPOLOGY });
    expect(readProgress().active, 'the rebuild keeps the exercise').toEqual(active);
    const r = await check();
    expect(r.status).toBe(1);
    expect(failing(r).join('\n')).toMatch(/the lab was rebuilt/);
    // the rebuilt lab still runs on the exercise's own objects
    expect(readdirSync(EX_MANIFESTS).length).toBeGreaterThan(0);
    await exerciseReset(quiet);
  }, 300_000);
});

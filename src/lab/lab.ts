// Lab lifecycle: up (namespaces, links, routes, pod servers, one data plane per node), down
// (everything up made, also after a crash), and status. The host's root namespace is never
// touched: the underlay bridge lives in its own namespace.
import {
  existsSync,
  mkdtempSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { REPO_ROOT } from '../runtime.ts';
import { API_SOCKET } from './api.ts';
import { UserError } from '../errors.ts';
import { removeResolvConf } from '../cluster/dns/resolv-conf.ts';
import { sandboxNames } from '../cluster/kubelet.ts';
import type { Pod } from '../cluster/types.ts';
import { recordedSandboxes, renderStaticView } from './control-plane.ts';
import { checkManifestEndpoints, readLabServices } from './manifests.ts';
import { installKernelDataplane, isKernelMode } from './kube-proxy.ts';
import { labTarget, planLab, planLinks, planNode } from './plan.ts';
import { apiServerAt, prepareCredentials } from './apiserver.ts';
import { makeSaMountpoint, removeSaMountpoint } from './sa-mountpoint.ts';
import { writeAgentConfig } from './daemonset.ts';
import { isAlive, procStartTime, startInNs, stopProcess, tail, waitForLog } from './procs.ts';
import {
  ctlSocketFor,
  freshLog,
  NODE_TUN,
  runPhases,
  startAgent,
  startOnHost,
  stopAgent,
  waitAgent,
} from './provision.ts';
import { LabError } from './error.ts';
import { inNs, listNetns, shTry } from '../sh.ts';
import {
  type LabMode,
  type LabProcess,
  type LabState,
  CTL_DIR,
  LAB_DIR,
  LOG_DIR,
  readState,
  STATE_FILE,
  STORE_DIR,
  VIEW_DIR,
  writeState,
} from './state.ts';
import {
  allPods,
  LAB_PREFIX,
  labNamespaces,
  loadTopology,
  type Topology,
  targetNamespace,
} from './topology.ts';

function podNamespaces(t: Topology): Set<string> {
  return new Set(allPods(t).map((p) => p.ns));
}

export { REPO_ROOT };
export const DEFAULT_TOPOLOGY = join(REPO_ROOT, 'lab', 'topology.yaml');
/** The TUN device kubetun creates in each node namespace. */
export const LAB_TUN = NODE_TUN;

export type Progress = (msg: string) => void;
const quiet: Progress = () => {};

export interface UpOptions {
  topology?: string;
  mode?: LabMode;
  /** kubetun mode: the agents run without TUN offloads (`kubetun run --no-offload`) */
  noOffload?: boolean;
  /** what the agents read: the view directory (default) or the lab's API server */
  source?: 'dir' | 'api';
  progress?: Progress;
}

export async function labUp(opts: UpOptions = {}): Promise<LabState> {
  try {
    return await withLabLock(() => upUnlocked(opts));
  } finally {
    // A lab up refused before it built anything (a bad manifest) leaves no empty directory.
    rmEmptyDir(LAB_DIR);
  }
}

/** The agents' source when `lab up` is not told: KUBETUN_LAB_SOURCE (so the lab tests run in API mode too), else dir. */
export function defaultLabSource(): 'dir' | 'api' {
  const v = process.env.KUBETUN_LAB_SOURCE;
  if (v === undefined || v === '' || v === 'dir') return 'dir';
  if (v === 'api') return 'api';
  throw new UserError('LAB_SOURCE', `KUBETUN_LAB_SOURCE=${v}: use dir or api`);
}

async function upUnlocked(opts0: UpOptions): Promise<LabState> {
  const opts = { ...opts0, source: opts0.source ?? defaultLabSource() };
  const say = opts.progress ?? quiet;
  const mode = opts.mode ?? 'kubetun';
  const t = loadTopology(opts.topology ?? DEFAULT_TOPOLOGY);
  await checkView(t);
  const prev = readState();
  if (
    prev &&
    prev.phase === 'up' &&
    prev.topologyFile === t.file &&
    prev.topologyHash === t.hash &&
    prev.mode === mode &&
    (prev.noOffload ?? false) === (opts.noOffload ?? false) &&
    (prev.source ?? 'dir') === (opts.source ?? 'dir') &&
    labHealthy(prev)
  ) {
    say(`lab is already up (${t.nodes.length} nodes, mode ${mode}); nothing to do`);
    return prev;
  }
  const leftovers = labNamespaces(t).filter((ns) => listNetns().includes(ns));
  if (prev || leftovers.length > 0) {
    say('removing the previous lab first');
    // an exercise's topology, objects and progress outlive the rebuild: `exercise check` then
    // judges the rebuild (a shortcut) instead of losing the exercise and the lab's own objects
    await downUnlocked({ topology: t.file, keepExercise: true });
  }
  const state: LabState = {
    version: 1,
    topologyFile: t.file,
    topologyHash: t.hash,
    mode,
    noOffload: opts.noOffload,
    source: opts.source,
    phase: 'building',
    createdAt: new Date().toISOString(),
    // the pods' namespaces are the kubelets' (recorded in SANDBOX_FILE as they make them)
    namespaces: labNamespaces(t).filter((ns) => !podNamespaces(t).has(ns)),
    links: planLinks(t),
    processes: [],
  };
  writeState(state);
  try {
    await build(t, state, say);
  } catch (err) {
    say('lab up failed; removing what was built');
    await downUnlocked({ topology: t.file, keepLogs: true, keepStore: true, progress: say });
    throw err;
  }
  state.phase = 'up';
  writeState(state);
  say(
    `lab is up: ${t.nodes.length} nodes, ${t.nodes.reduce((a, n) => a + n.pods.length, 0)} pods, mode ${mode}`,
  );
  say(
    `next: kubetun lab demo curl-vs-ping (then: lab status, svc list --node ${t.nodes[0]?.name ?? 'node1'}, lab compare; lab down when done)`,
  );
  return state;
}

async function build(t: Topology, state: LabState, say: Progress): Promise<void> {
  // The machines and the wire between them are lab-only; each node is then provisioned by the
  // same code `kubetun lab provision-node` runs in a Vagrant VM (src/lab/provision.ts), and its
  // Pods by the kubelets of the control plane, with that code's per-pod plan (plan.ts planPod).
  runPhases(planLab(t), say);
  for (const n of t.nodes) runPhases(planNode(t, n, labTarget(n), { pods: false }), say);
  await startControlPlane(t, state, say);
  if (state.source === 'api') await startApiServer(t, state, say);
  if (state.mode === 'kubetun') await startKubetun(t, state, say);
  if (isKernelMode(state.mode)) installKernelDataplane(t, state.mode, say);
}

/**
 * The view this topology and its manifests give, computed before anything is touched: an
 * object the apiserver would refuse, or a hand-written endpoint that is no pod of the topology
 * (a typo that would otherwise be a mysterious timeout much later), stops `lab up` here.
 */
async function checkView(t: Topology): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'kubetun-view-'));
  try {
    const refused: string[] = [];
    await renderStaticView(t, dir, (m) => refused.push(m));
    const problems = [
      ...refused,
      ...checkManifestEndpoints(t, readLabServices(dir)),
      // a dual-stack topology: the IPv6 endpoints too (a hand-written IPv6 slice)
      ...(t.ipv6 ? checkManifestEndpoints(t, readLabServices(dir, 'IPv6'), 'IPv6') : []),
    ];
    if (problems.length > 0)
      throw new UserError(
        'LAB_MANIFESTS',
        `manifests do not match the topology:\n  ${problems.join('\n  ')}`,
      );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The control plane runs on the machine that runs the lab (on node1 in the VM lab): a process
 * of its own, so `lab apply` and the controllers outlive the command that started them.
 */
async function startControlPlane(t: Topology, state: LabState, say: Progress): Promise<void> {
  const argv = [process.execPath, join(REPO_ROOT, 'bin/kubetun.mjs'), 'lab', 'control-plane'];
  argv.push('--topology', t.file);
  const p = remember(
    state,
    startOnHost('control-plane', 'control-plane', argv, freshLog('control-plane.log')),
  );
  say(`control plane: store ${STORE_DIR}, view ${VIEW_DIR}, API ${API_SOCKET}`);
  await waitForLog(p, /^synced /m, 90_000);
  say(`control plane synced: ${tail(p.log, 1).trim()}`);
}
/**
 * --source api: the lab's API server (apiserver.ts) in node1's namespace, serving the view and
 * the Nodes over HTTPS with a ServiceAccount token; the agents' config file from the ConfigMap.
 */
async function startApiServer(t: Topology, state: LabState, say: Progress): Promise<void> {
  const at = apiServerAt(t);
  prepareCredentials(at.host);
  writeAgentConfig(t);
  makeSaMountpoint();
  const argv = [process.execPath, join(REPO_ROOT, 'bin/kubetun.mjs'), 'lab', 'apiserver'];
  argv.push('--topology', t.file);
  const log = freshLog('apiserver.log');
  const p = remember(state, startInNs('apiserver', 'apiserver', at.ns, argv, log));
  await waitForLog(p, /serving https:/m, 90_000);
  say(`API server: https://${at.host}:${at.port} (${tail(p.log, 1).trim()})`);
}

export async function startKubetun(t: Topology, state: LabState, say: Progress): Promise<void> {
  const agents = t.nodes.map((n) => {
    const extra = agentExtra(state, n.name);
    const p = startAgent(t, n, labTarget(n), ctlSocketFor(n), extra, VIEW_DIR, state.source);
    say(`kubetun on ${n.name}: ${p.argv.slice(1).join(' ')}`);
    return remember(state, p);
  });
  await Promise.all(
    agents.map(async (a) => {
      await waitAgent(a);
      say(`kubetun on ${a.name} answers on ${a.ctlSocket}`);
    }),
  );
}

/** The node's extra `kubetun run` flags: the lab's --no-offload, then its `lab agent` flags. */
export function agentExtra(state: LabState, node: string): string[] {
  return [...(state.noOffload ? ['--no-offload'] : []), ...(state.agentFlags?.[node] ?? [])];
}

export function remember(state: LabState, p: LabProcess): LabProcess {
  state.processes.push(p);
  writeState(state);
  return p;
}

/** Every namespace there and every process alive. */
export function labHealthy(s: LabState): boolean {
  const present = new Set(listNetns());
  return s.namespaces.every((ns) => present.has(ns)) && s.processes.every((p) => isAlive(p));
}

export interface DownResult {
  namespaces: string[];
  processes: number;
}

/**
 * Ends the lab's processes (by PID, checked against their start time), then any process still
 * inside a lab namespace (only the lab puts processes there), then deletes the namespaces,
 * which takes every veth, bridge and TUN with them. Safe to run any number of times.
 */
export interface DownOptions {
  topology?: string;
  progress?: Progress;
  /** keep LOG_DIR (the agents', servers' and captures' logs); everything else goes */
  keepLogs?: boolean;
  /**
   * keep the control plane's store (objects and allocations): `lab up` rebuilding a lab does,
   * so ClusterIPs and NodePorts survive the restart; `lab down` removes it unless asked
   */
  keepStore?: boolean;
  /** keep the exercise directory (src/lab/exercise/lab.ts): a rebuilding `lab up` does */
  keepExercise?: boolean;
}

export async function labDown(opts: DownOptions = {}): Promise<DownResult> {
  const r = await withLabLock(() => downUnlocked(opts));
  // The lock lived in LAB_DIR; with it gone the directory is empty unless logs were kept.
  rmEmptyDir(LAB_DIR);
  return r;
}

async function downUnlocked(opts: DownOptions): Promise<DownResult> {
  const say = opts.progress ?? quiet;
  const state = readState();
  let t: Topology | undefined;
  try {
    t = loadTopology(state?.topologyFile ?? opts.topology ?? DEFAULT_TOPOLOGY);
  } catch {
    t = undefined;
  }
  const procs = [...(state?.processes ?? [])].reverse().filter((p) => isAlive(p));
  if (procs.length > 0) say(`stopping ${procs.length} processes`);
  await Promise.all(procs.map((p) => (p.role === 'kubetun' ? stopAgent(p) : stopProcess(p))));
  let stopped = procs.length;
  const wanted = new Set([
    ...(state?.namespaces ?? []),
    ...(t ? labNamespaces(t) : []),
    ...recordedSandboxes(),
  ]);
  const present = listNetns().filter((ns) => wanted.has(ns) && ns.startsWith(LAB_PREFIX));
  for (const ns of present) stopped += await stopNsProcesses(ns);
  if (present.length > 0) say(`deleting ${present.length} namespaces`);
  for (const ns of present) {
    removeResolvConf(ns);
    const r = shTry(['ip', 'netns', 'del', ns]);
    if (!r.ok) throw new LabError(`ip netns del ${ns}: ${r.err.trim()}`);
  }
  const kept = new Set(['lock']);
  if (opts.keepLogs) kept.add('logs');
  if (opts.keepStore) kept.add('store');
  if (opts.keepExercise) kept.add('exercise');
  removeLabFiles(state, t, kept);
  removeSaMountpoint(); // any lab's: the last one down removes it
  say(present.length + stopped > 0 ? 'lab is down' : 'no lab to take down');
  if (opts.keepLogs && existsSync(LOG_DIR)) say(`logs kept in ${LOG_DIR}`);
  if (opts.keepStore && existsSync(STORE_DIR)) say(`store kept in ${STORE_DIR}`);
  return { namespaces: present, processes: stopped };
}

/**
 * Everything the lab wrote under its prefix's directories (src/lab/prefix.ts): each agent's
 * socket and the undo file `kubetun run` keeps beside it (node/failure.ts: the namespace it
 * would undo is gone, so a later run must not find it), the control-socket directory once
 * empty, and the state directory but for the entries in `kept` (always the lock; if asked the
 * control plane's store, the logs, the exercise directory).
 */
function removeLabFiles(state: LabState | undefined, t: Topology | undefined, kept: Set<string>) {
  const sockets = new Set(state?.processes.flatMap((p) => (p.ctlSocket ? [p.ctlSocket] : [])));
  for (const n of t?.nodes ?? []) sockets.add(ctlSocketFor(n));
  for (const sock of sockets) {
    const base = sock.replace(/\.sock$/, '');
    rmSync(sock, { force: true });
    rmSync(`${base}.state.json`, { force: true });
    rmSync(`${base}.maps`, { force: true }); // pinned maps of a crashed agent (node/pin.ts)
    const dir = dirname(sock);
    const lease = `${basename(base)}.lease.`; // its lease (node/failure.ts)
    for (const f of existsSync(dir) ? readdirSync(dir) : []) {
      if (f.startsWith(lease)) rmSync(join(dir, f), { force: true });
    }
  }
  rmEmptyDir(CTL_DIR);
  let entries: string[] = [];
  try {
    entries = readdirSync(LAB_DIR);
  } catch {
    return;
  }
  for (const e of entries) {
    // The store can outlive a lab, as etcd outlives its apiserver (src/lab/control-plane.ts);
    // the lock's holder removes it.
    if (kept.has(e)) continue;
    rmSync(join(LAB_DIR, e), { recursive: true, force: true });
  }
  rmSync(STATE_FILE, { force: true });
}

/** rmdir that leaves a directory someone still uses (not empty, or never there) alone. */
function rmEmptyDir(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // ENOTEMPTY: something else lives there (another `kubetun run`); ENOENT: already gone.
  }
}

/** Stragglers (a tcpdump from a killed demo, an exec'd shell) keep a namespace alive. */
async function stopNsProcesses(ns: string): Promise<number> {
  const pids = shTry(['ip', 'netns', 'pids', ns])
    .out.split('\n')
    .map((l) => Number(l.trim()))
    .filter((n) => Number.isInteger(n) && n > 0 && n !== process.pid);
  const procs = pids.flatMap((pid) => {
    const startTime = procStartTime(pid);
    return startTime === undefined ? [] : [{ pid, startTime }];
  });
  await Promise.all(procs.map((p) => stopProcess(p, 1000)));
  return procs.length;
}

/** argv to run cmd in a lab target (pod, node, client or "underlay"). */
export function execArgv(ns: string, cmd: string[]): string[] {
  return inNs(ns, cmd);
}

/**
 * The network namespace `lab exec TARGET` runs in: a node, client, "underlay" or named pod of
 * the topology, else any Pod of the store by name in `namespace` (a Deployment's Pod
 * api-7c9f…-x2k4q): its sandbox, named as the kubelet names it. Undefined when no such
 * namespace exists on this machine (the lab is down, or there is no such Pod).
 */
export function execNamespace(t: Topology, target: string, namespace: string): string | undefined {
  const present = new Set(listNetns());
  const named = namespace === 'default' ? targetNamespace(t, target) : undefined;
  if (named) return present.has(named) ? named : undefined;
  const { ns } = sandboxNames({ metadata: { name: target, namespace } } as Pod);
  return present.has(ns) ? ns : undefined;
}

export const LOCK_FILE = join(LAB_DIR, 'lock');

/**
 * One lab command at a time: two concurrent `lab up`s would build the same namespaces. The lock
 * file holds the owner's PID, so a lock left by a killed command is taken over, not obeyed.
 */
export async function withLabLock<T>(fn: () => Promise<T>): Promise<T> {
  mkdirSync(LAB_DIR, { recursive: true });
  for (let attempt = 0; ; attempt++) {
    try {
      writeFileSync(LOCK_FILE, `${process.pid}\n`, { flag: 'wx' });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw err;
      const owner = Number(readFileSync(LOCK_FILE, 'utf8').trim());
      if (owner > 0 && owner !== process.pid && procStartTime(owner) !== undefined) {
        throw new LabError(
          `another lab command (pid ${owner}) is running; if it is not, remove ${LOCK_FILE}`,
        );
      }
      rmSync(LOCK_FILE, { force: true });
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(LOCK_FILE, { force: true });
  }
}

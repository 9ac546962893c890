// The lab an exercise runs on, as the engine (run.ts, actions.ts, checks.ts, guards.ts) sees it:
// its topology and where its namespaces' commands run, its data plane and each node's agent,
// its Services as the data planes read them, where the exercise's progress is kept, and what it
// cannot do. Two kinds, and nothing in the engine knows which:
//
//   namespace lab   (ns-lab.ts) `lab up`'s exercise lab on this machine: the living cluster with
//                   its control plane, agents as lab processes, workloads, every capability
//   VM lab          (vm-lab.ts) the Vagrant VMs, from the host over ssh (lab/vms.ts): a static
//                   view, kubetun.service on each node broken and repaired through the node's
//                   provisioning (`provision-node --agent crash|restart`), progress on the host
//
// An exercise needs capabilities by what its setup, checks and fix use (exerciseNeeds); a lab
// that lacks one says why, and the engine refuses the exercise with that reason in one line.
import type { EndpointSlice, Pod, Service } from '../../cluster/types.ts';
import type { NsRoute } from '../../sh.ts';
import { LabError } from '../error.ts';
import type { Progress } from '../lab.ts';
import type { LabMode } from '../state.ts';
import type { Topology } from '../topology.ts';
import type { Action, Exercise } from './spec.ts';

/** What some exercises need beyond traffic, agents and the kernel's tools in the namespaces. */
export type Capability = 'control-plane' | 'workloads' | 'agent-socket' | 'kernel-modes';

/** One node's kubetun as the lab sees it now. */
export interface AgentNow {
  /** why it does not serve, if it does not (not running, not answering) */
  problem?: string;
  /** its extra `kubetun run` flags (`lab agent restart NODE -- FLAGS`) */
  flags: string[];
}

/** The lab as it stands. */
export interface LabNow {
  mode: LabMode;
  /** this build of the lab: a rebuild changes it, and with it the fault is gone */
  createdAt: string;
  /** its names are the lab's (routed on a lab of other machines) */
  topology: Topology;
  /** it is the exercise lab (not another lab that happens to be up) */
  exerciseLab: boolean;
  /** per node, in kubetun mode */
  agents: Record<string, AgentNow>;
}

/** Services, EndpointSlices and Pods as one reader sees them (`where`: '' or a node). */
export interface LabObjects {
  where: string;
  services: Service[];
  slices: EndpointSlice[];
  pods: Pod[];
}

/** A process an exercise runs in a pod (a connection pool, a resolver). */
export interface Workload {
  ns: string;
  pid: number;
  alive: boolean;
  /** its log so far */
  log: string;
}

export interface ExerciseLab {
  /** for messages: "the namespace lab", "the VM lab (node1, node2, client; …)" */
  name: string;
  /** its topology as written (node and client addresses: forLab) */
  addresses: Topology;
  /** where progress.json, undo.json and the fix commands' kubetun live */
  dir: string;
  /** what rebuilds it (the guard names it): `lab up`, a new provisioning */
  rebuiltBy: string;
  /** the environment the fix commands run with: their `kubetun` reaches this lab */
  env: Record<string, string>;
  /** where its namespaces' commands run; undefined: this machine (`ip netns exec`) */
  route?: NsRoute;
  /** the repository where its pods are (lab/servers/*.mjs) */
  repo: string;
  /** what it cannot do, and why */
  lacks: Partial<Record<Capability, string>>;
  /** the command that puts the lab's data plane back to `mode` (the guard's hint) */
  modeCommand(mode: LabMode): string;
  /** before the first command and after the last (connections) */
  open(): void;
  close(): void;

  /** the lab now; undefined when it is not up */
  now(): Promise<LabNow | undefined>;
  /** the exercise lab in `mode`, kept when it runs, else brought up or switched */
  ensure(mode: LabMode, say: Progress): Promise<LabNow>;
  /** back to normal: objects, workloads, every agent running with no extra flags */
  normalise(say: Progress): Promise<string[]>;
  switchMode(mode: LabMode, say: Progress): Promise<void>;
  /** the objects as every data plane reads them, now (edits made just now taken in first) */
  syncDataplanes(say: Progress): Promise<void>;
  objects(): Promise<LabObjects[]>;

  /** SIGKILL, as the OOM killer does; it stays down, the node fails open */
  crashAgent(node: string): Promise<void>;
  /** flags undefined: keep; returns the flags in force */
  restartAgent(node: string, flags: string[] | undefined, say: Progress): Promise<string[]>;

  // capabilities some labs lack (they throw with the reason there)
  /** a request to the node's kubetun on its control socket ('agent-socket') */
  agentCtl<T>(node: string, req: Record<string, unknown>): Promise<T>;
  /** the directory of the lab's object files ('control-plane') */
  objectsDir(): string;
  /** writes (text) or removes (undefined) one object file and applies it ('control-plane') */
  writeObject(file: string, text: string | undefined, say: Progress): Promise<void>;
  startWorkload(a: Extract<Action, { kind: 'workload' }>, argv: string[]): Promise<void>;
  workload(name: string): Workload | undefined;
}

/** Where the fix text uses the lab's objects or its API (kubectl's verbs on the lab). */
const CONTROL_PLANE_FIX =
  /\blab (exercise objects|apply|delete|get|describe|logs|rollout|scale)\b|exercise objects/;

/** What e needs, and for what (the first use of each), beyond traffic and agents. */
export function exerciseNeeds(e: Exercise, mode?: LabMode): Map<Capability, string> {
  const need = new Map<Capability, string>();
  const add = (c: Capability, why: string) => void (need.has(c) || need.set(c, why));
  if (e.needs.length) add('control-plane', `it needs the lab's ${e.needs.join(', ')}`);
  for (const a of e.setup) {
    if (a.kind === 'manifest' || a.kind === 'remove-manifest')
      add('control-plane', `its setup changes the lab's objects (${a.file})`);
    if (a.kind === 'rollout-wait') add('control-plane', `its setup waits for ${a.deployment}`);
    if (a.kind === 'workload') add('workloads', `its setup runs ${a.name} in ${a.pod}`);
  }
  for (const c of e.checks) {
    if (['service', 'object', 'endpoints', 'rollout', 'dns-config', 'dns-lookup'].includes(c.kind))
      add('control-plane', `it checks the lab's objects (${c.kind})`);
    if (c.kind === 'workload' || c.kind === 'workload-log')
      add('workloads', `it checks its workload ${c.name}`);
    if (c.kind === 'ct-headroom' || c.kind === 'counter-still')
      add('agent-socket', `it reads kubetun's counters on ${c.node}`);
  }
  const fix = e.solution.fix.find((f) => CONTROL_PLANE_FIX.test(f));
  if (fix) add('control-plane', `its fix edits the lab's objects (${fix.trim().split('\n')[0]})`);
  const m = mode ?? (e.modes.includes('kubetun') ? 'kubetun' : e.modes[0]);
  if (m !== 'kubetun') add('kernel-modes', `it runs in ${m} mode`);
  return need;
}

/** Why e cannot run on lab (in mode), in one line; undefined: it can. */
export function cannotRun(lab: ExerciseLab, e: Exercise, mode?: LabMode): string | undefined {
  for (const [c, why] of exerciseNeeds(e, mode)) {
    const lack = lab.lacks[c];
    if (lack) return `${why}, and ${lack}`;
  }
  return undefined;
}

/** A method of a capability the lab lacks: the engine refuses such exercises before this. */
export function lacking(lab: { name: string }, why: string): never {
  throw new LabError(`${lab.name}: ${why}`);
}

/**
 * The exercise as it reads on this lab. Exercises are written against lab/topology.yaml (ref):
 * a node or client address in any of its texts, checks or answers becomes the lab's own address
 * of the same node or client (the VMs' 192.168.56.12 for node2's 172.30.0.12).
 */
export function forLab(e: Exercise, lab: ExerciseLab, ref: Topology): Exercise {
  const mine = [...lab.addresses.nodes, ...lab.addresses.clients];
  const pairs = [...ref.nodes, ...ref.clients].flatMap((x) => {
    const y = mine.find((z) => z.name === x.name);
    return y && y.ip !== x.ip ? [[x.ip, y.ip] as const] : [];
  });
  if (pairs.length === 0) return e;
  const res = pairs.map(
    ([a, b]) => [new RegExp(`(?<![\\d.])${a.replace(/\./g, '\\.')}(?![\\d])`, 'g'), b] as const,
  );
  const sub = (v: unknown): unknown =>
    typeof v === 'string' ? res.reduce((s, [re, b]) => s.replace(re, b), v) : v;
  return JSON.parse(JSON.stringify(e), (_k, v) => sub(v)) as Exercise;
}

// `kubetun lab exercise list | start | status | hint | check | solution | reset`: the exercise
// loop over the data in lab/exercises/. start brings the exercise lab to its normal state, breaks
// it as the exercise says and prints only the symptom; check judges state and behaviour plus the
// guards (guards.ts); solution shows the cause, the evidence and the fix commands, and runs them;
// reset puts the lab back as `lab up` made it.
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { agentOf, restartAgent } from '../agent.ts';
import { type Progress, REPO_ROOT } from '../lab.ts';
import { isAlive, stopProcess } from '../procs.ts';
import { inNs, shTry } from '../../sh.ts';
import { type LabMode, type LabState, readState, writeState } from '../state.ts';
import { loadTopology, type Topology } from '../topology.ts';
import { decideAnswer } from './answers.ts';
import { nsOf, runAction, syncDataplanes } from './actions.ts';
import { type CheckItem, counterOf, runCheck } from './checks.ts';
import { resyncCluster } from './cluster.ts';
import { dataplaneGuard, rebuiltGuard, serviceSnapshots, servicesGuard } from './guards.ts';
import {
  EX_DIR,
  EX_TOPOLOGY,
  ensureExerciseLab,
  readProgress,
  readUndo,
  restoreManifests,
  UNDO_FILE,
  writeProgress,
} from './lab.ts';
import {
  type Exercise,
  ExerciseError,
  type Feature,
  findExercise,
  loadExercises,
  type Question,
} from './spec.ts';

/**
 * Lab features present in this checkout. Exercises that need a missing one are listed with what
 * they wait for and refuse to start.
 */
export function availableFeatures(root = REPO_ROOT): Set<Feature> {
  const has = (p: string) => existsSync(join(root, p));
  const f = new Set<Feature>();
  if (has('src/cluster/store.ts')) f.add('cluster');
  if (has('src/cluster/dns')) f.add('dns');
  if (has('src/cluster/deployment-controller.ts')) f.add('rollout');
  return f;
}

export function missingFeatures(e: Exercise, have = availableFeatures()): Feature[] {
  return e.needs.filter((n) => !have.has(n));
}

export interface ListEntry {
  name: string;
  title: string;
  minutes: number;
  modes: LabMode[];
  teaches: string;
  /** active wins over done: an exercise solved before can be started again */
  state: 'done' | 'active' | 'open' | 'waiting';
  done: boolean;
  waitsOn: Feature[];
}

export function exerciseList(all = loadExercises()): ListEntry[] {
  const p = readProgress();
  const have = availableFeatures();
  return all.map((e) => {
    const waitsOn = missingFeatures(e, have);
    const state =
      p.active?.name === e.name
        ? 'active'
        : p.done[e.name]
          ? 'done'
          : waitsOn.length
            ? 'waiting'
            : 'open';
    const done = p.done[e.name] !== undefined;
    return {
      name: e.name,
      title: e.title,
      minutes: e.minutes,
      modes: e.modes,
      teaches: e.teaches,
      state,
      done,
      waitsOn,
    };
  });
}

/** Back to what `lab up` made: default objects, no workloads, every agent with no extra flags. */
export async function normaliseLab(say: Progress): Promise<string[]> {
  const did: string[] = [];
  const undo = readUndo();
  if (undo.length) {
    const t = loadTopology(readState()!.topologyFile);
    for (const u of undo.reverse()) shTry(inNs(nsOf(t, u.in), u.cmd));
    rmSync(UNDO_FILE, { force: true });
    did.push(`undid ${undo.length} change(s) inside the lab`);
  }
  const changed = restoreManifests();
  if (changed.length) did.push(`restored ${changed.join(', ')}`);
  // the store as the files say: objects deleted by hand back, ones `lab apply` added gone
  const removed = await resyncCluster(true, true);
  if (removed.length) did.push(`deleted ${removed.join(', ')} (not in the lab's files)`);
  await syncDataplanes(say);
  const s = readState();
  if (!s) return did;
  const workloads = s.processes.filter((p) => p.role === 'workload');
  for (const w of workloads) await stopProcess(w, 1000);
  if (workloads.length) {
    s.processes = s.processes.filter((p) => p.role !== 'workload');
    writeState(s);
    did.push(`stopped ${workloads.map((w) => w.name).join(', ')}`);
  }
  if (s.mode === 'kubetun') {
    const t = loadTopology(s.topologyFile);
    for (const n of t.nodes) {
      const a = agentOf(s, n.name);
      const flags = s.agentFlags?.[n.name] ?? [];
      if (a && isAlive(a) && flags.length === 0) continue;
      await restartAgent(n.name, [], () => {});
      did.push(`restarted kubetun on ${n.name} with its default flags`);
    }
  }
  return did;
}

export async function exerciseStart(name: string, mode: LabMode | undefined, say: Progress) {
  const all = loadExercises();
  const e = findExercise(all, name);
  const waits = missingFeatures(e);
  if (waits.length)
    throw new ExerciseError(
      `${e.name} needs the lab's ${waits.join(', ')} (issue 12), which this checkout does not have yet`,
    );
  const m = mode ?? e.modes[0]!;
  if (!e.modes.includes(m))
    throw new ExerciseError(`${e.name} runs in mode ${e.modes.join(' or ')}, not ${m}`);
  const p = readProgress();
  if (p.active && p.active.name !== e.name) say(`leaving ${p.active.name} (its fault is undone)`);
  const s0 = readState();
  const ours = s0?.phase === 'up' && s0.topologyFile === EX_TOPOLOGY;
  if (ours) for (const d of await normaliseLab(say)) say(d);
  const returnMode = p.active?.returnMode ?? (ours ? s0.mode : 'kubetun');
  const s = await ensureExerciseLab(m, say);
  for (const a of e.setup) await runAction(a, say);
  p.active = {
    name: e.name,
    mode: m,
    returnMode,
    startedAt: new Date().toISOString(),
    labCreatedAt: s.createdAt,
    hintsShown: 0,
    answers: {},
    baseline: await serviceSnapshots(),
  };
  writeProgress(p);
  return e;
}

function active(): { e: Exercise; p: ReturnType<typeof readProgress> } {
  const p = readProgress();
  if (!p.active)
    throw new ExerciseError('no exercise is active (kubetun lab exercise list, then start NAME)');
  return { e: findExercise(loadExercises(), p.active.name), p };
}

export function exerciseHint(): { exercise: string; n: number; of: number; hint: string } {
  const { e, p } = active();
  const a = p.active!;
  const n = Math.min(a.hintsShown + 1, e.hints.length);
  a.hintsShown = n;
  writeProgress(p);
  return { exercise: e.name, n, of: e.hints.length, hint: e.hints[n - 1]! };
}

/** Case, spaces and quotes do not matter; numbers compare as numbers (1/2 = 0.5 = 0.50000). */
export function answerMatches(given: string, accept: string[]): boolean {
  const norm = (s: string) =>
    s
      .trim()
      .toLowerCase()
      .replace(/["'\s]+/g, '');
  const num = (s: string) => {
    const f = /^(-?\d+(?:\.\d+)?)\/(\d+(?:\.\d+)?)$/.exec(s);
    if (f) return Number(f[1]) / Number(f[2]);
    return /^-?\d+(\.\d+)?%?$/.test(s)
      ? Number(s.replace('%', '')) / (s.endsWith('%') ? 100 : 1)
      : Number.NaN;
  };
  const g = norm(given);
  return accept.some((a) => {
    const w = norm(a);
    const [x, y] = [num(g), num(w)];
    return g === w || (!Number.isNaN(x) && !Number.isNaN(y) && Math.abs(x - y) < 1e-3);
  });
}

async function questionItem(
  q: Question,
  given: string | undefined,
  t: Topology,
): Promise<CheckItem> {
  if (given === undefined)
    return {
      title: `question ${q.id}: ${q.ask}`,
      ok: false,
      detail: `not answered yet (check --answer ${q.id}=...)`,
    };
  const accept = [...q.accept];
  if (q.acceptFrom) {
    const a = await decideAnswer(q.acceptFrom, t);
    if (!Array.isArray(a) || a.length === 0)
      return {
        title: `question ${q.id}: ${q.ask}`,
        ok: false,
        detail: Array.isArray(a) ? 'the lab shows no such flow now' : a.error,
      };
    accept.push(...a);
  }
  const ok = answerMatches(given, accept);
  return {
    title: `question ${q.id}: ${q.ask}`,
    ok,
    detail: `you answered ${JSON.stringify(given)}${ok ? '' : ': not what the lab shows'}`,
  };
}

export interface CheckReport {
  exercise: string;
  solved: boolean;
  items: CheckItem[];
}

/** "id=value" pairs from --answer. */
export function parseAnswers(list: string[], e: Exercise): Record<string, string> {
  const out: Record<string, string> = {};
  for (const a of list) {
    const i = a.indexOf('=');
    const id = i > 0 ? a.slice(0, i) : e.questions.length === 1 ? e.questions[0]!.id : '';
    if (!e.questions.some((q) => q.id === id))
      throw new ExerciseError(
        `--answer ${a}: ${e.name} asks ${e.questions.map((q) => q.id).join(', ') || 'no questions'}; write ID=VALUE`,
      );
    out[id] = i > 0 ? a.slice(i + 1) : a;
  }
  return out;
}

export async function exerciseCheck(answers: string[] = []): Promise<CheckReport> {
  const { e, p } = active();
  const a = p.active!;
  Object.assign(a.answers, parseAnswers(answers, e));
  writeProgress(p);
  const s = readState();
  if (!s)
    return {
      exercise: e.name,
      solved: false,
      items: [
        { title: 'the lab is up', ok: false, detail: 'the lab is down; start the exercise again' },
      ],
    };
  const t = loadTopology(s.topologyFile);
  // kubetun watches the objects; this makes an edit made just now count without a race.
  if (s.mode === 'kubetun') await syncDataplanes(() => {});
  const items: CheckItem[] = [
    rebuiltGuard(a, s),
    await dataplaneGuard(a, s, t),
    await servicesGuard(a, e.mayChange),
  ];
  const before = new Map<string, number>();
  const still = e.checks.filter((c) => c.kind === 'counter-still');
  for (const c of still) {
    const v = await counterOf({ state: s }, c.node, c.reason);
    if (v !== undefined) before.set(`${c.node}/${c.reason}`, v);
  }
  const x = { t, state: s as LabState, before };
  for (const c of e.checks.filter((c) => c.kind !== 'counter-still'))
    items.push(await runCheck(c, x));
  for (const c of still) items.push(await runCheck(c, x));
  for (const q of e.questions) items.push(await questionItem(q, a.answers[q.id], t));
  const solved = items.every((i) => i.ok);
  if (solved) {
    p.done[e.name] = { at: new Date().toISOString(), hints: a.hintsShown };
    writeProgress(p);
  }
  return { exercise: e.name, solved, items };
}

export function exerciseStatus() {
  const p = readProgress();
  const all = loadExercises();
  return {
    active: p.active
      ? {
          name: p.active.name,
          mode: p.active.mode,
          startedAt: p.active.startedAt,
          hintsShown: p.active.hintsShown,
          hints: findExercise(all, p.active.name).hints.length,
          answers: p.active.answers,
        }
      : null,
    done: Object.keys(p.done).filter((n) => all.some((e) => e.name === n)),
    total: all.length,
  };
}

/** A `kubetun` on PATH for the fix commands, whichever way this one was started. */
export function shimPath(): string {
  const dir = join(EX_DIR, 'bin');
  mkdirSync(dir, { recursive: true });
  const shim = join(dir, 'kubetun');
  writeFileSync(
    shim,
    `#!/bin/sh\nexec "${process.execPath}" "${join(REPO_ROOT, 'bin/kubetun.mjs')}" "$@"\n`,
  );
  chmodSync(shim, 0o755);
  return `${dir}:${process.env.PATH ?? '/usr/bin:/bin'}`;
}

/** Runs one fix command as a learner's shell would; returns its status and output. */
export function runFixCommand(cmd: string): { status: number; out: string } {
  const r = spawnSync('bash', ['-c', cmd], {
    encoding: 'utf8',
    env: { ...process.env, PATH: shimPath() },
    timeout: 180_000,
  });
  return { status: r.status ?? -1, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
}

export function exerciseSolution(): Exercise {
  return active().e;
}

export async function exerciseReset(say: Progress): Promise<string[]> {
  const p = readProgress();
  const s = readState();
  const did = s?.phase === 'up' ? await normaliseLab(say) : [];
  const back = p.active?.returnMode;
  if (s?.phase === 'up' && back && s.mode !== back) {
    const { labSwitchMode } = await import('../compare/mode.ts');
    await labSwitchMode(back, say);
    did.push(`the lab runs mode ${back} again`);
  }
  const left = p.active?.name;
  p.active = undefined;
  writeProgress(p);
  if (left) did.push(`${left} is no longer active`);
  return did;
}

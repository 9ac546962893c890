// `kubetun lab exercise list | start | status | hint | check | solution | reset`: the exercise
// loop over the data in lab/exercises/. start brings the exercise lab to its normal state, breaks
// it as the exercise says and prints only the symptom; check judges state and behaviour plus the
// guards (guards.ts); solution shows the cause, the evidence and the fix commands, and runs them;
// reset puts the lab back as `lab up` made it.
//
// Every step works on an ExerciseLab (labs.ts) — the namespace lab, or the VM lab with --vms —
// and refuses, in one line, an exercise that needs what the lab lacks.
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_TOPOLOGY, type Progress, REPO_ROOT } from '../lab.ts';
import { inNs, LOCAL_ROUTE, shTry, withNsRoute } from '../../sh.ts';
import type { LabMode } from '../state.ts';
import { loadTopology, type Topology } from '../topology.ts';
import { decideAnswer } from './answers.ts';
import { nsOf, runAction } from './actions.ts';
import { type CheckItem, counterOf, runCheck } from './checks.ts';
import { dataplaneGuard, rebuiltGuard, serviceSnapshots, servicesGuard } from './guards.ts';
import { readProgress, readUndo, undoFile, writeProgress } from './lab.ts';
import { cannotRun, type ExerciseLab, forLab } from './labs.ts';
import { exerciseLab } from './select.ts';
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
  /** why it does not run on this lab (the VM lab: what it lacks); absent: it runs */
  notHere?: string;
}

export function exerciseList(all = loadExercises(), lab = exerciseLab()): ListEntry[] {
  const p = readProgress(lab.dir);
  const have = availableFeatures();
  return all.map((e) => {
    const waitsOn = missingFeatures(e, have);
    const notHere = cannotRun(lab, e);
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
      ...(notHere ? { notHere } : {}),
    };
  });
}

/** fn with the lab's connections open and its namespaces' route in force. */
async function withLab<T>(lab: ExerciseLab, fn: () => Promise<T>): Promise<T> {
  lab.open();
  try {
    return await withNsRoute(lab.route ?? LOCAL_ROUTE, fn);
  } finally {
    lab.close();
  }
}

/** Back to normal: the exec steps taken back, then the lab's own (labs.ts normalise). */
async function normalise(lab: ExerciseLab, t: Topology, say: Progress): Promise<string[]> {
  const did: string[] = [];
  const undo = readUndo(lab.dir);
  if (undo.length) {
    for (const u of undo.reverse()) shTry(inNs(nsOf(t, u.in), u.cmd));
    rmSync(undoFile(lab.dir), { force: true });
    did.push(`undid ${undo.length} change(s) inside the lab`);
  }
  return did.concat(await lab.normalise(say));
}

export async function exerciseStart(
  name: string,
  mode: LabMode | undefined,
  say: Progress,
  lab = exerciseLab(),
) {
  const e = exerciseOn(lab, name);
  const waits = missingFeatures(e);
  if (waits.length)
    throw new ExerciseError(
      `${e.name} needs the lab's ${waits.join(', ')} (issue 12), which this checkout does not have yet`,
    );
  const m = mode ?? e.modes[0]!;
  if (!e.modes.includes(m))
    throw new ExerciseError(`${e.name} runs in mode ${e.modes.join(' or ')}, not ${m}`);
  const why = cannotRun(lab, e, m);
  if (why) throw new ExerciseError(`${e.name} does not run on ${lab.name}: ${why}`);
  return withLab(lab, async () => {
    const p = readProgress(lab.dir);
    if (p.active && p.active.name !== e.name) say(`leaving ${p.active.name} (its fault is undone)`);
    const s0 = await lab.now();
    const ours = s0?.exerciseLab === true;
    if (ours) for (const d of await normalise(lab, s0.topology, say)) say(d);
    // reset goes back to the mode the lab ran, if this lab can run it again
    const back =
      ours && (s0.mode === 'kubetun' || !lab.lacks['kernel-modes']) ? s0.mode : 'kubetun';
    const returnMode = p.active?.returnMode ?? back;
    const s = await lab.ensure(m, say);
    for (const a of e.setup) await runAction(a, lab, s.topology, say);
    p.active = {
      name: e.name,
      mode: m,
      returnMode,
      startedAt: new Date().toISOString(),
      labCreatedAt: s.createdAt,
      hintsShown: 0,
      answers: {},
      baseline: await serviceSnapshots(lab),
    };
    writeProgress(p, lab.dir);
    return e;
  });
}

/** The exercise as it reads on the lab (forLab: its own node addresses). */
function exerciseOn(lab: ExerciseLab, name: string): Exercise {
  return forLab(findExercise(loadExercises(), name), lab, loadTopology(DEFAULT_TOPOLOGY));
}

function active(lab: ExerciseLab): { e: Exercise; p: ReturnType<typeof readProgress> } {
  const p = readProgress(lab.dir);
  if (!p.active)
    throw new ExerciseError('no exercise is active (kubetun lab exercise list, then start NAME)');
  return { e: exerciseOn(lab, p.active.name), p };
}

export function exerciseHint(lab = exerciseLab()): {
  exercise: string;
  n: number;
  of: number;
  hint: string;
} {
  const { e, p } = active(lab);
  const a = p.active!;
  const n = Math.min(a.hintsShown + 1, e.hints.length);
  a.hintsShown = n;
  writeProgress(p, lab.dir);
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

export async function exerciseCheck(
  answers: string[] = [],
  lab = exerciseLab(),
): Promise<CheckReport> {
  const { e, p } = active(lab);
  const a = p.active!;
  Object.assign(a.answers, parseAnswers(answers, e));
  writeProgress(p, lab.dir);
  const items = await withLab(lab, () => checkItems(e, a, lab));
  const solved = items.every((i) => i.ok);
  if (solved) {
    p.done[e.name] = { at: new Date().toISOString(), hints: a.hintsShown };
    writeProgress(p, lab.dir);
  }
  return { exercise: e.name, solved, items };
}

async function checkItems(
  e: Exercise,
  a: NonNullable<ReturnType<typeof readProgress>['active']>,
  lab: ExerciseLab,
): Promise<CheckItem[]> {
  const s = await lab.now();
  if (!s)
    return [
      { title: 'the lab is up', ok: false, detail: 'the lab is down; start the exercise again' },
    ];
  // kubetun watches the objects; this makes an edit made just now count without a race.
  if (s.mode === 'kubetun') await lab.syncDataplanes(() => {});
  const items: CheckItem[] = [
    rebuiltGuard(a, s, lab),
    await dataplaneGuard(a, s, lab),
    await servicesGuard(a, e.mayChange, lab),
  ];
  const before = new Map<string, number>();
  const still = e.checks.filter((c) => c.kind === 'counter-still');
  for (const c of still) {
    const v = await counterOf(lab, c.node, c.reason);
    if (v !== undefined) before.set(`${c.node}/${c.reason}`, v);
  }
  const x = { t: s.topology, lab, now: s, before };
  for (const c of e.checks.filter((c) => c.kind !== 'counter-still'))
    items.push(await runCheck(c, x));
  for (const c of still) items.push(await runCheck(c, x));
  for (const q of e.questions) items.push(await questionItem(q, a.answers[q.id], s.topology));
  return items;
}

export function exerciseStatus(lab = exerciseLab()) {
  const p = readProgress(lab.dir);
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
export function shimPath(lab: ExerciseLab): string {
  const dir = join(lab.dir, 'bin');
  mkdirSync(dir, { recursive: true });
  const shim = join(dir, 'kubetun');
  writeFileSync(
    shim,
    `#!/bin/sh\nexec "${process.execPath}" "${join(REPO_ROOT, 'bin/kubetun.mjs')}" "$@"\n`,
  );
  chmodSync(shim, 0o755);
  return `${dir}:${process.env.PATH ?? '/usr/bin:/bin'}`;
}

/**
 * Runs one fix command as a learner's shell would, on the lab (its environment: a fix typed for
 * the VM lab reaches the VMs); returns its status and output.
 */
export function runFixCommand(cmd: string, lab = exerciseLab()): { status: number; out: string } {
  const r = spawnSync('bash', ['-c', cmd], {
    encoding: 'utf8',
    env: { ...process.env, PATH: shimPath(lab), ...lab.env },
    // a fix on a VM lab restarts an agent in a VM: minutes under software emulation
    timeout: 900_000,
  });
  return { status: r.status ?? -1, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
}

export function exerciseSolution(lab = exerciseLab()): Exercise {
  return active(lab).e;
}

export async function exerciseReset(say: Progress, lab = exerciseLab()): Promise<string[]> {
  const p = readProgress(lab.dir);
  const did = await withLab(lab, async () => {
    const s = await lab.now();
    if (!s) return [];
    const done = await normalise(lab, s.topology, say);
    const back = p.active?.returnMode;
    if (back && s.mode !== back) {
      await lab.switchMode(back, say);
      done.push(`the lab runs mode ${back} again`);
    }
    return done;
  });
  const left = p.active?.name;
  p.active = undefined;
  writeProgress(p, lab.dir);
  if (left) did.push(`${left} is no longer active`);
  return did;
}

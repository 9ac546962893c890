// The lab the exercises run on, and what `exercise` remembers between commands.
//
// Exercises break the lab the way clusters break — a changed object, a crashed agent, a busy
// client — never kubetun's code. The objects they change are the lab's own copy of the
// manifests (LAB_DIR/exercise/manifests, the default topology pointing at it), never the
// repository's lab/manifests, so `reset` can always put back exactly what `lab up` started with.
// Progress (which exercise is active, hints shown, answers given, which are done) lives beside
// it in progress.json, in the lab's state directory. This is the namespace lab's side; the lab
// an exercise runs on, either kind, is an ExerciseLab (labs.ts).
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { DEFAULT_TOPOLOGY, labHealthy, labUp, type Progress } from '../lab.ts';
import { LAB_DIR, type LabMode, type LabState, readState } from '../state.ts';

export const EX_DIR = join(LAB_DIR, 'exercise');
export const EX_TOPOLOGY = join(EX_DIR, 'topology.yaml');
/** The lab's objects while an exercise lab runs: what every node's data plane reads. */
export const EX_MANIFESTS = join(EX_DIR, 'manifests');

// Progress and undo steps live in the exercise directory of the lab they belong to
// (ExerciseLab.dir: EX_DIR here, the VM lab's own on this machine); EX_DIR by default.
const progressFile = (dir: string) => join(dir, 'progress.json');
/** Commands that take back what an exercise's exec steps changed (run by reset, next start). */
export const undoFile = (dir: string) => join(dir, 'undo.json');

export interface UndoStep {
  in: string;
  cmd: string[];
}

export function pushUndo(step: UndoStep, dir = EX_DIR): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(undoFile(dir), JSON.stringify([...readUndo(dir), step]));
}

export function readUndo(dir = EX_DIR): UndoStep[] {
  try {
    return JSON.parse(readFileSync(undoFile(dir), 'utf8')) as UndoStep[];
  } catch {
    return [];
  }
}

/** The manifests the exercise lab starts from (the default lab's). */
export function pristineManifestsDir(): string {
  const doc = parse(readFileSync(DEFAULT_TOPOLOGY, 'utf8')) as { manifests?: string };
  return join(DEFAULT_TOPOLOGY, '..', doc.manifests ?? 'manifests');
}

/** The default topology with its manifests in the lab's own copy. Same text each time. */
function writeExerciseTopology(): void {
  const doc = parse(readFileSync(DEFAULT_TOPOLOGY, 'utf8')) as Record<string, unknown>;
  doc.manifests = EX_MANIFESTS;
  mkdirSync(EX_DIR, { recursive: true });
  const text = `# Written by kubetun lab exercise: the default lab, objects in ${EX_MANIFESTS}\n${stringify(doc)}`;
  if (!existsSync(EX_TOPOLOGY) || readFileSync(EX_TOPOLOGY, 'utf8') !== text)
    writeFileSync(EX_TOPOLOGY, text);
}

/** Puts the lab's objects back to the default manifests; returns the files it changed. */
export function restoreManifests(): string[] {
  const src = pristineManifestsDir();
  mkdirSync(EX_MANIFESTS, { recursive: true });
  const want = new Set(readdirSync(src).filter((f) => f.endsWith('.yaml')));
  const changed: string[] = [];
  for (const f of readdirSync(EX_MANIFESTS)) {
    if (!want.has(f)) {
      rmSync(join(EX_MANIFESTS, f), { force: true });
      changed.push(f);
    }
  }
  for (const f of want) {
    const to = join(EX_MANIFESTS, f);
    const text = readFileSync(join(src, f), 'utf8');
    if (!existsSync(to) || readFileSync(to, 'utf8') !== text) {
      cpSync(join(src, f), to);
      changed.push(f);
    }
  }
  return changed;
}

/** True when the running lab is the exercise lab, in this mode, every part alive. */
export function exerciseLabUp(mode: LabMode, s = readState()): boolean {
  return (
    s !== undefined &&
    s.phase === 'up' &&
    s.topologyFile === EX_TOPOLOGY &&
    s.mode === mode &&
    labHealthy(s)
  );
}

/** The exercise lab in `mode`: kept when it runs, else (re)built from the default objects. */
export async function ensureExerciseLab(mode: LabMode, say: Progress): Promise<LabState> {
  const s = readState();
  if (s && exerciseLabUp(mode, s)) return s;
  if (s && s.topologyFile === EX_TOPOLOGY && s.mode !== mode && labHealthy(s)) {
    const { labSwitchMode } = await import('../compare/mode.ts');
    return labSwitchMode(mode, say);
  }
  say(
    s?.phase === 'up'
      ? `rebuilding the lab as the exercise lab (mode ${mode})`
      : `bringing the exercise lab up (mode ${mode})`,
  );
  writeExerciseTopology();
  restoreManifests();
  return labUp({ topology: EX_TOPOLOGY, mode, progress: say });
}

/** A Service as the guard compares it (exercise/guards.ts). */
export interface ServiceSnapshot {
  key: string;
  fields: Record<string, unknown>;
}

export interface ActiveExercise {
  name: string;
  mode: LabMode;
  /** the mode the lab ran before start; reset goes back to it */
  returnMode: LabMode;
  startedAt: string;
  /** the lab's createdAt when the exercise started: a rebuild wipes the fault */
  labCreatedAt: string;
  hintsShown: number;
  answers: Record<string, string>;
  baseline: ServiceSnapshot[];
}

export interface ExerciseProgress {
  version: 1;
  active?: ActiveExercise;
  done: Record<string, { at: string; hints: number }>;
}

export function readProgress(dir = EX_DIR): ExerciseProgress {
  try {
    const p = JSON.parse(readFileSync(progressFile(dir), 'utf8')) as ExerciseProgress;
    if (p.version === 1) return { ...p, done: p.done ?? {} };
  } catch {}
  return { version: 1, done: {} };
}

export function writeProgress(p: ExerciseProgress, dir = EX_DIR): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(progressFile(dir), `${JSON.stringify(p, null, 2)}\n`);
}

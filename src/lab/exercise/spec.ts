// The exercise file format (lab/exercises/NAME.yaml): one exercise per file, data only, so
// adding one is writing a file. Validated once when read; every mistake names the file and the
// field. lab/exercises/README.md documents each field with an example.
//
//   name, title, minutes, teaches, modes, needs    what it is, which data planes it runs on,
//                                                  which lab features it waits for
//   symptom                                        what `start` prints: the ticket
//   setup: [action]                                how `start` breaks the lab (actions.ts)
//   hints: [text]                                  revealed one by one, following the runbook
//   checks: [check]                                what `check` judges (checks.ts)
//   questions: [{id, ask, accept}]                 answered with `check --answer ID=VALUE`
//   mayChange: [field]                             Service fields the fix may change
//   solution: {cause, evidence: [{run, saw}], fix: [command]}
import { readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { REPO_ROOT } from '../../runtime.ts';
import { parse } from 'yaml';
import { UserError } from '../../errors.ts';
import { LAB_MODES, type LabMode } from '../state.ts';

/** A mistake in an exercise file or an exercise command: the user's to fix (exit 2). */
export class ExerciseError extends UserError {
  constructor(message: string) {
    super('EXERCISE', message);
  }
}

/** Lab features an exercise may wait for; `list` says which are missing. */
export const FEATURES = ['cluster', 'dns', 'rollout'] as const;
export type Feature = (typeof FEATURES)[number];

export type Action =
  | { kind: 'crash-agent'; node: string }
  | { kind: 'agent'; node: string; flags: string[] }
  | { kind: 'manifest'; file: string; text: string }
  | { kind: 'remove-manifest'; file: string }
  | { kind: 'workload'; name: string; pod: string; argv: string[] }
  /** undo: run by reset (and by the next start) to take the change back */
  | { kind: 'exec'; in: string; cmd: string[]; undo?: string[] }
  | { kind: 'sleep'; ms: number }
  /** waits until the Deployment ("kube-system/coredns") has rolled out, as `lab rollout status` */
  | { kind: 'rollout-wait'; deployment: string };

export type Check =
  | { kind: 'http'; title: string; from: string[]; url: string; times: number; minBackends: number }
  | { kind: 'udp'; title: string; from: string[]; ip: string; port: number; times: number }
  | { kind: 'ping'; title: string; from: string[]; ip: string; expect: 'reply' | 'none' }
  | { kind: 'ct-headroom'; title: string; node: string; atLeast: number }
  | { kind: 'counter-still'; title: string; node: string; reason: string }
  | { kind: 'agent-flag'; title: string; node: string; flag: string; present: boolean }
  | { kind: 'workload'; title: string; name: string }
  | { kind: 'workload-log'; title: string; name: string; match: string; last: number }
  | { kind: 'service'; title: string; name: string; field: string; equals: unknown }
  /** a field of an object in the store ("Deployment default/shop"): equals, notEquals or exists */
  | {
      kind: 'object';
      title: string;
      ref: string;
      field: string;
      equals?: unknown;
      notEquals?: unknown;
      exists?: boolean;
    }
  /** the Service (ns/name) has at least this many ready endpoints (on `port`, if given) */
  | { kind: 'endpoints'; title: string; service: string; atLeast: number; port?: number }
  /** the Deployment's Pods try the name in its env var `env` as is first (ndots, trailing dot) */
  | { kind: 'dns-config'; title: string; deployment: string; env: string }
  /** `getent ahostsv4` of that name in every Pod answers, asking the cluster DNS <= atMost names */
  | { kind: 'dns-lookup'; title: string; deployment: string; env: string; atMost: number }
  /** a rolling restart of the Deployment under request loops from every `from`: none refused */
  | { kind: 'rollout'; title: string; from: string[]; deployment: string; url: string };

/**
 * An answer the lab decides at check time. kube-sep-of-flow: the KUBE-SEP chain (iptables mode)
 * whose DNAT target is the backend the node's conntrack shows for the ESTABLISHED TCP flow from
 * `src` to `dst`:`dport`.
 */
export interface AcceptFrom {
  kind: 'kube-sep-of-flow';
  node: string;
  src: string;
  dst: string;
  dport: number;
}

export interface Question {
  id: string;
  ask: string;
  /** accepted answers, compared after normalising (case, spaces, fractions as numbers) */
  accept: string[];
  acceptFrom?: AcceptFrom;
}

export interface Exercise {
  name: string;
  file: string;
  /** place on the learning path (list order) */
  order: number;
  title: string;
  minutes: number;
  teaches: string;
  modes: LabMode[];
  needs: Feature[];
  symptom: string;
  setup: Action[];
  hints: string[];
  checks: Check[];
  questions: Question[];
  mayChange: string[];
  solution: { cause: string; evidence: { run: string; saw: string }[]; fix: string[] };
}

type Obj = Record<string, unknown>;

/** Reads fields of one YAML object, naming file and path in every complaint. */
class Reader {
  constructor(
    readonly file: string,
    readonly path: string,
    readonly o: Obj,
  ) {}
  fail(field: string, what: string): never {
    throw new ExerciseError(`${this.file}: ${this.at(field)}: ${what}`);
  }
  at(field: string): string {
    if (!field) return this.path;
    return this.path ? `${this.path}.${field}` : field;
  }
  str(field: string, dflt?: string): string {
    const v = this.o[field] ?? dflt;
    if (typeof v !== 'string' || v.trim() === '') this.fail(field, 'a non-empty string');
    return v;
  }
  num(field: string, dflt?: number): number {
    const v = this.o[field] ?? dflt;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) this.fail(field, 'a number >= 0');
    return v;
  }
  strs(field: string, dflt?: string[]): string[] {
    const v = this.o[field] ?? dflt;
    if (typeof v === 'string') return [v];
    if (!Array.isArray(v) || v.some((x) => typeof x !== 'string' && typeof x !== 'number'))
      this.fail(field, 'a list of strings');
    return v.map(String);
  }
  list(field: string): Reader[] {
    const v = this.o[field] ?? [];
    if (!Array.isArray(v)) this.fail(field, 'a list');
    return v.map((x, i) => {
      if (!x || typeof x !== 'object' || Array.isArray(x)) this.fail(`${field}[${i}]`, 'a map');
      return new Reader(this.file, this.at(`${field}[${i}]`), x as Obj);
    });
  }
  /** A one-key map {kind: body}, as setup steps are written. */
  single(): [string, unknown] {
    const keys = Object.keys(this.o);
    if (keys.length !== 1) this.fail('', `one action per step, found ${keys.join(', ') || 'none'}`);
    return [keys[0]!, this.o[keys[0]!]];
  }
}

function readAction(r: Reader): Action {
  const [kind, body] = r.single();
  const b = new Reader(r.file, r.at(kind), (body && typeof body === 'object' ? body : {}) as Obj);
  switch (kind) {
    case 'crash-agent':
      if (typeof body !== 'string') r.fail(kind, 'a node name');
      return { kind, node: body };
    case 'remove-manifest':
      if (typeof body !== 'string') r.fail(kind, 'a file name');
      return { kind, file: body };
    case 'sleep':
      if (typeof body !== 'number' || body < 0) r.fail(kind, 'milliseconds');
      return { kind, ms: body };
    case 'rollout-wait':
      if (typeof body !== 'string') r.fail(kind, 'a Deployment (NAME or NAMESPACE/NAME)');
      return { kind, deployment: body };
    case 'agent':
      return { kind, node: b.str('node'), flags: b.strs('flags', []) };
    case 'manifest':
      return { kind, file: safeFile(b, b.str('file')), text: b.str('text') };
    case 'workload':
      return { kind, name: b.str('name'), pod: b.str('pod'), argv: b.strs('argv') };
    case 'exec':
      return {
        kind,
        in: b.str('in'),
        cmd: b.strs('cmd'),
        ...(b.o.undo === undefined ? {} : { undo: b.strs('undo') }),
      };
    default:
      return r.fail(
        kind,
        'unknown action (known: crash-agent, agent, manifest, remove-manifest, workload, exec, sleep, rollout-wait)',
      );
  }
}

function safeFile(r: Reader, f: string): string {
  if (!/^[a-z0-9][a-z0-9.-]*\.yaml$/.test(f)) r.fail('file', 'a plain file name ending in .yaml');
  return f;
}

function readCheck(r: Reader): Check {
  const kind = r.str('kind');
  const title = r.str('title');
  const from = () => r.strs('from', ['pods']);
  switch (kind) {
    case 'http':
      return {
        kind,
        title,
        from: from(),
        url: r.str('url'),
        times: r.num('times', 3),
        minBackends: r.num('minBackends', 0),
      };
    case 'udp':
      return {
        kind,
        title,
        from: from(),
        ip: r.str('ip'),
        port: r.num('port'),
        times: r.num('times', 3),
      };
    case 'ping': {
      const expect = r.str('expect');
      if (expect !== 'reply' && expect !== 'none') r.fail('expect', 'reply or none');
      return { kind, title, from: from(), ip: r.str('ip'), expect };
    }
    case 'ct-headroom':
      return { kind, title, node: r.str('node'), atLeast: r.num('atLeast') };
    case 'counter-still':
      return { kind, title, node: r.str('node'), reason: r.str('reason') };
    case 'agent-flag': {
      const present = r.o.present ?? true;
      if (typeof present !== 'boolean') r.fail('present', 'true or false');
      return { kind, title, node: r.str('node'), flag: r.str('flag'), present };
    }
    case 'workload':
      return { kind, title, name: r.str('name') };
    case 'workload-log': {
      const match = r.str('match');
      try {
        new RegExp(match);
      } catch {
        r.fail('match', 'a regular expression');
      }
      return { kind, title, name: r.str('name'), match, last: r.num('last', 3) };
    }
    case 'service':
      if (!('equals' in r.o)) r.fail('equals', 'required');
      return { kind, title, name: r.str('name'), field: r.str('field'), equals: r.o.equals };
    case 'object': {
      const given = ['equals', 'notEquals', 'exists'].filter((k) => k in r.o);
      if (given.length !== 1) r.fail('equals', 'exactly one of equals, notEquals or exists');
      if ('exists' in r.o && typeof r.o.exists !== 'boolean') r.fail('exists', 'true or false');
      const base = { kind, title, ref: r.str('ref'), field: r.str('field') } as const;
      return { ...base, [given[0]!]: r.o[given[0]!] };
    }
    case 'endpoints':
      return {
        kind,
        title,
        service: r.str('service'),
        atLeast: r.num('atLeast', 1),
        ...(r.o.port === undefined ? {} : { port: r.num('port') }),
      };
    case 'rollout':
      return { kind, title, from: from(), deployment: r.str('deployment'), url: r.str('url') };
    case 'dns-config':
      return { kind, title, deployment: r.str('deployment'), env: r.str('env') };
    case 'dns-lookup':
      return {
        kind,
        title,
        deployment: r.str('deployment'),
        env: r.str('env'),
        atMost: r.num('atMost', 1),
      };
    default:
      return r.fail(
        'kind',
        `unknown check "${kind}" (known: http, udp, ping, ct-headroom, counter-still, agent-flag, workload, workload-log, service, object, endpoints, rollout, dns-config, dns-lookup)`,
      );
  }
}

function readQuestion(q: Reader): Question {
  const out: Question = { id: q.str('id'), ask: q.str('ask'), accept: q.strs('accept', []) };
  if (q.o.acceptFrom !== undefined) {
    const v = q.o.acceptFrom;
    if (!v || typeof v !== 'object' || Array.isArray(v)) q.fail('acceptFrom', 'a map');
    const f = new Reader(q.file, q.at('acceptFrom'), v as Obj);
    if (f.str('kind') !== 'kube-sep-of-flow') f.fail('kind', 'kube-sep-of-flow');
    out.acceptFrom = {
      kind: 'kube-sep-of-flow',
      node: f.str('node'),
      src: f.str('src'),
      dst: f.str('dst'),
      dport: f.num('dport'),
    };
  }
  if (out.accept.length === 0 && !out.acceptFrom) q.fail('accept', 'at least one accepted answer');
  return out;
}

export function parseExercise(text: string, file: string): Exercise {
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (err) {
    throw new ExerciseError(`${file}: not YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc))
    throw new ExerciseError(`${file}: an exercise is a YAML map`);
  const r = new Reader(file, '', doc as Obj);
  const name = r.str('name');
  if (name !== basename(file, '.yaml'))
    r.fail('name', `must be the file's name (${basename(file, '.yaml')})`);
  const modes = r.strs('modes', ['kubetun']);
  for (const m of modes)
    if (!(LAB_MODES as readonly string[]).includes(m) || m === 'none')
      r.fail('modes', `"${m}" is not a lab data plane (kubetun, iptables, nftables)`);
  const needs = r.strs('needs', []);
  for (const f of needs)
    if (!(FEATURES as readonly string[]).includes(f))
      r.fail('needs', `"${f}" is not a lab feature (${FEATURES.join(', ')})`);
  const sol = r.o.solution;
  if (!sol || typeof sol !== 'object') r.fail('solution', 'a map with cause, evidence, fix');
  const s = new Reader(file, 'solution', sol as Obj);
  const ex: Exercise = {
    name,
    file,
    order: r.num('order'),
    title: r.str('title'),
    minutes: r.num('minutes'),
    teaches: r.str('teaches'),
    modes: modes as LabMode[],
    needs: needs as Feature[],
    symptom: r.str('symptom').trim(),
    setup: r.list('setup').map(readAction),
    hints: r.strs('hints'),
    checks: r.list('checks').map(readCheck),
    questions: r.list('questions').map(readQuestion),
    mayChange: r.strs('mayChange', []),
    solution: {
      cause: s.str('cause').trim(),
      evidence: s.list('evidence').map((e) => ({ run: e.str('run'), saw: e.str('saw').trimEnd() })),
      fix: s.strs('fix'),
    },
  };
  if (ex.checks.length === 0 && ex.questions.length === 0)
    r.fail('checks', 'an exercise needs at least one check or question');
  if (ex.hints.length === 0) r.fail('hints', 'at least one hint');
  if (ex.solution.fix.length === 0) s.fail('fix', 'at least one command');
  return ex;
}

export const EXERCISES_DIR = join(REPO_ROOT, 'lab/exercises');

/** Every exercise in the directory, in file-name order (the numbered learning path). */
export function loadExercises(dir = EXERCISES_DIR): Exercise[] {
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort();
  const all = files.map((f) => parseExercise(readFileSync(join(dir, f), 'utf8'), join(dir, f)));
  return all.sort((a, b) => a.order - b.order || a.name.localeCompare(b.name));
}

export function findExercise(all: Exercise[], name: string): Exercise {
  const e = all.find((x) => x.name === name);
  if (!e)
    throw new ExerciseError(
      `no exercise named "${name}" (kubetun lab exercise list shows them: ${all.map((x) => x.name).join(', ')})`,
    );
  return e;
}

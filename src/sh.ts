// The one way kubetun runs a command (`ip`, `tc`, `sysctl`, `nft`, `tcpdump`, a lab process):
// the agent's steering and cleanup, the lab's build and its exercises all use this module.
// argv arrays, never a shell string, so an interface or pod name cannot inject anything; a
// failure carries the command line and the tool's stderr. Slow world only.
//
//   sh        stdout, or throws CommandError          (a step that must succeed)
//   shTry     { ok, out, err, status }, never throws  (teardown: "already gone" is fine)
//   shJson    `ip -j` / `tc -j` output parsed
//   shBatch   many `ip` or `tc` commands in one process (`-batch -`); shBatchAsync: the same
//             without blocking the event loop
//   shAsync   like shTry, asynchronous: many commands at once (exercise checks)
//   shHasOutput  whether a command prints anything, without reading the rest (asynchronous)
//   inNs      argv inside a lab namespace: `ip netns exec`, or the route of a lab on other
//             machines (NsRoute, withNsRoute)
//
// Synchronous by default on purpose: lab up and the agent's start are sequences where each step
// needs the one before. zx is not used here: see docs/architecture.md ("Shell commands").
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import type { Writable } from 'node:stream';
import { KubetunError } from './errors.ts';

/** A command that failed: not the user's typo (exit 1). Names the command and its stderr. */
export class CommandError extends KubetunError {
  readonly argv: readonly string[];
  readonly stderr: string;
  constructor(argv: readonly string[], stderr: string, cause: unknown) {
    super('COMMAND_FAILED', `${argv.join(' ')}: ${stderr.trim() || (cause as Error).message}`, {
      cause,
    });
    this.argv = argv;
    this.stderr = stderr;
  }
}

export interface ShOptions {
  /** written to the command's stdin */
  input?: string;
  /** killed after this long (default 30 s: a hung `ip` must not hang a start or a lab up) */
  timeoutMs?: number;
}

const DEFAULT_TIMEOUT_MS = 30_000;

/** Runs argv and returns its stdout; throws CommandError with the command and its stderr. */
export function sh(argv: readonly string[], opts: ShOptions = {}): string {
  try {
    return execFileSync(argv[0]!, argv.slice(1), {
      encoding: 'utf8',
      input: opts.input,
      timeout: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
  } catch (err) {
    const e = err as { stderr?: Buffer | string };
    throw new CommandError(argv, String(e.stderr ?? ''), err);
  }
}

export interface ShResult {
  ok: boolean;
  out: string;
  /** the command's stderr (or why it could not run) */
  err: string;
  /** exit status; -1 when it did not exit by itself */
  status: number;
}

/** Like sh, but reports failure instead of throwing. */
export function shTry(argv: readonly string[], timeoutMs = DEFAULT_TIMEOUT_MS): ShResult {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout: timeoutMs });
  const err = r.stderr || (r.error ? r.error.message : '');
  return { ok: r.status === 0, out: r.stdout ?? '', err, status: r.status ?? -1 };
}

/** `ip -j ...` / `tc -j ...` output as JSON (both print nothing for "no objects"). */
export function shJson<T>(argv: readonly string[]): T[] {
  const out = sh(argv).trim();
  return out ? (JSON.parse(out) as T[]) : [];
}

/**
 * Many commands of one tool in one process: `<tool…> [-force] -batch -`, where `tool` is the
 * argv before the batch options (`['tc']`, `['ip', '-n', ns]`) and each line the words after
 * it. One fork instead of one per command — forking a large process costs milliseconds natively
 * and seconds under software emulation (the VM lab: an agent's steering took 85 s as single
 * commands). Without force it stops at the first failure and throws it, as sh() does; with
 * force it runs them all and returns the failed ones, each as `<command>: <the tool's message>`
 * (iproute2 ends each message with "Command failed -:<line>").
 */
/**
 * One command of a batch: its words, or the line already joined (a build of tens of thousands
 * of lines makes each one a string, not an array of its words).
 */
export type BatchLine = readonly string[] | string;

export function shBatch(
  tool: readonly string[],
  lines: readonly BatchLine[],
  opts: { force?: boolean } = {},
): string[] {
  if (lines.length === 0) return [];
  const argv = batchArgv(tool, opts.force);
  const r = spawnSync(argv[0]!, argv.slice(1), {
    encoding: 'utf8',
    input: batchInput(lines),
    timeout: DEFAULT_TIMEOUT_MS,
  });
  if (r.status === 0) return [];
  const err = r.stderr || (r.error ? r.error.message : `exit ${r.status}`);
  const failed = batchFailures(tool, lines, argv, err);
  if (!opts.force) throw new CommandError(failed[0]!.cmd, failed[0]!.message, r.error ?? err);
  return failed.map((f) => `${f.cmd.join(' ')}: ${f.message}`);
}

/**
 * shBatch with force, without blocking the event loop while the tool runs (the agent's packet
 * loop shares the thread): resolves to the failed lines, never rejects. The input goes in
 * BATCH_WRITE_STEP lines at a time, a turn of the event loop between two (writeInSteps).
 */
export function shBatchAsync(
  tool: readonly string[],
  lines: readonly BatchLine[],
): Promise<string[]> {
  if (lines.length === 0) return Promise.resolve([]);
  const argv = batchArgv(tool, true);
  return new Promise((resolve) => {
    const c = spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    c.stderr.on('data', (d) => {
      err += d;
    });
    const timer = setTimeout(() => c.kill('SIGKILL'), DEFAULT_TIMEOUT_MS);
    const done = (code: number | null, why: string) => {
      clearTimeout(timer);
      if (code === 0) return resolve([]);
      const failed = batchFailures(tool, lines, argv, err || why);
      resolve(failed.map((f) => `${f.cmd.join(' ')}: ${f.message}`));
    };
    c.on('error', (e) => done(-1, e.message));
    c.on('close', (code) => done(code, `exit ${code}`));
    c.stdin.on('error', () => {}); // the tool exited early: 'close' reports it
    void writeInSteps(c.stdin, lines);
  });
}

/**
 * Lines a batch writes at once: the 90k lines of an endpoint table joined in one go held the
 * agent's thread ~200 ms (issue 18); 1,024 are ~200 KB, a few ms.
 */
const BATCH_WRITE_STEP = 1024;

/** `lines` into a child's stdin a step at a time: a turn between two, or the pipe's drain. */
async function writeInSteps(stdin: Writable, lines: readonly BatchLine[]): Promise<void> {
  for (let i = 0; i < lines.length; i += BATCH_WRITE_STEP) {
    if (stdin.destroyed) return;
    const room = stdin.write(batchInput(lines.slice(i, i + BATCH_WRITE_STEP)));
    await new Promise<void>((resolve) => {
      if (room) return setImmediate(resolve);
      const go = () => {
        stdin.off('drain', go);
        stdin.off('close', go);
        resolve();
      };
      stdin.on('drain', go);
      stdin.on('close', go);
    });
  }
  if (!stdin.destroyed) stdin.end();
}

function batchArgv(tool: readonly string[], force = false): string[] {
  return [...tool, ...(force ? ['-force'] : []), '-batch', '-'];
}

function batchInput(lines: readonly BatchLine[]): string {
  return `${lines.map((l) => (typeof l === 'string' ? l : l.join(' '))).join('\n')}\n`;
}

/** The failed lines of a batch, from the tool's stderr ("Command failed -:<line>" after each). */
function batchFailures(
  tool: readonly string[],
  lines: readonly BatchLine[],
  argv: readonly string[],
  err: string,
): { cmd: readonly string[]; message: string }[] {
  const failed: { cmd: readonly string[]; message: string }[] = [];
  let message: string[] = [];
  for (const line of err.split('\n')) {
    const m = /^Command failed -:(\d+)$/.exec(line.trim());
    if (!m) {
      if (line.trim()) message.push(line.trim());
      continue;
    }
    const at = lines[Number(m[1]) - 1];
    const words = typeof at === 'string' ? at.split(' ') : at;
    failed.push({ cmd: words ? [...tool, ...words] : argv, message: message.join('; ') });
    message = [];
  }
  if (failed.length === 0) failed.push({ cmd: argv, message: err.trim() });
  return failed;
}

/** Runs argv without a shell, in parallel with others; never rejects. */
export function shAsync(argv: readonly string[], timeoutMs = 15_000): Promise<ShResult> {
  return new Promise((resolve) => {
    const c = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    c.stdout.on('data', (d) => {
      out += d;
    });
    c.stderr.on('data', (d) => {
      err += d;
    });
    const timer = setTimeout(() => c.kill('SIGKILL'), timeoutMs);
    c.on('error', (e) => {
      clearTimeout(timer);
      resolve({ ok: false, status: -1, out, err: e.message });
    });
    c.on('close', (code) => {
      clearTimeout(timer);
      resolve({ ok: code === 0, status: code ?? -1, out, err });
    });
  });
}

/**
 * Whether argv prints anything on stdout: read up to the first bytes, then it is ended (`tc
 * filter show ... pref P` of an endpoint table of 90k entries prints ~20 MB nobody needs).
 * Never rejects: a command that cannot run printed nothing.
 */
export function shHasOutput(
  argv: readonly string[],
  timeoutMs = DEFAULT_TIMEOUT_MS,
): Promise<boolean> {
  return new Promise((resolve) => {
    const c = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'ignore'] });
    let any = false;
    const timer = setTimeout(() => c.kill('SIGKILL'), timeoutMs);
    c.stdout.once('data', () => {
      any = true;
      c.kill('SIGKILL');
    });
    c.on('error', () => resolve(false));
    c.on('close', () => {
      clearTimeout(timer);
      resolve(any);
    });
  });
}

/**
 * Where a namespace's commands run. The default is this machine: `ip netns exec <ns>`. A lab
 * whose nodes are other machines (`lab compare --vms`: VMs reached by ssh) installs its own
 * route for the length of a run (withNsRoute), and every command the lab engine builds with
 * inNs — captures, scenarios, mode switches — goes there instead, unchanged otherwise.
 */
export interface NsRoute {
  /** argv that runs argv inside namespace ns */
  argv(ns: string, argv: readonly string[]): string[];
  /** the Node binary where the namespaces are (a lab command written in JavaScript) */
  node: string;
}

/** This machine's namespaces. */
export const LOCAL_ROUTE: NsRoute = {
  argv: (ns, argv) => ['ip', 'netns', 'exec', ns, ...argv],
  node: process.execPath,
};

let route: NsRoute = LOCAL_ROUTE;

/** argv to run a command inside a network namespace (through the current route). */
export function inNs(ns: string, argv: readonly string[]): string[] {
  return route.argv(ns, argv);
}

/** The Node binary on the side of the current route. */
export function nsNode(): string {
  return route.node;
}

/** Runs fn with r as the namespaces' route; the previous route is back afterwards. */
export async function withNsRoute<T>(r: NsRoute, fn: () => Promise<T>): Promise<T> {
  const before = route;
  route = r;
  try {
    return await fn();
  } finally {
    route = before;
  }
}

/** The network namespaces of this machine (`ip netns list`). */
export function listNetns(): string[] {
  return shTry(['ip', 'netns', 'list'])
    .out.split('\n')
    .map((l) => l.trim().split(/\s+/)[0] ?? '')
    .filter((n) => n !== '');
}

/** POSIX shell quoting, for the watchdog's undo script and a command sent over ssh. */
export function shQuote(s: string): string {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

// The one way kubetun runs a command (`ip`, `tc`, `sysctl`, `nft`, `tcpdump`, a lab process):
// the agent's steering and cleanup, the lab's build and its exercises all use this module.
// argv arrays, never a shell string, so an interface or pod name cannot inject anything; a
// failure carries the command line and the tool's stderr. Slow world only.
//
//   sh        stdout, or throws CommandError          (a step that must succeed)
//   shTry     { ok, out, err, status }, never throws  (teardown: "already gone" is fine)
//   shJson    `ip -j` / `tc -j` output parsed
//   shAsync   like shTry, asynchronous: many commands at once (exercise checks)
//
// Synchronous by default on purpose: lab up and the agent's start are sequences where each step
// needs the one before. zx is not used here: see docs/architecture.md ("Shell commands").
import { execFileSync, spawn, spawnSync } from 'node:child_process';
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

/** argv to run a command inside a network namespace. */
export function inNs(ns: string, argv: readonly string[]): string[] {
  return ['ip', 'netns', 'exec', ns, ...argv];
}

/** The network namespaces of this machine (`ip netns list`). */
export function listNetns(): string[] {
  return shTry(['ip', 'netns', 'list'])
    .out.split('\n')
    .map((l) => l.trim().split(/\s+/)[0] ?? '')
    .filter((n) => n !== '');
}

/** POSIX shell quoting, for the watchdog's undo script. */
export function shQuote(s: string): string {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

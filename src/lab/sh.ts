// Running the commands that build the lab. Synchronous on purpose: lab up is a sequence where
// each step needs the one before, and a failed step must stop the build with its stderr shown.
import { execFileSync, spawnSync } from 'node:child_process';
import { type ErrorOptions, KubetunError } from '../errors.ts';

/** A lab step that failed (a command, a process, the lock): not the user's typo. Exit 1. */
export class LabError extends KubetunError {
  constructor(message: string, options: ErrorOptions = {}) {
    super('LAB', message, options);
  }
}

/** Runs argv and returns its stdout; throws LabError with the command and its stderr on failure. */
export function sh(argv: string[], opts: { input?: string; timeoutMs?: number } = {}): string {
  try {
    return execFileSync(argv[0]!, argv.slice(1), {
      encoding: 'utf8',
      input: opts.input,
      timeout: opts.timeoutMs ?? 30_000,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    const why = (e.stderr ?? '').trim() || e.message;
    throw new LabError(`${argv.join(' ')}: ${why}`);
  }
}

/** Like sh, but reports failure instead of throwing (for teardown, where "already gone" is fine). */
export function shTry(
  argv: string[],
  timeoutMs = 30_000,
): { ok: boolean; out: string; err: string; status: number } {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout: timeoutMs });
  return { ok: r.status === 0, out: r.stdout ?? '', err: r.stderr ?? '', status: r.status ?? -1 };
}

/** argv to run a command inside a network namespace. */
export function inNs(ns: string, argv: string[]): string[] {
  return ['ip', 'netns', 'exec', ns, ...argv];
}

export function listNetns(): string[] {
  const r = shTry(['ip', 'netns', 'list']);
  return r.out
    .split('\n')
    .map((l) => l.trim().split(/\s+/)[0] ?? '')
    .filter((n) => n !== '');
}

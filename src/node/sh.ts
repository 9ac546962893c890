// Running `ip` / `tc` from the agent (slow world only: startup, rescans, shutdown). execFileSync
// with argv arrays, never a shell, so interface names cannot inject anything; a failure carries
// the command line and the tool's stderr.
import { execFileSync } from 'node:child_process';
import { KubetunError } from '../errors.ts';

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

/**
 * Runs argv[0] with the rest as arguments (`input` on its stdin); returns stdout; throws
 * CommandError on failure.
 */
export function run(argv: readonly string[], input?: string): string {
  try {
    return execFileSync(argv[0], argv.slice(1), {
      encoding: 'utf8',
      input,
      stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
  } catch (err) {
    const e = err as { stderr?: Buffer | string };
    throw new CommandError(argv, String(e.stderr ?? ''), err);
  }
}

/** Like run, but a failure is returned instead of thrown (undo steps of things maybe gone). */
export function tryRun(argv: readonly string[]): { ok: boolean; out: string; err: string } {
  try {
    return { ok: true, out: run(argv), err: '' };
  } catch (err) {
    return { ok: false, out: '', err: (err as Error).message };
  }
}

/** `ip -j ...` / `tc -j ...` output as JSON (both print nothing for "no objects"). */
export function runJson<T>(argv: readonly string[]): T[] {
  const out = run(argv).trim();
  return out ? (JSON.parse(out) as T[]) : [];
}

/** POSIX shell quoting, for the watchdog's undo script. */
export function shQuote(s: string): string {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

// The house's one error base class, and how the command line reports it.
//
//   KubetunError            a failure kubetun knows how to describe: a stable `code` (for
//     │                     programs and tests), a message naming what failed, an optional
//     │                     one-line `hint` saying what to do. Printed without a stack, exit 1.
//     └─ UserError          a mistake the user can fix (a flag, a file, a name, not root, no lab
//          │                up). Printed the same way, exit 2 — as commander does for usage.
//          ├─ UsageError    a bad flag, argument or name on the command line
//          ├─ NotRootError  the command needs root
//          └─ NoLabError    the command needs a running lab
//
// Areas subclass one of these (ManifestError, TopologyError and OptionError are UserErrors;
// LabError and CommandError are KubetunErrors: a tool failed, not the user). Callers match by
// class (`instanceof UserError`), never by name or message. Anything that is not a KubetunError
// is a bug and keeps its stack. The data plane never throws: it counts and drops.

export interface ErrorOptions {
  /** one line saying what to do, e.g. "run as root: sudo npx kubetun lab up" */
  hint?: string;
  cause?: unknown;
}

export class KubetunError extends Error {
  readonly code: string;
  readonly hint: string;
  /** the process exit status the command line uses for this error */
  readonly exitStatus: number = 1;
  constructor(code: string, message: string, options: ErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.hint = options.hint ?? '';
  }
}

/** A mistake in what the user typed or wrote; exit status 2. */
export class UserError extends KubetunError {
  override readonly exitStatus: number = 2;
}

export class UsageError extends UserError {
  constructor(message: string, options: ErrorOptions = {}) {
    super('USAGE', message, options);
  }
}

export class NotRootError extends UserError {
  constructor(what: string) {
    super('NOT_ROOT', 'needs root (it builds network namespaces and writes /run)', {
      hint: `run it as root, e.g. sudo npx kubetun ${what}`,
    });
  }
}

export class NoLabError extends UserError {
  constructor(message = 'the lab is not up') {
    super('NO_LAB', message, { hint: 'bring it up first: kubetun lab up' });
  }
}

/** Throws NotRootError unless this process runs as root (uid 0). */
export function requireRoot(what: string): void {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) {
    throw new NotRootError(what);
  }
}

/** An errno failure on a path (EACCES, ENOENT...) as a KubetunError naming the path. */
export function fromErrno(err: unknown, what: string, path: string): KubetunError {
  const code = (err as NodeJS.ErrnoException).code ?? '';
  if (code === 'EACCES' || code === 'EPERM') {
    return new UserError('NOT_ROOT', `${what}: ${path}: permission denied`, {
      hint: 'run it as root (sudo)',
      cause: err,
    });
  }
  return new KubetunError(`IO_${code || 'ERROR'}`, `${what}: ${path}: ${code || String(err)}`, {
    cause: err,
  });
}

/**
 * The lines the command line prints for err: "kubetun <cmd>: message" and, if there is one, the
 * hint. A KubetunError's message may span lines (a list of problems); it is printed as is.
 */
export function formatError(err: KubetunError, cmd: string): string {
  const head = cmd ? `kubetun ${cmd}: ` : 'kubetun: ';
  return `${head}${err.message}\n${err.hint ? `  hint: ${err.hint}\n` : ''}`;
}

/**
 * Reports err on stderr and returns the exit status: a KubetunError as its message (the stack
 * only when debug is set), anything else — a bug — with its stack.
 */
export function reportError(err: unknown, cmd: string, debug: boolean): number {
  if (err instanceof KubetunError) {
    process.stderr.write(formatError(err, cmd));
    if (debug && err.stack) process.stderr.write(`${err.stack}\n`);
    return err.exitStatus;
  }
  process.stderr.write(`kubetun ${cmd}: internal error (a bug; please report it):\n`);
  process.stderr.write(`${(err as Error)?.stack ?? String(err)}\n`);
  return 1;
}

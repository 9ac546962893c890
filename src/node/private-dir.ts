// Root-only control files: the directory that holds an agent's control socket and state file.
//
// Whoever can write that directory can plant `<node>.state.json`, whose undo commands the next
// `kubetun run` executes as root, or put their own socket where inspect commands connect. So
// the permissions must not depend on the caller's umask (mkdir's and listen's modes are masked
// by it: under `umask 000` they came out 0777):
//
//   ensurePrivateDir(dir)   creates every missing component 0700 (chmod after mkdir, so the
//                           umask cannot widen it); an existing directory must be ours and
//                           writable by nobody else — it is tightened to 0700, never loosened,
//                           and a shared one (/tmp: 1777) is refused rather than chmod-ed.
//   privateFileProblem(p)   why a file found there must not be trusted (owner, mode, the
//                           directory's owner and mode), or undefined when it may be.
//
// Files created in it are written 0600 by their writers (sockets chmod-ed after listen, while the
// 0700 directory keeps everyone else out of the gap).
import { chmodSync, lstatSync, mkdirSync, type Stats } from 'node:fs';
import { dirname } from 'node:path';

const GROUP_OTHER_WRITE = 0o022;

/** The effective uid the files must belong to (-1 where the platform has none). */
function euid(): number {
  return typeof process.geteuid === 'function' ? process.geteuid() : -1;
}

function tryLstat(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch {
    return undefined;
  }
}

/** What is wrong with `dir` as a private directory, or undefined. */
function dirProblem(dir: string, st: Stats): string | undefined {
  if (!st.isDirectory()) return `${dir} is not a directory`;
  if (st.uid !== euid()) return `${dir} belongs to uid ${st.uid}, not to this user (uid ${euid()})`;
  if ((st.mode & GROUP_OTHER_WRITE) !== 0)
    return `${dir} is writable by other users (mode ${(st.mode & 0o7777).toString(8)})`;
  return undefined;
}

/** Makes `dir` (and missing parents) 0700 whatever the umask; refuses a directory others share. */
export function ensurePrivateDir(dir: string): void {
  const st = tryLstat(dir);
  if (st === undefined) {
    const parent = dirname(dir);
    if (parent !== dir) ensurePrivateDirParent(parent);
    mkdirSync(dir, { mode: 0o700 });
    chmodSync(dir, 0o700);
    return;
  }
  const problem = dirProblem(dir, st);
  if (problem !== undefined)
    throw new Error(`${problem}: choose a control directory only this user can write`);
  if ((st.mode & 0o777) !== 0o700) chmodSync(dir, 0o700);
}

/** Missing parents are created 0700 too; existing ones are left as they are (e.g. /run). */
function ensurePrivateDirParent(dir: string): void {
  if (tryLstat(dir) !== undefined) return;
  const parent = dirname(dir);
  if (parent !== dir) ensurePrivateDirParent(parent);
  mkdirSync(dir, { mode: 0o700 });
  chmodSync(dir, 0o700);
}

/** Why the file at `path` must not be trusted, or undefined when it is ours and private. */
export function privateFileProblem(path: string): string | undefined {
  const st = tryLstat(path);
  if (st === undefined) return `${path} is gone`;
  if (!st.isFile()) return `${path} is not a regular file`;
  if (st.uid !== euid())
    return `${path} belongs to uid ${st.uid}, not to this user (uid ${euid()})`;
  if ((st.mode & GROUP_OTHER_WRITE) !== 0)
    return `${path} is writable by other users (mode ${(st.mode & 0o7777).toString(8)})`;
  const dir = dirname(path);
  const dst = tryLstat(dir);
  return dst === undefined ? `${dir} is gone` : dirProblem(dir, dst);
}

// Processes the lab starts inside its namespaces (pod servers, kubetun, tcpdump): started in the
// background with their output in a log file, remembered by PID + start time, ended by PID only.
// Both kinds start through sh.ts inNs, so a lab on other machines (an NsRoute) runs them there.
//
//   startInNs    detached; its PID is the process's own (ip netns exec execs it)
//   startStream  held by this process: stdout to a local file, ended by closing its stdin, so it
//                works the same where the far process is behind ssh (a capture in a VM)
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, existsSync, fstatSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { inNs } from '../sh.ts';
import { LabError } from './error.ts';
import type { LabProcess } from './state.ts';

/** /proc/<pid>/stat field 22 (start time in clock ticks since boot), or undefined if gone. */
export function procStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const state = rest[0];
    if (state === 'Z' || state === 'X') return undefined;
    return rest[19];
  } catch {
    return undefined;
  }
}

export function isAlive(p: Pick<LabProcess, 'pid' | 'startTime'>): boolean {
  return procStartTime(p.pid) === p.startTime;
}

/** Starts argv inside network namespace ns (ip netns exec execs it, so the PID is argv's). */
export function startInNs(
  role: LabProcess['role'],
  name: string,
  ns: string,
  argv: string[],
  log: string,
): LabProcess {
  mkdirSync(dirname(log), { recursive: true });
  const fd = openSync(log, 'a');
  try {
    const logFrom = fstatSync(fd).size;
    const routed = inNs(ns, argv);
    const child = spawn(routed[0]!, routed.slice(1), {
      detached: true,
      stdio: ['ignore', fd, fd],
    });
    child.unref();
    if (child.pid === undefined) throw new LabError(`could not start ${argv[0]} in ${ns}`);
    const startTime = procStartTime(child.pid) ?? '';
    return { role, name, ns, pid: child.pid, startTime, log, logFrom, argv };
  } finally {
    closeSync(fd);
  }
}

/** SIGTERM, then SIGKILL after graceMs; only if the PID still is the process we started. */
export async function stopProcess(
  p: Pick<LabProcess, 'pid' | 'startTime'>,
  graceMs = 3000,
): Promise<void> {
  if (!isAlive(p)) return;
  try {
    process.kill(p.pid, 'SIGTERM');
  } catch {
    return;
  }
  for (let waited = 0; waited < graceMs; waited += 50) {
    await sleep(50);
    if (!isAlive(p)) return;
  }
  try {
    process.kill(p.pid, 'SIGKILL');
  } catch {}
  for (let i = 0; i < 40 && isAlive(p); i++) await sleep(50);
}

/** Waits until the process's own part of its log (from logFrom on) holds a line matching re;
 * fails early if the process died. */
export async function waitForLog(p: LabProcess, re: RegExp, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (re.test(readLog(p.log, p.logFrom))) return;
    if (!isAlive(p)) throw new LabError(`${p.argv.join(' ')} in ${p.ns} exited:\n${tail(p.log)}`);
    await sleep(25);
  }
  throw new LabError(
    `${p.argv.join(' ')} in ${p.ns}: not ready after ${timeoutMs} ms:\n${tail(p.log)}`,
  );
}

/** The log's text, from byte `from` on (a process's own output in a log it shares). */
export function readLog(file: string, from = 0): string {
  if (!existsSync(file)) return '';
  const all = readFileSync(file);
  return (from > 0 ? all.subarray(from) : all).toString('utf8');
}

/** The last lines of a log, indented, for error messages. */
export function tail(file: string, lines = 15): string {
  const all = readLog(file).trimEnd().split('\n');
  return all
    .slice(-lines)
    .map((l) => `    ${l}`)
    .join('\n');
}

// Runs "$@" until this script's stdin closes, then SIGTERMs it and waits for it: the far end of
// a stream ends when the lab closes the pipe, wherever the process runs (ssh carries the EOF;
// a signal to the local ssh would leave the far process running). SIGTERM, not SIGINT: the
// command runs in the background of a non-interactive shell, where SIGINT is ignored. If the
// command exits first (a bad filter), the script exits with it and the stream ends at once.
const STREAM_SCRIPT = `exec 3<&0
"$@" </dev/null &
p=$!
{ cat <&3 >/dev/null; kill -TERM "$p"; } >/dev/null 2>&1 &
wait "$p"`;

/** A process started by startStream. */
export interface Stream {
  name: string;
  ns: string;
  argv: string[];
  /** the file its stdout goes to */
  out: string;
  /** its stderr */
  log: string;
  child: ChildProcess;
  /** resolves with its exit status (-1: by a signal) once it and its output are done */
  done: Promise<number>;
}

/** Starts argv inside ns, stdout to the file out, stderr to log, until endStream. */
export function startStream(name: string, ns: string, argv: string[], out: string, log: string) {
  mkdirSync(dirname(log), { recursive: true });
  const outFd = openSync(out, 'w');
  const logFd = openSync(log, 'a');
  try {
    const routed = inNs(ns, ['sh', '-c', STREAM_SCRIPT, 'sh', ...argv]);
    const child = spawn(routed[0]!, routed.slice(1), { stdio: ['pipe', outFd, logFd] });
    const done = new Promise<number>((resolve) => {
      child.on('error', () => resolve(-1));
      child.on('close', (code) => resolve(code ?? -1));
    });
    // The far end may be gone already (it exited): a write error on the pipe is not ours to raise.
    child.stdin!.on('error', () => {});
    return { name, ns, argv, out, log, child, done } satisfies Stream;
  } finally {
    closeSync(outFd);
    closeSync(logFd);
  }
}

/** Waits until the stream's log holds a line matching re; fails early if it ended. */
export async function waitForStreamLog(s: Stream, re: RegExp, timeoutMs: number): Promise<void> {
  let ended = false;
  void s.done.then(() => {
    ended = true;
  });
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (re.test(readLog(s.log))) return;
    if (ended) throw new LabError(`${s.argv.join(' ')} in ${s.ns} exited:\n${tail(s.log)}`);
    await sleep(25);
  }
  throw new LabError(
    `${s.argv.join(' ')} in ${s.ns}: not ready after ${timeoutMs} ms:\n${tail(s.log)}`,
  );
}

/**
 * Ends a stream by closing its stdin and waits until its output is complete (its far end
 * flushed and exited; over ssh, the last byte crossed). If it does not end in graceMs, the
 * local process is killed — and the output may then be short: the exit status says so (-1).
 */
export async function endStream(s: Stream, graceMs = 30_000): Promise<number> {
  s.child.stdin!.end();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), graceMs);
  });
  const first = await Promise.race([s.done, late]);
  clearTimeout(timer);
  if (first !== 'late') return first;
  s.child.kill('SIGTERM');
  await Promise.race([s.done, sleep(2000)]);
  s.child.kill('SIGKILL');
  await s.done;
  return -1;
}

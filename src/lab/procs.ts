// Processes the lab starts inside its namespaces (pod servers, kubetun, tcpdump): started in the
// background with their output in a log file, remembered by PID + start time, ended by PID only.
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
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
    const child = spawn('ip', ['netns', 'exec', ns, ...argv], {
      detached: true,
      stdio: ['ignore', fd, fd],
    });
    child.unref();
    if (child.pid === undefined) throw new LabError(`could not start ${argv[0]} in ${ns}`);
    const startTime = procStartTime(child.pid) ?? '';
    return { role, name, ns, pid: child.pid, startTime, log, argv };
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

/** Waits until the log holds a line matching re; fails early if the process died. */
export async function waitForLog(p: LabProcess, re: RegExp, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (re.test(readLog(p.log))) return;
    if (!isAlive(p)) throw new LabError(`${p.argv.join(' ')} in ${p.ns} exited:\n${tail(p.log)}`);
    await sleep(25);
  }
  throw new LabError(
    `${p.argv.join(' ')} in ${p.ns}: not ready after ${timeoutMs} ms:\n${tail(p.log)}`,
  );
}

export function readLog(file: string): string {
  return existsSync(file) ? readFileSync(file, 'utf8') : '';
}

/** The last lines of a log, indented, for error messages. */
export function tail(file: string, lines = 15): string {
  const all = readLog(file).trimEnd().split('\n');
  return all
    .slice(-lines)
    .map((l) => `    ${l}`)
    .join('\n');
}

// The lab's agent supervisor (src/lab/supervisor.ts) around stand-in agents (sh, sleep): a
// crash is restarted with a backoff, a clean exit and a usage error (status 2) are not, a stop
// passes SIGTERM on, a hold keeps a crash down, and too many crashes end in a give-up that the
// status file and `lab status`'s line say. No root, no namespaces.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  MAX_RESTARTS,
  readSupervisor,
  type SupervisorStatus,
  supervisedArgv,
  supervisorFileFor,
  supervisorLine,
} from '../../src/lab/supervisor.ts';
import { waitFor } from '../node/wait.ts';

const dir = mkdtempSync(join(tmpdir(), 'kt-sup-'));
const started: ChildProcess[] = [];
afterAll(() => {
  for (const p of started) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

let n = 0;
function supervise(agent: string[]) {
  const sock = join(dir, `node${n++}.sock`);
  const [cmd, ...args] = supervisedArgv(supervisorFileFor(sock), agent);
  const p = spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  started.push(p);
  let log = '';
  p.stdout!.on('data', (b: Buffer) => {
    log += b;
  });
  const exit = new Promise<number | null>((r) => p.once('exit', (code) => r(code)));
  return { p, sock, exit, log: () => log, st: () => readSupervisor(sock) };
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('the lab supervisor', () => {
  it('restarts an agent killed by SIGKILL, and a stop passes SIGTERM on to the agent', async () => {
    const s = supervise(['sleep', '60']);
    await waitFor(() => s.st()?.state === 'running', 'the first agent');
    const first = s.st()!.agentPid;
    process.kill(first, 'SIGKILL');
    await waitFor(() => {
      const st = s.st();
      return st?.state === 'running' && st.agentPid !== first;
    }, 'a second agent');
    const st = s.st()!;
    expect([st.restarts, st.lastExit]).toEqual([1, 'signal 9']);
    expect(alive(st.agentPid)).toBe(true);
    expect(s.log()).toMatch(/agent exited \(signal 9\), restart 1 in 0\.5s/);
    expect(supervisorLine(st)).toBe(', 1 restarts by the supervisor (last: signal 9)');
    s.p.kill('SIGTERM');
    await s.exit;
    expect(alive(st.agentPid)).toBe(false); // the agent got the stop
    expect(existsSync(supervisorFileFor(s.sock))).toBe(false);
  });

  it('does not restart a clean exit or a usage error (status 2)', async () => {
    const clean = supervise(['sh', '-c', 'exit 0']);
    expect(await clean.exit).toBe(0);
    const usage = supervise(['sh', '-c', 'exit 2']);
    expect(await usage.exit).toBe(2);
    expect(usage.st()).toMatchObject({ state: 'failed', restarts: 0, lastExit: 'status 2' });
  });

  it('held (lab agent crash): the next crash stays down', async () => {
    const s = supervise(['sleep', '60']);
    await waitFor(() => s.st()?.state === 'running', 'the agent');
    s.p.kill('SIGUSR1');
    await new Promise((r) => setTimeout(r, 200));
    process.kill(s.st()!.agentPid, 'SIGKILL');
    await s.exit;
    expect(s.st()).toMatchObject({ state: 'held', restarts: 0, lastExit: 'signal 9' });
    expect(supervisorLine(s.st())).toMatch(/supervisor held/);
  });

  it(`gives up after ${MAX_RESTARTS} restarts within the window, with a backoff`, async () => {
    const t0 = Date.now();
    const s = supervise(['sh', '-c', 'exit 1']);
    expect(await s.exit).toBe(1);
    const took = Date.now() - t0;
    const st = s.st() as SupervisorStatus;
    expect(st).toMatchObject({ state: 'gave-up', restarts: MAX_RESTARTS, lastExit: 'status 1' });
    expect(s.log()).toMatch(/restart 2 in 1s/);
    expect(s.log()).toMatch(/restart 4 in 4s/);
    expect(s.log()).toMatch(new RegExp(`${MAX_RESTARTS} restarts in 60s, giving up`));
    expect(took).toBeGreaterThanOrEqual(11_000); // 0.5 + 1 + 2 + 4 + 4 s of backoff
    expect(supervisorLine(st)).toMatch(
      /GAVE UP after 5 restarts \(last: status 1; kubetun lab agent restart\)/,
    );
  }, 40_000);
});

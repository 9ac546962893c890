// The fail-open watchdog and the state file (src/node/failure.ts), without root: the undo
// commands here only append to a file in a temp dir.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import {
  claimLease,
  createLease,
  recoverState,
  statePathFor,
  writeState,
} from '../../src/node/failure.ts';
import { running, waitFor } from './wait.ts';

const dir = mkdtempSync(join(tmpdir(), 'kt-failure-'));
const CHILD = fileURLToPath(new URL('./fixtures/watchdog-child.ts', import.meta.url));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Starts the stand-in agent; resolves with its process and its watchdog's pid. */
async function startChild(mode: string, log: string, ...lease: string[]) {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, mode, log, ...lease], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const pid = await new Promise<number>((resolve) => {
    child.stdout.once('data', (b: Buffer) => resolve(Number(b.toString().trim())));
  });
  return { child, watchdogPid: pid };
}

describe('Watchdog', () => {
  it('replays the undo list, last first, when the agent is killed', async () => {
    const log = join(dir, 'killed.log');
    const { child, watchdogPid } = await startChild('wait', log);
    child.kill('SIGKILL');
    await waitFor(() => !running(watchdogPid), 'the watchdog to finish');
    expect(readFileSync(log, 'utf8')).toBe("second it's quoted; $HOME\nfirst\n");
  });

  it('does nothing when the agent disarms it after cleaning up itself', async () => {
    const log = join(dir, 'clean.log');
    const { child, watchdogPid } = await startChild('clean', log);
    await new Promise((r) => child.once('exit', r));
    await waitFor(() => !running(watchdogPid), 'the watchdog to exit');
    expect(existsSync(log)).toBe(false);
  });
});

describe('Watchdog with a grace window (restart without losing a connection)', () => {
  it('waits out the window while the lease exists, then takes it and fails open', async () => {
    const log = join(dir, 'grace.log');
    const lease = join(dir, 'grace.lease');
    createLease(lease);
    const { child, watchdogPid } = await startChild('wait', log, lease, '1500');
    const t0 = Date.now();
    child.kill('SIGKILL');
    await new Promise((r) => setTimeout(r, 700));
    expect(existsSync(log)).toBe(false); // still in the window: nothing undone
    expect(running(watchdogPid)).toBe(true);
    await waitFor(() => !running(watchdogPid), 'the watchdog to fail open');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1400);
    expect(readFileSync(log, 'utf8')).toBe("second it's quoted; $HOME\nfirst\n");
    expect(existsSync(lease)).toBe(false);
    expect(claimLease(lease)).toBe(false); // the watchdog won: nobody takes over any more
  });

  it('exits without undoing anything once a restarted agent claims the lease', async () => {
    const log = join(dir, 'claimed.log');
    const lease = join(dir, 'claimed.lease');
    createLease(lease);
    const { child, watchdogPid } = await startChild('wait', log, lease, '20000');
    child.kill('SIGKILL');
    await new Promise((r) => setTimeout(r, 300));
    expect(claimLease(lease)).toBe(true);
    await waitFor(() => !running(watchdogPid), 'the watchdog to step back');
    expect(existsSync(log)).toBe(false);
  });
});

describe('state file', () => {
  it('maps the socket path to a state path beside it', () => {
    expect(statePathFor('/run/kubetun/node1.sock')).toBe('/run/kubetun/node1.state.json');
  });

  it('recoverState replays a crashed run’s undo list last first and removes the file', async () => {
    const path = join(dir, 'n.state.json');
    const log = join(dir, 'recover.log');
    const step = (s: string) => ['sh', '-c', `echo ${s} >> "$1"`, 'sh', log];
    writeState(path, { pid: 1, watchdogPid: 0, tun: 'kt0', undo: [step('a'), step('b')] });
    const r = await recoverState(path);
    expect(r).toEqual({ prevPid: 1, steps: 2, failed: 0 });
    expect(readFileSync(log, 'utf8')).toBe('b\na\n');
    expect(existsSync(path)).toBe(false);
  });

  it('recoverState without a state file does nothing', async () => {
    expect(await recoverState(join(dir, 'none.state.json'))).toBeUndefined();
  });

  it('an unreadable state file is removed rather than trusted', async () => {
    const path = join(dir, 'bad.state.json');
    writeFileSync(path, '{not json');
    expect(await recoverState(path)).toEqual({ prevPid: 0, steps: 0, failed: 0 });
    expect(existsSync(path)).toBe(false);
  });
});

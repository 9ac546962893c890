// Root, the namespace lab: a crashed agent comes back by itself (src/lab/supervisor.ts, the
// lab's systemd Restart=on-failure). A paced download pod-a -> 10.96.0.81 (web-local: pod-d on
// node2) runs through node1's kt0 (DNAT out, reverse NAT back); node1's agent is killed with
// SIGKILL and the test runs no command after that: the supervisor starts a new agent, which
// takes over the pinned maps and the TUN, and the SAME connection finishes with every byte right.
// `lab status` then shows the restart. (The give-up and the backoff: supervisor-script.test.ts.)
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { patternChunks } from '../../lab/servers/pattern.mjs';
import { restartAgent } from '../../src/lab/agent.ts';
import { labCtl } from '../../src/lab/ctl.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import { readState } from '../../src/lab/state.ts';
import { formatStatus, labStatus } from '../../src/lab/status.ts';
import { LAB_PREFIX } from '../../src/lab/topology.ts';

const N = 40 * 1024 * 1024; // at --limit-rate 4M: ~10 s, the agent is dark for part of it
const URL = `http://10.96.0.81/bytes?n=${N}`;
// tsx alone can take many seconds to start an agent on a loaded machine: a grace window the
// restart surely fits in (the default 5 s is for an idle node)
const GRACE = ['--restart-grace', '60000'];
const tmp = mkdtempSync(join(tmpdir(), 'kubetun-supervisor-'));

function patternSha(n: number): string {
  const h = createHash('sha256');
  for (const chunk of patternChunks(n)) h.update(chunk);
  return h.digest('hex');
}

const socket = () =>
  readState()!.processes.find((p) => p.role === 'kubetun' && p.name === 'node1')!.ctlSocket!;
const status = () => labCtl<{ pid: number; tookOverPid: number }>(socket(), { cmd: 'status' });

beforeAll(async () => {
  await labUp({ mode: 'kubetun' });
  await restartAgent('node1', GRACE, () => {});
}, 300_000);

afterAll(async () => {
  await labDown({});
  rmSync(tmp, { recursive: true, force: true });
}, 120_000);

describe('the lab supervisor', () => {
  it('restarts a SIGKILLed agent by itself; the same connection finishes, every byte right', async () => {
    const before = await status();
    const file = join(tmp, 'dl.bin');
    const curl = spawn(
      'ip',
      [
        'netns',
        'exec',
        `${LAB_PREFIX}pod-a`,
        'curl',
        '-sS',
        '--max-time',
        '150',
        '--limit-rate',
        '4M',
      ].concat(['-o', file, '-w', '%{http_code} %{size_download} %{num_connects}', URL]),
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    curl.stdout!.on('data', (b: Buffer) => {
      out += b;
    });
    curl.stderr!.on('data', (b: Buffer) => {
      err += b;
    });
    const done = new Promise<number | null>((r) => curl.once('exit', (c) => r(c)));
    await sleep(2000);
    const killedAt = Date.now();
    process.kill(before.pid, 'SIGKILL'); // the agent, not the supervisor: nothing else from here on
    const code = await done;
    expect(code, err).toBe(0);
    expect(out).toBe(`200 ${N} 1`); // one connection, all of it
    const h = createHash('sha256').update(readFileSync(file)).digest('hex');
    expect(h).toBe(patternSha(N));

    const after = await status();
    expect(after.pid).not.toBe(before.pid);
    expect(after.tookOverPid).toBe(before.pid); // took over, did not start fresh
    const s = await labStatus();
    const n1 = s.nodes.find((n) => n.name === 'node1')!.kubetun!;
    expect(n1.supervisor).toMatchObject({ state: 'running', restarts: 1, lastExit: 'signal 9' });
    expect(formatStatus(s)).toContain('1 restarts by the supervisor (last: signal 9)');
    console.log(
      `supervisor: download finished ${Date.now() - killedAt} ms after the kill; load ${readFileSync('/proc/loadavg', 'utf8').trim()}`,
    );
  }, 240_000);
});

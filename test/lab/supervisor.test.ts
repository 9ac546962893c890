// Root, the namespace lab (issue 18's done-when): kill -9 of an agent in the middle of 500 MiB
// downloads through a VIP and through a NodePort, and nothing else — the lab's supervisor
// (src/lab/supervisor.ts, its Restart=on-failure) starts a new agent, which takes over the
// pinned maps and the TUN within the DEFAULT restart grace window, and the SAME connections
// finish with every byte right (sha256, one connection each). Each download needs the killed
// agent for every segment, both ways:
//
//   node1 killed   pod-a (node1) -> 10.96.0.81 (web-local's ClusterIP; its one endpoint is pod-d
//                  on node2): node1 DNATs every request segment and reverse-NATs every reply
//                  client -> 172.30.0.11:30080 (web-np NodePort): node1 DNATs and masquerades,
//                  the replies come back to node1 to be translated again
//   node2 killed   pod-c (node2) -> 10.96.0.81 (pod-d, node2)
//                  client -> 172.30.0.12:30081 (web-local NodePort, externalTrafficPolicy
//                  Local: pod-d)
//
// With the supervisor switched off (held before the kill) the first test fails: the grace
// window passes with no agent, the node fails open, and the next reply segment reaches its
// client untranslated (curl: connection reset). `lab status` shows the restarts.
// (The supervisor's give-up and backoff: supervisor-script.test.ts.)
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { patternChunks } from '../../lab/servers/pattern.mjs';
import { labCtl } from '../../src/lab/ctl.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import { readState } from '../../src/lab/state.ts';
import { formatStatus, labStatus } from '../../src/lab/status.ts';
import { LAB_PREFIX } from '../../src/lab/topology.ts';
import { DEFAULT_RESTART_GRACE_MS } from '../../src/node/failure.ts';

const N = 500 * 1024 * 1024;
// paced, so that each download outlasts a restart on a loaded machine (~20 s at full rate)
const RATE = '25M';
let sha = '';

interface Status {
  pid: number;
  tookOverPid: number;
  readyToForwardMs: number;
  firstBatchMs: number;
}

const socket = (node: string) =>
  readState()!.processes.find((p) => p.role === 'kubetun' && p.name === node)!.ctlSocket!;
const status = (node: string) => labCtl<Status>(socket(node), { cmd: 'status' });
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** curl in namespace `ns`, the body hashed as it comes (no 500 MiB file); -w on stderr. */
function download(ns: string, url: string) {
  const curl = spawn('ip', [
    'netns',
    'exec',
    `${LAB_PREFIX}${ns}`,
    'curl',
    '-sS',
    '--max-time',
    '300',
    '--limit-rate',
    RATE,
    '-o',
    '-',
    '-w',
    '%{stderr}%{http_code} %{size_download} %{num_connects}',
    url,
  ]);
  const h = createHash('sha256');
  let err = '';
  curl.stdout.on('data', (b: Buffer) => h.update(b));
  curl.stderr.on('data', (b: Buffer) => {
    err += b;
  });
  return new Promise<{ code: number | null; report: string; sha: string }>((resolve) =>
    curl.once('close', (code) => resolve({ code, report: err, sha: h.digest('hex') })),
  );
}

/** The new agent's 'took over' log line: ms since its process started, and where they went. */
function tookOver(node: string): string {
  const log = readState()!.processes.find((p) => p.role === 'kubetun' && p.name === node)!.log;
  const line = readFileSync(log, 'utf8')
    .split('\n')
    .filter((l) => l.includes('took over the previous run'))
    .pop();
  if (!line) return 'no took-over line in its log';
  const j = JSON.parse(line) as { sinceProcessStartMs: number; phasesMs: object };
  return `forwarding ${j.sinceProcessStartMs} ms after its process started (phases ${JSON.stringify(j.phasesMs)})`;
}

/** ms from the kill until the node's control socket answers a new agent's status. */
async function waitBack(node: string, killedPid: number, killedAt: number): Promise<number> {
  for (;;) {
    try {
      if ((await status(node)).pid !== killedPid) return Date.now() - killedAt;
    } catch {
      // not back yet
    }
    await sleep(50);
  }
}

/** Starts the downloads, kills `node`'s agent 3 s in, and checks every byte of every one. */
async function killDuring(node: string, downloads: { ns: string; url: string }[]) {
  const before = await status(node);
  const runs = downloads.map((d) => download(d.ns, d.url));
  await sleep(3000);
  const killedAt = Date.now();
  process.kill(before.pid, 'SIGKILL'); // the agent, not the supervisor: nothing else from here on
  const back = await waitBack(node, before.pid, killedAt);
  const results = await Promise.all(runs);
  const after = await status(node);
  console.log(
    `supervisor: ${node}'s agent answered ${back} ms after the kill (grace ${DEFAULT_RESTART_GRACE_MS} ms); ${tookOver(node)}; ready to forward ${after.readyToForwardMs} ms after its start(), first batch read at ${after.firstBatchMs} ms; downloads done ${Date.now() - killedAt} ms after the kill; load ${loadavg()}`,
  );
  for (const [i, r] of results.entries()) {
    const what = `${downloads[i].ns} -> ${downloads[i].url}`;
    expect(r.code, `${what}: ${r.report}`).toBe(0);
    expect(r.report, what).toBe(`200 ${N} 1`); // one connection, all of it
    expect(r.sha, what).toBe(sha);
  }
  expect(after.tookOverPid).toBe(before.pid); // took over, did not start fresh
  const s = await labStatus();
  const sup = s.nodes.find((n) => n.name === node)!.kubetun!.supervisor;
  expect(sup).toMatchObject({ state: 'running', restarts: 1, lastExit: 'signal 9' });
  return s;
}

beforeAll(async () => {
  await labUp({ mode: 'kubetun' });
  const h = createHash('sha256');
  for (const chunk of patternChunks(N)) h.update(chunk);
  sha = h.digest('hex');
}, 300_000);

afterAll(async () => {
  await labDown({});
}, 120_000);

describe('the lab supervisor: kill -9 mid-download, the same connections finish', () => {
  it("node1's agent: pod-a -> VIP (backend on node2) and client -> node1's NodePort", async () => {
    const s = await killDuring('node1', [
      { ns: 'pod-a', url: `http://10.96.0.81/bytes?n=${N}` },
      { ns: 'client', url: `http://172.30.0.11:30080/bytes?n=${N}` },
    ]);
    expect(formatStatus(s)).toContain('1 restarts by the supervisor (last: signal 9)');
  }, 600_000);

  it("node2's agent: pod-c -> VIP and client -> node2's NodePort (externalTrafficPolicy Local)", async () => {
    await killDuring('node2', [
      { ns: 'pod-c', url: `http://10.96.0.81/bytes?n=${N}` },
      { ns: 'client', url: `http://172.30.0.12:30081/bytes?n=${N}` },
    ]);
  }, 600_000);
});

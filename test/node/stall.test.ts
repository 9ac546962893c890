// Root test (issue 18 point 2): the packet loop never waits for the control plane. A pod pings
// a ClusterIP every 20 ms (--vip-echo: the agent answers from its packet loop) while the running
// agent loads, in turn: a 10 MB manifest (one Service with ~97k annotation keys, which the
// probe saw stall both agents for ~184 s; refused, over the apiserver's 256 KiB), a valid
// directory of 5,000 Services and their EndpointSlices, and that directory's removal. Over the
// whole of each load every request must be answered, none later than 100 ms — judged from
// ping's own figures: its sequence numbers and round-trip times (kernel receive timestamps, so
// ping's own scheduling on a loaded machine does not count; a request waiting in the TUN for a
// stalled packet loop does). Printed beside them: the gaps between replies (-D), and the same
// figures for a quiet second before the loads and for a pod-to-pod ping at the same time (the
// kernel alone: the machine's own jitter).
//
// Why pod -> VIP and not pod -> pod on the same node: the steering hands the agent Service
// traffic and endpoints' replies only (steering.ts); a same-node pod-to-pod ping never crosses
// the agent, so it keeps answering however stalled the agent is and would prove nothing. The
// answered VIP ping crosses the TUN and the packet loop both ways, like every Service packet.
//
// With the manifests read on the agent's main thread (worker off) and the sync unsliced, the
// first load alone leaves the pings unanswered for seconds (see the commit that added this).
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ctlRequest } from '../../src/node/ctl.ts';
import { PODS, Topo, VIP } from './topo.ts';

const POD_BE1 = PODS[1].ip;

const t = new Topo();
let agent: ChildProcess | undefined;
/** The behaviour bound of the issue: no reply later than this after the previous one. */
const GAP_MS = 100;
const SERVICES = 5000;

function bigAnnotations(keys: number): string {
  const lines = ['apiVersion: v1', 'kind: Service', 'metadata:', '  name: big', '  annotations:'];
  for (let i = 0; i < keys; i++) lines.push(`    example.com/key-${i}: "${'v'.repeat(80)}"`);
  return `${lines.join('\n')}\nspec: {clusterIP: 10.96.0.99, ports: [{port: 80}]}\n`;
}

function manyServices(n: number): string {
  const docs: string[] = [];
  for (let i = 1; i <= n; i++) {
    const ip = `${100 + (i >> 8)}.${i & 255}`; // 10.96.100.1 .. 10.96.119.136
    docs.push(`apiVersion: v1
kind: Service
metadata: {name: s${i}, namespace: bulk}
spec:
  clusterIP: 10.96.${ip}
  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: s${i}-1, namespace: bulk, labels: {kubernetes.io/service-name: s${i}}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints:
- {addresses: [10.244.1.11], conditions: {ready: true}, nodeName: node1}
- {addresses: [10.244.1.12], conditions: {ready: true}, nodeName: node1}
`);
  }
  return docs.join('---\n');
}

interface Reply {
  seq: number;
  at: number; // when ping printed it (-D), ms since the epoch
  rtt: number; // ms
}

/** `ping -D` from the client pod to `dst`; its replies as they come. */
function startPing(dst: string): { proc: ChildProcess; replies: Reply[] } {
  const proc = spawn(
    'ip',
    ['netns', 'exec', t.ns('client'), 'ping', '-n', '-D', '-i', '0.02', dst],
    {
      stdio: ['ignore', 'pipe', 'ignore'],
    },
  );
  const replies: Reply[] = [];
  let rest = '';
  proc.stdout!.on('data', (b: Buffer) => {
    const lines = (rest + b.toString()).split('\n');
    rest = lines.pop() ?? '';
    for (const l of lines) {
      const m = /^\[(\d+\.\d+)\] .*icmp_seq=(\d+) .*time=([\d.]+) ms/.exec(l);
      if (m) replies.push({ at: Number(m[1]) * 1000, seq: Number(m[2]), rtt: Number(m[3]) });
    }
  });
  return { proc, replies };
}

/** What ping saw of [from, to]: unanswered requests, replies over GAP_MS, the gaps between replies. */
function during(replies: Reply[], from: number, to: number) {
  const inside = replies.filter((r) => r.at >= from && r.at <= to);
  const stamps = [from, ...inside.map((r) => r.at), to];
  let maxGap = 0;
  for (let i = 1; i < stamps.length; i++) maxGap = Math.max(maxGap, stamps[i] - stamps[i - 1]);
  const seqs = inside.map((r) => r.seq);
  const missing = seqs.length > 1 ? seqs[seqs.length - 1] - seqs[0] + 1 - seqs.length : 0;
  return {
    replies: inside.length,
    missing,
    late: inside.filter((r) => r.rtt > GAP_MS).map((r) => Math.round(r.rtt)),
    maxRtt: Math.round(Math.max(0, ...inside.map((r) => r.rtt))),
    maxGap: Math.round(maxGap),
  };
}

const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** Puts `text` into the manifests dir as `name` (atomically) and waits for the agent's reload. */
async function load(name: string, text: string | null) {
  const file = join(t.manifests, name);
  const from = Date.now();
  if (text === null) rmSync(file);
  else {
    writeFileSync(`${t.dir}/${name}.tmp`, text);
    renameSync(`${t.dir}/${name}.tmp`, file);
  }
  const r = (await ctlRequest(t.socket, { cmd: 'reload' })) as {
    services: number;
    error?: string;
  };
  return { r, from, to: Date.now() };
}

beforeAll(async () => {
  await t.setup();
  agent = await t.startAgent(['--vip-echo']);
}, 120_000);

afterAll(async () => {
  if (agent && agent.exitCode === null && agent.signalCode === null) {
    agent.kill('SIGTERM');
    await new Promise((r) => agent!.once('exit', r));
  }
  await t.teardown();
});

describe('the packet loop while the control plane loads (issue 18 point 2)', () => {
  it(`a pod's ping to a VIP is answered, never later than ${GAP_MS} ms: a 10 MB manifest, ${SERVICES} Services, their removal`, async () => {
    const ping = startPing(VIP);
    const direct = startPing(POD_BE1); // pod to pod: the kernel alone, the machine's jitter
    try {
      await new Promise((r) => setTimeout(r, 1000)); // ping is answering
      expect(ping.replies.length).toBeGreaterThan(10);
      const quiet = { from: Date.now() - 1000, to: Date.now() };
      const runs = [
        {
          what: '10 MB, 97k annotation keys (refused)',
          ...(await load('big.yaml', bigAnnotations(97_000))),
        },
        { what: 'its removal', ...(await load('big.yaml', null)) },
        {
          what: `${SERVICES} Services + slices`,
          ...(await load('bulk.yaml', manyServices(SERVICES))),
        },
        { what: `${SERVICES} Services removed`, ...(await load('bulk.yaml', null)) },
      ];
      await new Promise((r) => setTimeout(r, 300)); // the last replies of the window are in
      const report = runs.map((x) => ({
        what: x.what,
        ms: x.to - x.from,
        vip: during(ping.replies, x.from, x.to),
        podToPod: during(direct.replies, x.from, x.to),
      }));
      const base = during(ping.replies, quiet.from, quiet.to);
      console.log(
        `stall: quiet ${JSON.stringify(base)}; ${JSON.stringify(report)}; load ${loadavg()}`,
      );
      expect(runs[0].r.error).toMatch(/annotations/);
      expect(runs[2].r.services).toBe(SERVICES + 3);
      expect(runs[3].r.services).toBe(3);
      for (const x of report) {
        expect(x.vip.replies, x.what).toBeGreaterThan(0);
        expect(x.vip.missing, `${x.what}: requests never answered`).toBe(0);
        expect(x.vip.late, `${x.what}: replies later than ${GAP_MS} ms`).toEqual([]);
      }
    } finally {
      ping.proc.kill();
      direct.proc.kill();
    }
  }, 300_000);
});

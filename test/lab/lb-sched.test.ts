// Schedulers, hot reload and UDP conntrack cleanup on the live namespace lab (root), with a copy
// of the lab's manifests in a temporary directory that the tests edit. Run beside the default
// lab with its own prefix: KUBETUN_LAB_PREFIX=kl- npx vitest run test/lab/lb-sched.test.ts
//
//   node1: pod-a 10.244.1.2, pod-b 10.244.1.3      node2: pod-c 10.244.2.2, pod-d 10.244.2.3
//   web-rr 10.96.0.50:80 (rr)  web-lc 10.96.0.51:80 (lc)  -> pod-a, pod-b, pod-c
//   sticky 10.96.0.40:80 (sessionAffinity: ClientIP)      -> pod-a, pod-b
//   udp-echo 10.96.0.54:53/UDP                           -> pod-b, pod-d
//   clients: pod-d (TCP, node2's agent decides), pod-c (UDP)
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { labCtl } from '../../src/lab/ctl.ts';
import { longConnectionsDemo } from '../../src/lab/demo/long-connections.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import type { LabState } from '../../src/lab/state.ts';
import { allPods, loadTopology } from '../../src/lab/topology.ts';
import { curlMany } from './curl.ts';

const ROOT = join(import.meta.dirname, '../..');
const dir = mkdtempSync(join(tmpdir(), 'kubetun-lb-lab-'));
const MANIFESTS = join(dir, 'manifests');
const TOPOLOGY = join(dir, 'topology.yaml');
mkdirSync(MANIFESTS);
for (const f of readdirSync(join(ROOT, 'lab/manifests'))) {
  if (f.endsWith('.yaml')) copyFileSync(join(ROOT, 'lab/manifests', f), join(MANIFESTS, f));
}
writeFileSync(
  TOPOLOGY,
  readFileSync(join(ROOT, 'lab/topology.yaml'), 'utf8').replace(
    /^manifests: .*$/m,
    `manifests: ${MANIFESTS}`,
  ),
);
const t = loadTopology(TOPOLOGY);
const pod = (name: string) => allPods(t).find((p) => p.name === name)!;

/** n curls from one pod, each a new connection: who answered each. */
function answersFrom(from: string, url: string, n: number): string[] {
  return curlMany(pod(from).ns, url, n).map((l) => l.split(' ')[0]!);
}

function kubetunOut(args: string[]): string {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin/kubetun.mjs'), ...args], {
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`kubetun ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

/** Polls `f` until it holds or `ms` passed; returns the last value. */
async function eventually<T>(ms: number, f: () => T, ok: (v: T) => boolean): Promise<T> {
  const until = Date.now() + ms;
  let v = f();
  while (!ok(v) && Date.now() < until) {
    await sleep(250);
    v = f();
  }
  return v;
}

let state: LabState;
const children: ChildProcess[] = [];

function startInPod(name: string, argv: string[]): { child: ChildProcess; lines: string[] } {
  const child = spawn('ip', ['netns', 'exec', pod(name).ns, ...argv], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  const lines: string[] = [];
  let buf = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (c: string) => {
    buf += c;
    const parts = buf.split('\n');
    buf = parts.pop()!;
    lines.push(...parts);
  });
  return { child, lines };
}

describe('schedulers, hot reload and UDP cleanup on the lab', () => {
  beforeAll(async () => {
    await labDown({ topology: TOPOLOGY });
    state = await labUp({ topology: TOPOLOGY, mode: 'kubetun' });
  });

  afterAll(async () => {
    for (const c of children) if (c.exitCode === null && c.pid) process.kill(c.pid, 'SIGKILL');
    await labDown({ topology: TOPOLOGY });
    rmSync(dir, { recursive: true, force: true });
  });

  function agentSocket(node: string): string {
    return state.processes.find((p) => p.role === 'kubetun' && p.name === node)!.ctlSocket!;
  }

  it('kubetun svc list shows each service scheduler', async () => {
    const r = await labCtl<{ services: { vip: string; scheduler: string }[] }>(
      agentSocket('node2'),
      {
        cmd: 'svc',
      },
    );
    const sched = Object.fromEntries(r.services.map((s) => [s.vip, s.scheduler]));
    expect(sched).toMatchObject({ '10.96.0.50': 'rr', '10.96.0.51': 'lc', '10.96.0.10': 'random' });
  });

  it('each node serves kube-proxy metrics on 127.0.0.1:10249 and health on its IP :10256', () => {
    for (const n of t.nodes) {
      const get = (url: string) =>
        spawnSync(
          'ip',
          ['netns', 'exec', n.ns, 'curl', '-sS', '-m', '3', '-w', '\n%{http_code}', url],
          {
            encoding: 'utf8',
          },
        ).stdout;
      const metrics = get('http://127.0.0.1:10249/metrics');
      expect(metrics).toMatch(/^kubeproxy_sync_proxy_rules_last_timestamp_seconds\S* [1-9]/m);
      expect(metrics).toMatch(/^kubetun_map_fill_ratio\{map="services"\} 0\.\d*[1-9]/m);
      const health = get(`http://${n.ip}:10256/healthz`);
      expect(health).toMatch(/"lastUpdated".*\n200$/s);
    }
  });

  it('rr: new connections rotate strictly over the three endpoints', () => {
    const got = answersFrom('pod-d', 'http://10.96.0.50/', 9);
    expect(new Set(got.slice(0, 3))).toEqual(new Set(['pod-a', 'pod-b', 'pod-c']));
    expect(got).toEqual([...got.slice(0, 3), ...got.slice(0, 3), ...got.slice(0, 3)]);
  });

  it('lc: one long-lived connection steers new ones away from its pod', async () => {
    // A request for a huge body, read slowly: the connection stays ESTABLISHED on one pod.
    const slow = `
      const s = require('node:net').connect(80, '10.96.0.51', () =>
        s.write('GET /bytes?n=1000000000 HTTP/1.1\\r\\nHost: lc\\r\\n\\r\\n'));
      s.once('data', (d) => { const m = /x-pod: (\\S+)/i.exec(d.toString('latin1'));
        console.log(m ? m[1] : 'none'); s.pause(); });
      setInterval(() => {}, 1000);`;
    const { lines } = startInPod('pod-d', [process.execPath, '-e', slow]);
    const holder = await eventually(
      10_000,
      () => lines[0],
      (v) => v !== undefined,
    );
    expect(['pod-a', 'pod-b', 'pod-c']).toContain(holder);
    const got = answersFrom('pod-d', 'http://10.96.0.51/', 12);
    expect(got.filter((p) => p === holder)).toEqual([]);
    expect(new Set(got).size).toBe(2);
  });

  it('sessionAffinity ClientIP: every new connection of a client goes to one pod', () => {
    // sticky 10.96.0.40 -> pod-a, pod-b; without affinity 20 picks agree with chance 2^-19
    const got = answersFrom('pod-d', 'http://10.96.0.40/', 20);
    expect(['pod-a', 'pod-b']).toContain(got[0]);
    expect(got).toEqual(Array(20).fill(got[0]));
  });

  it('long-connections demo: one keep-alive connection stays on one pod, new ones spread', async () => {
    const r = await longConnectionsDemo({ topology: TOPOLOGY, out: () => {} });
    expect(r.keepAliveSockets).toBe(1);
    expect(Object.values(r.keepAlive)).toEqual([100]);
    expect(Object.keys(r.newConnections).sort()).toEqual(['pod-a', 'pod-b', 'pod-c']);
  });

  it('hot reload: an edited selector is in force within the sync interval (control plane, controller, view, agent)', async () => {
    const file = join(MANIFESTS, 'rr.yaml');
    const text = readFileSync(file, 'utf8');
    // web-rr selects session=sticky instead of app=web: pod-c leaves its EndpointSlice
    const edited = text.replace(/selector:\n {4}app: web\n/, 'selector:\n    session: sticky\n');
    expect(edited).not.toBe(text);
    writeFileSync(file, edited);
    const got = await eventually(
      15_000,
      () => answersFrom('pod-d', 'http://10.96.0.50/', 6),
      (v) => !v.includes('pod-c'),
    );
    expect(new Set(got)).toEqual(new Set(['pod-a', 'pod-b']));
  });

  it('an invalid manifest is refused naming file, object and field; the last good state keeps serving', async () => {
    const bad = join(MANIFESTS, 'zz-broken.yaml');
    writeFileSync(
      bad,
      'apiVersion: v1\nkind: Service\nmetadata: {name: broken, namespace: default}\nspec: {clusterIP: 10.96.0.300, ports: [{port: 80}]}\n',
    );
    const log = state.processes.find((p) => p.role === 'control-plane')!.log;
    const seen = await eventually(
      10_000,
      () => readFileSync(log, 'utf8'),
      (v) => v.includes('zz-broken.yaml'),
    );
    expect(seen).toMatch(/zz-broken\.yaml: Service default\/broken: spec\.clusterIP/);
    expect(new Set(answersFrom('pod-d', 'http://10.96.0.50/', 4))).toEqual(
      new Set(['pod-a', 'pod-b']),
    );
    rmSync(bad);
  });

  it('UDP: a client keeping its socket is answered by the other pod right after its backend leaves', async () => {
    // one socket, one datagram every 200 ms; each reply printed
    const client = `
      const s = require('node:dgram').createSocket('udp4');
      s.on('message', (m) => console.log(m.toString().split(' ')[0]));
      s.connect(53, '10.96.0.54', () => setInterval(() => s.send('who?'), 200));`;
    const { lines } = startInPod('pod-c', [process.execPath, '-e', client]);
    const first = await eventually(
      5_000,
      () => lines[0],
      (v) => v !== undefined,
    );
    expect(['pod-b', 'pod-d']).toContain(first);
    const other = first === 'pod-b' ? 'pod-d' : 'pod-b';
    // the pod loses the label udp-echo selects (kubectl label pod X echo-): it leaves the slice
    const podJson = JSON.parse(kubetunOut(['lab', 'get', 'pod', first, '-o', 'json'])) as {
      metadata: { labels: Record<string, string> };
    };
    delete podJson.metadata.labels.echo;
    const relabel = join(dir, `${first}.json`);
    writeFileSync(relabel, JSON.stringify(podJson));
    const mark = lines.length;
    expect(kubetunOut(['lab', 'apply', '-f', relabel])).toBe(`pod/${first} configured\n`);
    // The pod that left still runs and would answer: only the conntrack cleanup moves the flow.
    const after = await eventually(
      15_000,
      () => lines.slice(mark),
      (v) => v.slice(-3).length === 3 && v.slice(-3).every((p) => p === other),
    );
    expect(after.slice(-3)).toEqual([other, other, other]);
  }, 180_000);
});

// The namespace lab, end to end (root): lab up builds the default topology, pods reach each other
// across nodes by host-gw routes, status/exec report it, a second up is a no-op, up repairs a
// broken lab, and lab down leaves no namespace, link or process behind — also after a crash.
//
//   kt-underlay br0 ── kt-node1 (pod-a, pod-b) ── kt-node2 (pod-c, pod-d) ── kt-client
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { labDown, labUp } from '../../src/lab/lab.ts';
import { isAlive, procStartTime } from '../../src/lab/procs.ts';
import { type LabState, readState, STATE_FILE } from '../../src/lab/state.ts';
import type { LabStatus } from '../../src/lab/status.ts';
import { allPods, labNamespaces, loadTopology } from '../../src/lab/topology.ts';

const ROOT = join(import.meta.dirname, '../..');
const TOPOLOGY = join(ROOT, 'lab/topology.yaml');
const UDPQ = join(ROOT, 'lab/servers/udpq.mjs');
const t = loadTopology(TOPOLOGY);
const pods = allPods(t);

function kubetun(args: string[]): { out: string; err: string; status: number } {
  const r = spawnSync('node', [join(ROOT, 'bin/kubetun.mjs'), ...args], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { out: r.stdout, err: r.stderr, status: r.status ?? -1 };
}

function inNs(ns: string, argv: string[], input = ''): { out: string; status: number } {
  const r = spawnSync('ip', ['netns', 'exec', ns, ...argv], {
    encoding: 'utf8',
    timeout: 20_000,
    input,
  });
  return { out: r.stdout, status: r.status ?? -1 };
}

function labNetns(): string[] {
  return execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
    .split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter((n) => n.startsWith('kt-'));
}

let state: LabState;

beforeAll(async () => {
  await labDown({ topology: TOPOLOGY });
  state = await labUp({ topology: TOPOLOGY, mode: 'none' });
});

afterAll(async () => {
  await labDown({ topology: TOPOLOGY });
});

describe('lab (mode none: routing only)', () => {
  it('creates every namespace of the topology and records a live server per pod', () => {
    expect(labNetns().sort()).toEqual(labNamespaces(t).sort());
    const servers = state.processes.filter((p) => p.role === 'server');
    expect(servers.map((s) => s.name).sort()).toEqual(pods.map((p) => p.name).sort());
    for (const s of servers) expect(isAlive(s)).toBe(true);
  });

  it('routes HTTP from every pod to every pod, same node and across nodes', () => {
    for (const from of pods) {
      for (const to of pods) {
        const r = inNs(from.ns, ['curl', '-sS', '-m', '3', `http://${to.ip}:${t.httpPort}/`]);
        expect({ from: from.name, out: r.out }).toEqual({
          from: from.name,
          out: `${to.name} ${to.ip}\n`,
        });
      }
    }
  });

  it('routes UDP from every pod to every other pod', () => {
    for (const from of pods) {
      for (const to of pods.filter((p) => p !== from)) {
        const r = inNs(from.ns, ['node', UDPQ, to.ip, String(t.udpPort)]);
        expect(r.out).toBe(`${to.name} ${to.ip}\n`);
      }
    }
  });

  it('lets the external client reach pods on both nodes over the underlay', () => {
    for (const to of pods) {
      const r = inNs(t.clients[0]!.ns, [
        'curl',
        '-sS',
        '-m',
        '3',
        `http://${to.ip}:${t.httpPort}/`,
      ]);
      expect(r.out).toBe(`${to.name} ${to.ip}\n`);
    }
  });

  it('reports nodes, pods, services and the mode in status --json', () => {
    const r = kubetun(['lab', 'status', '--json']);
    expect(r.status).toBe(0);
    const s = JSON.parse(r.out) as LabStatus;
    expect(s.up).toBe(true);
    expect(s.mode).toBe('none');
    expect(s.pods.map((p) => [p.name, p.node, p.ns, p.ip])).toEqual(
      pods.map((p) => [p.name, p.node, p.ns, p.ip]),
    );
    const web = s.services.find((v) => v.name === 'web')!;
    expect([web.clusterIP, web.ports[0]!.port, web.ports[0]!.protocol]).toEqual([
      '10.96.0.10',
      80,
      'TCP',
    ]);
    expect(web.ports[0]!.endpoints.map((e) => e.pod)).toEqual(['pod-a', 'pod-b', 'pod-c']);
  });

  it('runs commands in a pod with lab exec and passes the exit status through', () => {
    const ok = kubetun([
      'lab',
      'exec',
      'pod-c',
      '--',
      'ip',
      '-4',
      '-o',
      'addr',
      'show',
      'dev',
      'eth0',
    ]);
    expect(ok.out).toContain('10.244.2.2/32');
    expect(kubetun(['lab', 'exec', 'pod-c', '--', 'sh', '-c', 'exit 3']).status).toBe(3);
    expect(kubetun(['lab', 'exec', 'nosuchpod', '--', 'true']).err).toContain(
      'no pod, node or client named "nosuchpod"',
    );
  });

  it('does nothing on a second lab up of a healthy lab', async () => {
    const again = await labUp({ topology: TOPOLOGY, mode: 'none' });
    expect(again.processes.map((p) => p.pid)).toEqual(state.processes.map((p) => p.pid));
  });

  it('rebuilds the lab on lab up when a pod server died', async () => {
    const victim = state.processes.find((p) => p.name === 'pod-c')!;
    process.kill(victim.pid, 'SIGKILL');
    while (isAlive(victim)) await new Promise((r) => setTimeout(r, 20));
    state = await labUp({ topology: TOPOLOGY, mode: 'none' });
    const fresh = state.processes.find((p) => p.name === 'pod-c')!;
    expect(fresh.pid).not.toBe(victim.pid);
    expect(
      inNs('kt-pod-a', ['curl', '-sS', '-m', '3', `http://10.244.2.2:${t.httpPort}/`]).out,
    ).toBe('pod-c 10.244.2.2\n');
  });

  it('lab down after a crash removes namespaces, links, recorded and stray processes, and state', async () => {
    // A crash: a server killed, the state left behind, and a process nobody recorded in a pod.
    const stray = spawn('ip', ['netns', 'exec', 'kt-pod-d', 'sleep', '600'], {
      stdio: 'ignore',
      detached: true,
    });
    stray.unref();
    await new Promise((r) => setTimeout(r, 200));
    const recorded = readState()!.processes;
    process.kill(recorded[0]!.pid, 'SIGKILL');

    const r = kubetun(['lab', 'down']);
    expect(r.status).toBe(0);
    expect(labNetns()).toEqual([]);
    for (const p of recorded) expect(isAlive(p)).toBe(false);
    expect(procStartTime(stray.pid!)).toBeUndefined(); // gone, or a zombie not yet reaped by us
    expect(existsSync(STATE_FILE)).toBe(false);
    const links = execFileSync('ip', ['-o', 'link'], { encoding: 'utf8' });
    expect(links).not.toMatch(/\b(veth-pod-[a-d]|u-node\d|u-client)\b/);
    expect(kubetun(['lab', 'down']).err).toContain('no lab to take down');
  });
});

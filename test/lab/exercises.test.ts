// The solution bot (root): every exercise in lab/exercises/ that this checkout can run is
// started, found unsolved by `check`, fixed with exactly the commands `solution` prints (run by
// bash, as a learner would paste them), found solved, and reset — after which the lab is as it
// was before the exercise. Then the shortcuts: routing around the fault must not pass `check`
// even when traffic flows — by editing the lab's files and through the control plane's API
// (`lab delete`, `lab apply`) alike. One lab for all of it (the exercise lab, its data plane
// switched in place when an exercise runs in a kernel mode), driven through the CLI a learner
// uses. Prefix-aware: KUBETUN_LAB_PREFIX picks the lab.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { labUp } from '../../src/lab/lab.ts';
import { isAlive } from '../../src/lab/procs.ts';
import { inNs } from '../../src/lab/sh.ts';
import { readState } from '../../src/lab/state.ts';
import {
  EX_MANIFESTS,
  EX_TOPOLOGY,
  ensureExerciseLab,
  pristineManifestsDir,
} from '../../src/lab/exercise/lab.ts';
import type { Deployment, Pod, Service } from '../../src/cluster/types.ts';
import { listObjects } from '../../src/lab/exercise/cluster.ts';
import { missingFeatures, runFixCommand } from '../../src/lab/exercise/run.ts';
import { loadExercises } from '../../src/lab/exercise/spec.ts';
import { allPods, loadTopology } from '../../src/lab/topology.ts';

const ROOT = join(import.meta.dirname, '../..');
const t = loadTopology(join(ROOT, 'lab/topology.yaml'));

function kubetun(args: string[]): { out: string; err: string; status: number } {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin/kubetun.mjs'), ...args], {
    encoding: 'utf8',
    timeout: 240_000,
  });
  return { out: r.stdout, err: r.stderr, status: r.status ?? -1 };
}

interface Report {
  solved: boolean;
  items: { title: string; ok: boolean; detail: string }[];
}

function check(): Report & { status: number } {
  const r = kubetun(['lab', 'exercise', 'check', '--json']);
  return { ...(JSON.parse(r.out) as Report), status: r.status };
}

function failing(r: Report): string[] {
  return r.items.filter((i) => !i.ok).map((i) => `${i.title}: ${i.detail}`);
}

function curl(ns: string, url: string): string {
  const argv = inNs(ns, ['curl', '-sS', '-m', '3', url]);
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout: 10_000 });
  return r.status === 0 ? r.stdout.split(' ')[0]! : `fail ${r.status}`;
}

/** What "the lab as before" means: objects (files and store), processes, flags, traffic. */
async function fingerprint() {
  const s = readState()!;
  const files = (d: string) =>
    readdirSync(d)
      .filter((f) => f.endsWith('.yaml'))
      .sort()
      .map((f) => `${f}:${readFileSync(join(d, f), 'utf8')}`);
  const svcs = (await listObjects<Service>('Service')).map(
    (x) =>
      `${x.metadata.namespace}/${x.metadata.name} ${x.spec.clusterIP} ${JSON.stringify(x.spec.ports)} ${JSON.stringify(x.spec.selector ?? {})}`,
  );
  const deploys = (await listObjects<Deployment>('Deployment')).map(
    (d) => `${d.metadata.namespace}/${d.metadata.name} x${d.spec.replicas}`,
  );
  const pods = (await listObjects<Pod>('Pod')).filter((p) => !p.metadata.deletionTimestamp);
  return {
    topology: s.topologyFile,
    mode: s.mode,
    objects: JSON.stringify(files(EX_MANIFESTS)) === JSON.stringify(files(pristineManifestsDir())),
    services: svcs.sort(),
    deployments: deploys.sort(),
    pods: pods.length,
    roles: s.processes.map((p) => `${p.role}/${p.name}`).sort(),
    alive: s.processes.every((p) => isAlive(p)),
    flags: Object.values(s.agentFlags ?? {}).flat(),
    web: allPods(t).map((p) => curl(p.ns, 'http://10.96.0.10/').startsWith('pod-')),
    // --vip-echo is off again: the VIP does not answer ping
    ping:
      spawnSync('ip', [
        'netns',
        'exec',
        allPods(t)[0]!.ns,
        'ping',
        '-c',
        '1',
        '-W',
        '1',
        '10.96.0.10',
      ]).status === 0,
  };
}

/** The lab settles after a reset (terminating Pods go, agents reload): a few tries. */
async function settledFingerprint(want: Awaited<ReturnType<typeof fingerprint>>) {
  let got = await fingerprint();
  for (let i = 0; i < 20 && JSON.stringify(got) !== JSON.stringify(want); i++) {
    await sleep(1500);
    got = await fingerprint();
  }
  return got;
}

const runnable = loadExercises().filter((e) => missingFeatures(e).length === 0);

describe('the solution bot: start, check fails, the printed fix, check passes, reset', () => {
  let before: Awaited<ReturnType<typeof fingerprint>>;

  beforeAll(async () => {
    // The exercise lab in its normal state; each exercise then changes only what it needs.
    await ensureExerciseLab('kubetun', () => {});
    const r = kubetun(['lab', 'exercise', 'reset']);
    expect(r.status, r.err).toBe(0);
    before = await fingerprint();
    expect(before.web.every(Boolean), 'the normal lab serves web from every pod').toBe(true);
    expect(before.ping, 'a VIP does not answer ping by default').toBe(false);
  }, 300_000);

  it.each(runnable.map((e) => [e.name, e] as const))(
    '%s',
    async (name, e) => {
      const start = kubetun(['lab', 'exercise', 'start', name]);
      expect(start.status, start.err).toBe(0);
      expect(start.out).toContain(e.symptom.split('\n')[0]!);
      const broken = check();
      expect(broken.status, 'check exits non-zero while unsolved').toBe(1);
      expect(broken.solved).toBe(false);
      expect(failing(broken).length).toBeGreaterThan(0);

      const sol = JSON.parse(kubetun(['lab', 'exercise', 'solution', '--json']).out) as {
        fix: string[];
      };
      expect(sol.fix).toEqual(e.solution.fix);
      for (const cmd of sol.fix) {
        const r = runFixCommand(cmd);
        expect(r.status, `${cmd}\n${r.out}`).toBe(0);
      }
      const fixed = check();
      expect(failing(fixed), 'every check holds after the fix').toEqual([]);
      expect(fixed.status).toBe(0);
      const list = JSON.parse(kubetun(['lab', 'exercise', 'list', '--json']).out) as {
        name: string;
        done: boolean;
      }[];
      expect(list.find((x) => x.name === name)?.done).toBe(true);

      expect(kubetun(['lab', 'exercise', 'reset']).status).toBe(0);
      expect(await settledFingerprint(before)).toEqual(before);
    },
    400_000,
  );
});

describe('shortcuts are refused', () => {
  const fault = 'dataplane-down';
  const startFault = () => {
    const r = kubetun(['lab', 'exercise', 'start', fault]);
    expect(r.status, r.err).toBe(0);
  };

  afterAll(() => {
    kubetun(['lab', 'exercise', 'reset']);
  });

  it('switching the data plane to the kernel: traffic flows, check refuses', () => {
    startFault();
    expect(kubetun(['lab', 'mode', 'iptables']).status).toBe(0);
    const r = check();
    expect(r.status).toBe(1);
    const web = r.items.find((i) => i.title.includes('reaches web'))!;
    expect(web.ok, 'traffic does flow: the refusal is the guard').toBe(true);
    expect(failing(r).join('\n')).toMatch(/now runs mode iptables/);
    expect(kubetun(['lab', 'exercise', 'reset']).status).toBe(0);
    expect(readState()!.mode).toBe('kubetun');
  }, 300_000);

  it('turning the data plane off (mode none): check refuses', () => {
    startFault();
    expect(kubetun(['lab', 'mode', 'none']).status).toBe(0);
    const r = check();
    expect(r.status).toBe(1);
    expect(failing(r).join('\n')).toMatch(/now runs mode none/);
    expect(kubetun(['lab', 'exercise', 'reset']).status).toBe(0);
  }, 300_000);

  const webDirect = `apiVersion: v1
kind: Service
metadata: { name: web-direct, namespace: default }
spec:
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  ports: [{ name: http, protocol: TCP, port: 80, targetPort: 8080 }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-direct-1
  namespace: default
  labels: { kubernetes.io/service-name: web-direct }
addressType: IPv4
ports: [{ name: http, protocol: TCP, port: 8080 }]
endpoints:
  - addresses: [10.244.1.2]
    conditions: { ready: true }
    nodeName: node1
    targetRef: { kind: Pod, namespace: default, name: pod-a }
`;

  /** check until the web traffic item holds (the data planes take the new objects in). */
  async function checkOnceWebFlows(): Promise<Report & { status: number }> {
    let r = check();
    for (let i = 0; i < 10 && !r.items.find((x) => x.title.includes('reaches web'))?.ok; i++) {
      await sleep(1000);
      r = check();
    }
    return r;
  }

  /** web-direct carries the traffic, and check refuses it for what it is. */
  async function refusedThoughWebFlows(): Promise<void> {
    const r = await checkOnceWebFlows();
    expect(r.items.find((i) => i.title.includes('reaches web'))?.ok, 'traffic flows').toBe(true);
    expect(r.status).toBe(1);
    const why = failing(r).join('\n');
    expect(why).toMatch(/default\/web-direct was not there at start/);
    expect(why).toMatch(/default\/web was deleted/);
  }

  /** reset puts the store back as the files say: web-direct pruned, web with its ClusterIP. */
  async function resetRestoresWeb(): Promise<void> {
    expect(kubetun(['lab', 'exercise', 'reset']).status).toBe(0);
    const svcs = await listObjects<Service>('Service', 'default');
    expect(svcs.map((x) => x.metadata.name)).not.toContain('web-direct');
    expect(svcs.find((x) => x.metadata.name === 'web')?.spec.clusterIP).toBe('10.96.0.10');
  }

  it('in the files: deleting the Service and pointing a new one at a pod IP — traffic flows, check refuses', async () => {
    startFault();
    expect(kubetun(['lab', 'agent', 'restart', 'node2']).status).toBe(0);
    rmSync(join(EX_MANIFESTS, 'web.yaml'));
    writeFileSync(join(EX_MANIFESTS, 'web-direct.yaml'), webDirect);
    await refusedThoughWebFlows();
    await resetRestoresWeb();
    expect(readdirSync(EX_MANIFESTS)).not.toContain('web-direct.yaml');
  }, 300_000);

  it('through the API: lab delete svc web, lab apply a Service at a pod IP — traffic flows, check refuses', async () => {
    const r0 = kubetun(['lab', 'exercise', 'start', 'selector-typo']);
    expect(r0.status, r0.err).toBe(0);
    expect(kubetun(['lab', 'delete', 'svc', 'web']).status).toBe(0);
    const dir = mkdtempSync(join(tmpdir(), 'kt-shortcut-'));
    writeFileSync(join(dir, 'web-direct.yaml'), webDirect);
    const ap = kubetun(['lab', 'apply', '-f', join(dir, 'web-direct.yaml')]);
    rmSync(dir, { recursive: true, force: true });
    expect(ap.out, ap.err).toContain('service/web-direct created');
    await refusedThoughWebFlows();
    await resetRestoresWeb();
    expect(curl(allPods(t)[2]!.ns, 'http://10.96.0.10/')).toMatch(/^pod-/);
  }, 300_000);

  // last: it rebuilds the lab
  it('rebuilding the lab instead of finding the fault: check refuses', async () => {
    startFault();
    await labUp({ topology: EX_TOPOLOGY });
    const r = check();
    expect(r.status).toBe(1);
    expect(failing(r).join('\n')).toMatch(/the lab was rebuilt/);
  }, 300_000);
});

afterAll(async () => {
  kubetun(['lab', 'down']);
});

// `lab up --source api` end to end (root): the lab's API server (src/lab/apiserver.ts) serves
// the view and the Node objects over HTTPS list/watch from node1's namespace, and every node's
// agent is started as deploy/daemonset.yaml starts it (src/lab/daemonset.ts): in-cluster config
// (KUBERNETES_SERVICE_HOST/PORT, the ServiceAccount token and CA mounted where a Pod has them),
// NODE_NAME, --config from deploy/configmap.yaml, and no --node-ip / --pod-cidr / --manifests:
// those come from the Node object; inside the container the manifest describes (root with exactly
// its capabilities, /proc/sys read-only, the host's /proc/sys/net by hostPath). The core lab
// checks then pass as with the view directory, and
// a client loop through a ClusterIP loses nothing while the watches end, the history is
// compacted (410 Gone, relist) and the API server restarts — each followed by a Service change
// that must still arrive.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { API_DIR, SA_DIR, SA_MOUNT } from '../../src/lab/apiserver.ts';
import { agentCapabilities, POD_ROOT } from '../../src/lab/daemonset.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import { isAlive, startInNs, stopProcess, waitForLog } from '../../src/lab/procs.ts';
import { saMountpointInUse } from '../../src/lab/sa-mountpoint.ts';
import { readSupervisor } from '../../src/lab/supervisor.ts';
import { CTL_DIR, LAB_DIR, type LabState, readState, writeState } from '../../src/lab/state.ts';
import { LAB_PREFIX, loadTopology } from '../../src/lab/topology.ts';
import { missingCapabilities } from '../../src/node/capabilities.ts';
import { curlMany } from './curl.ts';

const ROOT = join(import.meta.dirname, '../..');
const KUBETUN = join(ROOT, 'bin/kubetun.mjs');
const dir = mkdtempSync(join(tmpdir(), 'kt-api-source-'));
const TOPOLOGY = join(dir, 'topology.yaml');
const ZONE = 'topology.kubernetes.io/zone';
{
  const doc = parse(readFileSync(join(ROOT, 'lab/topology.yaml'), 'utf8'));
  doc.manifests = join(ROOT, 'lab/manifests');
  doc.nodes.forEach((n: { labels?: Record<string, string> }, i: number) => {
    n.labels = { [ZONE]: `zone-${'ab'[i % 2]}` };
  });
  writeFileSync(TOPOLOGY, stringify(doc));
}
const t = loadTopology(TOPOLOGY);
const pods = t.nodes.flatMap((n) => n.pods);
const pod = (name: string) => pods.find((p) => p.name === name)!;
const TRIES = 40; // 3 backends: the chance one is never picked is 3 * (2/3)^40 ≈ 3e-7

function inNs(ns: string, argv: string[]): { out: string; status: number } {
  const r = spawnSync('ip', ['netns', 'exec', ns, ...argv], { encoding: 'utf8', timeout: 60_000 });
  return { out: r.stdout, status: r.status ?? -1 };
}

const who = (answers: string[]) => [...new Set(answers.map((a) => a.split(' ')[0]))].sort();

function lab(args: string[]): string {
  const r = spawnSync(process.execPath, [KUBETUN, 'lab', ...args], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`lab ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

/** A Service selecting app=web at a fixed ClusterIP, applied (or deleted) through the lab's API. */
function probe(name: string, ip: string): string {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(
    file,
    stringify({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace: 'default' },
      spec: { selector: { app: 'web' }, clusterIP: ip, ports: [{ port: 80, targetPort: 8080 }] },
    }),
  );
  return file;
}

/** Polls until a curl from pod-d to ip:80 succeeds (want true) or is refused (want false). */
async function until(ip: string, want: boolean, ms = 30_000): Promise<number> {
  const t0 = Date.now();
  for (;;) {
    const r = inNs(pod('pod-d').ns, ['curl', '-sS', '-m', '2', `http://${ip}:80/`]);
    if ((r.status === 0) === want) return Date.now() - t0;
    if (Date.now() - t0 > ms) throw new Error(`${ip}: still ${want ? 'not served' : 'served'}`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

const apiProc = (s: LabState) => s.processes.find((p) => p.role === 'apiserver')!;
let state: LabState;
/** The ServiceAccount mountpoint's directories, and which of them the machine had before. */
const SA_CHAIN = ['/var/run/secrets', '/var/run/secrets/kubernetes.io', SA_MOUNT];
const saPresent = () => SA_CHAIN.filter((d) => existsSync(d));
let saBefore: string[] = [];

describe('lab up --source api: agents as the DaemonSet starts them, fed by the API', () => {
  beforeAll(async () => {
    await labDown({ topology: TOPOLOGY });
    saBefore = saPresent();
    state = await labUp({ topology: TOPOLOGY, mode: 'kubetun', source: 'api' });
  }, 300_000);

  afterAll(async () => {
    await labDown({ topology: TOPOLOGY });
    rmSync(dir, { recursive: true, force: true });
  }, 120_000);

  it('starts each agent with the DaemonSet command line and in-cluster config; the Node object gives its facts', () => {
    for (const n of t.nodes) {
      const a = state.processes.find((p) => p.role === 'kubetun' && p.name === n.name)!;
      const argv = a.argv.join(' ');
      expect(argv).toContain(`NODE_NAME=${n.name}`);
      expect(argv).toContain(`KUBERNETES_SERVICE_HOST=${t.nodes[0]!.ip}`);
      expect(argv).toContain(`mount --bind ${SA_DIR} ${SA_MOUNT}`);
      expect(argv).toContain(`run --config=${API_DIR}/config.conf --hostname-override=${n.name}`);
      expect(argv).not.toMatch(/--manifests|--node-ip|--pod-cidr/);
      const facts = readFileSync(a.log, 'utf8')
        .split('\n')
        .filter((l) => l.includes('node facts from the Node object'))
        .map((l) => JSON.parse(l));
      expect(facts[0]).toMatchObject({ nodeIp: n.ip, podCidr: n.podCidr, zone: n.labels![ZONE] });
    }
  });

  it("runs each agent as the DaemonSet's container: exactly its capabilities, no new privileges, /proc/sys read-only, sysctls through the hostPath mount", () => {
    const want = agentCapabilities();
    for (const n of t.nodes) {
      const a = state.processes.find((p) => p.role === 'kubetun' && p.name === n.name)!;
      const pid = readSupervisor(a.ctlSocket!)!.agentPid;
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const set = (f: string) =>
        BigInt(`0x${new RegExp(`^${f}:\\s*(\\w+)`, 'm').exec(status)![1]}`);
      expect(missingCapabilities(status)).toEqual([]);
      expect(set('CapEff').toString(2).replace(/0/g, '').length).toBe(want.length);
      expect([set('CapPrm'), set('CapBnd')]).toEqual([set('CapEff'), set('CapEff')]);
      expect(set('CapInh') | set('CapAmb')).toBe(0n);
      expect(status).toMatch(/^NoNewPrivs:\s*1$/m);
      // mountinfo: mount point (5th field) and its options (6th)
      const mounts = new Map(
        readFileSync(`/proc/${pid}/mountinfo`, 'utf8')
          .trim()
          .split('\n')
          .map((l) => l.split(' '))
          .map((f) => [f[4]!, f[5]!.split(',')[0]!]),
      );
      expect(mounts.get('/proc/sys')).toBe('ro');
      expect(mounts.get('/sys')).toBe('ro');
      expect(mounts.get(`${POD_ROOT}/host/proc/sys/net`)).toBe('rw');
      expect(mounts.get('/dev/net/tun')).toBe('rw');
      // written by the agent only, through that mount: /proc/sys is read-only in its view
      expect(inNs(n.ns, ['cat', '/proc/sys/net/ipv4/conf/kt0/accept_local']).out.trim()).toBe('1');
    }
  });

  it('ClusterIP web answers from every backend, from pods on both nodes', () => {
    for (const from of [pod('pod-d'), pod('pod-b')]) {
      expect({
        from: from.name,
        who: who(curlMany(from.ns, 'http://10.96.0.10:80/', TRIES)),
      }).toEqual({ from: from.name, who: ['pod-a', 'pod-b', 'pod-c'] });
    }
  });

  it('NodePort web-np answers the external client on both nodes', () => {
    for (const n of t.nodes) {
      expect(who(curlMany(t.clients[0]!.ns, `http://${n.ip}:30080/`, 20))).toEqual([
        'pod-a',
        'pod-d',
      ]);
    }
  });

  it('a Service applied through the lab arrives over the watch; deleted, it is refused', async () => {
    const file = probe('api-probe', '10.96.0.99');
    lab(['apply', '-f', file]);
    await until('10.96.0.99', true);
    lab(['delete', '-f', file]);
    await until('10.96.0.99', false);
  });

  it('watch ends, 410 Gone and an API server restart under a client loop lose nothing', async () => {
    const loop = spawn(
      'ip',
      [
        'netns',
        'exec',
        pod('pod-d').ns,
        'sh',
        '-c',
        'while :; do curl -sS -m 2 http://10.96.0.10:80/ || echo FAIL; sleep 0.05; done',
      ],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    let out = '';
    loop.stdout.on('data', (d) => {
      out += d;
    });
    try {
      const api = apiProc(state);
      const lists = () => {
        const m = [...readFileSync(api.log, 'utf8').matchAll(/lists (\d+), watches (\d+)/g)].pop();
        return m ? { lists: Number(m[1]), watches: Number(m[2]) } : { lists: 0, watches: 0 };
      };
      // every watch ends: the agents watch again, a change still arrives
      const w0 = lists().watches;
      process.kill(api.pid, 'SIGUSR1');
      lab(['apply', '-f', probe('probe-1', '10.96.0.101')]);
      await until('10.96.0.101', true);
      expect(lists().watches).toBeGreaterThan(w0);
      // compacted past every watcher: 410 Gone, a relist by every agent
      const l0 = lists().lists;
      process.kill(api.pid, 'SIGUSR2');
      lab(['delete', '-f', join(dir, 'probe-1.yaml')]);
      await until('10.96.0.101', false);
      expect(lists().lists).toBeGreaterThanOrEqual(l0 + t.nodes.length);
      // the API server restarts (storage kept): a change made meanwhile and one after arrive
      await stopProcess(api);
      lab(['apply', '-f', probe('probe-2', '10.96.0.102')]);
      writeFileSync(api.log, ''); // the new server's "serving" line, not the old one's
      const again = startInNs('apiserver', 'apiserver', api.ns, api.argv, api.log);
      const s = readState()!;
      s.processes = s.processes.map((p) => (p.role === 'apiserver' ? again : p));
      writeState(s);
      state = s;
      await waitForLog(again, /serving https:/m, 60_000);
      await until('10.96.0.102', true, 60_000);
      lab(['apply', '-f', probe('probe-3', '10.96.0.103')]);
      await until('10.96.0.103', true, 60_000);
    } finally {
      loop.kill();
    }
    const answers = out.trim().split('\n');
    expect(answers.length).toBeGreaterThan(20);
    expect(answers.filter((a) => !/^pod-[abc] /.test(a))).toEqual([]);
  }, 240_000);

  it('lab down leaves nothing: no namespace, process or file, and not the ServiceAccount mountpoint', async () => {
    expect(saPresent()).toEqual(SA_CHAIN); // the agents' bind mounts needed it
    const procs = readState()!.processes;
    await labDown({ topology: TOPOLOGY });
    const netns = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
    expect(netns.split('\n').filter((l) => l.startsWith(LAB_PREFIX))).toEqual([]);
    for (const p of procs) expect(isAlive(p), `${p.role} ${p.name}`).toBe(false);
    expect([LAB_DIR, CTL_DIR].filter((d) => existsSync(d))).toEqual([]);
    // Another API-mode lab on this machine may still use it (the last lab down removes it).
    if (existsSync(SA_MOUNT) && saMountpointInUse()) {
      console.log(`${SA_MOUNT}: kept, another API-mode lab uses it`);
      return;
    }
    expect(saPresent()).toEqual(saBefore);
  }, 120_000);
});

// A one-node topology in network namespaces for the `kubetun run` root tests, all names prefixed
// `ktr-<pid>-` so parallel runs and other helpers' tests never collide:
//
//   ns client (10.244.1.10) ─eth0══vc─┐
//   ns be1    (10.244.1.11) ─eth0══vb1┼─ ns node: 10.244.1.1/32 + proxy_arp on each v*,
//   ns be2    (10.244.1.12) ─eth0══vb2┘           <pod ip>/32 dev v*, uplink eth0 10.250.0.2/24
//                                                    ║ 10.244.2.0/24 via 10.250.0.3
//   ns remote ("another node": eth0 10.250.0.3, pod address 10.244.2.10 on lo) ═╝
//
// Backends (be1, be2, remote) run a tiny HTTP server on :8080 answering their own name. Everything is removed by
// teardown(): processes by PID, then namespaces.
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { ctlRequest } from '../../src/node/ctl.ts';
import { AGENT_NODE_OPTIONS } from '../../src/runtime.ts';

export const NODE_IP = '10.250.0.2';
export const GW = '10.244.1.1';
export const VIP = '10.96.0.10';
export const VIP_EMPTY = '10.96.0.20';
export const VIP_FAR = '10.96.0.30';
export const REMOTE_NODE_IP = '10.250.0.3';
export const REMOTE_POD_IP = '10.244.2.10';
export const PODS = [
  { name: 'client', veth: 'vc', ip: '10.244.1.10' },
  { name: 'be1', veth: 'vb1', ip: '10.244.1.11' },
  { name: 'be2', veth: 'vb2', ip: '10.244.1.12' },
] as const;

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

const MANIFESTS = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: ${VIP}
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.244.1.11], conditions: {ready: true}, nodeName: node1}
  - {addresses: [10.244.1.12], conditions: {ready: true}, nodeName: node1}
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: default}
spec:
  clusterIP: ${VIP_EMPTY}
  selector: {app: nothing}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: far, namespace: default}
spec:
  clusterIP: ${VIP_FAR}
  selector: {app: far}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: far-1, namespace: default, labels: {kubernetes.io/service-name: far}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [${REMOTE_POD_IP}], conditions: {ready: true}, nodeName: node2}
`;

const SERVER = `require('http').createServer((q, s) => s.end(process.argv[1]))
  .listen(8080, '0.0.0.0', () => process.stdout.write('up\\n'));`;

export interface Exec {
  status: number | null;
  out: string;
  err: string;
}

export class Topo {
  readonly prefix = `ktr-${process.pid}-`;
  readonly dir = mkdtempSync(join(tmpdir(), 'ktr-'));
  readonly manifests = join(this.dir, 'manifests');
  readonly socket = join(this.dir, 'run', 'node1.sock');
  readonly state = join(this.dir, 'run', 'node1.state.json');
  private readonly procs: ChildProcess[] = [];
  private readonly namespaces: string[] = [];
  private agentRuns = 0;

  ns(name: string): string {
    return this.prefix + name;
  }

  /** Runs argv inside namespace `name` (never throws). */
  exec(name: string, argv: string[], timeoutMs = 15_000, input?: string): Exec {
    const r = spawnSync('ip', ['netns', 'exec', this.ns(name), ...argv], {
      encoding: 'utf8',
      timeout: timeoutMs,
      input,
    });
    return { status: r.status, out: r.stdout ?? '', err: r.stderr ?? '' };
  }

  /** Runs argv inside `name`, throwing on failure (topology setup). */
  must(name: string, argv: string[]): string {
    const r = this.exec(name, argv);
    if (r.status !== 0) throw new Error(`${name}: ${argv.join(' ')}: ${r.err}`);
    return r.out;
  }

  async setup(): Promise<void> {
    this.addNs('node');
    const node = (...a: string[]) => this.must('node', a);
    node('ip', 'link', 'set', 'lo', 'up');
    // Like a real node before kubetun: routing pods already, strict reverse-path filtering.
    node('sysctl', '-qw', 'net.ipv4.ip_forward=1', 'net.ipv4.conf.all.rp_filter=1');
    this.addRemote();
    for (const p of PODS) this.addPod(p);
    mkdirSync(this.manifests);
    writeFileSync(join(this.manifests, 'web.yaml'), MANIFESTS);
    await Promise.all(['be1', 'be2', 'remote'].map((b) => this.startServer(b)));
  }

  private addNs(name: string): void {
    execFileSync('ip', ['netns', 'add', this.ns(name)]);
    this.namespaces.push(this.ns(name));
  }

  /**
   * The uplink eth0 (10.250.0.2) is a veth whose peer is "another node": ns remote with the
   * underlay address 10.250.0.3 and a pod address 10.244.2.10 (host-gw routes both ways).
   */
  private addRemote(): void {
    this.addNs('remote');
    const node = (...a: string[]) => this.must('node', a);
    const remote = (...a: string[]) => this.must('remote', a);
    this.addVeth('eth0', 'remote');
    node('ip', 'addr', 'add', `${NODE_IP}/24`, 'dev', 'eth0');
    node('ip', 'link', 'set', 'eth0', 'up');
    node('ip', 'route', 'add', '10.244.2.0/24', 'via', REMOTE_NODE_IP);
    remote('ip', 'link', 'set', 'lo', 'up');
    remote('ip', 'addr', 'add', `${REMOTE_POD_IP}/32`, 'dev', 'lo');
    remote('ip', 'addr', 'add', `${REMOTE_NODE_IP}/24`, 'dev', 'eth0');
    remote('ip', 'link', 'set', 'eth0', 'up');
    remote('ip', 'route', 'add', '10.244.1.0/24', 'via', NODE_IP);
  }

  /** A veth `local` in ns node whose peer is eth0 in ns `peer`. */
  private addVeth(local: string, peer: string): void {
    this.must('node', [
      'ip',
      'link',
      'add',
      local,
      'type',
      'veth',
      'peer',
      'name',
      'eth0',
      'netns',
      this.ns(peer),
    ]);
  }

  /** A pod namespace joined to the node by a veth, wired the way the lab does it. */
  addPod(p: { name: string; veth: string; ip: string }): void {
    this.addNs(p.name);
    const node = (...a: string[]) => this.must('node', a);
    this.addVeth(p.veth, p.name);
    node('ip', 'addr', 'add', `${GW}/32`, 'dev', p.veth);
    node('sysctl', '-qw', `net.ipv4.conf.${p.veth}.proxy_arp=1`);
    node('sysctl', '-qw', `net.ipv4.neigh.${p.veth}.proxy_delay=0`);
    node('ip', 'link', 'set', p.veth, 'up');
    node('ip', 'route', 'add', `${p.ip}/32`, 'dev', p.veth);
    const pod = (...a: string[]) => this.must(p.name, a);
    pod('ip', 'link', 'set', 'lo', 'up');
    pod('ip', 'addr', 'add', `${p.ip}/24`, 'dev', 'eth0');
    pod('ip', 'link', 'set', 'eth0', 'up');
    pod('ip', 'route', 'add', 'default', 'via', GW);
  }

  /** A process of the test's own, killed by teardown like the servers. */
  adopt(p: ChildProcess): void {
    this.procs.push(p);
  }

  private async startServer(name: string): Promise<void> {
    const p = spawn('ip', ['netns', 'exec', this.ns(name), process.execPath, '-e', SERVER, name], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    this.procs.push(p);
    await new Promise<void>((resolve, reject) => {
      p.stdout!.once('data', () => resolve());
      p.once('exit', (code) => reject(new Error(`server ${name} exited (${code})`)));
    });
  }

  /**
   * `kubetun run`'s argv in the node namespace (for `ip`). `wrap`: a command that execs the
   * agent after it (setpriv, unshare), run inside the namespace.
   */
  agentArgv(extra: string[] = [], wrap: string[] = []): string[] {
    // node's options as the agent is started with them (src/runtime.ts), then tsx's loader
    const node = [process.execPath, ...AGENT_NODE_OPTIONS, '--import', 'tsx'];
    const args = ['netns', 'exec', this.ns('node'), ...wrap, ...node];
    const flags = ['--manifests', this.manifests, '--node-name', 'node1', '--node-ip', NODE_IP];
    flags.push(
      '--pod-cidr',
      '10.244.1.0/24',
      '--ctl-socket',
      this.socket,
      '--pod-rescan-ms',
      '200',
      '--log-level',
      'debug',
    );
    return [...args, MAIN, 'run', ...flags, ...extra];
  }

  /** Starts `kubetun run` in the node namespace and waits until its socket answers status. */
  async startAgent(extra: string[] = [], wrap: string[] = []): Promise<ChildProcess> {
    const log = openSync(join(this.dir, `agent-${this.agentRuns++}.log`), 'w');
    const p = spawn('ip', this.agentArgv(extra, wrap), { stdio: ['ignore', log, log] });
    this.procs.push(p);
    let exited = false;
    p.once('exit', () => {
      exited = true;
    });
    for (let i = 0; i < 300 && !exited; i++) {
      try {
        await ctlRequest(this.socket, { cmd: 'status' });
        return p;
      } catch {
        await sleep(100);
      }
    }
    throw new Error(`agent not ready (exited: ${exited}); see ${this.dir}/agent-*.log`);
  }

  /**
   * Everything kubetun may leave behind in the node namespace, as values to compare with the
   * node before kubetun ran (`sysctls`: the keys to read).
   */
  footprint(sysctls: readonly string[]) {
    const all = (
      JSON.parse(this.must('node', ['ip', '-j', 'link', 'show'])) as { ifname: string }[]
    ).map((l) => l.ifname);
    const links = all.filter((n) => n !== 'kt0');
    const filters = links.map((d) =>
      this.must('node', ['tc', 'filter', 'show', 'dev', d, 'ingress']),
    );
    return {
      clsact: this.must('node', ['tc', 'qdisc', 'show']).includes('clsact'),
      filters: filters.join('').trim(),
      tun: links.length < all.length,
      svcRoute: this.must('node', ['ip', 'route', 'show', '10.96.0.0/16']).trim(),
      // the reply steering (steer-replies.ts): its nftables table, rules and routing table
      nft: this.must('node', ['nft', 'list', 'tables'])
        .split('\n')
        .filter((l) => l.includes('kubetun'))
        .join('\n'),
      rules: ['-4', '-6'].map((f) => this.must('node', ['ip', f, 'rule', 'show']).trim()),
      replyRoutes: this.exec('node', ['ip', 'route', 'show', 'table', '7700']).out.trim(),
      // the kernel's entries of flows the agent translated (it forgets them when it stops)
      marked: this.exec('node', ['conntrack', '-L', '--mark', '0x2000/0x2000']).out.trim(),
      sysctls: Object.fromEntries(
        sysctls.map((k) => [k, this.must('node', ['sysctl', '-n', k]).trim()]),
      ),
    };
  }

  /** HTTP GET from pod `from`; returns curl's exit status and the body. */
  curl(from: string, url: string, maxTime = 3): Exec {
    return this.exec(
      from,
      ['curl', '-s', '--max-time', String(maxTime), url],
      (maxTime + 5) * 1000,
    );
  }

  /** Kills what it started (by PID) and waits for it, then deletes the namespaces. */
  async teardown(): Promise<void> {
    await teardownTopo(this.procs, this.namespaces, this.dir);
  }
}

/**
 * A test topology's teardown (Topo here, Topo6 in topo6.ts): kills the processes it started, by
 * their handles, waits for them, deletes its namespaces and its directory.
 */
export async function teardownTopo(
  procs: readonly ChildProcess[],
  namespaces: readonly string[],
  dir: string,
): Promise<void> {
  const alive = procs.filter((p) => p.exitCode === null && p.signalCode === null);
  await Promise.all(
    alive.map((p) => {
      const gone = new Promise((r) => p.once('exit', r));
      p.kill('SIGKILL');
      return gone;
    }),
  );
  // A namespace file is busy while any process (or mount namespace of `ip netns exec`) still
  // holds it: retry a little rather than leak it.
  for (const n of namespaces) {
    for (let i = 0; i < 20; i++) {
      if (spawnSync('ip', ['netns', 'del', n]).status === 0) break;
      await sleep(100);
    }
  }
  rmSync(dir, { recursive: true, force: true });
}

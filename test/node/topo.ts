// A one-node topology in network namespaces for the `kubetun run` root tests, all names prefixed
// `ktr-<pid>-` so parallel runs and other helpers' tests never collide:
//
//   ns client (10.244.1.10) ─eth0══vc─┐
//   ns be1    (10.244.1.11) ─eth0══vb1┼─ ns node: 10.244.1.1/32 + proxy_arp on each v*,
//   ns be2    (10.244.1.12) ─eth0══vb2┘           <pod ip>/32 dev v*, uplink eth0 10.250.0.2/24
//
// Backends run a tiny HTTP server on :8080 answering their own name. Everything is removed by
// teardown(): processes by PID, then namespaces.
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { ctlRequest } from '../../src/node/ctl.ts';

export const NODE_IP = '10.250.0.2';
export const GW = '10.244.1.1';
export const VIP = '10.96.0.10';
export const VIP_EMPTY = '10.96.0.20';
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
  private agentRuns = 0;

  ns(name: string): string {
    return this.prefix + name;
  }

  /** Runs argv inside namespace `name` (never throws). */
  exec(name: string, argv: string[], timeoutMs = 15_000): Exec {
    const r = spawnSync('ip', ['netns', 'exec', this.ns(name), ...argv], {
      encoding: 'utf8',
      timeout: timeoutMs,
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
    for (const n of ['node', ...PODS.map((p) => p.name)])
      execFileSync('ip', ['netns', 'add', this.ns(n)]);
    const node = (...a: string[]) => this.must('node', a);
    node('ip', 'link', 'set', 'lo', 'up');
    // Like a real node before kubetun: routing pods already, strict reverse-path filtering.
    node('sysctl', '-qw', 'net.ipv4.ip_forward=1', 'net.ipv4.conf.all.rp_filter=1');
    // The uplink: this kernel has no dummy driver, so a veth pair whose peer stays unused.
    node('ip', 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0peer');
    node('ip', 'addr', 'add', `${NODE_IP}/24`, 'dev', 'eth0');
    node('ip', 'link', 'set', 'eth0peer', 'up');
    node('ip', 'link', 'set', 'eth0', 'up');
    for (const p of PODS) {
      const podNs = this.ns(p.name);
      node('ip', 'link', 'add', p.veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', podNs);
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
    mkdirSync(this.manifests);
    writeFileSync(join(this.manifests, 'web.yaml'), MANIFESTS);
    await Promise.all(['be1', 'be2'].map((b) => this.startServer(b)));
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

  /** Starts `kubetun run` in the node namespace and waits until its socket answers status. */
  async startAgent(extra: string[] = []): Promise<ChildProcess> {
    const log = openSync(join(this.dir, `agent-${this.agentRuns++}.log`), 'w');
    const args = [
      'netns',
      'exec',
      this.ns('node'),
      process.execPath,
      '--import',
      'tsx',
      MAIN,
      'run',
    ];
    const flags = ['--manifests', this.manifests, '--node-name', 'node1', '--node-ip', NODE_IP];
    flags.push('--pod-cidr', '10.244.1.0/24', '--ctl-socket', this.socket, '--log-level', 'debug');
    const p = spawn('ip', [...args, ...flags, ...extra], { stdio: ['ignore', log, log] });
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

  /** HTTP GET from pod `from`; returns curl's exit status and the body. */
  curl(from: string, url: string, maxTime = 3): Exec {
    return this.exec(
      from,
      ['curl', '-s', '--max-time', String(maxTime), url],
      (maxTime + 5) * 1000,
    );
  }

  teardown(): void {
    for (const p of this.procs) {
      if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    }
    for (const n of ['node', ...PODS.map((p) => p.name)])
      spawnSync('ip', ['netns', 'del', this.ns(n)]);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

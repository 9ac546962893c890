// The IPv6 node topology of the `kubetun run --service-cidr-v6` root tests (v6.test.ts,
// v6-nodeport.test.ts), in namespaces named `<prefix><name>` (each test file its own prefix),
// all removed by teardown():
//
//   ns client 10.244.1.10 fd00:244:1::10 ─eth0══vc──┐  ns node: fe80::1 + 10.244.1.1 (proxy
//   ns be1    10.244.1.11 fd00:244:1::11 ─eth0══vb1─┼─   ARP) on each v*, <pod ip>/32 and /128
//   ns be2    10.244.1.12 fd00:244:1::12 ─eth0══vb2─┘   dev v*; kt0; uplink eth0
//                                                       10.250.0.2/24 fd00:250::2/64
//   ns remote ("another node": eth0 fd00:250::3, pod address fd00:244:2::10 on lo) ═╝
//                                                       fd00:244:2::/64 via fd00:250::3
//
// Contract: setup() builds exactly this; startServer/startAgent start processes teardown()
// kills by PID (and any given to adopt()); nothing outside these namespaces is touched.
import type { ChildProcess } from 'node:child_process';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, openSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { ctlRequest } from '../../src/node/ctl.ts';
import { teardownTopo } from './topo.ts';

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
export const CIDR6 = 'fd00:10:96::/112';
export const NODE_IP = '10.250.0.2';
export const NODE_IP6 = 'fd00:250::2';
export const REMOTE_NODE_IP6 = 'fd00:250::3';
export const REMOTE_POD6 = 'fd00:244:2::10';
export const POD_CIDR6 = 'fd00:244:1::/64';
export const PODS = [
  { name: 'client', veth: 'vc', ip: '10.244.1.10', ip6: 'fd00:244:1::10' },
  { name: 'be1', veth: 'vb1', ip: '10.244.1.11', ip6: 'fd00:244:1::11' },
  { name: 'be2', veth: 'vb2', ip: '10.244.1.12', ip6: 'fd00:244:1::12' },
] as const;
export const MIRRED = ['action', 'mirred', 'egress', 'redirect', 'dev', 'kt0'];

export interface Exec {
  status: number | null;
  out: string;
  err: string;
}

export class Topo6 {
  readonly dir: string;
  readonly manifests: string;
  readonly socket: string;
  private readonly namespaces: string[] = [];
  private readonly procs: ChildProcess[] = [];
  private agentRuns = 0;

  constructor(readonly prefix: string) {
    this.dir = mkdtempSync(join(tmpdir(), prefix));
    this.manifests = join(this.dir, 'manifests');
    this.socket = join(this.dir, 'run', 'node1.sock');
  }

  /** Runs argv in namespace `name` (never throws). */
  exec(name: string, argv: string[], timeoutMs = 15_000): Exec {
    const r = spawnSync('ip', ['netns', 'exec', this.prefix + name, ...argv], {
      encoding: 'utf8',
      timeout: timeoutMs,
    });
    return { status: r.status, out: r.stdout ?? '', err: r.stderr ?? '' };
  }

  /** Runs argv in `name`, throwing on failure (topology setup). */
  must(name: string, ...argv: string[]): string {
    const r = this.exec(name, argv);
    if (r.status !== 0) throw new Error(`${name}: ${argv.join(' ')}: ${r.err}`);
    return r.out;
  }

  addNs(name: string): void {
    execFileSync('ip', ['netns', 'add', this.prefix + name]);
    this.namespaces.push(this.prefix + name);
  }

  /** The node, its uplink to ns remote, the pods; `manifests` written to manifests/web.yaml. */
  setup(manifests: string): void {
    this.addNs('node');
    const node = (...a: string[]) => this.must('node', ...a);
    node('ip', 'link', 'set', 'lo', 'up');
    node('sysctl', '-qw', 'net.ipv4.ip_forward=1');
    // the uplink: a veth to "another node", ns remote, with a pod address of its own
    this.addNs('remote');
    const remote = (...a: string[]) => this.must('remote', ...a);
    this.veth('node', 'eth0', 'remote');
    node('ip', 'addr', 'add', `${NODE_IP}/24`, 'dev', 'eth0');
    node('ip', '-6', 'addr', 'add', `${NODE_IP6}/64`, 'dev', 'eth0', 'nodad');
    node('ip', 'link', 'set', 'eth0', 'up');
    node('ip', '-6', 'route', 'add', 'fd00:244:2::/64', 'via', REMOTE_NODE_IP6);
    remote('ip', 'link', 'set', 'lo', 'up');
    remote('ip', '-6', 'addr', 'add', `${REMOTE_POD6}/128`, 'dev', 'lo');
    remote('ip', '-6', 'addr', 'add', `${REMOTE_NODE_IP6}/64`, 'dev', 'eth0', 'nodad');
    remote('ip', 'link', 'set', 'eth0', 'up');
    // a pod answers from its one address: the UDP server's replies (a socket on ::) too
    remote('ip', '-6', 'route', 'add', POD_CIDR6, 'via', NODE_IP6, 'src', REMOTE_POD6);
    for (const p of PODS) this.addPod(p);
    mkdirSync(this.manifests);
    writeFileSync(join(this.manifests, 'web.yaml'), manifests);
  }

  /** A veth `local` in ns `from` whose peer is eth0 in ns `peer`. */
  veth(from: string, local: string, peer: string): void {
    const argv = ['ip', 'link', 'add', local, 'type', 'veth', 'peer', 'name', 'eth0'];
    this.must(from, ...argv, 'netns', this.prefix + peer);
  }

  addPod(p: (typeof PODS)[number]): void {
    this.addNs(p.name);
    const node = (...a: string[]) => this.must('node', ...a);
    const pod = (...a: string[]) => this.must(p.name, ...a);
    this.veth('node', p.veth, p.name);
    node('ip', 'addr', 'add', '10.244.1.1/32', 'dev', p.veth);
    node('ip', '-6', 'addr', 'add', 'fe80::1/64', 'dev', p.veth, 'nodad');
    node('sysctl', '-qw', `net.ipv4.conf.${p.veth}.proxy_arp=1`);
    node('sysctl', '-qw', `net.ipv4.neigh.${p.veth}.proxy_delay=0`);
    node('ip', 'link', 'set', p.veth, 'up');
    node('ip', 'route', 'add', `${p.ip}/32`, 'dev', p.veth);
    node('ip', '-6', 'route', 'add', `${p.ip6}/128`, 'dev', p.veth);
    pod('ip', 'link', 'set', 'lo', 'up');
    pod('ip', 'addr', 'add', `${p.ip}/24`, 'dev', 'eth0');
    // a /128: every other address (pods too) is reached through the node, as the IPv4 side's
    // /24 is through proxy ARP
    pod('ip', '-6', 'addr', 'add', `${p.ip6}/128`, 'dev', 'eth0', 'nodad');
    pod('ip', 'link', 'set', 'eth0', 'up');
    pod('ip', 'route', 'add', 'default', 'via', '10.244.1.1');
    pod('ip', '-6', 'route', 'add', 'default', 'via', 'fe80::1', 'dev', 'eth0');
  }

  /** A process of the test's own, killed by teardown like the servers. */
  adopt(p: ChildProcess): void {
    this.procs.push(p);
  }

  /** Runs node script `script` (argv1: the namespace's name) in `name`; its first output: up. */
  async startServer(name: string, script: string): Promise<void> {
    const argv = ['netns', 'exec', this.prefix + name, process.execPath, '-e', script, name];
    const p = spawn('ip', argv, { stdio: ['ignore', 'pipe', 'inherit'] });
    this.procs.push(p);
    await new Promise<void>((resolve, reject) => {
      p.stdout!.once('data', () => resolve());
      p.once('exit', (code) => reject(new Error(`server ${name} exited (${code})`)));
    });
  }

  /** `kubetun run --service-cidr-v6 --pod-cidr-v6` (and `extra`) in ns node, once it answers. */
  async startAgent(extra: string[] = []): Promise<ChildProcess> {
    const log = openSync(join(this.dir, `agent-${this.agentRuns++}.log`), 'w');
    const flags = ['--manifests', this.manifests, '--node-name', 'node1', '--node-ip', NODE_IP];
    flags.push('--pod-cidr', '10.244.1.0/24', '--service-cidr-v6', CIDR6);
    flags.push('--ctl-socket', this.socket, '--pod-cidr-v6', POD_CIDR6);
    flags.push('--pod-rescan-ms', '200', '--log-level', 'debug', ...extra);
    const argv = ['netns', 'exec', `${this.prefix}node`, process.execPath, '--import', 'tsx', MAIN];
    const p = spawn('ip', [...argv, 'run', ...flags], { stdio: ['ignore', log, log] });
    this.procs.push(p);
    let exited = false;
    p.once('exit', () => {
      exited = true;
    });
    for (let i = 0; i < 600 && !exited; i++) {
      try {
        await ctlRequest(this.socket, { cmd: 'status' });
        return p;
      } catch {
        await sleep(100);
      }
    }
    throw new Error(`agent not ready (exited: ${exited}); see ${this.dir}/agent-*.log`);
  }

  /** The agent's counters (ctl socket). */
  async counters(): Promise<Record<string, number>> {
    const r = (await ctlRequest(this.socket, { cmd: 'counters' })) as {
      counters: Record<string, number>;
    };
    return r.counters;
  }

  /** Kills what it started (by PID) and waits for it, then deletes the namespaces. */
  async teardown(): Promise<void> {
    await teardownTopo(this.procs, this.namespaces, this.dir);
  }
}

// `lab compare --vms SSH_CONFIG`: the comparison on the Vagrant lab, whose nodes are VMs
// provisioned by `kubetun lab provision-node --systemd` (lab/provision/node.sh) — each node the
// VM's own network namespace, its pods namespaces vm-pod-a… inside it — and reached from here
// only by ssh. The engine (run.ts) is the namespace lab's; what differs is behind CompareLab:
//
//   where commands run   an NsRoute: "vm-pod-d@node2" runs `ip netns exec vm-pod-d …` on node2,
//                        "@node2" runs on node2 itself; any other name has no route and fails
//                        loudly (a command that bypassed the route would name a namespace this
//                        machine does not have)
//   captures             tcpdump -U -w - on the VM, streamed over ssh to a file here (capture.ts)
//   clock                each machine's clock offset, measured before each plane; packet times
//                        are moved onto this machine's clock (clock.ts)
//   the view             rendered here from the same topology and manifests the VMs rendered it
//                        from (renderStaticView: the nodes read a static view, no control plane)
//   the mode             kubetun: every node's agent started through its provisioning
//                        (`provision-node --agent start`: kubetun.service, waited for until its
//                        control socket answers); iptables/nftables: the agents stopped (a clean
//                        stop undoes their steering), the kernel data plane flushed, and
//                        kube-proxy's rules for each node rendered here from the view and fed to
//                        iptables-restore / nft on the node over ssh, with kube-proxy's conntrack
//                        sysctls — installKernelDataplane, the namespace lab's own code
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UsageError } from '../../errors.ts';
import { type NsRoute, shAsync, shTry, withNsRoute } from '../../sh.ts';
import { renderStaticViewSync } from '../control-plane.ts';
import { LabError } from '../error.ts';
import { flushKernelDataplane, installKernelDataplane, isKernelMode } from '../kube-proxy.ts';
import type { Progress } from '../lab.ts';
import { REPO_ROOT } from '../../runtime.ts';
import type { Machines } from '../machines.ts';
import { findUplink, firstNodes } from '../provision.ts';
import type { LabMode } from '../state.ts';
import { allPods, type LabNode, loadTopology, type Topology } from '../topology.ts';
import { CLOCK_SCRIPT, type ClockOffset, measureClockOffset } from './clock.ts';
import type { CompareLab } from './labs.ts';
import type { Scenario } from './scenarios.ts';

/** The topology the Vagrantfile brings up. */
export const VM_TOPOLOGY = join(REPO_ROOT, 'lab', 'vagrant-topology.yaml');
/** The lab prefix lab/provision/node.sh provisions the VMs with: pods vm-pod-a…. */
export const VM_LAB_PREFIX = 'vm-';
/** The repository inside the VMs (the Vagrantfile's REPO_IN_VM). */
export const VM_REPO = '/opt/kubetun';
/**
 * Software emulation (TCG, docs/vagrant.md) runs a guest several times slower than the host:
 * the scenarios' client timeouts are scaled by this, alike for both planes.
 */
export const VM_SLOWNESS = 5;

export interface VmLabOptions {
  /** how to reach the machines (sshMachines) */
  machines: Machines;
  /** the machines there are (the ssh config's hosts): nodes of the topology and its client */
  hosts: string[];
  /** the topology, on this machine (default lab/vagrant-topology.yaml) */
  topologyFile?: string;
  /** the lab prefix the nodes were provisioned with (their pods' namespaces) */
  prefix?: string;
  /** kubetun as the machines run it (default: node.sh's wrapper, with the VMs' prefix) */
  kubetun?: string[];
  /** the topology file on the machines */
  remoteTopology?: string;
  slowness?: number;
  /** for the report */
  name?: string;
  progress: Progress;
}

export interface VmLab extends CompareLab {
  /** ends the connections and removes the rendered view */
  close(): void;
}

/** "vm-pod-d@node2": namespace vm-pod-d on machine node2; "@node2": node2's own. */
export function placeName(host: string, netns = ''): string {
  return `${netns}@${host}`;
}

export function parsePlace(name: string): { host: string; netns: string } | undefined {
  const at = name.lastIndexOf('@');
  return at < 0 || at === name.length - 1
    ? undefined
    : { netns: name.slice(0, at), host: name.slice(at + 1) };
}

/** Why a scenario cannot run on VMs (t: the VM lab's topology, when one is open). */
export function vmRefusal(s: Scenario, t?: Topology): string | undefined {
  if (s.needs === 'control-plane')
    return "it changes Services or EndpointSlices through the lab's control plane; the VMs' nodes read a static view";
  if (!t) return undefined;
  const names = [...allPods(t), ...t.clients].map((p) => p.name);
  if (!names.includes(s.client))
    return `its client ${s.client} is not one of the lab's pods or machines (${names.join(', ')})`;
  return undefined;
}

export async function openVmLab(o: VmLabOptions): Promise<VmLab> {
  const say = o.progress;
  const all = loadTopology(o.topologyFile ?? VM_TOPOLOGY);
  const t0 = firstNodes(all, nodeCount(all, o.hosts));
  const clients = t0.clients.filter((c) => o.hosts.includes(c.name));
  const hosts = [...t0.nodes.map((n) => n.name), ...clients.map((c) => c.name)];
  const m = o.machines;
  say(`connecting to ${hosts.join(', ')}`);
  m.open(hosts);
  let viewDir: string | undefined;
  try {
    const via = (host: string) => (argv: string[]) => m.run(host, argv);
    const uplink = (host: string, ip: string) => {
      const u = findUplink(ip, via(host));
      if (!u) throw new LabError(`${host}: no interface holds ${ip} (${all.file})`);
      return u;
    };
    const prefix = o.prefix ?? VM_LAB_PREFIX;
    const t: Topology = {
      ...t0,
      nodes: t0.nodes.map((n) => ({
        ...n,
        ns: placeName(n.name),
        uplink: uplink(n.name, n.ip),
        pods: n.pods.map((p) => ({ ...p, ns: placeName(n.name, prefix + p.name) })),
      })),
      clients: clients.map((c) => ({ ...c, ns: placeName(c.name), uplink: uplink(c.name, c.ip) })),
    };
    viewDir = mkdtempSync(join(tmpdir(), 'kubetun-vm-view-'));
    renderStaticViewSync(t, viewDir);
    const lab = new VmLabImpl(o, t, hosts, viewDir);
    await lab.measureClocks(say);
    lab.current = await lab.detectMode();
    say(`${lab.name}: data plane ${lab.current}`);
    return lab;
  } catch (err) {
    m.close();
    if (viewDir) rmSync(viewDir, { recursive: true, force: true });
    throw err;
  }
}

/** How many of the topology's nodes are machines: its first k must all be there. */
function nodeCount(t: Topology, hosts: string[]): number {
  let k = 0;
  while (k < t.nodes.length && hosts.includes(t.nodes[k]!.name)) k++;
  const stray = t.nodes.slice(k).filter((n) => hosts.includes(n.name));
  if (k === 0 || stray.length > 0)
    throw new UsageError(
      `the machines (${hosts.join(', ')}) are not the first nodes of ${t.file} (${t.nodes.map((n) => n.name).join(', ')})`,
      {
        hint: 'the ssh config is `vagrant ssh-config` of the running lab (node1, node2, … and client)',
      },
    );
  return k;
}

class VmLabImpl implements VmLab {
  readonly name: string;
  readonly captureDir = join(tmpdir(), `kubetun-compare-vms-${process.getuid?.() ?? 0}`);
  readonly route: NsRoute;
  readonly slowness: number;
  current: LabMode = 'none';
  /** whether any node's agent may run: false only after this lab stopped them all (each
   * `provision-node --agent` call is a Node start in the VM: seconds under emulation) */
  private agentsUp = true;
  private offsets = new Map<string, ClockOffset>();
  private readonly hostSet: Set<string>;

  constructor(
    private readonly o: VmLabOptions,
    readonly topology: Topology,
    private readonly hosts: string[],
    readonly viewDir: string,
  ) {
    this.name = o.name ?? `the VM lab (${hosts.join(', ')})`;
    this.slowness = o.slowness ?? VM_SLOWNESS;
    this.hostSet = new Set(hosts);
    this.route = { node: o.machines.node, argv: (ns, argv) => this.routed(ns, argv) };
  }

  private routed(ns: string, argv: readonly string[]): string[] {
    const p = parsePlace(ns);
    if (!p || !this.hostSet.has(p.host))
      throw new LabError(
        `no route to namespace "${ns}" on ${this.name}: its namespaces are <netns>@<machine> of ${this.hosts.join(', ')}`,
      );
    const cmd = p.netns ? ['ip', 'netns', 'exec', p.netns, ...argv] : [...argv];
    return this.o.machines.run(p.host, cmd);
  }

  mode(): LabMode {
    return this.current;
  }

  clockOffsetUs(ns: string): number {
    const p = parsePlace(ns);
    return (p && this.offsets.get(p.host)?.offsetUs) || 0;
  }

  clocks(): Record<string, ClockOffset> {
    return Object.fromEntries(this.offsets);
  }

  cannotRun(s: Scenario): string | undefined {
    return vmRefusal(s, this.topology);
  }

  async measureClocks(say: Progress): Promise<void> {
    for (const host of this.hosts) {
      const argv = this.o.machines.run(host, ['sh', '-c', CLOCK_SCRIPT]);
      const c = await measureClockOffset(argv, `the clock of ${host}`);
      this.offsets.set(host, c);
      const ms = (c.offsetUs / 1000).toFixed(1);
      say(`${host}: clock ${ms} ms from this machine's (± ${(c.rttUs / 2000).toFixed(1)} ms)`);
    }
  }

  /** kubetun when every node's agent runs, else the kernel rules node1 holds, else none. */
  async detectMode(): Promise<LabMode> {
    const running = await Promise.all(this.topology.nodes.map((n) => this.agent(n, 'status')));
    if (running.every(Boolean)) return 'kubetun';
    const n = this.topology.nodes[0]!;
    const on = (argv: string[]) => shTry(this.o.machines.run(n.name, argv), 60_000).ok;
    if (on(['nft', 'list', 'table', 'ip', 'kube-proxy'])) return 'nftables';
    if (on(['iptables', '-w', '-t', 'nat', '-S', 'KUBE-SERVICES'])) return 'iptables';
    return 'none';
  }

  async switchMode(mode: LabMode, say: Progress, reinstall: boolean): Promise<void> {
    if (!reinstall && mode === this.current) return;
    say(`switching ${this.name} from ${this.current} to ${mode}`);
    const nodes = this.topology.nodes;
    await withNsRoute(this.route, async () => {
      if (this.agentsUp) await Promise.all(nodes.map((n) => this.agent(n, 'stop', say)));
      this.agentsUp = false;
      this.current = 'none';
      flushKernelDataplane(this.topology);
      if (mode === 'kubetun') {
        this.agentsUp = true;
        await Promise.all(nodes.map((n) => this.agent(n, 'start', say)));
      }
      if (isKernelMode(mode)) installKernelDataplane(this.topology, mode, say, this.viewDir);
    });
    this.current = mode;
    await this.measureClocks(say);
    say(`${this.name}: data plane ${mode}`);
  }

  /** The node's kubetun, through its own provisioning (provision.ts nodeAgent); true: it runs. */
  private async agent(n: LabNode, action: 'start' | 'stop' | 'status', say?: Progress) {
    const kubetun = this.o.kubetun ?? ['env', `KUBETUN_LAB_PREFIX=${VM_LAB_PREFIX}`, 'kubetun'];
    const topology = this.o.remoteTopology ?? `${VM_REPO}/lab/vagrant-topology.yaml`;
    const argv = [...kubetun, 'lab', 'provision-node', '--topology', topology, '--node', n.name];
    argv.push('--nodes', String(this.topology.nodes.length), '--uplink', n.uplink);
    const r = await shAsync(this.o.machines.run(n.name, [...argv, '--agent', action]), 900_000);
    if (!r.ok)
      throw new LabError(
        `${n.name}: kubetun lab provision-node --agent ${action}: ${r.err.trim() || `exit ${r.status}`}`,
      );
    for (const line of r.err.trim().split('\n').filter(Boolean)) say?.(`${n.name}: ${line}`);
    return r.out.trim().split('\n').pop() === 'running';
  }

  close(): void {
    this.o.machines.close();
    rmSync(this.viewDir, { recursive: true, force: true });
  }
}

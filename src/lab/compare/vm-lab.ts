// `lab compare --vms SSH_CONFIG`: the comparison on the Vagrant lab, whose nodes are VMs
// provisioned by `kubetun lab provision-node --systemd` (lab/provision/node.sh) — each node the
// VM's own network namespace, its pods namespaces vm-pod-a… inside it — and reached from here
// only by ssh. The engine (run.ts) is the namespace lab's; what differs is behind CompareLab:
//
//   where commands run   the VM lab's route (lab/vms.ts): "vm-pod-d@node2" runs `ip netns exec
//                        vm-pod-d …` on node2, "@node2" runs on node2 itself; any other name has
//                        no route and fails loudly (a command that bypassed the route would name
//                        a namespace this machine does not have)
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
import { type NsRoute, withNsRoute } from '../../sh.ts';
import { renderStaticViewSync } from '../control-plane.ts';
import { LabError } from '../error.ts';
import { flushKernelDataplane, installKernelDataplane, isKernelMode } from '../kube-proxy.ts';
import type { Progress } from '../lab.ts';
import type { Machines } from '../machines.ts';
import type { AgentAction } from '../node-agent.ts';
import { findUplink } from '../provision.ts';
import type { LabMode } from '../state.ts';
import { allPods, type LabNode, type Topology } from '../topology.ts';
import { parsePlace, type VmNodes, type VmSide, vmAgent, vmKernelRules, vmNodes } from '../vms.ts';
import { CLOCK_SCRIPT, type ClockOffset, measureClockOffset } from './clock.ts';
import type { CompareLab } from './labs.ts';
import { familyRefusal, type Scenario } from './scenarios.ts';

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
  /** how the machines were provisioned (default: lab/provision/node.sh's VMs) */
  side?: VmSide;
  slowness?: number;
  /** for the report */
  name?: string;
  progress: Progress;
}

export interface VmLab extends CompareLab {
  /** ends the connections and removes the rendered view */
  close(): void;
}

/** Why a scenario cannot run on VMs (t: the VM lab's topology, when one is open). */
export function vmRefusal(s: Scenario, t?: Topology): string | undefined {
  if (s.needs === 'control-plane')
    return "it changes Services or EndpointSlices through the lab's control plane; the VMs' nodes read a static view";
  const family = familyRefusal(s, t);
  if (family) return family;
  if (!t) return undefined;
  const names = [...allPods(t), ...t.clients].map((p) => p.name);
  if (!names.includes(s.client))
    return `its client ${s.client} is not one of the lab's pods or machines (${names.join(', ')})`;
  return undefined;
}

export async function openVmLab(o: VmLabOptions): Promise<VmLab> {
  const say = o.progress;
  const v0 = vmNodes(o);
  const m = o.machines;
  say(`connecting to ${v0.hosts.join(', ')}`);
  m.open(v0.hosts);
  let viewDir: string | undefined;
  try {
    const uplink = (host: string, ip: string) => {
      const u = findUplink(ip, (argv) => m.run(host, argv));
      if (!u) throw new LabError(`${host}: no interface holds ${ip} (${v0.topology.file})`);
      return u;
    };
    const t = v0.topology;
    const v: VmNodes = {
      ...v0,
      topology: {
        ...t,
        nodes: t.nodes.map((n) => ({ ...n, uplink: uplink(n.name, n.ip) })),
        clients: t.clients.map((c) => ({ ...c, uplink: uplink(c.name, c.ip) })),
      },
    };
    viewDir = mkdtempSync(join(tmpdir(), 'kubetun-vm-view-'));
    renderStaticViewSync(v.topology, viewDir);
    const lab = new VmLabImpl(o, v, viewDir);
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

  readonly topology: Topology;
  private readonly hosts: string[];

  constructor(
    private readonly o: VmLabOptions,
    private readonly v: VmNodes,
    readonly viewDir: string,
  ) {
    this.name = v.name;
    this.topology = v.topology;
    this.hosts = v.hosts;
    this.slowness = o.slowness ?? VM_SLOWNESS;
    this.route = v.route;
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
    return vmKernelRules(this.v, this.topology.nodes[0]!) ?? 'none';
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

  /** The node's kubetun, through its own provisioning (lab/vms.ts vmAgent); true: it runs. */
  private async agent(n: LabNode, action: AgentAction, say?: Progress): Promise<boolean> {
    return (await vmAgent(this.v, n, action, { say })).agent === 'running';
  }

  close(): void {
    this.o.machines.close();
    rmSync(this.viewDir, { recursive: true, force: true });
  }
}

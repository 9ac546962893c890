// The Vagrant lab seen from this machine: nodes and a client that are VMs provisioned by
// `kubetun lab provision-node --systemd` (lab/provision/node.sh), reached only by ssh with the
// config `vagrant ssh-config` prints (machines.ts). What every command that works on it from
// here shares — `lab compare --vms` (compare/vm-lab.ts), `lab exercise --vms`
// (exercise/vm-lab.ts), and `lab agent` and `lab exec` when KUBETUN_LAB_VMS names the config:
//
//   the topology   lab/vagrant-topology.yaml's first nodes (those the config has) and its client,
//                  every namespace named by the machine it is on: "vm-pod-d@node2" is namespace
//                  vm-pod-d on node2, "@node2" node2's own
//   the route      an NsRoute that runs such a namespace's commands there (sh.ts inNs); a name
//                  of no machine fails loudly, so nothing bypasses it unnoticed
//   each agent     through the node's own provisioning, run in the VM (node-agent.ts):
//                  `kubetun lab provision-node … --agent start|stop|status|crash|restart --json`
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { UsageError } from '../errors.ts';
import { REPO_ROOT } from '../runtime.ts';
import { type NsRoute, shAsync, shTry } from '../sh.ts';
import { LabError } from './error.ts';
import { VMS_ENV } from './prefix.ts';
import { type Machines, sshConfigHosts, sshMachines } from './machines.ts';
import type { AgentAction, AgentReport } from './node-agent.ts';
import { firstNodes } from './provision.ts';
import { type LabNode, loadTopology, type Topology } from './topology.ts';

/** The topology the Vagrantfile brings up. */
export const VM_TOPOLOGY = join(REPO_ROOT, 'lab', 'vagrant-topology.yaml');
/** The lab prefix lab/provision/node.sh provisions the VMs with: pods vm-pod-a…. */
export const VM_LAB_PREFIX = 'vm-';
/** The repository inside the VMs (the Vagrantfile's REPO_IN_VM). */
export const VM_REPO = '/opt/kubetun';
/** How the machines were provisioned, as commands there must be written. */
export interface VmSide {
  /** kubetun as the machines run it, with the lab's prefix */
  kubetun: string[];
  /** the topology file there */
  topology: string;
  /** the lab prefix of their pods' namespaces */
  prefix: string;
  /** the repository there (lab scripts such as lab/servers/udpq.mjs) */
  repo: string;
}

/** What lab/provision/node.sh makes of a Vagrant VM. */
export const VAGRANT_SIDE: VmSide = {
  kubetun: ['env', `KUBETUN_LAB_PREFIX=${VM_LAB_PREFIX}`, 'kubetun'],
  topology: `${VM_REPO}/lab/vagrant-topology.yaml`,
  prefix: VM_LAB_PREFIX,
  repo: VM_REPO,
};

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

/** The machines an ssh config names; a missing or empty config is the user's to fix. */
export function readSshConfig(config: string, flag = '--vms'): string[] {
  let text: string;
  try {
    text = readFileSync(config, 'utf8');
  } catch (err) {
    throw new UsageError(
      `${flag} ${config}: cannot read it (${(err as NodeJS.ErrnoException).code})`,
      {
        hint: 'write it with: vagrant ssh-config > FILE (inside the namespace of scripts/vm-host.sh: bash scripts/vm-host.sh exec vagrant ssh-config)',
      },
    );
  }
  const hosts = sshConfigHosts(text);
  if (hosts.length === 0)
    throw new UsageError(`${flag} ${config}: no Host in it`, {
      hint: 'it is what `vagrant ssh-config` prints for the running lab',
    });
  return hosts;
}

/** The VM lab KUBETUN_LAB_VMS names, or undefined when it names none. */
export function vmsFromEnv(): VmNodes | undefined {
  const config = process.env[VMS_ENV];
  if (!config) return undefined;
  const hosts = readSshConfig(config, VMS_ENV);
  return vmNodes({ machines: sshMachines(resolve(config)), hosts, config });
}

export interface VmNodesOptions {
  machines: Machines;
  /** the machines there are (the ssh config's hosts): nodes of the topology and its client */
  hosts: string[];
  /** the ssh config, for messages */
  config?: string;
  /** the topology, on this machine (default lab/vagrant-topology.yaml) */
  topologyFile?: string;
  side?: VmSide;
  /** for messages (default: the VM lab and its machines) */
  name?: string;
}

/** The VM lab as this machine addresses it. Nothing is run: no machine is asked yet. */
export interface VmNodes {
  name: string;
  /** routed names; uplinks unknown here (findUplink over the route, when needed) */
  topology: Topology;
  /** the machines: the nodes, then the clients */
  hosts: string[];
  machines: Machines;
  route: NsRoute;
  side: VmSide;
}

export function vmNodes(o: VmNodesOptions): VmNodes {
  const all = loadTopology(o.topologyFile ?? VM_TOPOLOGY);
  const t0 = firstNodes(all, nodeCount(all, o.hosts));
  const clients = t0.clients.filter((c) => o.hosts.includes(c.name));
  const hosts = [...t0.nodes.map((n) => n.name), ...clients.map((c) => c.name)];
  const side = o.side ?? VAGRANT_SIDE;
  const topology: Topology = {
    ...t0,
    nodes: t0.nodes.map((n) => ({
      ...n,
      ns: placeName(n.name),
      uplink: '',
      pods: n.pods.map((p) => ({ ...p, ns: placeName(n.name, side.prefix + p.name) })),
    })),
    clients: clients.map((c) => ({ ...c, ns: placeName(c.name), uplink: '' })),
  };
  const name =
    o.name ?? `the VM lab (${hosts.join(', ')}${o.config ? `; ssh -F ${o.config}` : ''})`;
  const known = new Set(hosts);
  const route: NsRoute = {
    node: o.machines.node,
    argv: (ns, argv) => {
      const p = parsePlace(ns);
      if (!p || !known.has(p.host))
        throw new LabError(
          `no route to namespace "${ns}" on ${name}: its namespaces are <netns>@<machine> of ${hosts.join(', ')}`,
        );
      return o.machines.run(p.host, p.netns ? ['ip', 'netns', 'exec', p.netns, ...argv] : argv);
    },
  };
  return { name, topology, hosts, machines: o.machines, route, side };
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

export interface VmAgentOptions {
  /** restart: the extra flags from now on ([]: none); undefined keeps them */
  flags?: string[];
  /** progress: provision-node's own lines, each prefixed with the node */
  say?: (m: string) => void;
}

/** The node's kubetun, through its own provisioning in the VM (node-agent.ts nodeAgent). */
export async function vmAgent(
  v: VmNodes,
  n: LabNode,
  action: AgentAction,
  o: VmAgentOptions = {},
): Promise<AgentReport> {
  const argv = [...v.side.kubetun, 'lab', 'provision-node', '--topology', v.side.topology];
  argv.push('--node', n.name, '--nodes', String(v.topology.nodes.length));
  if (n.uplink) argv.push('--uplink', n.uplink);
  argv.push('--agent', action, '--json');
  if (action === 'restart' && o.flags !== undefined)
    argv.push(...(o.flags.length > 0 ? ['--', ...o.flags] : ['--clear']));
  // minutes: each is a Node start in the VM, and a start waits for the agent's first sync
  const r = await shAsync(v.machines.run(n.name, argv), 900_000);
  const last = r.out.trim().split('\n').pop() ?? '';
  if (!r.ok || !last.startsWith('{'))
    throw new LabError(
      `${n.name}: kubetun lab provision-node --agent ${action}: ${r.err.trim() || `exit ${r.status}`}`,
    );
  for (const line of r.err.trim().split('\n').filter(Boolean)) o.say?.(`${n.name}: ${line}`);
  return JSON.parse(last) as AgentReport;
}

/** The kube-proxy rules a node holds (a kernel data plane left there), if any. */
export function vmKernelRules(v: VmNodes, n: LabNode): 'iptables' | 'nftables' | undefined {
  const on = (argv: string[]) => shTry(v.machines.run(n.name, argv), 60_000).ok;
  if (on(['nft', 'list', 'table', 'ip', 'kube-proxy'])) return 'nftables';
  if (on(['iptables', '-w', '-t', 'nat', '-S', 'KUBE-SERVICES'])) return 'iptables';
  return undefined;
}

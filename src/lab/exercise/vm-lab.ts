// The exercise lab on the Vagrant VMs (ExerciseLab, labs.ts), driven from the host: the VMs are
// reached only by ssh (lab/vms.ts), their pods are the VMs' own namespaces ("vm-pod-c@node2"),
// traffic checks run there through the route, and each node's kubetun.service is broken and
// repaired through the node's own provisioning — `provision-node --agent crash` (SIGKILL with
// the unit kept from restarting) and `--agent restart [-- FLAGS]` (node-agent.ts). What the
// exercise remembers (progress, undo steps) stays here, in the VM lab's own directory.
//
//   the lab now     every node's `--agent status`: its agent, extra flags, when it was
//                   provisioned (all nodes' times are the lab's createdAt: `vagrant provision`
//                   wipes the fault like `lab up` does), and where its view is
//   the objects     each node's static view as its kubetun reads it (cat over ssh): an edit in
//                   one VM counts; the Pods are the topology's, which the view was rendered from
//   what it lacks   a control plane, workloads, kubetun's control socket from here, kernel modes
import { join } from 'node:path';
import type { EndpointSlice, Pod, Service } from '../../cluster/types.ts';
import { shAsync } from '../../sh.ts';
import { LabError } from '../error.ts';
import { flushKernelDataplane } from '../kube-proxy.ts';
import type { Progress } from '../lab.ts';
import type { AgentReport } from '../node-agent.ts';
import { VMS_DIR, VMS_ENV } from '../prefix.ts';
import { findNode, findUplink } from '../provision.ts';
import { allPods, type LabNode } from '../topology.ts';
import { type VmNodes, vmAgent, vmKernelRules } from '../vms.ts';
import {
  type AgentNow,
  type Capability,
  type ExerciseLab,
  type LabNow,
  type LabObjects,
  lacking,
} from './labs.ts';

/** Why the VM lab cannot run some exercises (list --vms prints these). */
export const VM_LACKS: Record<Capability, string> = {
  'control-plane':
    "the VMs' nodes read a static view of lab/manifests rendered at provisioning (no control plane: no object edits, Deployments, DNS Pods or lab apply)",
  workloads: 'the VM lab runs nothing in its pods but their echo servers',
  'agent-socket': "kubetun's control socket is inside each VM, out of reach from here",
  'kernel-modes':
    "the VMs' exercises run with kubetun (kube-proxy's rules go on the VMs only for lab compare --vms)",
};

export function vmExerciseLab(v: VmNodes, config: string): ExerciseLab {
  let views = new Map<string, string>();
  // every look is a Node start in each VM (seconds, minutes under emulation): kept for the
  // command until an agent is crashed or restarted
  let known: LabNow | undefined;
  const node = (name: string) => findNode(v.topology, name);

  async function reports(): Promise<AgentReport[]> {
    const r = await Promise.all(v.topology.nodes.map((n) => vmAgent(v, n, 'status')));
    views = new Map(r.map((x) => [x.node, x.view]));
    return r;
  }

  async function now(): Promise<LabNow> {
    known ??= await look();
    return known;
  }

  async function look(): Promise<LabNow> {
    const r = await reports();
    const down = v.topology.nodes.filter((_, i) => r[i]!.agent !== 'running');
    const kernel = down.map((n) => vmKernelRules(v, n)).find((m) => m !== undefined);
    const agents: Record<string, AgentNow> = {};
    for (const x of r)
      agents[x.node] = {
        flags: x.flags,
        problem: x.agent === 'running' ? undefined : `kubetun on ${x.node} is not running`,
      };
    const createdAt = r.map((x) => `${x.node} ${x.provisioned || '(not stamped)'}`).join(', ');
    return {
      mode: kernel ?? 'kubetun',
      createdAt,
      topology: v.topology,
      exerciseLab: true,
      agents,
    };
  }

  /** Every node's kubetun running with no extra flags; kube-proxy's rules gone first. */
  async function normalise(say: Progress): Promise<string[]> {
    const s = await now();
    const did: string[] = [];
    if (s.mode !== 'kubetun') {
      const up = (n: LabNode) => findUplink(n.ip, (argv) => v.machines.run(n.name, argv)) ?? '';
      flushKernelDataplane({
        ...v.topology,
        nodes: v.topology.nodes.map((n) => ({ ...n, uplink: up(n) })),
      });
      did.push(`removed kube-proxy's ${s.mode} rules`);
    }
    await Promise.all(
      v.topology.nodes.map(async (n) => {
        const a = s.agents[n.name]!;
        if (!a.problem && a.flags.length === 0) return;
        await vmAgent(v, n, 'restart', { flags: [], say });
        did.push(`restarted kubetun on ${n.name} with its default flags`);
      }),
    );
    if (did.length > 0) known = undefined;
    return did;
  }

  const lab: ExerciseLab = {
    name: v.name,
    addresses: v.topology,
    dir: join(VMS_DIR, 'exercise'),
    rebuiltBy: 'a new provisioning (vagrant provision or reload)',
    env: { [VMS_ENV]: config },
    route: v.route,
    repo: v.side.repo,
    lacks: VM_LACKS,
    modeCommand: () => 'kubetun lab exercise reset',
    open: () => v.machines.open(v.hosts),
    close: () => v.machines.close(),
    now,
    ensure: async (mode, say) => {
      if (mode !== 'kubetun') lacking(lab, VM_LACKS['kernel-modes']);
      for (const d of await normalise(say)) say(d);
      return now();
    },
    normalise,
    switchMode: async (mode, say) => {
      if (mode !== 'kubetun') lacking(lab, VM_LACKS['kernel-modes']);
      await normalise(say);
    },
    // the nodes read a static view: nothing to take in
    syncDataplanes: async () => {},
    objects: async () => {
      if (views.size === 0) await reports();
      return Promise.all(v.topology.nodes.map((n) => nodeObjects(v, n, views.get(n.name)!)));
    },
    crashAgent: async (name) => {
      known = undefined;
      await vmAgent(v, node(name), 'crash');
    },
    restartAgent: async (name, flags, say) => {
      known = undefined;
      return (await vmAgent(v, node(name), 'restart', { flags, say })).flags;
    },
    agentCtl: () => lacking(lab, VM_LACKS['agent-socket']),
    objectsDir: () => lacking(lab, VM_LACKS['control-plane']),
    writeObject: () => lacking(lab, VM_LACKS['control-plane']),
    startWorkload: () => lacking(lab, VM_LACKS.workloads),
    workload: () => lacking(lab, VM_LACKS.workloads),
  };
  return lab;
}

/** The Services and EndpointSlices of a node's view; the Pods the view was rendered from. */
async function nodeObjects(v: VmNodes, n: LabNode, view: string): Promise<LabObjects> {
  const r = await shAsync(v.machines.run(n.name, ['cat', view]), 120_000);
  if (!r.ok) throw new LabError(`${n.name}: cat ${view}: ${r.err.trim() || `exit ${r.status}`}`);
  const items = (JSON.parse(r.out) as { items?: { kind?: string }[] }).items ?? [];
  const pods = allPods(v.topology).map(
    (p) => ({ metadata: { name: p.name, namespace: 'default' }, status: { podIP: p.ip } }) as Pod,
  );
  return {
    where: n.name,
    services: items.filter((i) => i.kind === 'Service') as Service[],
    slices: items.filter((i) => i.kind === 'EndpointSlice') as EndpointSlice[],
    pods,
  };
}

// One provisioning path (offline): what `lab up` runs for a node namespace and what
// `provision-node` runs in a VM are the same commands, only addressed differently — `ip -n <node>`
// / `ip netns exec <node>` in the namespace lab, the process's own namespace on a VM.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { labTarget, planLab, planNode, planUp } from '../../src/lab/plan.ts';
import { loadTopology } from '../../src/lab/topology.ts';

const ROOT = join(import.meta.dirname, '../..');
const lab = loadTopology(join(ROOT, 'lab/topology.yaml'));
const vagrant = loadTopology(join(ROOT, 'lab/vagrant-topology.yaml'));

/** A namespace-lab command as it would run inside the node itself. */
function unaddressed(ns: string, argv: string[]): string[] {
  if (argv[0] === 'ip' && argv[1] === '-n' && argv[2] === ns) return ['ip', ...argv.slice(3)];
  if (argv.slice(0, 4).join(' ') === `ip netns exec ${ns}`) return argv.slice(4);
  return argv;
}

describe('the VM topology', () => {
  it("gives the named pods the labels of the namespace lab's, which the Services select", () => {
    const labels = (t: typeof lab) =>
      Object.fromEntries(t.nodes.flatMap((n) => n.pods.map((p) => [p.name, p.labels ?? {}])));
    const vm = labels(vagrant);
    for (const [name, l] of Object.entries(labels(lab))) expect(vm[name], name).toEqual(l);
  });
});

describe('the node-local plan', () => {
  it('is what lab up runs for each node namespace, after the lab-only part', () => {
    expect(planUp(lab)).toEqual([
      ...planLab(lab),
      ...lab.nodes.flatMap((n) => planNode(lab, n, labTarget(n))),
    ]);
  });

  it('is the same commands for a node namespace and for a VM, only addressed differently', () => {
    for (const n of lab.nodes) {
      const inNs = planNode(lab, n, labTarget(n)).flatMap((p) => p.cmds);
      const onVm = planNode(lab, n, { uplink: n.uplink }).flatMap((p) => p.cmds);
      expect(inNs.map((c) => unaddressed(n.ns, c))).toEqual(onVm);
      // ...and the lab did address them to the node (the comparison above is not vacuous).
      expect(inNs.filter((c) => c.includes(n.ns)).length).toBeGreaterThan(0);
    }
  });

  it('routes a VM node to the others over its uplink (eth1), and touches no lab namespace', () => {
    const cmds = planNode(vagrant, vagrant.nodes[0]!, { uplink: 'eth1' })
      .flatMap((p) => p.cmds)
      .map((c) => c.join(' '));
    expect(cmds).toContain('ip route add 10.244.2.0/24 via 192.168.56.12 dev eth1');
    expect(cmds).toContain(
      'ip link add veth-pod-a type veth peer name eth0 netns ' + vagrant.nodes[0]!.pods[0]!.ns,
    );
    expect(cmds.filter((c) => c.includes(vagrant.nodes[0]!.ns))).toEqual([]);
  });
});

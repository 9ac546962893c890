// `kubetun lab provision-node`: make this machine (its network namespace) one node of a lab
// topology — the provisioning the Vagrantfile runs in each node VM (lab/provision/node.sh), and
// the same code `lab up` runs for each node namespace (src/lab/provision.ts).
import { requireRoot, UsageError } from '../errors.ts';
import type { Command } from 'commander';
import { AGENT_ACTIONS, type AgentAction, nodeAgent } from '../lab/node-agent.ts';
import {
  findNode,
  findUplink,
  firstNodes,
  installSystemd,
  provisionNode,
  systemdUnits,
  unprovisionNode,
} from '../lab/provision.ts';
import { LabError } from '../lab/error.ts';
import { loadTopology } from '../lab/topology.ts';

interface Flags {
  topology: string;
  node: string;
  nodes?: string;
  uplink?: string;
  systemd?: boolean;
  networkOnly?: boolean;
  down?: boolean;
  agent?: string;
  clear?: boolean;
  json?: boolean;
  dataPlane: 'kubetun' | 'none';
}

const say = (msg: string) => process.stderr.write(`provision-node: ${msg}\n`);

export function register(program: Command): void {
  const lab = program.commands.find((c) => c.name() === 'lab');
  if (!lab) throw new Error('src/cli/provision.ts: register it after the lab command');
  lab
    .command('provision-node')
    .description('make this machine one node of a lab topology (a VM; root)')
    .requiredOption('--topology <file>', 'lab topology YAML (e.g. lab/vagrant-topology.yaml)')
    .requiredOption('--node <name>', 'which node of the topology this machine is')
    .option('--nodes <n>', "use only the topology's first n nodes (default: all)")
    .option(
      '--uplink <iface>',
      'interface towards the other nodes (default: the one with the node IP)',
    )
    .option('--systemd', 'run pod servers and kubetun as systemd units (else in the background)')
    .option('--network-only', 'pods, routes and sysctls only: no pod servers, no kubetun')
    .option('--data-plane <kind>', 'kubetun or none', 'kubetun')
    .option('--down', 'remove what an earlier provision-node made here')
    .option(
      '--agent <action>',
      "only this node's kubetun, however it runs here (systemd or not): start, stop, status, crash (SIGKILL; it stays down) or restart [-- FLAGS] (extra kubetun run flags, kept; none: keep); prints running or stopped",
    )
    .option('--clear', '--agent restart: with no extra flags')
    .option('--json', '--agent: print its flags, provisioning time and view too, as JSON')
    .argument('[flags...]', '--agent restart: kubetun run flags (after --)')
    .action((flags: string[], f: Flags) => provision(f, flags));
}

async function provision(f: Flags, flags: string[] = []): Promise<void> {
  if (f.dataPlane !== 'kubetun' && f.dataPlane !== 'none')
    throw new UsageError(`--data-plane: "${f.dataPlane}" is not kubetun or none`);
  if (f.agent !== undefined && !(AGENT_ACTIONS as readonly string[]).includes(f.agent))
    throw new UsageError(`--agent: "${f.agent}" is not one of ${AGENT_ACTIONS.join(', ')}`);
  if ((flags.length > 0 || f.clear) && f.agent !== 'restart')
    throw new UsageError('kubetun run flags (and --clear) go with --agent restart only', {
      hint: 'kubetun lab provision-node … --agent restart -- --vip-echo',
    });
  requireRoot('lab provision-node');
  const all = loadTopology(f.topology);
  const t = f.nodes === undefined ? all : firstNodes(all, Number(f.nodes));
  const n = findNode(t, f.node);
  const uplink = f.uplink ?? findUplink(n.ip);
  if (f.down) {
    // Routes are deleted by destination and gateway: no uplink needed (it may be gone).
    await unprovisionNode(t, n, { uplink: uplink ?? '' }, say);
    return;
  }
  if (!uplink)
    throw new LabError(
      `${t.file}: node ${n.name}: ip: ${n.ip} is on no interface of this machine ` +
        '(Vagrant puts it on the private network, eth1; the wrong VM, or --node?)',
    );
  if (f.agent) {
    const keep = f.clear ? [] : flags.length > 0 ? flags : undefined;
    const r = await nodeAgent(t, n, uplink, f.agent as AgentAction, say, keep);
    process.stdout.write(f.json ? `${JSON.stringify(r)}\n` : `${r.agent}\n`);
    return;
  }
  const at = { uplink };
  if (f.systemd) {
    const units = systemdUnits(t, n, uplink, {
      topologyFile: t.file,
      nodes: t.nodes.length,
    });
    await installSystemd(units, n, say);
    return;
  }
  const rec = await provisionNode(t, n, {
    at,
    dataPlane: f.dataPlane,
    networkOnly: f.networkOnly,
    say,
  });
  say(
    `${n.name} is provisioned: ${n.pods.length} pods, uplink ${uplink}` +
      (rec.processes.length > 0 ? `, ${rec.processes.length} processes` : ''),
  );
}

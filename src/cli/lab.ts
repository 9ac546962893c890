// `kubetun lab ...`: build, inspect and tear down the namespace lab, and run its demos.
import { spawnSync } from 'node:child_process';
import { type Command, Option } from 'commander';
import { DEFAULT_TOPOLOGY, execArgv, labDown, labUp } from '../lab/lab.ts';
import { listNetns } from '../lab/sh.ts';
import { LAB_MODES, type LabMode, readState } from '../lab/state.ts';
import { formatStatus, labStatus } from '../lab/status.ts';
import { loadTopology, targetNamespace } from '../lab/topology.ts';

const progress = (msg: string) => process.stderr.write(`lab: ${msg}\n`);

/** Known failures print one message and exit 1; anything else is a bug and keeps its stack. */
async function guarded(fn: () => Promise<void> | void): Promise<void> {
  try {
    await fn();
  } catch (err) {
    const e = err as Error;
    if (e.name === 'LabError' || e.name === 'TopologyError') {
      process.stderr.write(`kubetun lab: ${e.message}\n`);
      process.exitCode = 1;
      return;
    }
    throw err;
  }
}

export function register(program: Command): void {
  const lab = program
    .command('lab')
    .description('a multi-node pod network in network namespaces on this machine (root)');
  const topo = () =>
    new Option('--topology <file>', 'lab topology YAML').default(
      DEFAULT_TOPOLOGY,
      'lab/topology.yaml',
    );

  lab
    .command('up')
    .description('create namespaces, links, routes, pod servers and a data plane on every node')
    .addOption(topo())
    .addOption(
      new Option('--mode <mode>', 'data plane on the nodes')
        .choices(LAB_MODES as LabMode[])
        .default('kubetun'),
    )
    .action((o: { topology: string; mode: LabMode }) =>
      guarded(async () => void (await labUp({ topology: o.topology, mode: o.mode, progress }))),
    );

  lab
    .command('down')
    .description('remove everything lab up created (also after a crash)')
    .addOption(topo())
    .action((o: { topology: string }) =>
      guarded(async () => void (await labDown({ topology: o.topology, progress }))),
    );

  lab
    .command('status')
    .description('nodes, pods, services and the processes behind them')
    .addOption(topo())
    .option('--json', 'print JSON')
    .action((o: { topology: string; json?: boolean }) =>
      guarded(async () => {
        const s = await labStatus(o.topology);
        process.stdout.write(o.json ? `${JSON.stringify(s, null, 2)}\n` : `${formatStatus(s)}\n`);
      }),
    );

  lab
    .command('exec <target> <cmd...>')
    .description(
      'run a command in a pod, node or client namespace (or "underlay"): lab exec pod-a -- curl ...',
    )
    .addOption(topo())
    .action((target: string, cmd: string[], o: { topology: string }) =>
      guarded(() => {
        const t = loadTopology(readState()?.topologyFile ?? o.topology);
        const ns = targetNamespace(t, target);
        if (!ns) {
          const names = [
            ...t.nodes.map((n) => n.name),
            ...t.nodes.flatMap((n) => n.pods.map((p) => p.name)),
            ...t.clients.map((c) => c.name),
            'underlay',
          ];
          throw Object.assign(
            new Error(`no pod, node or client named "${target}" (known: ${names.join(', ')})`),
            { name: 'LabError' },
          );
        }
        if (!listNetns().includes(ns)) {
          throw Object.assign(
            new Error(`${target} does not exist: the lab is not up (run: kubetun lab up)`),
            {
              name: 'LabError',
            },
          );
        }
        const argv = execArgv(ns, cmd);
        const r = spawnSync(argv[0]!, argv.slice(1), { stdio: 'inherit' });
        process.exitCode = r.status ?? 1;
      }),
    );

  lab
    .command('demo <name>')
    .description('run a lab demo: curl-vs-ping')
    .addOption(topo())
    .addOption(
      new Option(
        '--mode <mode>',
        "whose data plane to show: kubetun's or the kernel's with kube-proxy's rules",
      )
        .choices(['kubetun', 'iptables'])
        .default('kubetun'),
    )
    .action((name: string, o: { topology: string; mode: 'kubetun' | 'iptables' }) =>
      guarded(async () => {
        if (name !== 'curl-vs-ping')
          throw Object.assign(new Error(`unknown demo "${name}" (known: curl-vs-ping)`), {
            name: 'LabError',
          });
        const { curlVsPing } = await import('../lab/demo/curl-vs-ping.ts');
        await curlVsPing({ topology: o.topology, mode: o.mode, progress });
      }),
    );
}

// `kubetun lab ...`: build, inspect and tear down the namespace lab, and run its demos.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { type Command, Option } from 'commander';
import { registerClusterCommands } from './lab-cluster.ts';
import { DEFAULT_TOPOLOGY, execArgv, execNamespace, labDown, labUp } from '../lab/lab.ts';
import { NoLabError, requireRoot, UsageError } from '../errors.ts';
import { VMS_ENV } from '../lab/prefix.ts';
import { LAB_MODES, type LabMode, readState } from '../lab/state.ts';
import { formatStatus, labStatus } from '../lab/status.ts';
import { loadTopology } from '../lab/topology.ts';
import { registerExercise, vmsOption } from './exercise.ts';
import { registerCompare } from './lab-compare.ts';

const progress = (msg: string) => process.stderr.write(`lab: ${msg}\n`);

/**
 * Every lab command but `lab compare --list` builds or reads namespaces and /run: it needs root.
 * Errors are reported by src/cli/main.ts (src/errors.ts says how).
 */
async function guarded(what: string, fn: () => Promise<void> | void): Promise<void> {
  if (what !== 'status' && what !== 'compare' && what !== 'show') requireRoot(`lab ${what}`);
  await fn();
}

/** The lab commands that work on the Vagrant VMs from here (KUBETUN_LAB_VMS). */
const ON_VMS = ['exercise', 'agent', 'exec', 'compare'];

/**
 * Before every lab command: `--vms FILE` becomes KUBETUN_LAB_VMS (so the fix commands a solution
 * runs inherit it), and with it set, a command that works only on the namespace lab refuses
 * instead of acting on a namespace lab the learner did not mean.
 */
function selectLab(action: Command): void {
  const flag = (action.opts() as { vms?: string }).vms;
  if (flag) process.env[VMS_ENV] = resolve(flag);
  const vms = process.env[VMS_ENV];
  let top: Command = action;
  while (top.parent && top.parent.name() !== 'lab') top = top.parent;
  if (!vms || ON_VMS.includes(top.name()) || top.name() === 'provision-node') return;
  throw new UsageError(
    `lab ${top.name()}: ${VMS_ENV}=${vms} selects the VM lab, where only lab ${ON_VMS.join(', ')} work`,
    { hint: `unset ${VMS_ENV} to work on the namespace lab` },
  );
}

export function register(program: Command): void {
  const lab = program
    .command('lab')
    .description('a multi-node pod network in network namespaces on this machine (root)');
  lab.hook('preAction', (_lab, action) => selectLab(action));
  const topo = () =>
    new Option('--topology <file>', 'lab topology YAML').default(
      DEFAULT_TOPOLOGY,
      'lab/topology.yaml',
    );

  registerClusterCommands(lab);

  lab
    .command('up')
    .description('create namespaces, links, routes, pod servers and a data plane on every node')
    .addOption(topo())
    .addOption(
      new Option('--mode <mode>', 'data plane on the nodes')
        .choices(LAB_MODES as LabMode[])
        .default('kubetun'),
    )
    .option('--no-offload', 'kubetun mode: agents without TUN offloads (kubetun run --no-offload)')
    .addOption(
      new Option(
        '--source <source>',
        "what kubetun reads: the view directory, or the lab's API server (agents as the DaemonSet starts them); default dir, or $KUBETUN_LAB_SOURCE",
      ).choices(['dir', 'api']),
    )
    .action((o: { topology: string; mode: LabMode; offload: boolean; source?: 'dir' | 'api' }) =>
      guarded('up', async () => {
        await labUp({
          topology: o.topology,
          mode: o.mode,
          noOffload: !o.offload,
          source: o.source,
          progress,
        });
      }),
    );

  lab
    .command('down')
    .description('remove everything lab up created (also after a crash)')
    .addOption(topo())
    .option('--keep-logs', "keep the lab's logs (agents, pod servers, captures); says where")
    .option('--keep-store', "keep the lab's objects and allocations for the next lab up")
    .action((o: { topology: string; keepLogs?: boolean; keepStore?: boolean }) =>
      guarded(
        'down',
        async () =>
          void (await labDown({
            topology: o.topology,
            keepLogs: o.keepLogs,
            keepStore: o.keepStore,
            progress,
          })),
      ),
    );

  lab
    .command('status')
    .description('nodes, pods, services and the processes behind them')
    .addOption(topo())
    .option('--json', 'print JSON')
    .action((o: { topology: string; json?: boolean }) =>
      guarded('status', async () => {
        const s = await labStatus(o.topology);
        process.stdout.write(o.json ? `${JSON.stringify(s, null, 2)}\n` : `${formatStatus(s)}\n`);
        // Like kubectl's readiness checks: a script can ask `lab status` whether the lab works.
        if (!s.up) process.exitCode = 1;
      }),
    );

  lab
    .command('show')
    .description(
      'draw the lab (nodes, pods, client, underlay, Services and their endpoints, counters) as an SVG page; --flow draws one path',
    )
    .addOption(topo())
    .option('--html <file>', 'write the page here (default: show.html in the lab directory)')
    .option('--open', 'open the page in a browser (xdg-open)')
    .option('--flow <flow>', 'draw a path with its addresses at each hop: pod-a→web, client→web-np')
    .action((o: { topology: string; html?: string; open?: boolean; flow?: string }) =>
      guarded('show', async () => {
        const { labShow, renderShowPage, formatFlow } = await import('../lab/show/show.ts');
        const s = await labShow({ topology: o.topology, flow: o.flow });
        const { LAB_DIR } = await import('../lab/prefix.ts');
        const file = o.html ?? `${LAB_DIR}/show.html`;
        try {
          writeFileSync(file, renderShowPage(s));
        } catch (err) {
          throw new UsageError(
            `cannot write ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}): name another with --html FILE`,
          );
        }
        if (s.flow) process.stdout.write(`${formatFlow(s.flow)}\n`);
        progress(`wrote ${file}`);
        if (o.open) {
          const r = spawnSync('xdg-open', [file], { stdio: 'ignore' });
          if (r.status !== 0) progress(`could not open a browser; open ${file} yourself`);
        }
      }),
    );

  lab
    .command('exec <target> <cmd...>')
    .description(
      'run a command in a pod (any Pod of `lab get pods`), node or client namespace (or "underlay"): lab exec pod-a -- curl ...',
    )
    .addOption(topo())
    .addOption(new Option('-n, --namespace <ns>', "the Pod's namespace").default('default'))
    .addOption(vmsOption())
    .action((target: string, cmd: string[], o: { topology: string; namespace: string }) =>
      guarded('exec', async () => {
        if (process.env[VMS_ENV]) return execOnVms(target, cmd, o.namespace);
        const t = loadTopology(readState()?.topologyFile ?? o.topology);
        const ns = execNamespace(t, target, o.namespace);
        if (!ns) {
          if (!readState()) throw new NoLabError(`${target} does not exist: the lab is not up`);
          const names = [...t.nodes.map((n) => n.name), ...t.clients.map((c) => c.name)];
          throw new UsageError(
            `no Pod "${target}" in namespace ${o.namespace}, and no node or client of that name (nodes and clients: ${names.join(', ')}, underlay; Pods: kubetun lab get pods -A)`,
          );
        }
        const argv = execArgv(ns, cmd);
        const r = spawnSync(argv[0]!, argv.slice(1), { stdio: 'inherit' });
        process.exitCode = r.status ?? 1;
      }),
    );

  lab
    .command('mode <mode>')
    .description(
      'switch the running lab to another data plane (kubetun, iptables, nftables, none) without rebuilding it',
    )
    .action((mode: string) =>
      guarded('mode', async () => {
        if (!(LAB_MODES as readonly string[]).includes(mode))
          throw new UsageError(`unknown mode "${mode}" (known: ${LAB_MODES.join(', ')})`);
        const { labSwitchMode } = await import('../lab/compare/mode.ts');
        await labSwitchMode(mode as LabMode, progress);
      }),
    );

  registerCompare(lab, guarded, topo);

  registerExercise(lab, guarded);

  lab
    .command('demo <name>')
    .description('run a lab demo: curl-vs-ping, nodeport, long-connections')
    .addOption(topo())
    .addOption(
      new Option(
        '--mode <mode>',
        "whose data plane to show: kubetun's or the kernel's with kube-proxy's rules (a running lab is switched in place for the demo and back after it)",
      )
        .choices(['kubetun', 'iptables', 'nftables'])
        .default('kubetun'),
    )
    .option(
      '-6, --ipv6',
      'nodeport, long-connections: over IPv6, on a dual-stack lab (curl-vs-ping shows IPv6 there by itself)',
    )
    .action((name: string, o: DemoFlags) =>
      guarded('demo', async () => {
        if (name === 'nodeport') {
          const { nodePortDemo } = await import('../lab/demo/nodeport.ts');
          await nodePortDemo({ topology: o.topology, progress, ipv6: o.ipv6 });
          return;
        }
        if (name === 'long-connections') {
          const { longConnectionsDemo } = await import('../lab/demo/long-connections.ts');
          await longConnectionsDemo({ topology: o.topology, progress, ipv6: o.ipv6 });
          return;
        }
        if (name !== 'curl-vs-ping')
          throw new UsageError(
            `unknown demo "${name}" (known: curl-vs-ping, nodeport, long-connections)`,
          );
        if (o.ipv6)
          throw new UsageError('lab demo curl-vs-ping takes no --ipv6', {
            hint: 'on a dual-stack lab its step 4 does curl -6 and ping -6 by itself',
          });
        const { curlVsPing } = await import('../lab/demo/curl-vs-ping.ts');
        await curlVsPing({ topology: o.topology, mode: o.mode, progress });
      }),
    );
}

interface DemoFlags {
  topology: string;
  mode: 'kubetun' | 'iptables' | 'nftables';
  ipv6?: boolean;
}

/** `lab exec` on the VM lab: a pod, node or client of its topology, through its route (ssh). */
async function execOnVms(target: string, cmd: string[], namespace: string): Promise<void> {
  const { vmsFromEnv } = await import('../lab/vms.ts');
  const { targetNamespace } = await import('../lab/topology.ts');
  const v = vmsFromEnv()!;
  // no underlay namespace there: the VMs' wire is Vagrant's private network
  const named = namespace === 'default' && target !== 'underlay';
  const ns = named ? targetNamespace(v.topology, target) : undefined;
  if (!ns) {
    const t = v.topology;
    const names = [...t.nodes, ...t.clients, ...t.nodes.flatMap((n) => n.pods)].map((x) => x.name);
    throw new UsageError(`no pod, node or client "${target}" in ${v.name} (${names.join(', ')})`);
  }
  const argv = v.route.argv(ns, cmd);
  const r = spawnSync(argv[0]!, argv.slice(1), { stdio: 'inherit' });
  process.exitCode = r.status ?? 1;
}

// `kubetun run`: the per-node data plane (src/node/agent.ts), in the node's network namespace
// (the caller wraps it in `ip netns exec <node>`, or runs it on a real node). Runs until SIGTERM
// or SIGINT, then removes exactly what it installed. JSON logs (pino) on stdout.
import { availableParallelism } from 'node:os';
import { type Command, Option } from 'commander';
import pino from 'pino';
import type { NodeAgent } from '../node/agent.ts';
import { UserError } from '../errors.ts';
import { requireAgentCapabilities } from '../node/capabilities.ts';
import { ClusterConfigError, inCluster } from '../node/in-cluster.ts';
import { mergeUnderFlags, readKubeProxyConfig } from '../node/kube-proxy-config.ts';
import {
  type AgentConfig,
  commanderFlags,
  entryOf,
  RUN_OPTION_KEYS,
  RUN_OPTIONS,
  type RunFlags,
  resolveRunConfig,
} from '../node/options.ts';

export function register(program: Command): void {
  const cmd = program
    .command('run')
    .description("run the node data plane: TUN + steering + datapath, in this node's netns");
  addRunOptions(cmd);
  cmd.action(async (flags: RunFlags, c: Command) => {
    // a bad --config file is a UserError: main.ts prints its one line, exit 2
    const f = withConfigFile({ ...flags, nodeName: flags.nodeName ?? flags.hostnameOverride }, c);
    f.nodeName ??= process.env.NODE_NAME; // the DaemonSet's downward API
    const log = pino({ level: logLevel(f), base: { node: f.nodeName } });
    await runAgent(async () => {
      requireAgentCapabilities(); // before the API is asked anything
      return configOf(await withNodeFacts(f, log));
    }, log);
  });
}

/** commander's options, one per schema entry (src/node/options.ts RUN_OPTIONS). */
export function addRunOptions(cmd: Command): Command {
  for (const k of RUN_OPTION_KEYS) {
    const o = entryOf(k);
    const opt = new Option(commanderFlags(k), o.help);
    if (o.default !== undefined) opt.default(o.default);
    cmd.addOption(opt);
  }
  return cmd;
}

/** The validated agent config of these flags (OptionError naming the flag). */
export function configOf(f: RunFlags): AgentConfig {
  const inPod = !f.manifests && !f.kubeconfig && inCluster();
  return resolveRunConfig(f, { cores: availableParallelism(), inCluster: inPod });
}

/** The log level before validation: a bad one logs at info until the error is reported. */
function logLevel(f: RunFlags): string {
  try {
    return RUN_OPTIONS.logLevel.parse(f.logLevel ?? 'info', { cores: 1 });
  } catch {
    return 'info';
  }
}

/** --config FILE fills the flags the command line left at their defaults (kube-proxy-config.ts). */
function withConfigFile(flags: RunFlags, cmd: Command): RunFlags {
  if (typeof flags.config !== 'string') return flags;
  const read = readKubeProxyConfig(flags.config, availableParallelism());
  for (const note of read.notes) console.error(`kubetun run: ${note}`);
  const cli = (k: string) => cmd.getOptionValueSource(k) === 'cli';
  return mergeUnderFlags(flags, read.flags, (k) =>
    k === 'nodeName' ? cli('nodeName') || cli('hostnameOverride') : cli(k),
  );
}

async function runAgent(config: () => Promise<AgentConfig>, log: pino.Logger): Promise<void> {
  // Loaded here so that `kubetun --help` works without the native addon built.
  const { NodeAgent } = await import('../node/agent.ts');
  let agent: NodeAgent;
  try {
    agent = await NodeAgent.start(await config(), log);
  } catch (err) {
    if (err instanceof UserError) {
      log.fatal({ err: err.message }, 'kubetun run failed to start');
      throw err; // a mistake to fix: main.ts prints its one line (and hint), exit 2
    }
    log.fatal({ err: (err as Error).message }, 'kubetun run failed to start');
    process.exitCode = 1;
    return;
  }
  const stop = (reason: string, code: number) => {
    agent.stop(reason).finally(() => process.exit(code));
  };
  process.on('SIGTERM', () => stop('SIGTERM', 0));
  process.on('SIGINT', () => stop('SIGINT', 0));
  // a stop for a restart (an upgrade, systemd's restart): the next agent takes over (failure.ts)
  process.on('SIGUSR2', () => {
    agent.stop('SIGUSR2', true).finally(() => process.exit(0));
  });
  process.on('SIGHUP', () => {
    agent.reload().then(
      (r) =>
        r.error
          ? log.error(r, 'reload failed; the previous services stay')
          : log.info(r, 'reloaded'),
      (err: Error) => log.error({ err: err.message }, 'reload failed; the previous services stay'),
    );
  });
  process.on('uncaughtException', (err) => {
    log.fatal({ err: err.message, stack: err.stack }, 'uncaught exception; stopping');
    stop('uncaughtException', 1);
  });
}

/**
 * With the Kubernetes API as the source, what the command line left out comes from this node's
 * Node object (cluster-config.ts): --node-ip, --pod-cidr, --node-zone, and with
 * --service-cidr-v6 the IPv6 pod CIDR and IPv6 InternalIP of a dual-stack node (--pod-cidr-v6,
 * --node-ip-v6). Flags win.
 */
async function withNodeFacts(f: RunFlags, log: pino.Logger): Promise<RunFlags> {
  const api = typeof f.kubeconfig === 'string' ? f.kubeconfig : undefined;
  if (!api && (f.manifests || !inCluster())) return f;
  const want6 = !!f.serviceCidrV6 && !f.podCidrV6;
  const wantIp6 = !!f.serviceCidrV6 && !f.nodeIpV6;
  if (f.nodeIp && f.podCidr && f.nodeZone && !want6 && !wantIp6) return f;
  const nodeName = typeof f.nodeName === 'string' ? f.nodeName : '';
  if (!nodeName) throw new ClusterConfigError('no node name: give --node-name, or set NODE_NAME');
  const { loadKubeConfig, readNodeFacts } = await import('../node/cluster-config.ts');
  const facts = await readNodeFacts(loadKubeConfig(api), nodeName);
  const out = {
    ...f,
    nodeIp: f.nodeIp || facts.ip || '',
    podCidr: f.podCidr || facts.podCidr || '',
    nodeZone: f.nodeZone ?? facts.zone,
    ...(want6 && facts.podCidr6 ? { podCidrV6: facts.podCidr6 } : {}),
    ...(wantIp6 && facts.ip6 ? { nodeIpV6: facts.ip6 } : {}),
  };
  if (!out.nodeIp)
    throw new ClusterConfigError(`Node ${nodeName} has no IPv4 InternalIP: give --node-ip`);
  if (!out.podCidr)
    throw new ClusterConfigError(`Node ${nodeName} has no IPv4 spec.podCIDR: give --pod-cidr`);
  log.info(
    {
      nodeIp: out.nodeIp,
      podCidr: out.podCidr,
      nodeIpV6: out.nodeIpV6,
      podCidrV6: out.podCidrV6,
      zone: out.nodeZone,
    },
    'node facts from the Node object',
  );
  return out;
}

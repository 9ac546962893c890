// `kubetun run`: the per-node data plane (src/node/agent.ts), in the node's network namespace
// (the caller wraps it in `ip netns exec <node>`, or runs it on a real node). Runs until SIGTERM
// or SIGINT, then removes exactly what it installed. JSON logs (pino) on stdout.
import type { Command } from 'commander';
import pino from 'pino';
import type { NodeAgent } from '../node/agent.ts';
import type { AgentOptions } from '../node/options.ts';

interface RunFlags {
  manifests: string;
  nodeName: string;
  nodeIp: string;
  podCidr: string;
  clusterCidr: string;
  serviceCidr: string;
  uplink: string;
  tun: string;
  ctlSocket?: string;
  podIfaces?: string;
  podRescanMs: string;
  batch: string;
  watchdog: boolean;
  logLevel: string;
}

export function register(program: Command): void {
  program
    .command('run')
    .description("run the node data plane: TUN + steering + datapath, in this node's netns")
    .requiredOption('--manifests <dir>', 'Service/EndpointSlice YAML (file or directory)')
    .requiredOption('--node-name <name>', 'this node (endpoints topology, socket name)')
    .requiredOption('--node-ip <ip>', 'source address for node-originated traffic to VIPs')
    .requiredOption('--pod-cidr <cidr>', "this node's pod CIDR")
    .option('--cluster-cidr <cidr>', 'all pods', '10.244.0.0/16')
    .option('--service-cidr <cidr>', 'ClusterIP range, routed into the TUN', '10.96.0.0/16')
    .option('--uplink <iface>', 'interface towards the other nodes', 'eth0')
    .option('--tun <name>', 'TUN device name', 'kt0')
    .option('--ctl-socket <path>', 'control socket (default /run/kubetun/<node-name>.sock)')
    .option('--pod-ifaces <list>', 'comma-separated pod interfaces (default: found by route)')
    .option('--pod-rescan-ms <ms>', 'look for new pod interfaces this often (0: never)', '2000')
    .option('--batch <n>', 'packets per TUN read batch', '64')
    .option('--no-watchdog', 'no fail-open watchdog: if the agent dies, pod traffic is dropped')
    .option('--log-level <level>', 'fatal|error|warn|info|debug|trace|silent', 'info')
    .action(async (flags: RunFlags) => {
      await runAgent(toOptions(flags));
    });
}

export function toOptions(f: RunFlags): AgentOptions {
  return {
    manifests: f.manifests,
    nodeName: f.nodeName,
    nodeIp: f.nodeIp,
    podCidr: f.podCidr,
    clusterCidr: f.clusterCidr,
    serviceCidr: f.serviceCidr,
    uplink: f.uplink,
    tun: f.tun,
    ctlSocket: f.ctlSocket ?? `/run/kubetun/${f.nodeName}.sock`,
    podIfaces: f.podIfaces
      ?.split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    rescanMs: Number(f.podRescanMs),
    batch: Number(f.batch),
    watchdog: f.watchdog,
    logLevel: f.logLevel,
  };
}

async function runAgent(opts: AgentOptions): Promise<void> {
  const log = pino({ level: opts.logLevel, base: { node: opts.nodeName } });
  // Loaded here so that `kubetun --help` works without the native addon built.
  const { NodeAgent } = await import('../node/agent.ts');
  let agent: NodeAgent;
  try {
    agent = await NodeAgent.start(opts, log);
  } catch (err) {
    log.fatal({ err: (err as Error).message }, 'kubetun run failed to start');
    process.exitCode = 1;
    return;
  }
  const stop = (reason: string, code: number) => {
    agent.stop(reason).finally(() => process.exit(code));
  };
  process.on('SIGTERM', () => stop('SIGTERM', 0));
  process.on('SIGINT', () => stop('SIGINT', 0));
  process.on('SIGHUP', () => {
    try {
      log.info(agent.reload(), 'manifests reloaded');
    } catch (err) {
      log.error({ err: (err as Error).message }, 'reload failed; the previous services stay');
    }
  });
  process.on('uncaughtException', (err) => {
    log.fatal({ err: err.message, stack: err.stack }, 'uncaught exception; stopping');
    stop('uncaughtException', 1);
  });
}

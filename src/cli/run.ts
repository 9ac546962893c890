// `kubetun run`: the per-node data plane (src/node/agent.ts), in the node's network namespace
// (the caller wraps it in `ip netns exec <node>`, or runs it on a real node). Runs until SIGTERM
// or SIGINT, then removes exactly what it installed. JSON logs (pino) on stdout.
import { availableParallelism } from 'node:os';
import type { Command } from 'commander';
import pino from 'pino';
import type { NodeAgent } from '../node/agent.ts';
import { UserError } from '../errors.ts';
import { ClusterConfigError, inCluster } from '../node/cluster-config.ts';
import { mergeUnderFlags, readKubeProxyConfig } from '../node/kube-proxy-config.ts';
import type { AgentOptions } from '../node/options.ts';

interface RunFlags {
  manifests: string;
  kubeconfig?: string;
  config?: string;
  nodeZone?: string;
  scheduler?: string;
  metricsBindAddress?: string;
  healthzBindAddress?: string;
  syncPeriod?: string;
  minSyncPeriod?: string;
  nodeName?: string;
  nodeIp?: string;
  podCidr?: string;
  clusterCidr: string;
  detectLocalMode?: string;
  podBridgeInterface?: string;
  podInterfaceNamePrefix?: string;
  serviceCidr: string;
  uplink: string;
  tun: string;
  ctlSocket?: string;
  podIfaces?: string;
  podRescanMs: string;
  batch: string;
  watchdog: boolean;
  cleanupKubeProxy?: boolean;
  offload: boolean;
  vipEcho?: boolean;
  restartGrace?: string;
  logLevel: string;
  ctMax?: string;
  ctDropInvalid?: boolean;
  ctTimeout?: string;
  ctGcInterval?: string;
  ctGcMinInterval?: string;
  ctGcMaxInterval?: string;
}

export function register(program: Command): void {
  program
    .command('run')
    .description("run the node data plane: TUN + steering + datapath, in this node's netns")
    .option('--manifests <dir>', 'Service/EndpointSlice YAML (file or directory), hot-reloaded')
    .option('--kubeconfig <file>', 'watch Services/EndpointSlices on the Kubernetes API instead')
    .option('--node-zone <zone>', "this node's zone (topology hints, PreferClose)")
    .option(
      '--scheduler <name>',
      'default scheduler: random|rr|wrr|lc|wlc|sed|nq|sh|dh|maglev (kubetun.io/scheduler overrides)',
      'random',
    )
    .option('--metrics-bind-address <ip:port>', "metrics server ('' or 0: off)", '127.0.0.1:10249')
    .option('--healthz-bind-address <ip:port>', "health server ('' or 0: off)", '0.0.0.0:10256')
    .option('--sync-period <ms>', 'full resync at least this often', '30000')
    .option('--min-sync-period <ms>', 'at most one sync per this many ms', '1000')
    .option(
      '--config <file>',
      'KubeProxyConfiguration file (kube-proxy --config); flags given here override it',
    )
    .option('--node-name <name>', 'this node (default $NODE_NAME; endpoints topology, socket)')
    .option('--hostname-override <name>', 'kube-proxy spelling of --node-name')
    .option('--node-ip <ip>', "node-originated traffic's source (default: the Node's InternalIP)")
    .option('--pod-cidr <cidr>', "this node's pod CIDR (default: the Node's spec.podCIDR)")
    .option('--cluster-cidr <cidr>', 'all pods', '10.244.0.0/16')
    .option(
      '--detect-local-mode <mode>',
      'what counts as pod traffic: ClusterCIDR (default) | NodeCIDR | BridgeInterface | InterfaceNamePrefix',
    )
    .option('--pod-bridge-interface <iface>', "BridgeInterface mode: the pods' bridge (cni0)")
    .option('--pod-interface-name-prefix <p>', "InterfaceNamePrefix mode: pod links' prefix (cali)")
    .option('--service-cidr <cidr>', 'ClusterIP range, routed into the TUN', '10.96.0.0/16')
    .option('--uplink <iface>', 'interface towards the other nodes', 'eth0')
    .option('--tun <name>', 'TUN device name', 'kt0')
    .option('--ctl-socket <path>', 'control socket (default /run/kubetun/<node-name>.sock)')
    .option('--pod-ifaces <list>', 'comma-separated pod interfaces (default: found by route)')
    .option('--pod-rescan-ms <ms>', 'look for new pod interfaces this often (0: never)', '2000')
    .option('--batch <n>', 'packets per TUN read batch', '64')
    .option(
      '--no-offload',
      'no TUN offloads: every packet read and written at MTU size, checksums complete',
    )
    .option(
      '--vip-echo',
      'answer ping to a ClusterIP, as IPVS mode does (kube-ipvs0); default: no answer, as iptables',
    )
    .option('--no-watchdog', 'no fail-open watchdog: if the agent dies, pod traffic is dropped')
    .option(
      '--restart-grace <ms>',
      'after a crash (or SIGUSR2) steering, pinned maps and the TUN wait this long for a restarted agent; 0: fail open at once',
      '5000',
    )
    .option(
      '--cleanup-kube-proxy',
      "remove kube-proxy's rules found at start (default: refuse to start beside them)",
    )
    .option('--log-level <level>', 'fatal|error|warn|info|debug|trace|silent', 'info')
    .option('--ct-max <n>', 'conntrack entries (default max(32768 x cores, 131072), as kube-proxy)')
    .option(
      '--ct-drop-invalid',
      'drop packets conntrack calls INVALID (kube-proxy ctstate INVALID DROP)',
    )
    .option(
      '--ct-timeout <list>',
      'conntrack lifetimes, e.g. tcp-established=86400,tcp-close-wait=3600,udp=30 (s)',
    )
    .option('--ct-gc-interval <s>', 'first interval between conntrack GC passes (adapts)', '300')
    .option('--ct-gc-min-interval <s>', 'shortest GC interval', '10')
    .option('--ct-gc-max-interval <s>', 'longest GC interval', '43200')
    .action(async (flags: RunFlags & { hostnameOverride?: string }, cmd: Command) => {
      // a bad --config file is a UserError: main.ts prints its one line, exit 2
      const f = withConfigFile(
        { ...flags, nodeName: flags.nodeName ?? flags.hostnameOverride },
        cmd,
      );
      f.nodeName ??= process.env.NODE_NAME; // the DaemonSet's downward API
      await runAgent(toOptions(f));
    });
}

/** --config FILE fills the flags the command line left at their defaults (kube-proxy-config.ts). */
function withConfigFile(flags: RunFlags, cmd: Command): RunFlags {
  if (!flags.config) return flags;
  const read = readKubeProxyConfig(flags.config, availableParallelism());
  for (const note of read.notes) console.error(`kubetun run: ${note}`);
  const cli = (k: string) => cmd.getOptionValueSource(k) === 'cli';
  return mergeUnderFlags(flags, read.flags, (k) =>
    k === 'nodeName' ? cli('nodeName') || cli('hostnameOverride') : cli(k),
  );
}

export function toOptions(f: RunFlags): AgentOptions {
  return {
    manifests: f.manifests ?? '',
    kubeconfig: f.kubeconfig,
    nodeZone: f.nodeZone,
    scheduler: f.scheduler,
    metricsBindAddress: f.metricsBindAddress,
    healthzBindAddress: f.healthzBindAddress,
    syncPeriodMs: f.syncPeriod === undefined ? undefined : Number(f.syncPeriod),
    minSyncPeriodMs: f.minSyncPeriod === undefined ? undefined : Number(f.minSyncPeriod),
    nodeName: f.nodeName ?? '',
    nodeIp: f.nodeIp ?? '',
    podCidr: f.podCidr ?? '',
    clusterCidr: f.clusterCidr,
    detectLocalMode: f.detectLocalMode,
    bridgeInterface: f.podBridgeInterface,
    interfaceNamePrefix: f.podInterfaceNamePrefix,
    serviceCidr: f.serviceCidr,
    uplink: f.uplink,
    tun: f.tun,
    inCluster: !f.manifests && !f.kubeconfig && inCluster(),
    ctlSocket: f.ctlSocket ?? `/run/kubetun/${f.nodeName}.sock`,
    podIfaces: f.podIfaces
      ?.split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    rescanMs: Number(f.podRescanMs),
    batch: Number(f.batch),
    watchdog: f.watchdog,
    cleanupKubeProxy: f.cleanupKubeProxy === true,
    offload: f.offload,
    logLevel: f.logLevel,
    vipEcho: f.vipEcho === true,
    restartGraceMs: f.restartGrace === undefined ? undefined : Number(f.restartGrace),
    ctFlags: {
      ctMax: f.ctMax,
      ctDropInvalid: f.ctDropInvalid,
      ctTimeout: f.ctTimeout,
      ctGcInterval: f.ctGcInterval,
      ctGcMinInterval: f.ctGcMinInterval,
      ctGcMaxInterval: f.ctGcMaxInterval,
    },
  };
}

async function runAgent(opts: AgentOptions): Promise<void> {
  const log = pino({ level: opts.logLevel, base: { node: opts.nodeName } });
  // Loaded here so that `kubetun --help` works without the native addon built.
  const { NodeAgent } = await import('../node/agent.ts');
  let agent: NodeAgent;
  try {
    agent = await NodeAgent.start(await withNodeFacts(opts, log), log);
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
 * Node object (cluster-config.ts): --node-ip, --pod-cidr, --node-zone. Flags win.
 */
async function withNodeFacts(opts: AgentOptions, log: pino.Logger): Promise<AgentOptions> {
  if (!opts.kubeconfig && !opts.inCluster) return opts;
  if (opts.nodeIp && opts.podCidr && opts.nodeZone) return opts;
  if (!opts.nodeName)
    throw new ClusterConfigError('no node name: give --node-name, or set NODE_NAME');
  const { loadKubeConfig, readNodeFacts } = await import('../node/cluster-config.ts');
  const facts = await readNodeFacts(loadKubeConfig(opts.kubeconfig), opts.nodeName);
  const out = {
    ...opts,
    nodeIp: opts.nodeIp || facts.ip || '',
    podCidr: opts.podCidr || facts.podCidr || '',
    nodeZone: opts.nodeZone ?? facts.zone,
  };
  if (!out.nodeIp)
    throw new ClusterConfigError(`Node ${opts.nodeName} has no IPv4 InternalIP: give --node-ip`);
  if (!out.podCidr)
    throw new ClusterConfigError(`Node ${opts.nodeName} has no IPv4 spec.podCIDR: give --pod-cidr`);
  log.info(
    { nodeIp: out.nodeIp, podCidr: out.podCidr, zone: out.nodeZone },
    'node facts from the Node object',
  );
  return out;
}

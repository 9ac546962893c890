// `kubetun run` options: validated once, in the slow world, with the flag named in every error.
import { UserError } from '../errors.ts';
import { SCHED_RANDOM, schedulerFromName } from '../sched/kinds.ts';
import type { CtRunFlags } from './ct-flags.ts';
import { type LocalDetector, localDetector } from '../rules/local-detect.ts';
import { type Cidr, ipv4ToU32, parseCidr } from '../wire/addr.ts';

export interface AgentOptions {
  /** manifests file or directory (Service / EndpointSlice YAML), reloaded when it changes */
  manifests: string;
  /** kubeconfig file: watch the Kubernetes API instead of manifests */
  kubeconfig?: string;
  /** neither manifests nor kubeconfig, and running in a Pod: in-cluster API config */
  inCluster?: boolean;
  /** this node's zone (topology hints, trafficDistribution PreferClose) */
  nodeZone?: string;
  /** scheduler for services without a kubetun.io/scheduler annotation */
  scheduler?: string;
  /** kube-proxy --metrics-bind-address, host:port; '' = no metrics server */
  metricsBindAddress?: string;
  /** kube-proxy --healthz-bind-address, host:port; '' = no health server */
  healthzBindAddress?: string;
  /** full resync period (kube-proxy --iptables-sync-period), ms */
  syncPeriodMs?: number;
  /** minimum time between syncs (--iptables-min-sync-period), ms */
  minSyncPeriodMs?: number;
  nodeName: string;
  /** this node's address: source of node-originated traffic to VIPs */
  nodeIp: string;
  /** this node's pod CIDR (steered in from the uplink; pod interfaces are found by it) */
  podCidr: string;
  /** all pods: the ClusterCIDR local traffic detector, external IPs never inside it */
  clusterCidr: string;
  /** kube-proxy --detect-local-mode ('' = ClusterCIDR; src/rules/local-detect.ts) */
  detectLocalMode?: string;
  /** --pod-bridge-interface (detectLocal.bridgeInterface): BridgeInterface mode's bridge */
  bridgeInterface?: string;
  /** --pod-interface-name-prefix (detectLocal.interfaceNamePrefix) */
  interfaceNamePrefix?: string;
  serviceCidr: string;
  uplink: string;
  tun: string;
  ctlSocket: string;
  /** explicit pod interfaces; discovery by route (see discover.ts) when undefined */
  podIfaces?: string[];
  /** re-discover pod interfaces every this many ms (0: only at startup) */
  rescanMs: number;
  /** packets per TUN read batch */
  batch: number;
  /** run the fail-open watchdog (see failure.ts) */
  watchdog: boolean;
  /** kube-proxy's rules found at start are removed instead of refusing to start */
  cleanupKubeProxy?: boolean;
  /**
   * TUN offloads (src/tun/tun.ts): partial checksums and GSO super-packets read and written
   * whole; default on. false: `--no-offload`.
   */
  offload?: boolean;
  logLevel: string;
  /** --ct-max, --ct-timeout, --ct-drop-invalid, --ct-gc-* (parsed by ct-flags.ts parseCtRunFlags) */
  ctFlags?: CtRunFlags;
  /** --vip-echo: answer ping to a VIP, as IPVS mode does (datapath/vip-echo.ts) */
  vipEcho?: boolean;
  /**
   * --restart-grace: after a crash, steering, pinned maps and the persistent TUN wait this long
   * for a restarted agent to take over (failure.ts); 0 = fail open at once, nothing pinned.
   * Default DEFAULT_RESTART_GRACE_MS.
   */
  restartGraceMs?: number;
}

/** The parsed numeric forms the agent works with. */
export interface AgentNet {
  /** SCHED_* of --scheduler */
  scheduler: number;
  metricsBind: { host: string; port: number } | null;
  healthzBind: { host: string; port: number } | null;
  nodeIp: number;
  podCidr: Cidr;
  clusterCidr: Cidr;
  serviceCidr: Cidr;
  /** kube-proxy's local traffic detector for these options */
  local: LocalDetector;
}

/** A `kubetun run` flag with a bad value: the user's to fix (src/errors.ts). */
export class OptionError extends UserError {
  constructor(flag: string, message: string) {
    super('OPTION', `--${flag}: ${message}`);
  }
}

// Linux IFNAMSIZ is 16 including the NUL; a conservative character set keeps names safe to pass
// to ip/tc and to quote in the watchdog's shell script.
const IFNAME = /^[A-Za-z0-9_.@-]{1,15}$/;
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function checked<T>(flag: string, f: () => T): T {
  try {
    return f();
  } catch (err) {
    throw new OptionError(flag, (err as Error).message);
  }
}

function ifname(flag: string, s: string): string {
  if (!IFNAME.test(s)) throw new OptionError(flag, `invalid interface name ${JSON.stringify(s)}`);
  return s;
}

export function validateOptions(o: AgentOptions): AgentNet {
  if (!o.manifests && !o.kubeconfig && !o.inCluster) {
    throw new OptionError('manifests', 'required (or --kubeconfig, or run in a Pod)');
  }
  if (!o.nodeIp) throw new OptionError('node-ip', 'required');
  if (!o.nodeName) throw new OptionError('node-name', 'required');
  if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(o.nodeName)) {
    throw new OptionError('node-name', `not a Kubernetes node name: ${JSON.stringify(o.nodeName)}`);
  }
  ifname('uplink', o.uplink);
  ifname('tun', o.tun);
  for (const p of o.podIfaces ?? []) ifname('pod-ifaces', p);
  if (!LOG_LEVELS.includes(o.logLevel)) {
    throw new OptionError('log-level', `one of ${LOG_LEVELS.join(', ')}`);
  }
  if (!Number.isInteger(o.batch) || o.batch < 1 || o.batch > 4096) {
    throw new OptionError('batch', 'an integer 1..4096');
  }
  if (
    o.restartGraceMs !== undefined &&
    (!Number.isInteger(o.restartGraceMs) || o.restartGraceMs < 0)
  ) {
    throw new OptionError('restart-grace', 'an integer number of ms >= 0');
  }
  if (!Number.isInteger(o.rescanMs) || o.rescanMs < 0) {
    throw new OptionError('pod-rescan-ms', 'an integer >= 0');
  }
  for (const [flag, v] of [
    ['sync-period', o.syncPeriodMs],
    ['min-sync-period', o.minSyncPeriodMs],
  ] as const) {
    if (v !== undefined && !(Number.isInteger(v) && v >= 0)) {
      throw new OptionError(flag, 'a duration >= 0 in ms (e.g. 30000)');
    }
  }
  const net: AgentNet = {
    scheduler: o.scheduler
      ? checked('scheduler', () => schedulerFromName(o.scheduler!))
      : SCHED_RANDOM,
    metricsBind: bindAddress('metrics-bind-address', o.metricsBindAddress, '127.0.0.1:10249'),
    healthzBind: bindAddress('healthz-bind-address', o.healthzBindAddress, '0.0.0.0:10256'),
    nodeIp: checked('node-ip', () => ipv4ToU32(o.nodeIp)),
    podCidr: checked('pod-cidr', () => parseCidr(o.podCidr)),
    clusterCidr: checked('cluster-cidr', () => parseCidr(o.clusterCidr)),
    serviceCidr: checked('service-cidr', () => parseCidr(o.serviceCidr)),
    local: checked('detect-local-mode', () =>
      localDetector({
        mode: o.detectLocalMode,
        clusterCidr: o.clusterCidr,
        nodeCidr: o.podCidr,
        bridgeInterface: o.bridgeInterface,
        interfaceNamePrefix: o.interfaceNamePrefix,
      }),
    ),
  };
  if (net.local.by === 'iface') {
    const flag = net.local.prefix ? 'pod-interface-name-prefix' : 'pod-bridge-interface';
    ifname(flag, net.local.iface);
  }
  return net;
}

/** "host:port" ("" or "0" = off; kube-proxy's convention); undefined = the default. */
function bindAddress(
  flag: string,
  v: string | undefined,
  dflt: string,
): { host: string; port: number } | null {
  const s = v ?? dflt;
  if (s === '' || s === '0') return null;
  const m = /^(\d{1,3}(?:\.\d{1,3}){3}):(\d{1,5})$/.exec(s);
  const port = m ? Number(m[2]) : -1;
  if (!m || port > 65535) throw new OptionError(flag, `expected ip:port, got ${JSON.stringify(s)}`);
  checked(flag, () => ipv4ToU32(m[1]));
  return { host: m[1], port };
}

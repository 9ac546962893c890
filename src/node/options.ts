// `kubetun run` options: validated once, in the slow world, with the flag named in every error.
import { type Cidr, ipv4ToU32, parseCidr } from '../wire/addr.ts';

export interface AgentOptions {
  /** manifests file or directory (Service / EndpointSlice YAML) */
  manifests: string;
  nodeName: string;
  /** this node's address: source of node-originated traffic to VIPs */
  nodeIp: string;
  /** this node's pod CIDR (steered in from the uplink; pod interfaces are found by it) */
  podCidr: string;
  /** validated; not used by the ClusterIP steering yet (kept for SNAT / NodePort decisions) */
  clusterCidr: string;
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
  logLevel: string;
}

/** The parsed numeric forms the agent works with. */
export interface AgentNet {
  nodeIp: number;
  podCidr: Cidr;
  clusterCidr: Cidr;
  serviceCidr: Cidr;
}

export class OptionError extends Error {
  constructor(flag: string, message: string) {
    super(`--${flag}: ${message}`);
    this.name = 'OptionError';
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
  if (!o.manifests) throw new OptionError('manifests', 'required');
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
  if (!Number.isInteger(o.rescanMs) || o.rescanMs < 0) {
    throw new OptionError('pod-rescan-ms', 'an integer >= 0');
  }
  const net: AgentNet = {
    nodeIp: checked('node-ip', () => ipv4ToU32(o.nodeIp)),
    podCidr: checked('pod-cidr', () => parseCidr(o.podCidr)),
    clusterCidr: checked('cluster-cidr', () => parseCidr(o.clusterCidr)),
    serviceCidr: checked('service-cidr', () => parseCidr(o.serviceCidr)),
  };
  return net;
}

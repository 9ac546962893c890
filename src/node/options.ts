// `kubetun run`'s options, each declared once: RUN_OPTIONS is the schema. Every entry names the
// flag (its key, kebab-cased: `podRescanMs` is --pod-rescan-ms), its argument, its default, its
// help line, its parser (which validates) and, for the datapath's and the conntrack GC's knobs,
// the DatapathConfig / CtGcConfig fields it sets. From it come:
//
//   commander's options          addRunOptions (src/cli/run.ts)
//   the validated agent config   resolveRunConfig: flags ─▶ AgentConfig (net, datapath, gc inside)
//   the argv of a started agent  runArgv (the lab's nodes, systemd units)
//   the docs table               runOptionsTable (docs/run-flags.md: scripts/gen-run-flags-doc.ts)
//
// A new flag is one entry here (and its use where it acts). Slow world: every error is an
// OptionError naming the flag.
import { DEFAULT_MAX_INTERVAL_MS, DEFAULT_MIN_INTERVAL_MS } from '../control/runner.ts';
import { UserError } from '../errors.ts';
import { DEFAULT_RESTART_GRACE_MS } from './failure.ts';
import { PROC_SYS_NET } from './sysctl.ts';
import { ctMaxDefault, type DatapathConfig } from '../datapath/state/config.ts';
import type { CtTimeouts } from '../datapath/state/ct-state.ts';
import { type CtGcConfig, DEFAULT_CT_GC } from '../housekeeping/ct-gc.ts';
import { schedulerFromName } from '../sched/kinds.ts';
import { type LocalDetector, localDetector, localSourceCidr } from '../rules/local-detect.ts';
import { type Cidr, ipv4ToU32, parseCidr } from '../wire/addr.ts';
import {
  type Cidr6Words,
  canonIpv6,
  ipv6Groups,
  parseCidr6,
  parseCidr6Words,
} from '../wire/addr6.ts';

/** A `kubetun run` flag with a bad value: the user's to fix (src/errors.ts). */
export class OptionError extends UserError {
  constructor(flag: string, message: string) {
    super('OPTION', `--${flag}: ${message}`);
  }
}

/** A flag's value as given: commander's string, a switch's boolean, or absent. */
export type RawValue = string | boolean | undefined;

/** What a parser may depend on besides the value. */
export interface ParseContext {
  /** CPUs (kube-proxy's conntrack table size) */
  cores: number;
}

export interface RunOption<T> {
  /** the value's name in help (`<ms>`); absent: a switch */
  arg?: string;
  /** a switch that is on unless `--no-<flag>` is given */
  negate?: true;
  /** the default, as typed on a command line */
  default?: string;
  /** the default in words when it is computed (docs and help) */
  defaultDoc?: string;
  help: string;
  /** value (default applied) → setting; throws Error with a message, the flag is added */
  parse: (v: RawValue, ctx: ParseContext) => T;
  /** the datapath's fields this setting sets */
  datapath?: (v: T) => Partial<DatapathConfig>;
  /** the conntrack GC's fields this setting sets */
  gc?: (v: T) => Partial<CtGcConfig>;
}

const option = <T>(o: RunOption<T>): RunOption<T> => o;

// ── parsers: each validates one value (errors without the flag; resolveRunConfig adds it) ──

// Linux IFNAMSIZ is 16 including the NUL; a conservative character set keeps names safe to pass
// to ip/tc and to quote in the watchdog's shell script.
const IFNAME = /^[A-Za-z0-9_.@-]{1,15}$/;
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

const text = (v: RawValue): string | undefined => (v === undefined ? undefined : String(v));
const switchOn = (v: RawValue): boolean => v === true;
const switchOff = (v: RawValue): boolean => v !== false;

function ifname(s: string): string {
  if (!IFNAME.test(s)) throw new Error(`invalid interface name ${JSON.stringify(s)}`);
  return s;
}

function int(min: number, max: number, what: string) {
  return (v: RawValue): number => {
    const n = Number(v);
    if (typeof v !== 'string' || !Number.isInteger(n) || n < min || n > max) throw new Error(what);
    return n;
  };
}

/** A positive integer up to max, digits only (the conntrack flags). */
function posInt(v: string, max = 0x7fffffff): number {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isInteger(n) || n < 1 || n > max) {
    throw new Error(`a positive integer up to ${max}, got ${JSON.stringify(v)}`);
  }
  return n;
}

function cidr(v: RawValue): string {
  parseCidr(String(v ?? ''));
  return String(v);
}

/** --cluster-cidr's families: the IPv4 CIDR, and the IPv6 one when given beside it. */
export interface ClusterCidrs {
  v4: string;
  v6?: string;
}

/**
 * --cluster-cidr as kube-proxy takes it: one CIDR per family, comma-separated, either order
 * ("10.244.0.0/16,fd00:10:244::/56"). kubetun's IPv4 path always runs, so the IPv4 one is
 * required; the IPv6 one is the same as --cluster-cidr-v6. Throws the user's one-line message.
 */
export function clusterCidrs(s: string): ClusterCidrs {
  const parts = s.split(',').map((x) => x.trim());
  const v6 = parts.filter((x) => x.includes(':'));
  const v4 = parts.filter((x) => !x.includes(':'));
  const form = 'one CIDR per family, comma-separated (10.244.0.0/16,fd00:10:244::/56)';
  if (v4.length !== 1 || v6.length > 1)
    throw new Error(
      v4.length === 0
        ? `needs an IPv4 CIDR: ${form}`
        : `expected ${form}, got ${JSON.stringify(s)}`,
    );
  return { v4: cidr(v4[0]), ...(v6.length ? { v6: cidr6(v6[0]) } : {}) };
}

/** An IPv6 CIDR ("fd00:10:96::/112"), canonical; absent = none. */
function cidr6(v: RawValue): string | undefined {
  const s = text(v);
  if (s === undefined || s === '') return undefined;
  const c = parseCidr6(s);
  if (!c)
    throw new Error(`expected an IPv6 CIDR such as fd00:10:96::/112, got ${JSON.stringify(s)}`);
  return c.text;
}

/**
 * The node's IPv6 address (canonical; absent = none): a global or unique-local unicast address,
 * the destination of IPv6 NodePorts and the source of IPv6 masquerade. Refused: the unspecified
 * and loopback addresses, multicast (ff00::/8), link-local (fe80::/10: not routable, one per
 * link) and IPv4-mapped (::ffff:0:0/96: IPv4 traffic, --node-ip's).
 */
function nodeIp6(v: RawValue): string | undefined {
  const s = text(v);
  if (s === undefined || s === '') return undefined;
  const g = ipv6Groups(s);
  if (!g) throw new Error(`expected an IPv6 address such as fd00:250::2, got ${JSON.stringify(s)}`);
  const zero = g.slice(0, 5).every((x) => x === 0);
  const why =
    zero && g[5] === 0 && g[6] === 0 && g[7] <= 1
      ? 'the unspecified or loopback address'
      : g[0] >= 0xff00
        ? 'a multicast address'
        : (g[0] & 0xffc0) === 0xfe80
          ? 'a link-local address'
          : zero && g[5] === 0xffff
            ? 'an IPv4-mapped address (give IPv4 to --node-ip)'
            : '';
  if (why) throw new Error(`${s} is ${why}, not a routable IPv6 unicast address of this node`);
  return canonIpv6(s) ?? s;
}

/** "host:port" ("" or "0" = off; kube-proxy's convention). */
function bindAddress(v: RawValue): { host: string; port: number } | null {
  const s = String(v);
  if (s === '' || s === '0') return null;
  const m = /^(\d{1,3}(?:\.\d{1,3}){3}):(\d{1,5})$/.exec(s);
  const port = m ? Number(m[2]) : -1;
  if (!m || port > 65535) throw new Error(`expected ip:port, got ${JSON.stringify(s)}`);
  ipv4ToU32(m[1]);
  return { host: m[1], port };
}

const CT_TIMEOUT_NAMES: Record<string, keyof CtTimeouts> = {
  'tcp-syn-sent': 'ctTcpSynSent',
  'tcp-syn-recv': 'ctTcpSynRecv',
  'tcp-established': 'ctTcpEstablished',
  'tcp-fin-wait': 'ctTcpFinWait',
  'tcp-close-wait': 'ctTcpCloseWait',
  'tcp-last-ack': 'ctTcpLastAck',
  'tcp-time-wait': 'ctTcpTimeWait',
  'tcp-close': 'ctTcpClose',
  udp: 'ctUdp',
  'udp-stream': 'ctUdpStream',
};

/** "tcp-established=86400,udp=30" → the datapath's timeout fields (seconds). */
function ctTimeouts(v: RawValue): Partial<CtTimeouts> {
  const out: Partial<CtTimeouts> = {};
  for (const part of String(v ?? '').split(',')) {
    if (part.trim() === '') continue;
    const [name, value] = part.split('=');
    const key = CT_TIMEOUT_NAMES[name?.trim() ?? ''];
    if (!key || value === undefined) {
      const names = Object.keys(CT_TIMEOUT_NAMES).join(', ');
      throw new Error(
        `expected name=seconds with name one of ${names}, got ${JSON.stringify(part)}`,
      );
    }
    out[key] = posInt(value);
  }
  return out;
}

// ── the schema ──

export const RUN_OPTIONS = {
  manifests: option({
    arg: '<dir>',
    help: 'Service/EndpointSlice YAML (file or directory), hot-reloaded',
    parse: (v) => text(v) ?? '',
  }),
  kubeconfig: option({
    arg: '<file>',
    help: 'watch Services/EndpointSlices on the Kubernetes API instead',
    parse: text,
  }),
  nodeZone: option({
    arg: '<zone>',
    help: "this node's zone (topology hints, PreferClose)",
    parse: text,
  }),
  scheduler: option({
    arg: '<name>',
    default: 'random',
    help: 'default scheduler: random|rr|wrr|lc|wlc|sed|nq|sh|dh|maglev (kubetun.io/scheduler overrides)',
    parse: (v) => {
      if (!v) return 'random';
      schedulerFromName(String(v));
      return String(v);
    },
  }),
  metricsBindAddress: option({
    arg: '<ip:port>',
    default: '127.0.0.1:10249',
    help: "metrics server ('' or 0: off)",
    parse: bindAddress,
  }),
  healthzBindAddress: option({
    arg: '<ip:port>',
    default: '0.0.0.0:10256',
    help: "health server ('' or 0: off)",
    parse: bindAddress,
  }),
  syncPeriod: option({
    arg: '<ms>',
    default: String(DEFAULT_MAX_INTERVAL_MS),
    help: 'full resync at least this often',
    parse: int(0, Number.MAX_SAFE_INTEGER, 'a duration >= 0 in ms (e.g. 30000)'),
  }),
  minSyncPeriod: option({
    arg: '<ms>',
    default: String(DEFAULT_MIN_INTERVAL_MS),
    help: 'at most one sync per this many ms',
    parse: int(0, Number.MAX_SAFE_INTEGER, 'a duration >= 0 in ms (e.g. 30000)'),
  }),
  config: option({
    arg: '<file>',
    help: 'KubeProxyConfiguration file (kube-proxy --config); flags given here override it',
    parse: text,
  }),
  nodeName: option({
    arg: '<name>',
    help: 'this node (default $NODE_NAME; endpoints topology, socket)',
    parse: (v) => {
      const s = text(v) ?? '';
      if (s === '') throw new Error('required');
      if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(s))
        throw new Error(`not a Kubernetes node name: ${JSON.stringify(s)}`);
      return s;
    },
  }),
  hostnameOverride: option({
    arg: '<name>',
    help: 'kube-proxy spelling of --node-name',
    parse: text,
  }),
  nodeIp: option({
    arg: '<ip>',
    help: "node-originated traffic's source (default: the Node's InternalIP)",
    parse: (v) => {
      const s = text(v) ?? '';
      if (s === '') throw new Error('required');
      ipv4ToU32(s);
      return s;
    },
  }),
  nodeIpV6: option({
    arg: '<ip>',
    help: "this node's IPv6 address: IPv6 NodePorts are served on it and IPv6 masquerade uses it (with --service-cidr-v6; default: the Node's IPv6 InternalIP, else none: no IPv6 NodePort, no IPv6 masquerade)",
    parse: nodeIp6,
  }),
  podCidr: option({
    arg: '<cidr>',
    help: "this node's pod CIDR (default: the Node's spec.podCIDR)",
    parse: cidr,
  }),
  clusterCidr: option({
    arg: '<cidr>',
    default: '10.244.0.0/16',
    help: "all pods; kube-proxy's dual-stack form too: 10.244.0.0/16,fd00:10:244::/56 (the IPv6 one as --cluster-cidr-v6)",
    // canonical "v4[,v6]", kube-proxy's spelling (what /configz shows)
    parse: (v) => {
      const c = clusterCidrs(String(v ?? ''));
      return c.v6 ? `${c.v4},${c.v6}` : c.v4;
    },
  }),
  clusterCidrV6: option({
    arg: '<cidr>',
    help: 'all pods, IPv6: IPv6 ClusterIP traffic from outside it is masqueraded, a pod in it reaching an eTP=Local frontend gets every endpoint (with --service-cidr-v6; default: none, as without --cluster-cidr)',
    parse: cidr6,
  }),
  detectLocalMode: option({
    arg: '<mode>',
    help: 'what counts as pod traffic: ClusterCIDR (default) | NodeCIDR | BridgeInterface | InterfaceNamePrefix',
    parse: text,
  }),
  podBridgeInterface: option({
    arg: '<iface>',
    help: "BridgeInterface mode: the pods' bridge (cni0)",
    parse: (v) => (v === undefined ? undefined : ifname(String(v))),
  }),
  podInterfaceNamePrefix: option({
    arg: '<p>',
    help: "InterfaceNamePrefix mode: pod links' prefix (cali)",
    parse: (v) => (v === undefined ? undefined : ifname(String(v))),
  }),
  serviceCidr: option({
    arg: '<cidr>',
    default: '10.96.0.0/16',
    help: 'ClusterIP range, routed into the TUN',
    parse: cidr,
  }),
  serviceCidrV6: option({
    arg: '<cidr>',
    help: 'IPv6 ClusterIP range, routed and steered into the TUN (default: none, the TUN stays IPv4-only)',
    parse: cidr6,
  }),
  podCidrV6: option({
    arg: '<cidr>',
    help: "this node's IPv6 pod CIDR: replies of IPv6 endpoints on other nodes to its pods are steered on the uplink (with --service-cidr-v6; default: none, not steered)",
    parse: cidr6,
  }),
  uplink: option({
    arg: '<iface>',
    default: 'eth0',
    help: 'interface towards the other nodes',
    parse: (v) => ifname(String(v)),
  }),
  tun: option({
    arg: '<name>',
    default: 'kt0',
    help: 'TUN device name',
    parse: (v) => ifname(String(v)),
  }),
  procSysNet: option({
    arg: '<dir>',
    default: PROC_SYS_NET,
    help: "the host's /proc/sys/net, where net.* sysctls are written (a container: its read-write hostPath mount, /host/proc/sys/net)",
    parse: (v) => {
      if (!String(v).startsWith('/')) throw new Error('an absolute path');
      return String(v);
    },
  }),
  ctlSocket: option({
    arg: '<path>',
    defaultDoc: '/run/kubetun/<node-name>.sock',
    help: 'control socket (default /run/kubetun/<node-name>.sock)',
    parse: text,
  }),
  podIfaces: option({
    arg: '<list>',
    help: 'comma-separated pod interfaces (default: found by route)',
    parse: (v) =>
      v === undefined
        ? undefined
        : String(v)
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean)
            .map(ifname),
  }),
  podRescanMs: option({
    arg: '<ms>',
    default: '2000',
    help: 'look for new pod interfaces this often (0: never)',
    parse: int(0, Number.MAX_SAFE_INTEGER, 'an integer >= 0'),
  }),
  batch: option({
    arg: '<n>',
    default: '64',
    help: 'packets per TUN read batch',
    parse: int(1, 4096, 'an integer 1..4096'),
  }),
  tunQueue: option({
    arg: '<n>',
    default: '8192',
    help: "packets the kernel holds for the agent in the TUN's queue (txqueuelen; the kernel's default 500 lasts 5 ms at 100 kpps, less than a busy machine can keep the agent off the CPU)",
    parse: int(1, 1 << 20, 'an integer 1..1048576'),
  }),
  offload: option({
    negate: true,
    help: 'no TUN offloads: every packet read and written at MTU size, checksums complete',
    parse: switchOff,
  }),
  vipEcho: option({
    help: 'answer ping to a ClusterIP, as IPVS mode does (kube-ipvs0); default: no answer, as iptables',
    parse: switchOn,
    datapath: (v) => ({ vipEcho: v }),
  }),
  watchdog: option({
    negate: true,
    help: 'no fail-open watchdog: if the agent dies, pod traffic is dropped',
    parse: switchOff,
  }),
  restartGrace: option({
    arg: '<ms>',
    default: String(DEFAULT_RESTART_GRACE_MS),
    help: 'after a crash (or SIGUSR2) steering, pinned maps and the TUN wait this long for a restarted agent; 0: fail open at once',
    parse: int(0, Number.MAX_SAFE_INTEGER, 'an integer number of ms >= 0'),
  }),
  cleanupKubeProxy: option({
    help: "remove kube-proxy's rules found at start (default: refuse to start beside them)",
    parse: switchOn,
  }),
  logLevel: option({
    arg: '<level>',
    default: 'info',
    help: 'fatal|error|warn|info|debug|trace|silent',
    parse: (v) => {
      if (!LOG_LEVELS.includes(String(v))) throw new Error(`one of ${LOG_LEVELS.join(', ')}`);
      return String(v);
    },
  }),
  ctMax: option({
    arg: '<n>',
    defaultDoc: 'max(32768 x cores, 131072)',
    help: 'conntrack entries (default max(32768 x cores, 131072), as kube-proxy)',
    parse: (v, ctx) => (v === undefined ? ctMaxDefault(ctx.cores) : posInt(String(v), 1 << 25)),
    datapath: (v) => ({ ctCapacity: v }),
  }),
  ctDropInvalid: option({
    help: 'drop packets conntrack calls INVALID (kube-proxy ctstate INVALID DROP)',
    parse: switchOn,
    datapath: (v) => ({ ctDropInvalid: v }),
  }),
  ctTimeout: option({
    arg: '<list>',
    help: 'conntrack lifetimes, e.g. tcp-established=86400,tcp-close-wait=3600,udp=30 (s)',
    parse: ctTimeouts,
    datapath: (v) => v,
  }),
  ctGcInterval: option({
    arg: '<s>',
    default: String(DEFAULT_CT_GC.intervalSec),
    help: 'first interval between conntrack GC passes (adapts)',
    parse: (v) => posInt(String(v)),
    gc: (v) => ({ intervalSec: v }),
  }),
  ctGcMinInterval: option({
    arg: '<s>',
    default: String(DEFAULT_CT_GC.minIntervalSec),
    help: 'shortest GC interval',
    parse: (v) => posInt(String(v)),
    gc: (v) => ({ minIntervalSec: v }),
  }),
  ctGcMaxInterval: option({
    arg: '<s>',
    default: String(DEFAULT_CT_GC.maxIntervalSec),
    help: 'longest GC interval',
    parse: (v) => posInt(String(v)),
    gc: (v) => ({ maxIntervalSec: v }),
  }),
} as const;

export type RunOptionKey = keyof typeof RUN_OPTIONS;

/** The flags as given (commander's attribute names: the schema's keys). */
export type RunFlags = { [K in RunOptionKey]?: RawValue };

/** Each flag's parsed setting. */
export type RunSettings = {
  [K in RunOptionKey]: ReturnType<(typeof RUN_OPTIONS)[K]['parse']>;
};

/** The numeric forms the agent works with. */
export interface AgentNet {
  /** SCHED_* of --scheduler */
  scheduler: number;
  nodeIp: number;
  podCidr: Cidr;
  clusterCidr: Cidr;
  serviceCidr: Cidr;
  /** --service-cidr-v6, if given */
  serviceCidr6?: Cidr6Words;
  /** the IPv6 cluster CIDR (--cluster-cidr-v6, or --cluster-cidr's IPv6 part), if given */
  clusterCidr6?: string;
  /** kube-proxy's local traffic detector for these options */
  local: LocalDetector;
  /** the IPv6 one (kube-proxy builds one per family): the IPv6 cluster or pod CIDR */
  local6: LocalDetector;
}

/** The one validated configuration of `kubetun run`: what NodeAgent.start takes. */
export interface AgentConfig extends Omit<RunSettings, 'ctlSocket'> {
  /** neither manifests nor kubeconfig, and running in a Pod: in-cluster API config */
  inCluster: boolean;
  /** --ctl-socket, defaulted by node name */
  ctlSocket: string;
  net: AgentNet;
  /** the datapath's config from these flags: NAT addresses, conntrack, vip-echo */
  datapath: Partial<DatapathConfig>;
  /** the conntrack GC's (--ct-gc-*) */
  gc: Partial<CtGcConfig>;
}

/** The flag of a schema key: `podRescanMs` → `pod-rescan-ms`. */
export function flagOf(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/** Every schema key, in declaration order (help, argv and the docs table follow it). */
export const RUN_OPTION_KEYS = Object.keys(RUN_OPTIONS) as RunOptionKey[];
const KEYS = RUN_OPTION_KEYS;

/** An entry, whatever its setting's type (for the loops over the schema). */
export function entryOf(key: RunOptionKey): RunOption<unknown> {
  return RUN_OPTIONS[key] as unknown as RunOption<unknown>;
}

function parseOne<K extends RunOptionKey>(k: K, v: RawValue, ctx: ParseContext): RunSettings[K] {
  const o = entryOf(k);
  try {
    return o.parse(v ?? o.default, ctx) as RunSettings[K];
  } catch (err) {
    throw new OptionError(flagOf(k), (err as Error).message);
  }
}

/**
 * Validates the flags into the agent's config. `inCluster`: running in a Pod (no --manifests
 * nor --kubeconfig needed). Flags the datapath reads go into `datapath`, with the NAT addresses
 * of this node.
 */
export function resolveRunConfig(
  flags: RunFlags,
  ctx: ParseContext & { inCluster: boolean },
): AgentConfig {
  const f = { ...flags, nodeName: flags.nodeName ?? flags.hostnameOverride };
  if (!f.manifests && !f.kubeconfig && !ctx.inCluster)
    throw new OptionError('manifests', 'required (or --kubeconfig, or run in a Pod)');
  const s = {} as Record<RunOptionKey, unknown>;
  // node-ip and node-name first: "required" for them before anything else is checked
  const order: RunOptionKey[] = [
    'nodeIp',
    'nodeName',
    ...KEYS.filter((k) => !/^node(Ip|Name)$/.test(k)),
  ];
  for (const k of order) s[k] = parseOne(k, f[k], ctx);
  const set = s as RunSettings;
  const net = netOf(set);
  const datapath: Partial<DatapathConfig> = {
    // steer-replies.ts: replies come routed into the TUN, one TTL spent
    routedReplies: true,
    ...natDatapathConfig({
      nodeIp: set.nodeIp,
      podCidr: set.podCidr,
      localCidr: localSourceCidr(net.local, set.podCidr),
      nodeIp6: set.nodeIpV6,
      podCidr6: set.podCidrV6,
      localCidr6: localSourceCidr(net.local6, set.podCidrV6 ?? ''),
    }),
  };
  const gc: Partial<CtGcConfig> = {};
  for (const k of KEYS) {
    const o = entryOf(k);
    if (o.datapath) Object.assign(datapath, o.datapath(s[k]));
    if (o.gc) Object.assign(gc, o.gc(s[k]));
  }
  if (set.podCidrV6 && !set.serviceCidrV6)
    throw new OptionError(
      'pod-cidr-v6',
      'needs --service-cidr-v6 (without it nothing IPv6 is steered)',
    );
  if (set.nodeIpV6 && !set.serviceCidrV6)
    throw new OptionError(
      'node-ip-v6',
      'needs --service-cidr-v6 (without it nothing IPv6 is steered)',
    );
  if (net.clusterCidr6 && !set.serviceCidrV6)
    throw new OptionError(
      set.clusterCidrV6 ? 'cluster-cidr-v6' : 'cluster-cidr',
      `the IPv6 cluster CIDR ${net.clusterCidr6} needs --service-cidr-v6 (without it nothing IPv6 is steered)`,
    );
  if (set.nodeIpV6 && net.serviceCidr6 && inCidr6(set.nodeIpV6, net.serviceCidr6))
    throw new OptionError('node-ip-v6', `${set.nodeIpV6} lies in --service-cidr-v6`);
  const g = { ...DEFAULT_CT_GC, ...gc };
  if (g.minIntervalSec > g.maxIntervalSec)
    throw new OptionError('ct-gc-min-interval', 'larger than --ct-gc-max-interval');
  return {
    ...set,
    inCluster: !set.manifests && !set.kubeconfig && ctx.inCluster,
    ctlSocket: set.ctlSocket ?? `/run/kubetun/${set.nodeName}.sock`,
    net,
    datapath,
    gc,
  };
}

/** The cluster CIDRs in effect, kube-proxy's spelling ("v4[,v6]": /configz, the manifest reader). */
export function clusterCidrText(c: Pick<AgentConfig, 'clusterCidr' | 'net'>): string {
  const v4 = clusterCidrs(c.clusterCidr).v4;
  return c.net.clusterCidr6 ? `${v4},${c.net.clusterCidr6}` : v4;
}

function netOf(s: RunSettings): AgentNet {
  const cc = clusterCidrs(s.clusterCidr);
  if (cc.v6 && s.clusterCidrV6 && cc.v6 !== s.clusterCidrV6)
    throw new OptionError(
      'cluster-cidr-v6',
      `${s.clusterCidrV6} differs from the IPv6 CIDR in --cluster-cidr (${cc.v6}): give one`,
    );
  const clusterCidr6 = s.clusterCidrV6 ?? cc.v6;
  // one detector per family, as kube-proxy: each family's cluster CIDR (ClusterCIDR) or pod
  // CIDR (NodeCIDR); the interface modes are the same device test for both
  const detector = (clusterCidr: string | undefined, nodeCidr: string | undefined) => {
    try {
      return localDetector({
        mode: s.detectLocalMode,
        clusterCidr,
        nodeCidr,
        bridgeInterface: s.podBridgeInterface,
        interfaceNamePrefix: s.podInterfaceNamePrefix,
      });
    } catch (err) {
      throw new OptionError('detect-local-mode', (err as Error).message);
    }
  };
  return {
    scheduler: schedulerFromName(s.scheduler),
    nodeIp: ipv4ToU32(s.nodeIp),
    podCidr: parseCidr(s.podCidr),
    clusterCidr: parseCidr(cc.v4),
    serviceCidr: parseCidr(s.serviceCidr),
    serviceCidr6: s.serviceCidrV6 ? parseCidr6Words(s.serviceCidrV6) : undefined,
    ...(clusterCidr6 ? { clusterCidr6 } : {}),
    local: detector(cc.v4, s.podCidr),
    local6: detector(clusterCidr6, s.podCidrV6),
  };
}

function inCidr6(ip: string, c: Cidr6Words): boolean {
  const w = parseCidr6Words(`${ip}/128`).net;
  return [0, 1, 2, 3].every((k) => (w[k] & c.mask[k]) === c.net[k]);
}

/**
 * The NAT part of the datapath config for this node (nat.ts). localCidr is the local traffic
 * detector's source network (src/rules/local-detect.ts localSourceCidr; '' = no detector): the
 * datapath's clusterCidr, "from a pod" in kube-proxy's masquerade decisions.
 *
 * IPv6 (nat6.ts): nodeIp6 (--node-ip-v6) is the IPv6 NodePorts' address and every IPv6
 * masquerade's source — toward a local pod too (podGateway6 left to default to it): a pod veth's
 * node side has only a link-local address, so the kernel's MASQUERADE picks this one as well.
 * localCidr6 is the IPv6 detector's source network (the datapath's clusterCidr6; '' = none:
 * IPv6 ClusterIP traffic is not masqueraded, as kube-proxy without an IPv6 --cluster-cidr).
 * Without nodeIp6 nothing IPv6 is masqueraded, whatever localCidr6 says.
 */
export function natDatapathConfig(o: {
  nodeIp: string;
  podCidr: string;
  localCidr: string;
  nodeIp6?: string;
  podCidr6?: string;
  localCidr6?: string;
}): Partial<DatapathConfig> {
  const pod = parseCidr(o.podCidr);
  return {
    ...(o.nodeIp6 ? { nodeIp6: o.nodeIp6 } : {}),
    ...(o.nodeIp6 && o.podCidr6 ? { podCidr6: o.podCidr6 } : {}),
    ...(o.localCidr6 ? { clusterCidr6: o.localCidr6 } : {}),
    nodeIp: ipv4ToU32(o.nodeIp),
    // The node side of every pod veth carries the pod CIDR's first address (the lab's and the
    // usual CNI bridge convention): MASQUERADE toward a local pod picks it.
    podGateway: (pod.addr + 1) >>> 0,
    podCidr: o.podCidr,
    clusterCidr: o.localCidr,
  };
}

/** commander's flag spelling of an entry: `--pod-rescan-ms <ms>`, `--no-offload`, `--vip-echo`. */
export function commanderFlags(key: RunOptionKey): string {
  const o = entryOf(key);
  const flag = o.negate ? `--no-${flagOf(key)}` : `--${flagOf(key)}`;
  return o.arg ? `${flag} ${o.arg}` : flag;
}

/** The argv of `kubetun run` for these values (schema order; switches as they differ from off). */
export function runArgv(values: RunFlags): string[] {
  const out: string[] = [];
  for (const k of KEYS) {
    const v = values[k];
    if (v === undefined) continue;
    const o = entryOf(k);
    if (o.arg) out.push(`--${flagOf(k)}`, String(v));
    else if (o.negate ? v === false : v === true) out.push(commanderFlags(k));
  }
  return out;
}

/** The docs table of every flag (docs/run-flags.md, written by scripts/gen-run-flags-doc.ts). */
export function runOptionsTable(): string {
  const rows = ['| flag | default | what it does |', '|---|---|---|'];
  for (const k of KEYS) {
    const o = entryOf(k);
    const dflt = o.negate
      ? 'on (this flag: off)'
      : (o.default ?? o.defaultDoc ?? (o.arg ? '' : 'off'));
    const cell = (s: string) => s.replace(/\|/g, '\\|');
    rows.push(
      `| \`${commanderFlags(k)}\` | ${dflt === '' ? '' : `\`${cell(dflt)}\``} | ${cell(o.help)} |`,
    );
  }
  return `${rows.join('\n')}\n`;
}

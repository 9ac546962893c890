// kube-proxy's configuration file (KubeProxyConfiguration, kubeproxy.config.k8s.io/v1alpha1) for
// `kubetun run --config FILE`, and the same shape served back on the metrics port's /configz.
//
// One table, FIELDS, says which kube-proxy setting kubetun honours and which `kubetun run` flag
// it becomes; reading the file, /configz and the docs table (docs/cluster.md) all come from it.
// A file only fills flags the command line did not give (flags override, as with kube-proxy's
// --config plus flags). Settings kubetun has no equivalent for are reported once each, one line,
// and ignored; a value of the wrong shape is an error naming the file and the field.
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { UserError } from '../errors.ts';
import type { RunOptionKey } from './options.ts';

export const KPC_GROUP = 'kubeproxy.config.k8s.io';
export const KPC_API_VERSION = `${KPC_GROUP}/v1alpha1`;

/** `kubetun run` flags a file sets, by their schema keys (node/options.ts), as typed. */
export type KpcFlags = { [K in RunOptionKey]?: string };

/** A --config file kubetun cannot take: names the file and the field. */
export class KubeProxyConfigError extends UserError {
  constructor(file: string, field: string, message: string) {
    super('KUBE_PROXY_CONFIG', `${file}: ${field}: ${message}`);
  }
}

type Conv = (v: unknown, field: string, file: string) => string;

interface KpcField {
  /** dotted path in KubeProxyConfiguration */
  path: string;
  flag: keyof KpcFlags | 'ctMaxPerCore' | 'ctMin' | `ct:${string}`;
  conv: Conv;
  doc: string;
}

const str: Conv = (v, field, file) => {
  if (typeof v !== 'string') throw new KubeProxyConfigError(file, field, 'expected a string');
  return v;
};
const int: Conv = (v, field, file) => {
  if (!Number.isInteger(v) || (v as number) < 0)
    throw new KubeProxyConfigError(file, field, 'expected an integer >= 0');
  return String(v);
};
const ms: Conv = (v, field, file) => String(goDurationMs(str(v, field, file), field, file));
const sec: Conv = (v, field, file) => {
  const n = goDurationMs(str(v, field, file), field, file);
  if (n < 1000) throw new KubeProxyConfigError(file, field, 'at least 1s');
  return String(Math.round(n / 1000));
};

/** Every setting kubetun takes from the file, and where it goes. */
export const FIELDS: readonly KpcField[] = [
  { path: 'clientConnection.kubeconfig', flag: 'kubeconfig', conv: str, doc: '--kubeconfig' },
  { path: 'hostnameOverride', flag: 'nodeName', conv: str, doc: '--node-name' },
  { path: 'clusterCIDR', flag: 'clusterCidr', conv: str, doc: '--cluster-cidr' },
  {
    path: 'healthzBindAddress',
    flag: 'healthzBindAddress',
    conv: str,
    doc: '--healthz-bind-address',
  },
  {
    path: 'metricsBindAddress',
    flag: 'metricsBindAddress',
    conv: str,
    doc: '--metrics-bind-address',
  },
  { path: 'syncPeriod', flag: 'syncPeriod', conv: ms, doc: '--sync-period (ms)' },
  { path: 'minSyncPeriod', flag: 'minSyncPeriod', conv: ms, doc: '--min-sync-period (ms)' },
  { path: 'iptables.syncPeriod', flag: 'syncPeriod', conv: ms, doc: '--sync-period (ms)' },
  { path: 'iptables.minSyncPeriod', flag: 'minSyncPeriod', conv: ms, doc: '--min-sync-period' },
  { path: 'ipvs.scheduler', flag: 'scheduler', conv: str, doc: '--scheduler' },
  { path: 'detectLocalMode', flag: 'detectLocalMode', conv: str, doc: '--detect-local-mode' },
  {
    path: 'detectLocal.bridgeInterface',
    flag: 'podBridgeInterface',
    conv: str,
    doc: '--pod-bridge-interface',
  },
  {
    path: 'detectLocal.interfaceNamePrefix',
    flag: 'podInterfaceNamePrefix',
    conv: str,
    doc: '--pod-interface-name-prefix',
  },
  {
    path: 'conntrack.maxPerCore',
    flag: 'ctMaxPerCore',
    conv: int,
    doc: '--ct-max = max(maxPerCore × cores, min); 0 keeps the default',
  },
  { path: 'conntrack.min', flag: 'ctMin', conv: int, doc: '(with maxPerCore)' },
  {
    path: 'conntrack.tcpEstablishedTimeout',
    flag: 'ct:tcp-established',
    conv: sec,
    doc: '--ct-timeout tcp-established=',
  },
  {
    path: 'conntrack.tcpCloseWaitTimeout',
    flag: 'ct:tcp-close-wait',
    conv: sec,
    doc: '--ct-timeout tcp-close-wait=',
  },
  { path: 'conntrack.udpTimeout', flag: 'ct:udp', conv: sec, doc: '--ct-timeout udp=' },
  {
    path: 'conntrack.udpStreamTimeout',
    flag: 'ct:udp-stream',
    conv: sec,
    doc: '--ct-timeout udp-stream=',
  },
];

/** Fields read without effect: what kubetun already does, or cannot do yet (docs/cluster.md). */
const NOTED: Record<string, string> = {
  mode: 'kubetun is its own data plane; the mode is ignored',
  nodePortAddresses: 'NodePorts are served on the node IP only',
};

const ROOT_SKIP = new Set(['apiVersion', 'kind']);

function get(obj: unknown, path: string): unknown {
  let cur = obj;
  for (const k of path.split('.')) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[k];
  }
  return cur;
}

/** Leaf paths present in the file (objects descended, arrays and scalars are leaves). */
function leaves(obj: Record<string, unknown>, prefix = ''): string[] {
  const out: string[] = [];
  for (const [k, v] of Object.entries(obj)) {
    const p = prefix ? `${prefix}.${k}` : k;
    if (!prefix && ROOT_SKIP.has(k)) continue;
    if (v !== null && typeof v === 'object' && !Array.isArray(v))
      out.push(...leaves(v as Record<string, unknown>, p));
    else out.push(p);
  }
  return out;
}

export interface KpcRead {
  flags: KpcFlags;
  /** one line per setting read but not applied */
  notes: string[];
}

/** Reads a KubeProxyConfiguration file into `kubetun run` flag values (`cores` for ct-max). */
export function readKubeProxyConfig(file: string, cores: number): KpcRead {
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new KubeProxyConfigError(file, '(file)', (err as Error).message.split('\n')[0]);
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc))
    throw new KubeProxyConfigError(file, '(file)', 'expected a KubeProxyConfiguration mapping');
  const root = doc as Record<string, unknown>;
  if (root.kind !== 'KubeProxyConfiguration')
    throw new KubeProxyConfigError(file, 'kind', 'expected KubeProxyConfiguration');
  if (root.apiVersion !== KPC_API_VERSION)
    throw new KubeProxyConfigError(file, 'apiVersion', `expected ${KPC_API_VERSION}`);
  const flags: KpcFlags = {};
  const ct: string[] = [];
  let perCore: number | undefined;
  let min = 0;
  const used = new Set<string>();
  for (const f of FIELDS) {
    const v = get(root, f.path);
    if (v === undefined || v === null || v === '') continue;
    used.add(f.path);
    const s = f.conv(v, f.path, file);
    if (f.flag === 'ctMaxPerCore') perCore = Number(s);
    else if (f.flag === 'ctMin') min = Number(s);
    else if (f.flag.startsWith('ct:')) ct.push(`${f.flag.slice(3)}=${s}`);
    else flags[f.flag as keyof KpcFlags] = s;
  }
  if (perCore !== undefined && perCore > 0) flags.ctMax = String(Math.max(perCore * cores, min));
  if (ct.length > 0) flags.ctTimeout = ct.join(',');
  const notes: string[] = [];
  for (const p of leaves(root)) {
    if (used.has(p)) continue;
    const v = get(root, p);
    if (v === undefined || v === null || v === '' || (Array.isArray(v) && v.length === 0)) continue;
    notes.push(`${file}: ${p}: ${NOTED[p] ?? 'no kubetun equivalent; ignored'}`);
  }
  return { flags, notes };
}

/** The file's flags under the command line's: a flag typed on the command line always wins. */
export function mergeUnderFlags<T extends object>(
  flags: T,
  file: KpcFlags,
  givenOnCli: (flag: keyof KpcFlags) => boolean,
): T {
  const out = { ...flags } as T & KpcFlags;
  for (const [k, v] of Object.entries(file) as [keyof KpcFlags, string][]) {
    if (!givenOnCli(k)) out[k] = v;
  }
  return out;
}

/** Go's time.ParseDuration subset kube-proxy files use ("30s", "1h0m0s", "500ms"), in ms. */
export function goDurationMs(s: string, field: string, file: string): number {
  const re = /(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)/gy;
  let total = 0;
  let m: RegExpExecArray | null;
  let at = 0;
  if (s === '0') return 0;
  for (m = re.exec(s); m !== null; m = re.exec(s)) {
    const n = Number(m[1]);
    const unit = { h: 3_600_000, m: 60_000, s: 1000, ms: 1, us: 1e-3, µs: 1e-3, ns: 1e-6 }[m[2]];
    total += n * (unit ?? 0);
    at = re.lastIndex;
  }
  if (at !== s.length || s.length === 0)
    throw new KubeProxyConfigError(
      file,
      field,
      `expected a duration like "30s" or "1h0m0s", got ${JSON.stringify(s)}`,
    );
  return Math.round(total);
}

/** What /configz serves: the running agent's settings in kube-proxy's shape. */
export interface KpcView {
  nodeName: string;
  clusterCidr: string;
  healthzBindAddress: string;
  metricsBindAddress: string;
  syncPeriodMs: number;
  minSyncPeriodMs: number;
  scheduler: string;
  kubeconfig?: string;
  detectLocalMode: string;
  bridgeInterface: string;
  interfaceNamePrefix: string;
  ctMax: number;
  ctTcpEstablishedSec: number;
  ctTcpCloseWaitSec: number;
  ctUdpSec: number;
  ctUdpStreamSec: number;
}

const goDuration = (msv: number) => `${msv / 1000}s`;

/** kube-proxy's /configz body: {"kubeproxy.config.k8s.io": KubeProxyConfiguration}. */
export function configzBody(v: KpcView): Record<string, unknown> {
  return {
    [KPC_GROUP]: {
      apiVersion: KPC_API_VERSION,
      kind: 'KubeProxyConfiguration',
      mode: 'kubetun',
      hostnameOverride: v.nodeName,
      clusterCIDR: v.clusterCidr,
      healthzBindAddress: v.healthzBindAddress,
      metricsBindAddress: v.metricsBindAddress,
      clientConnection: { kubeconfig: v.kubeconfig ?? '' },
      syncPeriod: goDuration(v.syncPeriodMs),
      minSyncPeriod: goDuration(v.minSyncPeriodMs),
      ipvs: { scheduler: v.scheduler },
      detectLocalMode: v.detectLocalMode,
      detectLocal: {
        bridgeInterface: v.bridgeInterface,
        interfaceNamePrefix: v.interfaceNamePrefix,
      },
      conntrack: {
        maxPerCore: 0,
        min: v.ctMax,
        tcpEstablishedTimeout: `${v.ctTcpEstablishedSec}s`,
        tcpCloseWaitTimeout: `${v.ctTcpCloseWaitSec}s`,
        udpTimeout: `${v.ctUdpSec}s`,
        udpStreamTimeout: `${v.ctUdpStreamSec}s`,
      },
    },
  };
}

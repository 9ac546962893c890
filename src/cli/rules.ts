// `kubetun rules`: print the ruleset kube-proxy would program for a manifests directory, as
// `iptables-restore` input (iptables mode) or an `nft -f` file (nftables mode); with
// --ip-family IPv6, what kube-proxy's IPv6 proxier writes (ip6tables-restore input, the ip6
// table). Offline, no root: diff it against `iptables-save` on a real node, or load it into a
// scratch namespace.
import type { Command } from 'commander';
import { UsageError } from '../errors.ts';
import { loadManifests, resolveServicePorts } from '../manifests/index.ts';
import { renderIptables } from '../rules/iptables.ts';
import { renderJumpCommands } from '../rules/jumps.ts';
import type { RulesOptions } from '../rules/options.ts';

export type RulesMode = 'iptables' | 'nftables';

export interface RulesCliOptions extends RulesOptions {
  manifests: string;
  mode: RulesMode;
  /** kube-apiserver --service-node-port-range, "min-max" */
  nodePortRange?: string;
  /** also print the built-in chain jumps as shell commands (iptables mode) */
  jumps?: boolean;
  /** ServiceCIDRs (nftables mode drops traffic to unallocated ClusterIPs in them) */
  serviceCIDRs?: string[];
}

function parseRange(s: string): { min: number; max: number } {
  const m = /^(\d+)-(\d+)$/.exec(s);
  const min = m ? Number(m[1]) : Number.NaN;
  const max = m ? Number(m[2]) : Number.NaN;
  if (!m || min < 1 || max > 65535 || min > max) {
    throw new UsageError(`--service-node-port-range: "${s}" is not MIN-MAX`);
  }
  return { min, max };
}

/**
 * --cluster-cidr as kube-proxy takes it: one CIDR per family, comma-separated, either order
 * ("10.244.0.0/16,fd00:10:244::/56"); each family's proxier uses its own, and a family without
 * one has no local traffic detector (kube-proxy warns and runs without).
 */
export function clusterCidrOfFamily(
  v: string | undefined,
  family: 'IPv4' | 'IPv6' = 'IPv4',
): string | undefined {
  if (v === undefined) return undefined;
  const mine = v
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '' && x.includes(':') === (family === 'IPv6'));
  if (mine.length > 1)
    throw new UsageError(`--cluster-cidr: "${v}" has more than one ${family} CIDR`, {
      hint: 'one CIDR per family, comma-separated: 10.244.0.0/16,fd00:10:244::/56',
    });
  return mine[0];
}

/** Load, resolve and render; returns the text `kubetun rules` prints. */
export async function renderRules(opts: RulesCliOptions): Promise<string> {
  const o = { ...opts, clusterCIDR: clusterCidrOfFamily(opts.clusterCIDR, opts.ipFamily) };
  const range = o.nodePortRange === undefined ? undefined : parseRange(o.nodePortRange);
  const state = loadManifests(o.manifests, range ? { nodePortRange: range } : {});
  const ports = resolveServicePorts(state, { nodeName: o.nodeName, family: o.ipFamily });
  try {
    if (o.mode === 'nftables') {
      const { renderNftables } = await import('../rules/nftables.ts');
      return renderNftables(ports, o);
    }
    const restore = renderIptables(ports, o);
    return o.jumps
      ? `${restore}# jumps from the built-in chains:\n${renderJumpCommands(o.ipFamily === 'IPv6' ? 'ip6tables' : 'iptables')}`
      : restore;
  } catch (e) {
    if (e instanceof RangeError) throw new UsageError(e.message);
    throw e;
  }
}

const collect = (v: string, prev: string[] = []) => [...prev, ...v.split(',').filter(Boolean)];

function ipFamilyFlag(v: string | undefined): RulesCliOptions['ipFamily'] {
  if (v === undefined || v === 'IPv4' || v === 'IPv6') return v;
  throw new UsageError(`--ip-family: "${v}" is not IPv4 or IPv6`);
}

/** commander's parsed options -> RulesCliOptions (camel-cased flag names, --no-x defaults). */
function cliOptions(opts: Record<string, unknown>, mode: RulesMode): RulesCliOptions {
  return {
    manifests: opts.manifests as string,
    mode,
    ipFamily: ipFamilyFlag(opts.ipFamily as string | undefined),
    clusterCIDR: opts.clusterCidr as string | undefined,
    nodeName: opts.nodeName as string | undefined,
    nodeIPs: opts.nodeIp as string[] | undefined,
    nodeZone: opts.nodeZone as string | undefined,
    nodePortAddresses: opts.nodeportAddresses as string[] | undefined,
    serviceCIDRs: opts.serviceCidr as string[] | undefined,
    masqueradeAll: opts.masqueradeAll === true,
    masqueradeBit: opts.masqueradeBit as number | undefined,
    randomFully: opts.randomFully !== false,
    localhostNodePorts: opts.localhostNodeports !== false,
    nfacct: opts.nfacct !== false,
    conntrackTCPLiberal: opts.conntrackTcpLiberal === true,
    nodePortRange: opts.serviceNodePortRange as string | undefined,
    jumps: opts.jumps === true,
  };
}

export function register(program: Command): void {
  program
    .command('rules')
    .description(
      'print the rules kube-proxy would write for these manifests (iptables-restore or nft -f input)',
    )
    .requiredOption('--manifests <path>', 'Service/EndpointSlice YAML file or directory')
    .option('--mode <mode>', 'iptables or nftables', 'iptables')
    .option('--ip-family <family>', 'IPv4 (default) or IPv6: the proxier of that family')
    .option(
      '--cluster-cidr <cidr>',
      "pod CIDR (local traffic detector; off-cluster ClusterIP traffic is masqueraded); kube-proxy's dual-stack form v4,v6 too: each --ip-family takes its own",
    )
    .option('--node-name <name>', "this node's name (local endpoints, traffic policies)")
    .option('--node-ip <ip...>', "this node's IPs; the first is kube-proxy's node IP", collect)
    .option('--node-zone <zone>', 'topology.kubernetes.io/zone of this node (topology hints)')
    .option('--nodeport-addresses <cidr...>', 'kube-proxy --nodeport-addresses', collect)
    .option(
      '--service-cidr <cidr...>',
      'nftables mode: ServiceCIDRs (unallocated ClusterIPs are dropped)',
      collect,
    )
    .option('--masquerade-all', 'kube-proxy --masquerade-all')
    .option('--masquerade-bit <n>', 'kube-proxy --iptables-masquerade-bit', (v) =>
      Number.parseInt(v, 10),
    )
    .option('--no-random-fully', 'iptables without MASQUERADE --random-fully')
    .option('--no-localhost-nodeports', 'kube-proxy --iptables-localhost-nodeports=false')
    .option('--no-nfacct', 'nfacct counters unavailable')
    .option('--conntrack-tcp-liberal', 'nf_conntrack_tcp_be_liberal is set (no INVALID drop rule)')
    .option('--service-node-port-range <min-max>', 'accepted nodePort range (default 30000-32767)')
    .option('--jumps', 'iptables mode: also print the jumps from built-in chains as shell commands')
    .action(async (opts: Record<string, unknown>) => {
      const mode = opts.mode as string;
      if (mode !== 'iptables' && mode !== 'nftables') {
        throw new UsageError(`--mode: "${mode}" is not iptables or nftables`);
      }
      process.stdout.write(await renderRules(cliOptions(opts, mode)));
    });
}

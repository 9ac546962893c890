// A Pod's /etc/resolv.conf, as the kubelet writes it (pkg/kubelet/network/dns), and where the
// lab puts it so that processes in the Pod's network namespace read it.
//
// dnsPolicy (unset = ClusterFirst, the apiserver's default):
//   ClusterFirst            nameserver <cluster DNS IPs>
//                           search <ns>.svc.<domain> svc.<domain> <domain> <the node's searches>
//                           options ndots:5
//                           — with hostNetwork, or with no cluster DNS IP, the kubelet falls
//                           back to Default.
//   ClusterFirstWithHostNet as ClusterFirst, also for hostNetwork Pods.
//   Default                 the node's resolv.conf (nameservers, searches, options).
//   None                    nothing but spec.dnsConfig.
// spec.dnsConfig is merged into every policy: nameservers and searches appended without
// duplicates, options merged by name with the Pod's value winning (dnsConfig `ndots: "2"`
// replaces ndots:5). The result is capped as the kubelet caps it: 3 nameservers (glibc's
// MAXNS), 32 search domains.
//
// `ip netns exec NAME` bind-mounts every file of /etc/netns/NAME/ over the same name in /etc,
// so placeResolvConf(NAME, text) is how a Pod namespace gets its own /etc/resolv.conf (checked
// on this lab machine: `ip netns exec` shows the placed file, the host keeps its own).
import { mkdirSync, readFileSync, renameSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { UsageError } from '../../errors.ts';
import type { Pod, PodSpec } from '../types.ts';

export type PodDnsOption = NonNullable<NonNullable<PodSpec['dnsConfig']>['options']>[number];

/** The fields of a Pod (types.ts) the kubelet reads for DNS; a whole Pod will do. */
export interface PodDns {
  metadata: Pick<Pod['metadata'], 'namespace'>;
  spec?: Pick<PodSpec, 'dnsPolicy' | 'hostNetwork' | 'dnsConfig'>;
}

export interface DnsConfig {
  nameservers: string[];
  searches: string[];
  options: PodDnsOption[];
}

/** The kubelet's defaultDNSOptions for cluster DNS. */
export const CLUSTER_DNS_OPTIONS: readonly PodDnsOption[] = [{ name: 'ndots', value: '5' }];
export const MAX_NAMESERVERS = 3;
export const MAX_SEARCHES = 32;
export const NETNS_ETC = '/etc/netns';

export function resolvConf(
  pod: PodDns,
  clusterDnsIP: string | readonly string[],
  clusterDomain: string,
  nodeResolvConf: string = readNodeResolvConf(),
): string {
  return formatResolvConf(podDnsConfig(pod, clusterDnsIP, clusterDomain, nodeResolvConf));
}

export function podDnsConfig(
  pod: PodDns,
  clusterDnsIP: string | readonly string[],
  clusterDomain: string,
  nodeResolvConf: string,
): DnsConfig {
  const servers = (typeof clusterDnsIP === 'string' ? [clusterDnsIP] : [...clusterDnsIP]).filter(
    (s) => s !== '',
  );
  const policy = pod.spec?.dnsPolicy ?? 'ClusterFirst';
  const hostNet = pod.spec?.hostNetwork === true;
  const node = parseResolvConf(nodeResolvConf);
  let base: DnsConfig;
  if (policy === 'None') base = { nameservers: [], searches: [], options: [] };
  else if (policy === 'Default') base = node;
  else if (servers.length === 0 || (policy === 'ClusterFirst' && hostNet)) base = node;
  else {
    const ns = pod.metadata.namespace ?? 'default';
    const domain = clusterDomain.replace(/\.$/, '');
    base = {
      nameservers: servers,
      searches: [`${ns}.svc.${domain}`, `svc.${domain}`, domain, ...node.searches],
      options: [...CLUSTER_DNS_OPTIONS],
    };
  }
  const extra = pod.spec?.dnsConfig ?? {};
  return {
    nameservers: unique([...base.nameservers, ...(extra.nameservers ?? [])]).slice(
      0,
      MAX_NAMESERVERS,
    ),
    searches: unique([...base.searches, ...(extra.searches ?? [])]).slice(0, MAX_SEARCHES),
    options: mergeOptions(base.options, extra.options ?? []),
  };
}

function unique(list: string[]): string[] {
  return [...new Set(list)];
}

function mergeOptions(base: PodDnsOption[], extra: PodDnsOption[]): PodDnsOption[] {
  const byName = new Map<string, PodDnsOption>();
  for (const o of [...base, ...extra]) byName.set(o.name, o);
  return [...byName.values()];
}

/** resolv.conf(5): nameserver lines, the last search/domain line, options lines. */
export function parseResolvConf(text: string): DnsConfig {
  const c: DnsConfig = { nameservers: [], searches: [], options: [] };
  for (const raw of text.split('\n')) {
    const [key, ...args] = raw
      .replace(/[#;].*$/, '')
      .trim()
      .split(/\s+/);
    if (key === 'nameserver' && args[0]) c.nameservers.push(args[0]);
    else if (key === 'search' || key === 'domain') c.searches = args;
    else if (key === 'options')
      for (const a of args) {
        const i = a.indexOf(':');
        c.options = mergeOptions(c.options, [
          i < 0 ? { name: a } : { name: a.slice(0, i), value: a.slice(i + 1) },
        ]);
      }
  }
  return c;
}

export function formatResolvConf(c: DnsConfig): string {
  const lines = c.nameservers.map((s) => `nameserver ${s}`);
  if (c.searches.length > 0) lines.push(`search ${c.searches.join(' ')}`);
  if (c.options.length > 0)
    lines.push(
      `options ${c.options.map((o) => (o.value === undefined ? o.name : `${o.name}:${o.value}`)).join(' ')}`,
    );
  return `${lines.join('\n')}\n`;
}

function readNodeResolvConf(): string {
  try {
    return readFileSync('/etc/resolv.conf', 'utf8');
  } catch {
    return '';
  }
}

function netnsDir(netns: string, etc: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(netns) || netns.includes('..'))
    throw new UsageError(`not a network namespace name: ${JSON.stringify(netns)}`);
  return join(etc, netns);
}

/** Writes /etc/netns/<netns>/resolv.conf (atomically: a reader never sees half a file). */
export function placeResolvConf(netns: string, text: string, etc = NETNS_ETC): string {
  const dir = netnsDir(netns, etc);
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'resolv.conf');
  writeFileSync(`${file}.tmp`, text);
  renameSync(`${file}.tmp`, file);
  return file;
}

/** Removes what placeResolvConf wrote, and the namespace's folder once empty; /etc/netns stays. */
export function removeResolvConf(netns: string, etc = NETNS_ETC): void {
  const dir = netnsDir(netns, etc);
  rmSync(join(dir, 'resolv.conf'), { force: true });
  try {
    rmdirSync(dir);
  } catch {
    // not empty (someone placed other files there) or already gone: leave it
  }
}

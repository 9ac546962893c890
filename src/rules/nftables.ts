// The nftables transaction kube-proxy's nftables proxier (pkg/proxy/nftables, GA in 1.33)
// programs for a set of Services and EndpointSlices, IPv4, as a full sync into an empty
// table, in `nft -f` syntax. Dispatch is a hashed lookup per packet, not a rule list:
//
//   nat-prerouting/nat-output -> services:
//     ip daddr . meta l4proto . th dport vmap @service-ips    (ClusterIP, external, LB IPs)
//     ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports
//   service-X: masquerade off-cluster sources, then numgen random mod N vmap { i : goto endpoint-Y }
//   endpoint-Y: hairpin masquerade, dnat to ip:port
//   filter hooks: @no-endpoint-services / @no-endpoint-nodeports (drop or reject),
//                 @firewall-ips (loadBalancerSourceRanges), cluster-ips-check (bad port/IP)

import type { ResolvedServicePort } from '../model.ts';
import { nftEndpointNameBase, nftServiceNameBase } from './hash.ts';
import { familyNodeIP, familyNodePortCidrs, type RulesFamily, rulesFamily } from './family.ts';
import { nftLocalMatch } from './local-detect.ts';
import {
  type ResolvedRulesOptions,
  type RulesOptions,
  resolveRulesOptions,
  rulesLocalDetector,
} from './options.ts';
import {
  categorizePort,
  type EndpointInfo,
  externallyAccessible,
  type PortInfo,
  portInfos,
} from './portinfo.ts';
import type { Categorized as CategorizedOf } from '../endpoints/select.ts';

type Categorized = CategorizedOf<EndpointInfo>;

/** the local traffic detector's expressions (local-detect.ts); null = no detector */
type NftLocal = ReturnType<typeof nftLocalMatch>;

export interface NftOptions extends RulesOptions {
  /** ServiceCIDRs (kube-apiserver --service-cluster-ip-range): unallocated ClusterIPs are dropped */
  serviceCIDRs?: string[];
}

/** A transaction being built; printed in declaration-before-use order. */
class Tx {
  /** "ip kube-proxy" or "ip6 kube-proxy": the table every command names */
  private readonly t: string;
  constructor(readonly fam: RulesFamily) {
    this.t = `${fam.nft} kube-proxy`;
  }
  readonly sets: string[] = [];
  readonly maps: string[] = [];
  readonly chains: string[] = [];
  readonly rules: string[] = [];
  readonly elements: string[] = [];

  set(name: string, body: string): void {
    this.sets.push(`add set ${this.t} ${name} { ${body} ; }`);
  }
  map(name: string, type: string, comment: string): void {
    this.maps.push(`add map ${this.t} ${name} { type ${type} : verdict ; comment "${comment}" ; }`);
  }
  chain(name: string, spec?: string): void {
    this.chains.push(
      spec ? `add chain ${this.t} ${name} { ${spec} ; }` : `add chain ${this.t} ${name}`,
    );
  }
  rule(chain: string, rule: string, comment?: string): void {
    this.rules.push(`add rule ${this.t} ${chain} ${rule}${comment ? ` comment "${comment}"` : ''}`);
  }
  element(container: string, key: string, value?: string, comment?: string): void {
    const c = comment ? ` comment "${comment}"` : '';
    this.elements.push(
      `add element ${this.t} ${container} { ${key}${c}${value ? ` : ${value}` : ''} }`,
    );
  }
  text(): string {
    const head = `add table ${this.t} { comment "rules for kube-proxy" ; }`;
    const groups = [[head], this.sets, this.maps, this.chains, this.rules, this.elements];
    return `${groups
      .filter((g) => g.length > 0)
      .map((g) => g.join('\n'))
      .join('\n\n')}\n`;
  }
}

interface NodePorts {
  matchAll: boolean;
  ips: string[];
}

function nodePortSelection(o: ResolvedRulesOptions, fam: RulesFamily): NodePorts {
  const cidrs = familyNodePortCidrs(fam, o.nodePortAddresses);
  if (cidrs === null) return { matchAll: true, ips: [] };
  const ips: string[] = [];
  for (const ip of o.nodeIPs) {
    // Localhost NodePorts are not supported in nftables mode.
    if (fam.canon(ip) === null || fam.isLoopback(ip) || ips.includes(ip)) continue;
    if (cidrs.some((c) => c.contains(ip))) ips.push(ip);
  }
  return { matchAll: false, ips };
}

const BASE_CHAINS: [string, string][] = [
  ['filter-prerouting-pre-dnat', 'type filter hook prerouting priority -110'],
  ['filter-output-pre-dnat', 'type filter hook output priority -110'],
  ['filter-forward', 'type filter hook forward priority 0'],
  ['filter-input', 'type filter hook input priority 0'],
  ['filter-output', 'type filter hook output priority 0'],
  ['nat-output', 'type nat hook output priority -100'],
  ['nat-postrouting', 'type nat hook postrouting priority 100'],
  ['nat-prerouting', 'type nat hook prerouting priority -100'],
];

// [destination, source, match]: jumps from the base chains, in kube-proxy's order.
const JUMPS: [string, string, string][] = [
  ['nodeport-endpoints-check', 'filter-input', 'ct state new '],
  ['service-endpoints-check', 'filter-input', 'ct state new '],
  ['service-endpoints-check', 'filter-forward', 'ct state new '],
  ['service-endpoints-check', 'filter-output', 'ct state new '],
  ['firewall-check', 'filter-prerouting-pre-dnat', 'ct state new '],
  ['firewall-check', 'filter-output-pre-dnat', 'ct state new '],
  ['services', 'nat-output', ''],
  ['services', 'nat-prerouting', ''],
  ['masquerading', 'nat-postrouting', ''],
  ['cluster-ips-check', 'filter-forward', 'ct state new '],
  ['cluster-ips-check', 'filter-output', 'ct state new '],
];

const PLAIN_CHAINS = [
  'cluster-ips-check',
  'firewall-check',
  'mark-for-masquerade',
  'masquerading',
  'nodeport-endpoints-check',
  'services',
  'service-endpoints-check',
];

function writeMaps(tx: Tx): void {
  const dest = `${tx.fam.nftAddr} . inet_proto . inet_service`;
  tx.map('firewall-ips', dest, 'destinations that are subject to LoadBalancerSourceRanges');
  tx.map(
    'no-endpoint-nodeports',
    'inet_proto . inet_service',
    'vmap to drop or reject packets to service nodeports with no endpoints',
  );
  tx.map(
    'no-endpoint-services',
    dest,
    'vmap to drop or reject packets to services with no endpoints',
  );
  tx.map('service-ips', dest, 'ClusterIP, ExternalIP and LoadBalancer IP traffic');
  tx.map('service-nodeports', 'inet_proto . inet_service', 'NodePort traffic');
}

function writeBase(tx: Tx, o: ResolvedRulesOptions, np: NodePorts, serviceCIDRs: string[]): void {
  const { nft, nftAddr, loopback } = tx.fam;
  tx.set('cluster-ips', `type ${nftAddr} ; comment "Active ClusterIPs"`);
  if (!np.matchAll)
    tx.set('nodeport-ips', `type ${nftAddr} ; comment "IPs that accept NodePort traffic"`);
  writeMaps(tx);
  for (const [name, spec] of BASE_CHAINS) tx.chain(name, spec);
  for (const name of PLAIN_CHAINS) tx.chain(name);
  tx.chain('reject-chain', 'comment "helper for @no-endpoint-services / @no-endpoint-nodeports"');
  for (const [dst, src, match] of JUMPS) tx.rule(src, `${match}jump ${dst}`);
  const mark = o.masqueradeMark;
  tx.rule('mark-for-masquerade', `mark set mark or ${mark}`);
  tx.rule('masquerading', `mark and ${mark} == 0 return`);
  tx.rule('masquerading', `mark set mark xor ${mark}`);
  tx.rule('masquerading', 'masquerade fully-random');
  tx.rule(
    'cluster-ips-check',
    `${nft} daddr @cluster-ips reject`,
    'Reject traffic to invalid ports of ClusterIPs',
  );
  if (serviceCIDRs.length > 0) {
    tx.rule(
      'cluster-ips-check',
      `${nft} daddr { ${serviceCIDRs.join(',')} } drop`,
      'Drop traffic to unallocated ClusterIPs',
    );
  }
  tx.rule('firewall-check', `${nft} daddr . meta l4proto . th dport vmap @firewall-ips`);
  tx.rule('reject-chain', 'reject');
  tx.rule(
    'service-endpoints-check',
    `${nft} daddr . meta l4proto . th dport vmap @no-endpoint-services`,
  );
  tx.rule('services', `${nft} daddr . meta l4proto . th dport vmap @service-ips`);
  if (np.matchAll) {
    tx.rule(
      'nodeport-endpoints-check',
      `${nft} daddr != ${loopback} meta l4proto . th dport vmap @no-endpoint-nodeports`,
    );
    tx.rule(
      'services',
      `fib daddr type local ${nft} daddr != ${loopback} meta l4proto . th dport vmap @service-nodeports`,
    );
  } else {
    tx.rule(
      'nodeport-endpoints-check',
      `${nft} daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports`,
    );
    tx.rule(
      'services',
      `${nft} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports`,
    );
    for (const ip of np.ips) tx.element('nodeport-ips', ip);
  }
}

interface NftPlan {
  p: PortInfo;
  c: Categorized;
  svc: string;
  local: string;
  ext: string;
  fw: string;
  hasInternal: boolean;
  hasExternal: boolean;
}

function nftPlan(p: PortInfo, c: Categorized): NftPlan {
  const base = nftServiceNameBase(p.namespace, p.name, p.portName, p.protocol);
  return {
    p,
    c,
    svc: `service-${base}`,
    local: `local-${base}`,
    ext: `external-${base}`,
    fw: `firewall-${base}`,
    hasInternal: c.hasAny && (!p.internalPolicyLocal || c.local.length > 0),
    hasExternal: c.hasAny && (!p.externalPolicyLocal || c.local.length > 0),
  };
}

function epBase(p: PortInfo, ep: EndpointInfo): string {
  return nftEndpointNameBase(p.namespace, p.name, p.portName, p.protocol, ep.ip, ep.port);
}

function writeDispatchElements(tx: Tx, x: NftPlan): void {
  const { p } = x;
  const key = (ip: string) => `${ip} . ${p.protocol} . ${p.port}`;
  const noEps = x.c.hasAny ? 'drop' : 'goto reject-chain';
  tx.element('cluster-ips', p.clusterIP);
  if (x.hasInternal) {
    tx.element('service-ips', key(p.clusterIP), `goto ${p.internalPolicyLocal ? x.local : x.svc}`);
  } else {
    tx.element('no-endpoint-services', key(p.clusterIP), noEps, p.spn);
  }
  for (const ip of [...p.externalIPs, ...p.lbVIPs]) {
    if (x.c.hasAny) tx.element('service-ips', key(ip), `goto ${x.ext}`);
  }
  if (p.lbVIPs.length > 0 && p.sourceRanges.length > 0) {
    for (const ip of p.lbVIPs) tx.element('firewall-ips', key(ip), `goto ${x.fw}`);
  }
  if (!x.hasExternal) {
    for (const ip of [...p.externalIPs, ...p.lbVIPs])
      tx.element('no-endpoint-services', key(ip), noEps, p.spn);
  }
  if (p.nodePort === 0) return;
  const np = `${p.protocol} . ${p.nodePort}`;
  if (x.c.hasAny) tx.element('service-nodeports', np, `goto ${x.ext}`);
  if (!x.hasExternal) tx.element('no-endpoint-nodeports', np, noEps, p.spn);
}

function writeExternalChain(tx: Tx, x: NftPlan, local: NftLocal): void {
  if (!(x.c.hasAny && externallyAccessible(x.p))) return;
  tx.chain(x.ext);
  if (!x.p.externalPolicyLocal) {
    tx.rule(x.ext, 'jump mark-for-masquerade');
  } else {
    // Pods and the host itself get Cluster policy, as if they went out to the LB and back.
    if (local !== null) tx.rule(x.ext, `${local.local} goto ${x.svc}`, 'short-circuit pod traffic');
    tx.rule(x.ext, 'fib saddr type local jump mark-for-masquerade', 'masquerade local traffic');
    tx.rule(x.ext, `fib saddr type local goto ${x.svc}`, 'short-circuit local traffic');
  }
  if (x.hasExternal) tx.rule(x.ext, `goto ${x.p.externalPolicyLocal ? x.local : x.svc}`);
}

function writeFirewallChain(tx: Tx, x: NftPlan, nodeIP: string | null): void {
  const { p } = x;
  if (!(p.lbVIPs.length > 0 && p.sourceRanges.length > 0)) return;
  tx.chain(x.fw);
  const sources = p.sourceRanges.map((c) => c.text);
  // A node reaching a VIP-style LB IP that is local loops back with the VIP as source.
  if (nodeIP !== null && p.sourceRanges.some((c) => c.contains(nodeIP))) sources.push(...p.lbVIPs);
  tx.rule(x.fw, `${tx.fam.nft} saddr != { ${sources.join(' , ')} } drop`);
}

function writePolicyChain(
  tx: Tx,
  x: NftPlan,
  chain: string,
  eps: EndpointInfo[],
  masq: string | null,
): void {
  tx.chain(chain);
  if (masq !== null) tx.rule(chain, masq);
  if (x.p.affinity) {
    for (const ep of eps) {
      const b = epBase(x.p, ep);
      tx.rule(chain, `${tx.fam.nft} saddr @affinity-${b} goto endpoint-${b}`);
    }
  }
  const vmap = eps.map((ep, i) => `${i} : goto endpoint-${epBase(x.p, ep)}`).join(' , ');
  tx.rule(chain, `numgen random mod ${eps.length} vmap { ${vmap} }`);
}

function writeEndpointChains(tx: Tx, x: NftPlan): void {
  const { p } = x;
  const { nft, nftAddr } = tx.fam;
  for (const ep of x.c.reachable) {
    const b = epBase(p, ep);
    if (p.affinity)
      tx.set(
        `affinity-${b}`,
        `type ${nftAddr} ; flags dynamic,timeout ; timeout ${p.stickySeconds}s`,
      );
    tx.chain(`endpoint-${b}`);
    tx.rule(`endpoint-${b}`, `${nft} saddr ${ep.ip} jump mark-for-masquerade`);
    if (p.affinity) tx.rule(`endpoint-${b}`, `update @affinity-${b} { ${nft} saddr }`);
    tx.rule(`endpoint-${b}`, `meta l4proto ${p.protocol} dnat to ${ep.str}`);
  }
}

function writeService(tx: Tx, x: NftPlan, o: ResolvedRulesOptions, local: NftLocal): void {
  writeDispatchElements(tx, x);
  const { p, c } = x;
  const internalChain = p.internalPolicyLocal ? x.local : x.svc;
  let masq: string | null = null;
  const nft = tx.fam.nft;
  if (x.hasInternal && o.masqueradeAll)
    masq = `${nft} daddr ${p.clusterIP} jump mark-for-masquerade`;
  else if (x.hasInternal && local !== null)
    masq = `${nft} daddr ${p.clusterIP} ${local.notLocal} jump mark-for-masquerade`;
  if (c.cluster.length > 0 && (!p.internalPolicyLocal || externallyAccessible(p))) {
    writePolicyChain(tx, x, x.svc, c.cluster, internalChain === x.svc ? masq : null);
  }
  if (
    c.local.length > 0 &&
    (p.internalPolicyLocal || (p.externalPolicyLocal && externallyAccessible(p)))
  ) {
    writePolicyChain(tx, x, x.local, c.local, internalChain === x.local ? masq : null);
  }
  writeExternalChain(tx, x, local);
  writeFirewallChain(tx, x, familyNodeIP(o.nodeIPs, tx.fam));
  writeEndpointChains(tx, x);
}

/** Render an `nft -f` file with the table kube-proxy's nftables proxier programs. */
export function renderNftables(
  ports: readonly ResolvedServicePort[],
  opts: NftOptions = {},
): string {
  const o = resolveRulesOptions(opts);
  const fam = rulesFamily(o.ipFamily);
  const local = nftLocalMatch(rulesLocalDetector(o));
  const serviceCIDRs: string[] = [];
  // kube-proxy keeps the service CIDRs of its own family and leaves the other's to its twin.
  for (const s of opts.serviceCIDRs ?? []) {
    if (s.includes(':') !== (fam.name === 'IPv6')) continue;
    const c = fam.cidr(s);
    if (c === null) throw new RangeError(`serviceCIDRs: "${s}" is not an ${fam.name} CIDR`);
    serviceCIDRs.push(c.text);
  }
  const tx = new Tx(fam);
  writeBase(tx, o, nodePortSelection(o, fam), serviceCIDRs);
  const node = { nodeName: o.nodeName, nodeZone: o.nodeZone, preferSameNode: o.preferSameNode };
  for (const p of portInfos(ports, o.nodeName, fam)) {
    writeService(tx, nftPlan(p, categorizePort(p, node)), o, local);
  }
  return tx.text();
}

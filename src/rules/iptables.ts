// The iptables-restore input kube-proxy's iptables proxier writes for a set of Services and
// EndpointSlices: the same tables, chains, rules, comments and order as syncProxyRules (a full
// sync; ip6tables-restore input for an IPv6 proxier, options.ipFamily). Chain jumps from the built-in chains (PREROUTING -> KUBE-SERVICES, ...) are not
// part of that input; kube-proxy adds them with `iptables -I` (see jumps.ts).
//
//   nat  PREROUTING/OUTPUT -> KUBE-SERVICES -> KUBE-SVC-x ----------------> KUBE-SEP-y (DNAT)
//                                   |   \--> KUBE-EXT-x -> KUBE-SVC-x / KUBE-SVL-x
//                                   |   \--> KUBE-FW-x  -> KUBE-EXT-x (source ranges)
//                                   \-- (last) KUBE-NODEPORTS -> KUBE-EXT-x
//  filter KUBE-SERVICES / KUBE-EXTERNAL-SERVICES: REJECT (no endpoints), DROP (no local ones)

import type { ResolvedServicePort } from '../model.ts';
import { extChainName, fwChainName, sepChainName, svcChainName, svlChainName } from './hash.ts';
import { familyNodeIP, familyNodePortCidrs, type RulesFamily, rulesFamily } from './family.ts';
import { LineBuffer } from './linebuf.ts';
import { iptablesLocalMatch } from './local-detect.ts';
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
import { computeProbability } from './probability.ts';
import type { Categorized as CategorizedOf } from '../endpoints/select.ts';

type Categorized = CategorizedOf<EndpointInfo>;

export const KUBE_SERVICES = 'KUBE-SERVICES';
export const KUBE_EXTERNAL_SERVICES = 'KUBE-EXTERNAL-SERVICES';
export const KUBE_NODEPORTS = 'KUBE-NODEPORTS';
export const KUBE_POSTROUTING = 'KUBE-POSTROUTING';
export const KUBE_MARK_MASQ = 'KUBE-MARK-MASQ';
export const KUBE_FORWARD = 'KUBE-FORWARD';
export const KUBE_PROXY_FIREWALL = 'KUBE-PROXY-FIREWALL';
export const KUBE_FIREWALL = 'KUBE-FIREWALL';

/** nfacct counter names (pkg/proxy/metrics). */
export const NFACCT_CT_INVALID = 'ct_state_invalid_dropped_pkts';
export const NFACCT_LOCALHOST_NODEPORT = 'localhost_nps_accepted_pkts';

const chainLine = (chain: string) => `:${chain} - [0:0]`;
const q = (text: string) => `"${text}"`;
const cmt = (text: string) => ['-m', 'comment', '--comment', text];

interface Buffers {
  filterChains: LineBuffer;
  filterRules: LineBuffer;
  natChains: LineBuffer;
  natRules: LineBuffer;
}

interface Ctx extends Buffers {
  o: ResolvedRulesOptions;
  fam: RulesFamily;
  /** `-s <podCIDR>` of the local-traffic detector, or null without one */
  /** the local traffic detector's matches (local-detect.ts); null = no detector */
  local: { local: string[]; notLocal: string[] } | null;
  localhostNodePorts: boolean;
  largeClusterMode: boolean;
}

/** Per-port chain names and policy decisions (the prologue of kube-proxy's service loop). */
interface Plan {
  p: PortInfo;
  c: Categorized;
  svc: string;
  svl: string;
  ext: string;
  fw: string;
  internalChain: string;
  externalPolicyChain: string;
  hasInternal: boolean;
  hasExternal: boolean;
  usesExt: boolean;
  usesFw: boolean;
  lbChain: string;
}

function plan(p: PortInfo, c: Categorized): Plan {
  const svc = svcChainName(p.spn, p.protocol);
  const svl = svlChainName(p.spn, p.protocol);
  const ext = extChainName(p.spn, p.protocol);
  const fw = fwChainName(p.spn, p.protocol);
  const hasInternal = c.hasAny && (!p.internalPolicyLocal || c.local.length > 0);
  const hasExternal = c.hasAny && (!p.externalPolicyLocal || c.local.length > 0);
  const usesFw = c.hasAny && p.lbVIPs.length > 0 && p.sourceRanges.length > 0;
  return {
    p,
    c,
    svc,
    svl,
    ext,
    fw,
    internalChain: p.internalPolicyLocal ? svl : svc,
    externalPolicyChain: p.externalPolicyLocal ? svl : svc,
    hasInternal,
    hasExternal,
    usesExt: c.hasAny && externallyAccessible(p),
    usesFw,
    lbChain: usesFw ? fw : ext,
  };
}

function serviceMatch(x: Plan, ip: string, port: number): string[] {
  return ['-m', x.p.protocol, '-p', x.p.protocol, '-d', ip, '--dport', String(port)];
}

/** Filter verdict and comment for traffic with no usable endpoints (REJECT) or no local ones (DROP). */
function filterVerdict(x: Plan, external: boolean): [string, string] {
  if (!x.c.hasAny) return ['REJECT', q(`${x.p.spn} has no endpoints`)];
  if ((external && !x.hasExternal) || (!external && !x.hasInternal)) {
    return ['DROP', q(`${x.p.spn} has no local endpoints`)];
  }
  return ['', ''];
}

function writeClusterIPCapture(ctx: Ctx, x: Plan): void {
  const match = serviceMatch(x, x.p.clusterIP, x.p.port);
  if (x.hasInternal) {
    ctx.natRules.write(
      '-A',
      KUBE_SERVICES,
      cmt(q(`${x.p.spn} cluster IP`)),
      match,
      '-j',
      x.internalChain,
    );
    return;
  }
  const [target, comment] = filterVerdict(x, false);
  ctx.filterRules.write('-A', KUBE_SERVICES, cmt(comment), match, '-j', target);
}

function writeExternalIPCaptures(ctx: Ctx, x: Plan): void {
  const [target, comment] = filterVerdict(x, true);
  for (const ip of x.p.externalIPs) {
    const match = serviceMatch(x, ip, x.p.port);
    if (x.c.hasAny) {
      ctx.natRules.write('-A', KUBE_SERVICES, cmt(q(`${x.p.spn} external IP`)), match, '-j', x.ext);
    }
    if (!x.hasExternal) {
      ctx.filterRules.write('-A', KUBE_EXTERNAL_SERVICES, cmt(comment), match, '-j', target);
    }
  }
}

function writeLoadBalancerCaptures(ctx: Ctx, x: Plan): void {
  for (const ip of x.p.lbVIPs) {
    const match = serviceMatch(x, ip, x.p.port);
    if (x.c.hasAny) {
      ctx.natRules.write(
        '-A',
        KUBE_SERVICES,
        cmt(q(`${x.p.spn} loadbalancer IP`)),
        match,
        '-j',
        x.lbChain,
      );
    }
    if (x.usesFw) {
      const comment = q(`${x.p.spn} traffic not accepted by ${x.fw}`);
      ctx.filterRules.write('-A', KUBE_PROXY_FIREWALL, cmt(comment), match, '-j', 'DROP');
    }
  }
  if (x.hasExternal) return;
  const [target, comment] = filterVerdict(x, true);
  for (const ip of x.p.lbVIPs) {
    ctx.filterRules.write(
      '-A',
      KUBE_EXTERNAL_SERVICES,
      cmt(comment),
      serviceMatch(x, ip, x.p.port),
      '-j',
      target,
    );
  }
}

function writeNodePortCaptures(ctx: Ctx, x: Plan): void {
  const { p } = x;
  const proto = ['-m', p.protocol, '-p', p.protocol];
  if (p.nodePort !== 0) {
    const np = String(p.nodePort);
    if (x.c.hasAny) {
      // For better or worse, NodePorts are not subject to loadBalancerSourceRanges.
      if (ctx.localhostNodePorts && ctx.o.nfacct) {
        ctx.natRules.write(
          '-A',
          KUBE_NODEPORTS,
          cmt(p.spn),
          proto,
          '-d',
          ctx.fam.loopback,
          '--dport',
          np,
          '-m',
          'nfacct',
          '--nfacct-name',
          NFACCT_LOCALHOST_NODEPORT,
          '-j',
          x.ext,
        );
      }
      ctx.natRules.write('-A', KUBE_NODEPORTS, cmt(p.spn), proto, '--dport', np, '-j', x.ext);
    }
    if (!x.hasExternal) {
      const [target, comment] = filterVerdict(x, true);
      ctx.filterRules.write(
        '-A',
        KUBE_EXTERNAL_SERVICES,
        cmt(comment),
        '-m',
        'addrtype',
        '--dst-type',
        'LOCAL',
        proto,
        '--dport',
        np,
        '-j',
        target,
      );
    }
  }
}

function writeHealthCheckNodePort(ctx: Ctx, x: Plan): void {
  const { p } = x;
  if (p.healthCheckNodePort !== 0) {
    // Accepted whether or not this node has local endpoints: the LB asks, we answer 503.
    ctx.filterRules.write(
      '-A',
      KUBE_NODEPORTS,
      cmt(q(`${p.spn} health check node port`)),
      '-m',
      'tcp',
      '-p',
      'tcp',
      '--dport',
      String(p.healthCheckNodePort),
      '-j',
      'ACCEPT',
    );
  }
}

function writeInternalMasquerade(ctx: Ctx, x: Plan): void {
  if (!x.hasInternal) return;
  const args = [...cmt(q(`${x.p.spn} cluster IP`)), ...serviceMatch(x, x.p.clusterIP, x.p.port)];
  if (ctx.o.masqueradeAll) {
    ctx.natRules.write('-A', x.internalChain, args, '-j', KUBE_MARK_MASQ);
  } else if (ctx.local !== null) {
    // Off-cluster clients reaching a ClusterIP (a static route to the service range) may be
    // bridged to another node, so they are masqueraded.
    ctx.natRules.write('-A', x.internalChain, args, ...ctx.local.notLocal, '-j', KUBE_MARK_MASQ);
  }
}

function writeExternalChain(ctx: Ctx, x: Plan): void {
  if (!x.usesExt) return;
  const { spn } = x.p;
  ctx.natChains.write(chainLine(x.ext));
  if (!x.p.externalPolicyLocal) {
    ctx.natRules.write(
      '-A',
      x.ext,
      cmt(q(`masquerade traffic for ${spn} external destinations`)),
      '-j',
      KUBE_MARK_MASQ,
    );
  } else {
    // Pods reaching an external IP get Cluster policy, as if they went out to the LB and back.
    if (ctx.local !== null) {
      ctx.natRules.write(
        '-A',
        x.ext,
        cmt(q(`pod traffic for ${spn} external destinations`)),
        ...ctx.local.local,
        '-j',
        x.svc,
      );
    }
    // The host itself picks the LB IP (a local address) as source, so it must be masqueraded.
    ctx.natRules.write(
      '-A',
      x.ext,
      cmt(q(`masquerade LOCAL traffic for ${spn} external destinations`)),
      '-m',
      'addrtype',
      '--src-type',
      'LOCAL',
      '-j',
      KUBE_MARK_MASQ,
    );
    ctx.natRules.write(
      '-A',
      x.ext,
      cmt(q(`route LOCAL traffic for ${spn} external destinations`)),
      '-m',
      'addrtype',
      '--src-type',
      'LOCAL',
      '-j',
      x.svc,
    );
  }
  if (x.hasExternal) ctx.natRules.write('-A', x.ext, '-j', x.externalPolicyChain);
}

function writeFirewallChain(ctx: Ctx, x: Plan): void {
  if (!x.usesFw) return;
  ctx.natChains.write(chainLine(x.fw));
  const args = ['-A', x.fw, ...cmt(q(`${x.p.spn} loadbalancer IP`))];
  const nodeIP = familyNodeIP(ctx.o.nodeIPs, ctx.fam);
  let allowFromNode = false;
  for (const cidr of x.p.sourceRanges) {
    ctx.natRules.write(args, '-s', cidr.text, '-j', x.ext);
    if (nodeIP !== null && cidr.contains(nodeIP)) allowFromNode = true;
  }
  // A node reaching a VIP-style LB IP that is local loops back with the VIP as source.
  if (allowFromNode) {
    for (const ip of x.p.lbVIPs) ctx.natRules.write(args, '-s', ip, '-j', x.ext);
  }
  // Whatever falls off the end was not DNATed and meets KUBE-PROXY-FIREWALL's DROP.
  ctx.natRules.write(
    '-A',
    x.fw,
    cmt(q(`other traffic to ${x.p.spn} will be dropped by KUBE-PROXY-FIREWALL`)),
  );
}

function comment(ctx: Ctx, text: string): string[] {
  return ctx.largeClusterMode ? [] : cmt(text);
}

function writePolicyChain(ctx: Ctx, x: Plan, chain: string, eps: EndpointInfo[]): void {
  ctx.natChains.write(chainLine(chain));
  const { p } = x;
  if (p.affinity) {
    for (const ep of eps) {
      const sep = sepChainName(p.spn, p.protocol, ep.str);
      ctx.natRules.write(
        '-A',
        chain,
        comment(ctx, q(`${p.spn} -> ${ep.str}`)),
        '-m',
        'recent',
        '--name',
        sep,
        '--rcheck',
        '--seconds',
        String(p.stickySeconds),
        '--reap',
        '-j',
        sep,
      );
    }
  }
  eps.forEach((ep, i) => {
    const sep = sepChainName(p.spn, p.protocol, ep.str);
    const stat =
      i < eps.length - 1
        ? [
            '-m',
            'statistic',
            '--mode',
            'random',
            '--probability',
            computeProbability(eps.length - i),
          ]
        : [];
    ctx.natRules.write('-A', chain, comment(ctx, q(`${p.spn} -> ${ep.str}`)), stat, '-j', sep);
  });
}

function writeEndpointChains(ctx: Ctx, x: Plan): void {
  const { p } = x;
  for (const ep of x.c.reachable) {
    const sep = sepChainName(p.spn, p.protocol, ep.str);
    ctx.natChains.write(chainLine(sep));
    const args = ['-A', sep, ...comment(ctx, p.spn)];
    ctx.natRules.write(args, '-s', ep.ip, '-j', KUBE_MARK_MASQ); // hairpin: a pod reaching itself
    const affinity = p.affinity ? ['-m', 'recent', '--name', sep, '--set'] : [];
    ctx.natRules.write(
      args,
      affinity,
      '-m',
      p.protocol,
      '-p',
      p.protocol,
      '-j',
      'DNAT',
      '--to-destination',
      ep.str,
    );
  }
}

function writeService(ctx: Ctx, x: Plan): void {
  writeClusterIPCapture(ctx, x);
  writeExternalIPCaptures(ctx, x);
  writeLoadBalancerCaptures(ctx, x);
  writeNodePortCaptures(ctx, x);
  writeHealthCheckNodePort(ctx, x);
  writeInternalMasquerade(ctx, x);
  writeExternalChain(ctx, x);
  writeFirewallChain(ctx, x);
  if (x.c.cluster.length > 0 && (!x.p.internalPolicyLocal || externallyAccessible(x.p))) {
    writePolicyChain(ctx, x, x.svc, x.c.cluster);
  }
  if (
    x.c.local.length > 0 &&
    (x.p.internalPolicyLocal || (x.p.externalPolicyLocal && externallyAccessible(x.p)))
  ) {
    writePolicyChain(ctx, x, x.svl, x.c.local);
  }
  writeEndpointChains(ctx, x);
}

function writePrologue(ctx: Ctx): void {
  for (const c of [
    KUBE_SERVICES,
    KUBE_EXTERNAL_SERVICES,
    KUBE_FORWARD,
    KUBE_NODEPORTS,
    KUBE_PROXY_FIREWALL,
  ]) {
    ctx.filterChains.write(chainLine(c));
  }
  for (const c of [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ]) {
    ctx.natChains.write(chainLine(c));
  }
  const mark = ctx.o.masqueradeMark;
  ctx.natRules.write(
    '-A',
    KUBE_POSTROUTING,
    '-m',
    'mark',
    '!',
    '--mark',
    `${mark}/${mark}`,
    '-j',
    'RETURN',
  );
  // Clear the mark so a packet re-traversing the stack is not masqueraded twice.
  ctx.natRules.write('-A', KUBE_POSTROUTING, '-j', 'MARK', '--xor-mark', mark);
  const random = ctx.o.randomFully ? ['--random-fully'] : [];
  ctx.natRules.write(
    '-A',
    KUBE_POSTROUTING,
    cmt(q('kubernetes service traffic requiring SNAT')),
    '-j',
    'MASQUERADE',
    random,
  );
  ctx.natRules.write('-A', KUBE_MARK_MASQ, '-j', 'MARK', '--or-mark', mark);
  if (ctx.localhostNodePorts) {
    // route_localnet (needed for localhost NodePorts) opens CVE-2020-8558; this closes it.
    ctx.filterChains.write(chainLine(KUBE_FIREWALL));
    ctx.filterRules.write(
      '-A',
      KUBE_FIREWALL,
      cmt(q('block incoming localnet connections')),
      '-d',
      '127.0.0.0/8',
      '!',
      '-s',
      '127.0.0.0/8',
      '-m',
      'conntrack',
      '!',
      '--ctstate',
      'RELATED,ESTABLISHED,DNAT',
      '-j',
      'DROP',
    );
  }
}

/** IPs of this family that --nodeport-addresses selects among the node's addresses and loopback. */
function nodePortIPs(o: ResolvedRulesOptions, fam: RulesFamily): string[] {
  const cidrs = familyNodePortCidrs(fam, o.nodePortAddresses) ?? [];
  const out: string[] = [];
  for (const ip of [...o.nodeIPs, fam.loopbackIP]) {
    if (fam.canon(ip) === null || out.includes(ip)) continue;
    if (cidrs.some((c) => c.contains(ip))) out.push(ip);
  }
  return out;
}

function writeEpilogue(ctx: Ctx): void {
  const last = q('kubernetes service nodeports; NOTE: this must be the last rule in this chain');
  if (familyNodePortCidrs(ctx.fam, ctx.o.nodePortAddresses) === null) {
    const notLocalhost = ctx.localhostNodePorts ? [] : ['!', '-d', ctx.fam.loopback];
    ctx.natRules.write(
      '-A',
      KUBE_SERVICES,
      cmt(last),
      '-m',
      'addrtype',
      '--dst-type',
      'LOCAL',
      notLocalhost,
      '-j',
      KUBE_NODEPORTS,
    );
  } else {
    for (const ip of nodePortIPs(ctx.o, ctx.fam)) {
      if (ctx.fam.isLoopback(ip) && !ctx.localhostNodePorts) continue;
      ctx.natRules.write('-A', KUBE_SERVICES, cmt(last), '-d', ip, '-j', KUBE_NODEPORTS);
    }
  }
  if (!ctx.o.conntrackTCPLiberal) {
    // INVALID packets would otherwise reset connections (kubernetes#74839, #117924).
    const acct = ctx.o.nfacct ? ['-m', 'nfacct', '--nfacct-name', NFACCT_CT_INVALID] : [];
    ctx.filterRules.write(
      '-A',
      KUBE_FORWARD,
      '-m',
      'conntrack',
      '--ctstate',
      'INVALID',
      acct,
      '-j',
      'DROP',
    );
  }
  const mark = ctx.o.masqueradeMark;
  ctx.filterRules.write(
    '-A',
    KUBE_FORWARD,
    cmt(q('kubernetes forwarding rules')),
    '-m',
    'mark',
    '--mark',
    `${mark}/${mark}`,
    '-j',
    'ACCEPT',
  );
  ctx.filterRules.write(
    '-A',
    KUBE_FORWARD,
    cmt(q('kubernetes forwarding conntrack rule')),
    '-m',
    'conntrack',
    '--ctstate',
    'RELATED,ESTABLISHED',
    '-j',
    'ACCEPT',
  );
}

function localhostAllowed(o: ResolvedRulesOptions, fam: RulesFamily): boolean {
  // Localhost NodePorts need route_localnet, which IPv6 lacks: kube-proxy never offers them there.
  if (!o.localhostNodePorts || fam.name === 'IPv6') return false;
  const cidrs = familyNodePortCidrs(fam, o.nodePortAddresses);
  // kube-proxy turns localhost NodePorts off unless --nodeport-addresses has a loopback CIDR.
  return cidrs === null || cidrs.some((c) => fam.isLoopback(c.text.split('/')[0]));
}

/** Render `iptables-restore` input as kube-proxy's iptables proxier writes it (full sync). */
export function renderIptables(
  ports: readonly ResolvedServicePort[],
  opts: RulesOptions = {},
): string {
  const o = resolveRulesOptions(opts);
  const fam = rulesFamily(o.ipFamily);
  const infos = portInfos(ports, o.nodeName, fam);
  const total = infos.reduce((n, p) => n + p.endpoints.length, 0);
  const ctx: Ctx = {
    o,
    fam,
    local: iptablesLocalMatch(rulesLocalDetector(o)),
    localhostNodePorts: localhostAllowed(o, fam),
    largeClusterMode: total > o.largeClusterEndpointsThreshold,
    filterChains: new LineBuffer(),
    filterRules: new LineBuffer(),
    natChains: new LineBuffer(),
    natRules: new LineBuffer(),
  };
  writePrologue(ctx);
  const node = { nodeName: o.nodeName, nodeZone: o.nodeZone, preferSameNode: o.preferSameNode };
  for (const p of infos) writeService(ctx, plan(p, categorizePort(p, node)));
  writeEpilogue(ctx);
  return (
    `*filter\n${ctx.filterChains.text()}${ctx.filterRules.text()}COMMIT\n` +
    `*nat\n${ctx.natChains.text()}${ctx.natRules.text()}COMMIT\n`
  );
}

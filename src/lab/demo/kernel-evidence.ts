// The curl-vs-ping evidence when the kernel is the data plane (lab --mode iptables): what the
// seed articles show on a real node — the nat chains a packet to the VIP walks
// (KUBE-SERVICES → KUBE-SVC-… → KUBE-SEP-… DNAT, from `iptables -t nat -S`), and the kernel's
// conntrack entry (`conntrack -L`) whose reply tuple turns the pod's answers back into the VIP.
import { inNs, shTry } from '../../sh.ts';

/** The kernel conntrack lines of one TCP flow, as `conntrack -L` prints them. */
export function kernelCtLines(nodeNs: string, src: string, sport: number, vip: string): string[] {
  const argv = ['conntrack', '-L', '-p', 'tcp', '--orig-src', src, '--orig-dst', vip];
  const r = shTry(inNs(nodeNs, [...argv, '--orig-port-src', String(sport)]));
  return r.out.split('\n').filter((l) => l.trim() !== '');
}

/**
 * The rules a new connection to vip:port walks on this node: its KUBE-SERVICES entry, the whole
 * KUBE-SVC chain (the random-probability ladder) and the KUBE-SEP chain that DNATs to backendIp.
 */
export function natRulePath(
  nodeNs: string,
  vip: string,
  port: number,
  backendIp?: string,
): string[] {
  const rules = shTry(inNs(nodeNs, ['iptables', '-w', '-t', 'nat', '-S'])).out.split('\n');
  const entry = rules.find(
    (l) =>
      l.startsWith('-A KUBE-SERVICES ') &&
      l.includes(` -d ${vip}/32 `) &&
      l.includes(`--dport ${port} `) &&
      / -j KUBE-SVC-\w+$/.test(l),
  );
  if (!entry) return [];
  const svcChain = / -j (KUBE-SVC-\w+)$/.exec(entry)![1]!;
  const svcRules = rules.filter((l) => l.startsWith(`-A ${svcChain} `));
  const sepChain = rules
    .filter(
      (l) =>
        l.startsWith('-A KUBE-SEP-') && backendIp && l.includes(`--to-destination ${backendIp}:`),
    )
    .map((l) => l.split(' ')[1]!)
    .find((c) => svcRules.some((s) => s.endsWith(` -j ${c}`)));
  const sepRules = sepChain ? rules.filter((l) => l.startsWith(`-A ${sepChain} `)) : [];
  return [entry, ...svcRules, ...sepRules];
}

/** Whether any nat rule would match an ICMP packet to the VIP (kube-proxy writes none). */
export function natRulesForIcmp(nodeNs: string, vip: string): string[] {
  const rules = shTry(inNs(nodeNs, ['iptables', '-w', '-t', 'nat', '-S'])).out.split('\n');
  return rules.filter((l) => l.includes(` -d ${vip}/32 `) && !/ -p (tcp|udp|sctp) /.test(l));
}

/**
 * The packet/byte counters of the rules a connection to vip:port walked (iptables -t nat -L -n
 * -v -x): its KUBE-SERVICES entry and its KUBE-SVC chain, where kubetun shows its own counters.
 */
export function natCounters(nodeNs: string, vip: string, port: number): string[] {
  const list = (chain: string) =>
    shTry(inNs(nodeNs, ['iptables', '-w', '-t', 'nat', '-L', chain, '-n', '-v', '-x'])).out.split(
      '\n',
    );
  const services = list('KUBE-SERVICES');
  const entry = services.find((l) => l.includes(` ${vip} `) && l.includes(`dpt:${port}`));
  if (!entry) return [];
  const svcChain = /\b(KUBE-SVC-\w+)\b/.exec(entry)?.[1];
  const header = services[1] ?? '';
  const svcRules = svcChain
    ? list(svcChain)
        .slice(2)
        .filter((l) => l.trim() !== '')
    : [];
  return [header, entry, ...(svcChain ? [`Chain ${svcChain}:`, ...svcRules] : [])];
}

/**
 * The nftables path of a connection to vip:port in kube-proxy's table: the @service-ips element
 * (one hashed lookup), the service chain (numgen random mod N) and the endpoint chain that DNATs
 * to backendIp, from `nft list ruleset`.
 */
export function nftRulePath(
  nodeNs: string,
  vip: string,
  port: number,
  proto: string,
  backendIp?: string,
): string[] {
  const text = shTry(inNs(nodeNs, ['nft', 'list', 'table', 'ip', 'kube-proxy'])).out;
  const element = new RegExp(
    `${vip.replace(/\./g, '\\.')} \\. ${proto} \\. ${port} : goto ([\\w/.-]+)`,
  );
  const m = element.exec(text);
  if (!m) return [];
  const out = [`map service-ips: ${m[0]}`, ...chainBody(text, m[1]!)];
  const ep = chainBody(text, m[1]!)
    .join('\n')
    .match(/goto (endpoint-[\w/.-]+)/g)
    ?.map((g) => g.slice('goto '.length))
    .find((c) => backendIp && c.includes(`__${backendIp}/`));
  return ep ? [...out, ...chainBody(text, ep)] : out;
}

function chainBody(text: string, chain: string): string[] {
  const start = text.indexOf(`chain ${chain} {`);
  if (start < 0) return [];
  const end = text.indexOf('\n\t}', start);
  return text
    .slice(start, end + 3)
    .split('\n')
    .map((l) => l.replace(/^\t/, ''));
}

/** nftables mode: the rule that answers anything else sent to a ClusterIP (ping included). */
export function nftClusterIpReject(nodeNs: string): string[] {
  const text = shTry(
    inNs(nodeNs, ['nft', 'list', 'chain', 'ip', 'kube-proxy', 'cluster-ips-check']),
  ).out;
  return text
    .split('\n')
    .filter((l) => /reject|drop/.test(l))
    .map((l) => l.trim());
}

export interface KernelEvidence {
  kernelCt: string[];
  /** the rules the SYN walked: iptables nat chains, or the nftables map element and chains */
  natPath: string[];
  /** iptables: nat rules an ICMP packet to the VIP could match (none); nftables: the reject */
  natIcmpRules: string[];
  /** iptables: packet/byte counters of the VIP's rules (kube-proxy's nftables rules have none) */
  natCounters: string[];
}

/** What the kernel shows about one curl to vip:port in iptables or nftables mode. */
export function kernelEvidence(
  mode: 'iptables' | 'nftables',
  nodeNs: string,
  flow: { src: string; sport: number; vip: string; port: number; backendIp?: string },
): KernelEvidence {
  const kernelCt = kernelCtLines(nodeNs, flow.src, flow.sport, flow.vip);
  if (mode === 'nftables') {
    return {
      kernelCt,
      natPath: nftRulePath(nodeNs, flow.vip, flow.port, 'tcp', flow.backendIp),
      natIcmpRules: nftClusterIpReject(nodeNs),
      natCounters: [],
    };
  }
  return {
    kernelCt,
    natPath: natRulePath(nodeNs, flow.vip, flow.port, flow.backendIp),
    natIcmpRules: natRulesForIcmp(nodeNs, flow.vip),
    natCounters: natCounters(nodeNs, flow.vip, flow.port),
  };
}

/** The evidence block of the demo's report for a kernel mode. */
export function printKernelEvidence(
  out: (s: string) => void,
  mode: 'iptables' | 'nftables',
  node: string,
  e: Partial<KernelEvidence>,
): void {
  const show = (lines: string[] | undefined) => {
    for (const l of lines?.length ? lines : ['(none found)']) out(`    ${l}`);
  };
  if (mode === 'nftables') {
    out(
      `- the nftables path of the SYN on ${node} (nft list table ip kube-proxy): @service-ips -> service chain -> endpoint dnat`,
    );
    show(e.natPath);
  } else {
    out(
      `- the nat rules the SYN walked on ${node} (iptables -t nat -S): KUBE-SERVICES -> KUBE-SVC -> KUBE-SEP`,
    );
    show(e.natPath);
    out(`- their counters (iptables -t nat -L -n -v -x), where kubetun shows its own:`);
    show(e.natCounters);
  }
  out(
    `- the kernel's conntrack entry for the curl on ${node} (conntrack -L): orig tuple, then reply tuple`,
  );
  show(e.kernelCt);
}

// The curl-vs-ping evidence when the kernel is the data plane (lab --mode iptables): what the
// seed articles show on a real node — the nat chains a packet to the VIP walks
// (KUBE-SERVICES → KUBE-SVC-… → KUBE-SEP-… DNAT, from `iptables -t nat -S`), and the kernel's
// conntrack entry (`conntrack -L`) whose reply tuple turns the pod's answers back into the VIP.
import { inNs, shTry } from '../sh.ts';

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

// kube-proxy's rules on this node: found before kubetun starts (two proxies on one node fight
// over every Service packet, so the agent refuses), and removed on request — what
// `kube-proxy --cleanup` removes, from outside:
//
//   iptables  the jumps from the built-in chains (src/rules/jumps.ts, the list kube-proxy
//             ensures), then its chains in nat and filter flushed and deleted with one
//             `iptables-restore --noflush`. The kubelet's own KUBE-FIREWALL / KUBE-KUBELET-CANARY
//             are not kube-proxy's and stay (the kubelet recreates them anyway).
//   nftables  the tables `ip kube-proxy` and `ip6 kube-proxy`.
import { IPTABLES_JUMPS, jumpArgs } from '../rules/jumps.ts';
import { sh, shTry } from '../sh.ts';

/** kube-proxy's chains: the fixed ones and the per-service / per-endpoint prefixes. */
const KUBE_PROXY_CHAIN =
  /^KUBE-(SERVICES|EXTERNAL-SERVICES|NODEPORTS|POSTROUTING|MARK-MASQ|FORWARD|PROXY-FIREWALL|PROXY-CANARY|SVC-\w+|SVL-\w+|EXT-\w+|FW-\w+|SEP-\w+)$/;
const TABLES = ['nat', 'filter'] as const;
const NFT_FAMILIES = ['ip', 'ip6'] as const;

/** Where a command runs: this node's own namespace, or another's (`inNs`: the lab's nodes). */
type Place = (argv: string[]) => string[];
const HERE: Place = (argv) => argv;

/** kube-proxy's chains present in one iptables table (by `iptables-save -t`). */
function iptablesChains(table: string, at: Place = HERE): string[] {
  const r = shTry(at(['iptables-save', '-t', table]));
  if (!r.ok) return [];
  return r.out
    .split('\n')
    .filter((l) => l.startsWith(':'))
    .map((l) => l.slice(1).split(' ')[0])
    .filter((c) => KUBE_PROXY_CHAIN.test(c));
}

function nftTables(at: Place = HERE): string[] {
  return NFT_FAMILIES.filter((f) => shTry(at(['nft', 'list', 'table', f, 'kube-proxy'])).ok).map(
    (f) => `${f} kube-proxy`,
  );
}

/**
 * What of kube-proxy is on this node, one phrase each (empty: nothing) — what the agent refuses
 * to start beside. `at`: run the checks elsewhere (the lab's node namespaces).
 */
export function findKubeProxyRules(at: Place = HERE): string[] {
  const found: string[] = [];
  for (const t of TABLES) {
    const chains = iptablesChains(t, at);
    if (chains.length > 0) found.push(`iptables ${t}: ${chains.length} KUBE-* chains`);
  }
  for (const t of nftTables(at)) found.push(`nftables table ${t}`);
  return found;
}

/** Removes kube-proxy's rules (see the top of the file); returns what it removed. */
export function removeKubeProxyRules(): string[] {
  const removed: string[] = [];
  for (const j of IPTABLES_JUMPS) {
    if (!KUBE_PROXY_CHAIN.test(j.dstChain)) continue; // the kubelet's KUBE-FIREWALL stays
    // -D deletes one copy; a rule added twice needs as many deletions
    while (shTry(['iptables', '-w', '-t', j.table, '-D', j.srcChain, ...jumpArgs(j)]).ok)
      removed.push(`iptables ${j.table} ${j.srcChain} -j ${j.dstChain}`);
  }
  for (const t of TABLES) {
    const chains = iptablesChains(t);
    if (chains.length === 0) continue;
    // Declaring a chain flushes it (so no rule refers to another any more), then -X deletes.
    const input = [
      `*${t}`,
      ...chains.map((c) => `:${c} - [0:0]`),
      ...chains.map((c) => `-X ${c}`),
      'COMMIT',
      '',
    ].join('\n');
    sh(['iptables-restore', '-w', '--noflush'], { input });
    removed.push(`iptables ${t}: ${chains.length} KUBE-* chains`);
  }
  for (const t of nftTables()) {
    sh(['nft', 'delete', 'table', ...t.split(' ')]);
    removed.push(`nftables table ${t}`);
  }
  return removed;
}

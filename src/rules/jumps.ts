// The jumps from the built-in chains into kube-proxy's chains. kube-proxy does not put these
// in its iptables-restore input (that would replace everyone else's PREROUTING rules); it
// ensures each with `iptables -C` / `iptables -I` (prepend) before a full sync. Listed in
// kube-proxy's order (iptablesJumpChains, then the kubelet's KUBE-FIREWALL duplicates).

export interface JumpRule {
  table: 'filter' | 'nat';
  srcChain: string;
  dstChain: string;
  comment: string;
  extraArgs: readonly string[];
}

const NEW = ['-m', 'conntrack', '--ctstate', 'NEW'] as const;

export const IPTABLES_JUMPS: readonly JumpRule[] = [
  {
    table: 'filter',
    srcChain: 'INPUT',
    dstChain: 'KUBE-EXTERNAL-SERVICES',
    comment: 'kubernetes externally-visible service portals',
    extraArgs: NEW,
  },
  {
    table: 'filter',
    srcChain: 'FORWARD',
    dstChain: 'KUBE-EXTERNAL-SERVICES',
    comment: 'kubernetes externally-visible service portals',
    extraArgs: NEW,
  },
  {
    table: 'filter',
    srcChain: 'INPUT',
    dstChain: 'KUBE-NODEPORTS',
    comment: 'kubernetes health check service ports',
    extraArgs: [],
  },
  {
    table: 'filter',
    srcChain: 'FORWARD',
    dstChain: 'KUBE-SERVICES',
    comment: 'kubernetes service portals',
    extraArgs: NEW,
  },
  {
    table: 'filter',
    srcChain: 'OUTPUT',
    dstChain: 'KUBE-SERVICES',
    comment: 'kubernetes service portals',
    extraArgs: NEW,
  },
  {
    table: 'filter',
    srcChain: 'FORWARD',
    dstChain: 'KUBE-FORWARD',
    comment: 'kubernetes forwarding rules',
    extraArgs: [],
  },
  {
    table: 'filter',
    srcChain: 'INPUT',
    dstChain: 'KUBE-PROXY-FIREWALL',
    comment: 'kubernetes load balancer firewall',
    extraArgs: NEW,
  },
  {
    table: 'filter',
    srcChain: 'OUTPUT',
    dstChain: 'KUBE-PROXY-FIREWALL',
    comment: 'kubernetes load balancer firewall',
    extraArgs: NEW,
  },
  {
    table: 'filter',
    srcChain: 'FORWARD',
    dstChain: 'KUBE-PROXY-FIREWALL',
    comment: 'kubernetes load balancer firewall',
    extraArgs: NEW,
  },
  {
    table: 'nat',
    srcChain: 'OUTPUT',
    dstChain: 'KUBE-SERVICES',
    comment: 'kubernetes service portals',
    extraArgs: [],
  },
  {
    table: 'nat',
    srcChain: 'PREROUTING',
    dstChain: 'KUBE-SERVICES',
    comment: 'kubernetes service portals',
    extraArgs: [],
  },
  {
    table: 'nat',
    srcChain: 'POSTROUTING',
    dstChain: 'KUBE-POSTROUTING',
    comment: 'kubernetes postrouting rules',
    extraArgs: [],
  },
  // The kubelet creates KUBE-FIREWALL too; kube-proxy makes sure it is reachable.
  { table: 'filter', srcChain: 'INPUT', dstChain: 'KUBE-FIREWALL', comment: '', extraArgs: [] },
  { table: 'filter', srcChain: 'OUTPUT', dstChain: 'KUBE-FIREWALL', comment: '', extraArgs: [] },
];

/** Quote a word for a POSIX shell when it needs it. */
function sh(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** The rule's arguments after the chain name, as kube-proxy passes them to iptables. */
export function jumpArgs(j: JumpRule): string[] {
  const comment = j.comment === '' ? [] : ['-m', 'comment', '--comment', j.comment];
  return [...j.extraArgs, ...comment, '-j', j.dstChain];
}

/**
 * Shell commands equivalent to kube-proxy's EnsureChain + EnsureRule(Prepend): create the
 * chain if missing, insert the jump unless an identical rule exists.
 */
export function renderJumpCommands(cmd = 'iptables'): string {
  const lines: string[] = [];
  for (const j of IPTABLES_JUMPS) {
    const args = jumpArgs(j).map(sh).join(' ');
    lines.push(`${cmd} -w -t ${j.table} -N ${j.dstChain} 2>/dev/null || true`);
    lines.push(
      `${cmd} -w -t ${j.table} -C ${j.srcChain} ${args} 2>/dev/null || ${cmd} -w -t ${j.table} -I ${j.srcChain} ${args}`,
    );
  }
  return `${lines.join('\n')}\n`;
}

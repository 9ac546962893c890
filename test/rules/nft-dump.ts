// kube-proxy's comparison for nftables transactions (pkg/proxy/nftables/helpers_test.go,
// sortNFTablesTransaction): drop blank and comment lines, order by object type (table,
// chain, rule, set, map, element), then by object name; rules keep their order within a
// chain, everything else is ordered by the whole line.

const OBJECT_ORDER: Record<string, number> = {
  table: 10,
  chain: 9,
  rule: 8,
  set: 7,
  map: 6,
  element: 5,
};

export function sortNftTransaction(tx: string): string {
  const lines = tx.split('\n').filter((l) => l !== '' && !l.startsWith('#'));
  const keyed = lines.map((line, index) => ({ line, index, w: line.split(' ') }));
  keyed.sort((a, b) => {
    if (a.w.length < 5 || b.w.length < 5) return a.index - b.index;
    const oa = OBJECT_ORDER[a.w[1]] ?? 0;
    const ob = OBJECT_ORDER[b.w[1]] ?? 0;
    if (oa !== ob) return ob - oa;
    if (a.w[4] !== b.w[4]) return a.w[4] < b.w[4] ? -1 : 1;
    if (a.w[1] === 'rule') return a.index - b.index;
    return a.line < b.line ? -1 : a.line > b.line ? 1 : a.index - b.index;
  });
  return keyed.map((k) => k.line).join('\n');
}

/** Rules of one chain, in order (assertNFTablesChainEqual). */
export function nftChainRules(tx: string, chain: string): string[] {
  const prefix = `add rule ip kube-proxy ${chain} `;
  return tx
    .split('\n')
    .filter((l) => l.startsWith(prefix))
    .map((l) => l.slice(prefix.length));
}

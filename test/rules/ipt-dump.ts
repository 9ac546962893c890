// Test helpers mirroring kube-proxy's own (pkg/util/iptables/testing/parse.go and
// pkg/proxy/iptables/proxier_test.go): parse an iptables-restore dump, sort it the way
// sortIPTablesRules does before comparing with expected text, check jumps for consistency, and
// trace a packet through the rules (tracePacket) to reproduce the packet-flow tests.

export interface Rule {
  raw: string;
  chain: string;
  params: Map<string, { value: string | true; negated: boolean }>;
}

export interface Chain {
  name: string;
  rules: Rule[];
  deleted: boolean;
}

export interface Table {
  name: string;
  chains: Chain[];
}

const WORD = /(?:^|\s)("[^"]*"|[^"]\S*)/g;
const VALUELESS = new Set(['--random-fully', '--rcheck', '--set', '--reap']);

export function parseRule(raw: string): Rule {
  const words = [...raw.matchAll(WORD)].map((m) => m[1].replace(/^"|"$/g, ''));
  if (words[0] !== '-A' || words.length < 3) throw new Error(`bad rule ${raw}`);
  const params = new Map<string, { value: string | true; negated: boolean }>();
  let negated = false;
  for (let w = 2; w < words.length; ) {
    if (words[w] === '-m' && w < words.length - 1) {
      w += 2;
      continue;
    }
    if (words[w] === '!') {
      negated = true;
      w++;
      continue;
    }
    if (words[w].startsWith('-') && VALUELESS.has(words[w])) {
      params.set(words[w], { value: true, negated });
      w++;
    } else if (words[w].startsWith('-') && w + 1 < words.length) {
      params.set(words[w], { value: words[w + 1], negated });
      w += 2;
    } else {
      w++;
    }
    negated = false;
  }
  return { raw, chain: words[1], params };
}

export function parseDump(data: string): Table[] {
  const tables: Table[] = [];
  let t: Table | null = null;
  let declaring = false;
  for (const l of data.trim().split('\n')) {
    const line = l.trim();
    if (line === '' || line.startsWith('#')) continue;
    if (t === null) {
      if (!line.startsWith('*')) throw new Error(`expected table, got ${line}`);
      t = { name: line.slice(1), chains: [] };
      tables.push(t);
      declaring = true;
      continue;
    }
    const decl = /^:(\S*) - \[\d+:\d+\]$/.exec(line);
    if (declaring && decl) {
      t.chains.push({ name: decl[1], rules: [], deleted: false });
      continue;
    }
    declaring = false;
    if (line === 'COMMIT') {
      t = null;
    } else if (line.startsWith('-A ')) {
      const rule = parseRule(line);
      const c = t.chains.find((x) => x.name === rule.chain);
      if (!c) throw new Error(`rule for undeclared chain: ${line}`);
      c.rules.push(rule);
    } else if (line.startsWith('-X ')) {
      const c = t.chains.find((x) => x.name === line.slice(3));
      if (!c) throw new Error(`delete of undeclared chain: ${line}`);
      c.deleted = true;
    } else {
      throw new Error(`cannot parse ${line}`);
    }
  }
  if (t !== null) throw new Error('no COMMIT');
  return tables;
}

export function dumpString(tables: Table[]): string {
  let out = '';
  for (const t of tables) {
    out += `*${t.name}\n`;
    for (const c of t.chains) out += `:${c.name} - [0:0]\n`;
    for (const c of t.chains) for (const r of c.rules) out += `${r.raw}\n`;
    for (const c of t.chains) if (c.deleted) out += `-X ${c.name}\n`;
    out += 'COMMIT\n';
  }
  return out;
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

function chainRank(name: string): number {
  if (name === 'KUBE-NODEPORTS') return 0;
  if (name === 'KUBE-SERVICES') return 1;
  return name.startsWith('KUBE-') ? 2 : 3;
}

function commentService(r: Rule): string | null {
  const c = r.params.get('--comment');
  if (!c || typeof c.value !== 'string') return null;
  const i = c.value.search(/[ :]/);
  return i < 0 ? c.value : c.value.slice(0, i);
}

function byCommentService(a: Rule, b: Rule): number {
  const x = commentService(a);
  const y = commentService(b);
  if (x === null || y === null) return 0;
  return cmp(x, y);
}

const isLastRule = (r: Rule) =>
  String(r.params.get('--comment')?.value ?? '').includes('must be the last rule');

/** kube-proxy's sortIPTablesRules: order-insensitive where kube-proxy's output order is unspecified. */
export function sortDump(data: string): string {
  const tables = parseDump(data).sort((a, b) => cmp(a.name, b.name));
  for (const t of tables) {
    t.chains.sort((a, b) => chainRank(a.name) - chainRank(b.name) || cmp(a.name, b.name));
    for (const c of t.chains) {
      if (c.name === 'KUBE-NODEPORTS') c.rules.sort(byCommentService);
      if (c.name === 'KUBE-SERVICES' && t.name === 'filter') c.rules.sort(byCommentService);
      if (c.name === 'KUBE-SERVICES' && t.name === 'nat') {
        c.rules.sort((a, b) => (isLastRule(a) ? 1 : isLastRule(b) ? -1 : byCommentService(a, b)));
      }
    }
  }
  return dumpString(tables);
}

/** Rules of one chain, raw, one per line (kube-proxy's assertIPTablesChainEqual). */
export function chainText(data: string, table: string, chain: string): string {
  const t = parseDump(data).find((x) => x.name === table);
  const c = t?.chains.find((x) => x.name === chain);
  return c ? c.rules.map((r) => `${r.raw}\n`).join('') : '';
}

const BUILTIN_TARGETS = [
  'ACCEPT',
  'REJECT',
  'DROP',
  'MARK',
  'RETURN',
  'DNAT',
  'SNAT',
  'MASQUERADE',
];
const TOP_LEVEL = [
  'KUBE-SERVICES',
  'KUBE-EXTERNAL-SERVICES',
  'KUBE-NODEPORTS',
  'KUBE-POSTROUTING',
  'KUBE-FORWARD',
  'KUBE-MARK-MASQ',
  'KUBE-PROXY-FIREWALL',
  'KUBE-FIREWALL',
];

/** kube-proxy's checkIPTablesRuleJumps: every jump lands on a created, non-empty chain. */
export function checkJumps(data: string): string | null {
  for (const t of parseDump(data)) {
    const created = new Set(t.chains.filter((c) => !c.deleted).map((c) => c.name));
    const filled = new Set(t.chains.filter((c) => c.rules.length > 0).map((c) => c.name));
    const jumped = new Set<string>();
    for (const c of t.chains) {
      for (const r of c.rules) {
        const j = r.params.get('-j')?.value;
        if (typeof j === 'string' && !BUILTIN_TARGETS.includes(j)) jumped.add(j);
      }
    }
    for (const j of jumped) if (!created.has(j)) return `${t.name}: ${j} used but not created`;
    for (const j of jumped) {
      if (!filled.has(j) && j !== 'KUBE-NODEPORTS') return `${t.name}: ${j} jumped to but empty`;
    }
    for (const c of created) {
      if (!jumped.has(c) && !TOP_LEVEL.includes(c)) return `${t.name}: ${c} created but not used`;
    }
  }
  return null;
}

// ---- packet tracer (kube-proxy's tracePacket / runPacketFlowTests) ----

function ipToU32(s: string): number {
  return s.split('.').reduce((a, o) => a * 256 + Number(o), 0) >>> 0;
}

function addressMatches(p: { value: string | true; negated: boolean }, ip: string): boolean {
  const v = String(p.value);
  let m: boolean;
  if (v.includes('/')) {
    const [net, len] = v.split('/');
    const bits = Number(len);
    const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
    m = (ipToU32(ip) & mask) >>> 0 === (ipToU32(net) & mask) >>> 0;
  } else {
    m = v === ip;
  }
  return p.negated ? !m : m;
}

function valueMatches(p: { value: string | true; negated: boolean }, s: string): boolean {
  return p.negated ? p.value !== s : p.value === s;
}

export interface Packet {
  sourceIP: string;
  protocol: string;
  destIP: string;
  destPort: number;
}

export class Tracer {
  readonly matches: string[] = [];
  readonly outputs: string[] = [];
  markMasq = false;
  private readonly tables: Table[];
  private readonly localIPs: Set<string>;

  constructor(data: string, nodeIPs: readonly string[]) {
    this.tables = parseDump(data);
    this.localIPs = new Set(['127.0.0.1', '::1', ...nodeIPs]);
  }

  private ruleMatches(r: Rule, k: Packet): boolean {
    const g = (n: string) => r.params.get(n);
    const s = g('-s');
    if (s && !addressMatches(s, k.sourceIP)) return false;
    const st = g('--src-type');
    if (st && !valueMatches(st, this.localIPs.has(k.sourceIP) ? 'LOCAL' : 'not-matched'))
      return false;
    const p = g('-p');
    if (p && !valueMatches(p, k.protocol)) return false;
    const d = g('-d');
    if (d && !addressMatches(d, k.destIP)) return false;
    const dt = g('--dst-type');
    if (dt && !valueMatches(dt, this.localIPs.has(k.destIP) ? 'LOCAL' : 'not-matched'))
      return false;
    const dp = g('--dport');
    if (dp && !valueMatches(dp, String(k.destPort))) return false;
    // Anything that checks past state (affinity, marks, conntrack) is assumed not to match.
    return !(g('--rcheck') || g('--mark') || g('--ctstate'));
  }

  runChain(table: string, chain: string, k: Packet): boolean {
    const c = this.tables.find((t) => t.name === table)?.chains.find((x) => x.name === chain);
    if (!c) return false;
    for (const r of c.rules) {
      const jump = r.params.get('-j')?.value;
      if (typeof jump !== 'string' || !this.ruleMatches(r, k)) continue;
      this.matches.push(r.raw);
      if (jump === 'KUBE-MARK-MASQ') {
        this.markMasq = true;
        continue;
      }
      if (jump === 'ACCEPT' || jump === 'REJECT' || jump === 'DROP') {
        this.outputs.push(jump);
        return true;
      }
      if (jump === 'DNAT') {
        this.outputs.push(String(r.params.get('--to-destination')?.value));
        return true;
      }
      // A probabilistic jump does not end this chain: every endpoint is collected.
      if (this.runChain(table, jump, k) && !r.params.has('--probability')) return true;
    }
    return false;
  }
}

/** Where a packet ends up ("ip:port, ip:port", "DROP", "REJECT", "ACCEPT" or "") and if masqueraded. */
export function tracePacket(data: string, k: Packet, nodeIPs: readonly string[]) {
  const t = new Tracer(data, nodeIPs);
  // nat PREROUTING holds one rule, the jump to KUBE-SERVICES.
  t.runChain('nat', 'KUBE-SERVICES', k);
  const after = t.outputs.length > 0 ? { ...k, destIP: t.outputs[0].split(':')[0] } : k;
  for (const chain of [
    'KUBE-SERVICES',
    'KUBE-EXTERNAL-SERVICES',
    'KUBE-NODEPORTS',
    'KUBE-PROXY-FIREWALL',
  ]) {
    t.runChain('filter', chain, after);
  }
  return { matches: t.matches, output: t.outputs.join(', '), masq: t.markMasq };
}

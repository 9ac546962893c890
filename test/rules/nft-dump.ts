// kube-proxy's comparison for nftables transactions (pkg/proxy/nftables/helpers_test.go,
// sortNFTablesTransaction): drop blank and comment lines, order by object type (table,
// chain, rule, set, map, element), then by object name; rules keep their order within a
// chain, everything else is ordered by the whole line. Both table families (ip, ip6) are read.
import { ipInCidr } from '../../src/manifests/ip.ts';
import { canonIpv6 } from '../../src/wire/addr6.ts';

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
  const name = chain.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const prefix = new RegExp(`^add rule ip6? kube-proxy ${name} `);
  return tx
    .split('\n')
    .filter((l) => prefix.test(l))
    .map((l) => l.replace(prefix, ''));
}

// ---- packet tracer (kube-proxy's nftablesTracer / tracePacket in helpers_test.go) ----

interface Element {
  key: string[];
  value: string;
}

interface Parsed {
  chains: Map<string, string[]>;
  elements: Map<string, Element[]>;
}

export function parseNft(tx: string): Parsed {
  const chains = new Map<string, string[]>();
  const elements = new Map<string, Element[]>();
  for (const line of tx.split('\n')) {
    const m = /^add (chain|rule|element|set|map) ip6? kube-proxy (\S+)(?: (.*))?$/.exec(line);
    if (!m) continue;
    const [, kind, name, rest = ''] = m;
    if (kind === 'chain' && !chains.has(name)) chains.set(name, []);
    if (kind === 'rule') chains.get(name)?.push(rest);
    if (kind === 'element') {
      const inner = rest.replace(/^\{ /, '').replace(/ \}$/, '');
      const [k, v = ''] = inner.split(' : ');
      const key = k.replace(/ comment "[^"]*"$/, '').split(' . ');
      const list = elements.get(name) ?? [];
      list.push({ key, value: v });
      elements.set(name, list);
    }
  }
  return { chains, elements };
}

function inCidrOrIp(ip: string, spec: string): boolean {
  if (ip.includes(':') || spec.includes(':')) {
    if (!spec.includes('/')) return canonIpv6(spec) === canonIpv6(ip);
    return ipInCidr(ip, spec);
  }
  const toU32 = (s: string) => s.split('.').reduce((a, o) => a * 256 + Number(o), 0) >>> 0;
  if (!spec.includes('/')) return spec === ip;
  const [net, len] = spec.split('/');
  const bits = Number(len);
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return (toU32(ip) & mask) >>> 0 === (toU32(net) & mask) >>> 0;
}

const IGNORED = / *comment "[^"]*"$|^ct state new|^update @\S+ \{ ip6? saddr \}/g;

interface Pkt {
  sourceIP: string;
  protocol: string;
  destIP: string;
  destPort: string;
}

type Step = { rest: string } | { stop: 'nomatch' } | null;

export class NftTracer {
  readonly matches: string[] = [];
  readonly outputs: string[] = [];
  markMasq = false;

  constructor(
    private readonly nft: Parsed,
    private readonly localIPs: Set<string>,
  ) {}

  private lookup(map: string, key: string[]): Element | undefined {
    return (this.nft.elements.get(map) ?? []).find((e) => e.key.every((k, i) => k === key[i]));
  }

  /** One match expression at the start of `rule`: what is left, or that the rule fails. */
  private matchExpr(rule: string, k: Pkt): Step {
    const ok = (m: RegExpExecArray, pass: boolean): Step =>
      pass ? { rest: rule.slice(m[0].length) } : { stop: 'nomatch' };
    let m = /^ip6? daddr @(\S+)/.exec(rule);
    if (m) return ok(m, this.lookup(m[1], [k.destIP]) !== undefined);
    m = /^ip6? daddr \. meta l4proto \. th dport vmap @(\S+)$/.exec(rule);
    if (m) {
      const e = this.lookup(m[1], [k.destIP, k.protocol, k.destPort]);
      return e ? { rest: e.value } : { stop: 'nomatch' };
    }
    m = /^meta l4proto \. th dport vmap @(\S+)$/.exec(rule);
    if (m) {
      const e = this.lookup(m[1], [k.protocol, k.destPort]);
      return e ? { rest: e.value } : { stop: 'nomatch' };
    }
    m = /^ip6? (daddr|saddr) (!= )?\{([^}]*)\}/.exec(rule);
    if (m) {
      const ip = m[1] === 'daddr' ? k.destIP : k.sourceIP;
      const hit = m[3]
        .replaceAll(' ', '')
        .split(',')
        .some((s) => inCidrOrIp(ip, s));
      return ok(m, m[2] ? !hit : hit);
    }
    // Affinity: a check of past state, assumed not to match (as in kube-proxy's tracer).
    m = /^ip6? saddr @\S+/.exec(rule);
    if (m) return { stop: 'nomatch' };
    m = /^ip6? (daddr|saddr) (!= )?(\S+)/.exec(rule);
    if (m) {
      const hit = inCidrOrIp(m[1] === 'daddr' ? k.destIP : k.sourceIP, m[3]);
      return ok(m, m[2] ? !hit : hit);
    }
    m = /^fib (daddr|saddr) type local/.exec(rule);
    if (m) return ok(m, this.localIPs.has(m[1] === 'daddr' ? k.destIP : k.sourceIP));
    m = /^(tcp|udp|sctp) dport (\d+)/.exec(rule);
    if (m) return ok(m, m[1] === k.protocol && m[2] === k.destPort);
    return null;
  }

  /** Returns true when the packet hit a terminal verdict (dnat, drop, reject). */
  runChain(chain: string, k: Pkt): boolean {
    const rules = this.nft.chains.get(chain);
    if (!rules) throw new Error(`unknown chain ${chain}`);
    for (const raw of rules) {
      let rule = raw.replace(IGNORED, '').trim();
      while (rule !== '') {
        const step = this.matchExpr(rule, k);
        if (step && 'stop' in step) break;
        if (step) {
          rule = step.rest.trim();
          continue;
        }
        const verdict = this.verdict(rule, raw, k);
        if (verdict === 'continue') break;
        return verdict === 'terminal';
      }
    }
    return false;
  }

  private verdict(rule: string, raw: string, k: Pkt): 'terminal' | 'return' | 'continue' {
    this.matches.push(raw);
    if (rule === 'jump mark-for-masquerade') {
      this.markMasq = true;
      return 'continue';
    }
    let m = /^(jump|goto) (\S+)$/.exec(rule);
    if (m) {
      if (this.runChain(m[2], k)) return 'terminal';
      return m[1] === 'goto' ? 'return' : 'continue';
    }
    m = /^(drop|reject)$/.exec(rule);
    if (m) {
      this.outputs.push(m[1].toUpperCase());
      return 'terminal';
    }
    if (rule === 'return') return 'return';
    m = /^meta l4proto (tcp|udp|sctp) dnat to (\S+)$/.exec(rule);
    if (m) {
      this.outputs.push(m[2]);
      return 'terminal';
    }
    m = /^numgen random mod \d+ vmap \{(.*)\}$/.exec(rule);
    if (m) {
      // Every endpoint is followed, to collect them all.
      for (const e of m[1].matchAll(/\d+ : goto (\S+)/g)) this.runChain(e[1], k);
      return 'terminal';
    }
    throw new Error(`unmatched rule: ${raw}`);
  }
}

/** The address of a DNAT target "ip:port" or "[ip]:port". */
export function dnatHost(target: string): string {
  const v6 = /^\[([^\]]+)\]:\d+$/.exec(target);
  return v6 ? v6[1] : target.split(':')[0];
}

/** Where a packet ends up and whether it is masqueraded, as kube-proxy's nftables tracePacket. */
export function traceNft(tx: string, k: Pkt, localIPs: readonly string[]) {
  const t = new NftTracer(parseNft(tx), new Set(localIPs));
  const done = () => ({ matches: t.matches, output: t.outputs.join(', '), masq: t.markMasq });
  if (t.runChain('filter-prerouting-pre-dnat', k)) return done();
  t.runChain('nat-prerouting', k);
  const after = t.outputs.length > 0 ? { ...k, destIP: dnatHost(t.outputs[0]) } : k;
  if (t.runChain('filter-forward', after)) return done();
  t.runChain('filter-input', after);
  return done();
}

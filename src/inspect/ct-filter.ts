// Conntrack filters, as `conntrack -L/-D/-C` takes them: -s/--src and -d/--dst match the
// original direction's source and destination, -r/--reply-src and -q/--reply-dst the reply
// direction's, -p the protocol, --sport/--dport the original ports, --state the state name,
// -f the family (ipv4, ipv6; both when not given). Addresses, IPv4 or IPv6, may carry a /prefix;
// an address of one family never matches a flow of the other. A filter travels to the agent as
// JSON (CtFilterSpec) and is validated there; matching reads the conntrack map's columns
// directly (no per-entry strings for addresses), so counting or flushing a full table stays
// cheap.
import type { ConntrackMap } from '../maps/conntrack.ts';
import { type Cidr, cidrContains, ipv4ToU32, parseCidr, prefixMask } from '../wire/addr.ts';
import { type Cidr6Words, parseCidr6Words } from '../wire/addr6.ts';
import { IPPROTO_ICMP, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from '../wire/proto.ts';
import { ctStateName, OTHER_STATES, SCTP_STATES, TCP_STATES } from './ct-state.ts';

/** The JSON form (CLI flags -> control socket request). */
export interface CtFilterSpec {
  src?: string;
  dst?: string;
  replySrc?: string;
  replyDst?: string;
  proto?: string | number;
  state?: string;
  sport?: number;
  dport?: number;
  family?: 'ipv4' | 'ipv6';
}

/** An address filter of one family. */
export type AddrFilter = { ipv6: false; cidr: Cidr } | { ipv6: true; cidr: Cidr6Words };

export interface CtFilter {
  src?: AddrFilter;
  dst?: AddrFilter;
  replySrc?: AddrFilter;
  replyDst?: AddrFilter;
  /** only flows of this family (true: IPv6) */
  ipv6?: boolean;
  proto?: number;
  state?: string;
  sport?: number;
  dport?: number;
}

const PROTO_BY_NAME: Record<string, number> = {
  icmp: IPPROTO_ICMP,
  tcp: IPPROTO_TCP,
  udp: IPPROTO_UDP,
  sctp: IPPROTO_SCTP,
};
const STATES: readonly string[] = [...new Set([...TCP_STATES, ...SCTP_STATES, ...OTHER_STATES])];
const ADDR_KEYS = ['src', 'dst', 'replySrc', 'replyDst'] as const;
const KNOWN_KEYS = new Set<string>([...ADDR_KEYS, 'proto', 'state', 'sport', 'dport', 'family']);

/** Address or CIDR text, IPv4 or IPv6 -> its filter (a bare address is a /32 or /128). */
export function parseAddrOrCidr(s: string): AddrFilter {
  if (s.includes(':'))
    return { ipv6: true, cidr: parseCidr6Words(s.includes('/') ? s : `${s}/128`) };
  if (s.includes('/')) return { ipv6: false, cidr: parseCidr(s) };
  return { ipv6: false, cidr: { addr: ipv4ToU32(s), prefix: 32, mask: prefixMask(32) } };
}

/**
 * Validates a filter from a request; `where` names it in errors ("ct-flush: filter"), `field`
 * names one key (the CLI passes its flag names). Unknown keys are refused: a misspelt filter
 * on a flush must not delete every flow.
 */
export function parseCtFilter(
  raw: unknown,
  where: string,
  field: (key: string) => string = (k) => `${where}.${k}`,
): CtFilter {
  if (raw === undefined || raw === null) return {};
  if (typeof raw !== 'object' || Array.isArray(raw)) {
    throw new Error(`${where}: must be an object like {"src":"10.244.1.3","proto":"tcp"}`);
  }
  const spec = raw as Record<string, unknown>;
  for (const k of Object.keys(spec)) {
    if (!KNOWN_KEYS.has(k)) {
      throw new Error(`${field(k)}: unknown filter; known: ${[...KNOWN_KEYS].join(', ')}`);
    }
  }
  const f: CtFilter = {};
  for (const k of ADDR_KEYS) {
    const v = spec[k];
    if (v === undefined) continue;
    if (typeof v !== 'string') throw new Error(`${field(k)}: must be an address string`);
    try {
      f[k] = parseAddrOrCidr(v);
    } catch (err) {
      throw new Error(`${field(k)}: ${(err as Error).message}`);
    }
  }
  if (spec.proto !== undefined) f.proto = parseProto(spec.proto, field('proto'));
  if (spec.state !== undefined) f.state = parseState(spec.state, field('state'));
  if (spec.sport !== undefined) f.sport = parsePort(spec.sport, field('sport'));
  if (spec.dport !== undefined) f.dport = parsePort(spec.dport, field('dport'));
  if (spec.family !== undefined) {
    if (spec.family !== 'ipv4' && spec.family !== 'ipv6')
      throw new Error(`${field('family')}: ${JSON.stringify(spec.family)} is not ipv4 or ipv6`);
    f.ipv6 = spec.family === 'ipv6';
  }
  for (const k of ADDR_KEYS) {
    const a = f[k];
    if (a && f.ipv6 !== undefined && a.ipv6 !== f.ipv6)
      throw new Error(
        `${field(k)}: an ${a.ipv6 ? 'IPv6' : 'IPv4'} address with ${field('family')} ${spec.family}`,
      );
  }
  return f;
}

function parseProto(v: unknown, where: string): number {
  if (typeof v === 'string' && PROTO_BY_NAME[v.toLowerCase()] !== undefined) {
    return PROTO_BY_NAME[v.toLowerCase()];
  }
  const n = typeof v === 'string' && /^[0-9]+$/.test(v) ? Number(v) : v;
  if (typeof n === 'number' && Number.isInteger(n) && n >= 0 && n <= 255) return n;
  throw new Error(`${where}: ${JSON.stringify(v)} is not tcp, udp, sctp, icmp or 0..255`);
}

function parseState(v: unknown, where: string): string {
  const s = typeof v === 'string' ? v.toUpperCase() : '';
  if (!STATES.includes(s)) {
    throw new Error(`${where}: ${JSON.stringify(v)} is not one of ${STATES.join(', ')}`);
  }
  return s;
}

function parsePort(v: unknown, where: string): number {
  const n = typeof v === 'string' && /^[0-9]+$/.test(v) ? Number(v) : v;
  if (typeof n === 'number' && Number.isInteger(n) && n >= 0 && n <= 65535) return n;
  throw new Error(`${where}: ${JSON.stringify(v)} is not a port 0..65535`);
}

/** Word k of a flow's address column (an IPv4 map has one word: k is 0). */
export type AddrWord = (i: number, k: number) => number;

/** Whether the address whose words `word(i, k)` reads lies in `a` (never across families). */
function addrIn(a: AddrFilter, ipv6: boolean, word: AddrWord, i: number): boolean {
  if (a.ipv6 !== ipv6) return false;
  if (!a.ipv6) return cidrContains(a.cidr, word(i, 0));
  const { net, mask } = a.cidr;
  for (let k = 0; k < 4; k++) if ((word(i, k) & mask[k]!) !== net[k]) return false;
  return true;
}

/** The client, VIP and backend columns of a map as AddrWords (either family). */
export function ctAddrWords(ct: ConntrackMap): { s: AddrWord; d: AddrWord; b: AddrWord } {
  return ct.ipv6
    ? {
        s: (i, k) => ct.saddrWord(i, k),
        d: (i, k) => ct.daddrWord(i, k),
        b: (i, k) => ct.baddrWord(i, k),
      }
    : { s: (i) => ct.saddr(i), d: (i) => ct.daddr(i), b: (i) => ct.baddr(i) };
}

/**
 * True when entry `i` of `ct` (an IPv4 or an IPv6 map) passes every condition of `f` (an empty
 * filter passes all). `replyDst`: word k of where the reply goes — the client, or the SNAT
 * address of a masqueraded flow (the caller knows the SNAT table); read only when `f.replyDst`
 * is set. `cols`: ctAddrWords(ct), made once per scan.
 */
export function ctFilterMatch(
  f: CtFilter,
  ct: ConntrackMap,
  i: number,
  replyDst?: AddrWord,
  cols = ctAddrWords(ct),
): boolean {
  const v6 = ct.ipv6;
  if (f.ipv6 !== undefined && f.ipv6 !== v6) return false;
  const proto = ct.proto(i);
  if (f.proto !== undefined && proto !== f.proto) return false;
  if (f.src && !addrIn(f.src, v6, cols.s, i)) return false;
  if (f.dst && !addrIn(f.dst, v6, cols.d, i)) return false;
  // reply direction: backend -> client (or -> the masquerade address)
  if (f.replySrc && !addrIn(f.replySrc, v6, cols.b, i)) return false;
  if (f.replyDst && !addrIn(f.replyDst, v6, replyDst ?? cols.s, i)) return false;
  if (f.sport !== undefined && ct.sport(i) !== f.sport) return false;
  if (f.dport !== undefined && ct.dport(i) !== f.dport) return false;
  return f.state === undefined || ctStateName(proto, ct.flags(i)) === f.state;
}

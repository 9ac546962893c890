// Conntrack filters, as `conntrack -L/-D/-C` takes them: -s/--src and -d/--dst match the
// original direction's source and destination, -r/--reply-src and -q/--reply-dst the reply
// direction's, -p the protocol, --sport/--dport the original ports, --state the state name.
// Addresses may carry a /prefix. A filter travels to the agent as JSON (CtFilterSpec) and is
// validated there; matching reads the conntrack map's columns directly (no per-entry strings
// for addresses), so counting or flushing a full table stays cheap.
import type { ConntrackMap } from '../maps/conntrack.ts';
import { type Cidr, cidrContains, ipv4ToU32, parseCidr, prefixMask } from '../wire/addr.ts';
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
}

export interface CtFilter {
  src?: Cidr;
  dst?: Cidr;
  replySrc?: Cidr;
  replyDst?: Cidr;
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
const KNOWN_KEYS = new Set<string>([...ADDR_KEYS, 'proto', 'state', 'sport', 'dport']);

/** Address or CIDR text -> Cidr (a bare address is a /32). */
export function parseAddrOrCidr(s: string): Cidr {
  if (s.includes('/')) return parseCidr(s);
  return { addr: ipv4ToU32(s), prefix: 32, mask: prefixMask(32) };
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

/**
 * True when entry `i` of `ct` passes every condition of `f` (an empty filter passes all).
 * `replyDst`: where the reply goes — the client, or the SNAT address of a masqueraded flow
 * (the caller knows the SNAT table); read only when `f.replyDst` is set.
 */
export function ctFilterMatch(
  f: CtFilter,
  ct: ConntrackMap,
  i: number,
  replyDst: (i: number) => number = (j) => ct.saddr(j),
): boolean {
  const proto = ct.proto(i);
  if (f.proto !== undefined && proto !== f.proto) return false;
  if (f.src && !cidrContains(f.src, ct.saddr(i))) return false;
  if (f.dst && !cidrContains(f.dst, ct.daddr(i))) return false;
  // reply direction: backend -> client (or -> the masquerade address)
  if (f.replySrc && !cidrContains(f.replySrc, ct.baddr(i))) return false;
  if (f.replyDst && !cidrContains(f.replyDst, replyDst(i))) return false;
  if (f.sport !== undefined && ct.sport(i) !== f.sport) return false;
  if (f.dport !== undefined && ct.dport(i) !== f.dport) return false;
  return f.state === undefined || ctStateName(proto, ct.flags(i)) === f.state;
}

// Answers of the control socket, built from the datapath's maps and counters (slow world).
// The JSON shapes are in src/inspect/types.ts (the CLI formats them); filters in
// src/inspect/ct-filter.ts.
import { CT_F_SEEN_REPLY } from '../datapath/state/ct-state.ts';
import type { Datapath } from '../datapath/state/datapath.ts';
import { countersToRecord } from '../datapath/state/reasons.ts';
import { nat4SnatOf, nat6SnatOf } from '../datapath/state/nat-state.ts';
import {
  type AddrWord,
  type CtFilter,
  ctAddrWords,
  ctFilterMatch,
  parseCtFilter,
} from '../inspect/ct-filter.ts';
import { ctAssured, ctStateName } from '../inspect/ct-state.ts';
import type { CtEntry, SvcBackend, SvcEntry, SvcReport } from '../inspect/types.ts';
import type { ConntrackMap } from '../maps/conntrack.ts';
import type { MapAddr } from '../maps/hashtab.ts';
import type { SnatMap } from '../maps/snat.ts';
import { BE_ACTIVE, BE_F_LOCAL, BE_QUARANTINED, BE_TERMINATING } from '../maps/backends.ts';
import {
  SVC_F_AFFINITY,
  SVC_F_ETP_LOCAL,
  SVC_F_EXTERNAL_IP,
  SVC_F_ITP_LOCAL,
  SVC_F_LOADBALANCER,
  SVC_F_NODEPORT,
  SVC_F_SOURCE_RANGE,
  SVC_F_WILDCARD,
  SVC_SCOPE_LOCAL,
} from '../maps/services.ts';
import type { ResolvedServicePort } from '../model.ts';
import { SCHED_NAMES } from '../sched/kinds.ts';
import { ipv4ToU32, u32ToIpv4 } from '../wire/addr.ts';
import { canonIpv6, ipv6ToWords, wordsToIpv6 } from '../wire/addr6.ts';
import { PROTO_BY_K8S_NAME, protoName } from '../wire/proto.ts';
import { AGENT_COUNTER_NAMES } from './loop.ts';

export type { CtEntry, CtTuple } from '../inspect/types.ts';
export { ctStateName } from '../inspect/ct-state.ts';

/**
 * One family's conntrack as the listings read it: its map and SNAT table, its address columns,
 * where a flow's reply goes (word k of the client, or of the masquerade address), and an
 * address as text.
 */
interface CtView {
  ct: ConntrackMap;
  snat: SnatMap;
  cols: ReturnType<typeof ctAddrWords>;
  /** the SNAT entry of flow i, or -1 */
  snatOf(i: number): number;
  /** word k of SNAT entry e's masquerade address */
  natWord: AddrWord;
  replyDst: AddrWord;
  text(word: AddrWord, i: number): string;
}

function ctView(dp: Datapath, ipv6: boolean): CtView {
  const ct = ipv6 ? dp.ct6 : dp.ct;
  const snat = ipv6 ? dp.nat.snat6 : dp.nat.snat;
  const snatOf = (i: number) => (ipv6 ? nat6SnatOf : nat4SnatOf)(ct, snat, i);
  const cols = ctAddrWords(ct);
  const natWord: AddrWord = ipv6 ? (e, k) => snat.natAddrWord(e, k) : (e) => snat.natAddr(e);
  const text = ipv6
    ? (word: AddrWord, i: number) => wordsToIpv6([0, 1, 2, 3].map((k) => word(i, k)))
    : (word: AddrWord, i: number) => u32ToIpv4(word(i, 0));
  const replyDst: AddrWord = (i, k) => {
    const e = snatOf(i);
    return e < 0 ? cols.s(i, k) : natWord(e, k);
  };
  return { ct, snat, cols, snatOf, natWord, replyDst, text };
}

/** Both families' views, IPv4 first (the order of every listing). */
function ctViews(dp: Datapath): CtView[] {
  return [ctView(dp, false), ctView(dp, true)];
}

/**
 * Entry `i` of a conntrack map (IPv4 unless `v` is the IPv6 view) as JSON. The reply tuple is
 * what the backend sends, as `conntrack -L` prints it: for a masqueraded flow (NodePort,
 * hairpin, node → VIP) its destination is the masquerade address and SNAT port, not the
 * client (nat.ts's SNAT entry).
 */
export function ctEntry(dp: Datapath, i: number, nowSec: number, v = ctView(dp, false)): CtEntry {
  const { ct, cols, snat } = v;
  const proto = ct.proto(i);
  const flags = ct.flags(i);
  const client = v.text(cols.s, i);
  const e = v.snatOf(i);
  const nat = e < 0 ? undefined : { addr: v.text(v.natWord, e), port: snat.natPort(e) };
  return {
    proto: protoName(proto),
    protoNum: proto,
    ...(ct.ipv6 ? { family: 'ipv6' as const } : {}),
    state: ctStateName(proto, flags),
    expiresInSec: ct.expires(i) - nowSec,
    orig: {
      src: client,
      dst: v.text(cols.d, i),
      sport: ct.sport(i),
      dport: ct.dport(i),
      packets: ct.pktsOrig(i),
      bytes: ct.bytesOrig(i),
    },
    reply: {
      src: v.text(cols.b, i),
      dst: nat?.addr ?? client,
      sport: ct.bport(i),
      dport: nat?.port ?? ct.sport(i),
      packets: ct.pktsReply(i),
      bytes: ct.bytesReply(i),
    },
    backendId: ct.backendId(i),
    revNat: ct.revNat(i),
    ...(nat ? { snat: nat } : {}),
    packets: ct.pktsOrig(i) + ct.pktsReply(i),
    bytes: ct.bytesOrig(i) + ct.bytesReply(i),
    seenReply: (flags & CT_F_SEEN_REPLY) !== 0,
    assured: ctAssured(proto, flags),
  };
}

/** Calls fn(view, i) for every live (unexpired) flow of either family passing `filter`. */
function eachFlow(
  dp: Datapath,
  nowSec: number,
  filter: CtFilter,
  fn: (v: CtView, i: number) => void,
): void {
  for (const v of ctViews(dp)) {
    const ct = v.ct;
    if (filter.ipv6 !== undefined && filter.ipv6 !== ct.ipv6) continue;
    for (let i = ct.next(0); i >= 0; i = ct.next(i + 1)) {
      if (ct.expires(i) > nowSec && ctFilterMatch(filter, ct, i, v.replyDst, v.cols)) fn(v, i);
    }
  }
}

/** Live (unexpired) flows passing `filter`, at most `limit`: IPv4 first, then IPv6. */
export function ctEntries(dp: Datapath, nowSec: number, limit: number, filter: CtFilter = {}) {
  const out: CtEntry[] = [];
  eachFlow(dp, nowSec, filter, (v, i) => {
    if (out.length < limit) out.push(ctEntry(dp, i, nowSec, v));
  });
  return out;
}

export function ctCount(dp: Datapath, nowSec: number, filter: CtFilter = {}): number {
  let n = 0;
  eachFlow(dp, nowSec, filter, () => {
    n++;
  });
  return n;
}

/**
 * Deletes the live flows passing `filter` (all of them for an empty filter), as `conntrack -D`
 * / `-F`: the next packet of a deleted flow is a new flow (a new backend choice for a SYN;
 * mid-stream TCP is picked up again). Returns how many were deleted.
 */
export function ctFlush(dp: Datapath, nowSec: number, filter: CtFilter = {}): number {
  const doomed: [ConntrackMap, number][] = [];
  eachFlow(dp, nowSec, filter, (v, i) => {
    doomed.push([v.ct, i]);
  });
  for (const [ct, i] of doomed) ct.delete(i);
  return doomed.length;
}

const FLAG_NAMES: [number, string][] = [
  [SVC_F_NODEPORT, 'nodeport'],
  [SVC_F_EXTERNAL_IP, 'external-ip'],
  [SVC_F_LOADBALANCER, 'loadbalancer'],
  [SVC_F_ETP_LOCAL, 'etp-local'],
  [SVC_F_ITP_LOCAL, 'itp-local'],
  [SVC_F_AFFINITY, 'affinity'],
  [SVC_F_SOURCE_RANGE, 'source-range'],
];

const BE_STATE_NAMES: Record<number, string> = {
  [BE_ACTIVE]: 'active',
  [BE_TERMINATING]: 'terminating',
  [BE_QUARANTINED]: 'quarantined',
};

/**
 * Frontend -> ServicePortName, for the ports the agent loaded: "vip:port:protoNum" for the
 * ClusterIPs (an IPv4 VIP as its u32, an IPv6 one as its canonical text), external and LoadBalancer IPs, "nodeport:port:protoNum" for the NodePort (its
 * entries hold the node's addresses, which the manifests do not name).
 */
export function servicePortNames(ports: readonly ResolvedServicePort[]): Map<string, string> {
  const names = new Map<string, string>();
  for (const p of ports) {
    const proto = PROTO_BY_K8S_NAME[p.port.protocol];
    const ips = [
      ...(p.service.clusterIPs ?? []),
      ...(p.service.externalIPs ?? []),
      ...(p.service.loadBalancerIPs ?? []),
    ];
    for (const ip of ips) {
      if (ip.includes(':')) {
        const text = canonIpv6(ip);
        if (text) names.set(`${text}:${p.port.port}:${proto}`, p.servicePortName);
        continue;
      }
      try {
        names.set(`${ipv4ToU32(ip)}:${p.port.port}:${proto}`, p.servicePortName);
      } catch {
        // an address the loader refused never reached the maps: nothing to name
      }
    }
    if (p.port.nodePort) names.set(`nodeport:${p.port.nodePort}:${proto}`, p.servicePortName);
  }
  return names;
}

/** "ns/name:port" (or "ns/name") -> its parts; Kubernetes names hold neither '/' nor ':'. */
function splitServicePortName(spn: string): { namespace: string; service: string } {
  const slash = spn.indexOf('/');
  const colon = spn.indexOf(':', slash + 1);
  return {
    namespace: spn.slice(0, slash),
    service: spn.slice(slash + 1, colon < 0 ? undefined : colon),
  };
}

/** Active (TCP or SCTP ESTABLISHED) and inactive live flows per (revNat, backend id), one
 * table per family (index 0 IPv4, 1 IPv6: each family numbers its own). */
function connCounts(
  dp: Datapath,
  nowSec: number,
): Map<number, { active: number; inactive: number }>[] {
  const counts = [new Map(), new Map()] as Map<number, { active: number; inactive: number }>[];
  eachFlow(dp, nowSec, {}, ({ ct }, i) => {
    const table = counts[ct.ipv6 ? 1 : 0]!;
    const key = ct.revNat(i) * 0x1_0000_0000 + ct.backendId(i);
    let c = table.get(key);
    if (!c) {
      c = { active: 0, inactive: 0 };
      table.set(key, c);
    }
    if (ctStateName(ct.proto(i), ct.flags(i)) === 'ESTABLISHED') c.active++;
    else c.inactive++;
  });
  return counts;
}

/**
 * The service table as `ipvsadm -Ln` shows it, sorted by protocol, family (IPv4 first), VIP,
 * port; an IPv6 frontend prints as ipvsadm prints one, [addr]:port.
 */
export function svcReport(
  dp: Datapath,
  nowSec: number,
  names: Map<string, string> = new Map(),
): SvcReport {
  const counts = connCounts(dp, nowSec);
  const services: SvcEntry[] = [];
  for (const ipv6 of [false, true]) {
    const svc = ipv6 ? dp.svc6 : dp.svc;
    const be = ipv6 ? dp.be6 : dp.be;
    const table = counts[ipv6 ? 1 : 0]!;
    for (let i = svc.next(0); i >= 0; i = svc.next(i + 1)) {
      if (svc.slotOf(i) !== 0 || svc.flags(i) & SVC_F_WILDCARD) continue;
      // int32 in the map; IPv4 names are keyed by the u32, IPv6 by the text
      const vip: MapAddr = ipv6
        ? Int32Array.from([0, 1, 2, 3], (k) => svc.vipWord(i, k))
        : svc.vipOf(i) >>> 0;
      const vipKey = typeof vip === 'number' ? String(vip) : wordsToIpv6(vip);
      const port = svc.portOf(i);
      // The key's protocol byte carries SVC_SCOPE_LOCAL on the external-scope entry of an
      // externalTrafficPolicy: Local service (maps/services.ts); the protocol is the rest.
      const keyProto = svc.protoOf(i);
      const proto = keyProto & ~SVC_SCOPE_LOCAL;
      const revNat = svc.revNat(i);
      const backends: SvcBackend[] = [];
      for (let s = 1; s <= svc.count(i); s++) {
        const slot = svc.lookupAny(vip, port, keyProto, s);
        const b = slot < 0 ? -1 : be.lookup(svc.backendId(slot));
        if (b < 0) continue; // a slot mid-update or a dangling id: nothing to show
        const id = be.idOf(b);
        const state = be.state(b);
        const c = table.get(revNat * 0x1_0000_0000 + id);
        const addr = ipv6
          ? `[${wordsToIpv6([0, 1, 2, 3].map((k) => be.addrWord(b, k)))}]`
          : u32ToIpv4(be.addr(b));
        backends.push({
          id,
          addr,
          port: be.port(b),
          weight: state === BE_ACTIVE ? 1 : 0,
          state: BE_STATE_NAMES[state] ?? String(state),
          local: (be.flags(b) & BE_F_LOCAL) !== 0,
          active: c?.active ?? 0,
          inactive: c?.inactive ?? 0,
        });
      }
      const flags = svc.flags(i);
      const entry: SvcEntry = {
        vip: ipv6 ? `[${vipKey}]` : u32ToIpv4(vip as number),
        port,
        proto: protoName(proto),
        protoNum: proto,
        scheduler: SCHED_NAMES[svc.scheduler(i)] ?? `sched-${svc.scheduler(i)}`,
        flags: [
          ...FLAG_NAMES.filter(([bit]) => flags & bit).map(([, n]) => n),
          ...(keyProto & SVC_SCOPE_LOCAL ? ['local-scope'] : []),
        ],
        affinityTimeoutSec: flags & SVC_F_AFFINITY ? svc.affinityTimeout(i) : 0,
        revNat,
        backends,
      };
      const name =
        names.get(`${vipKey}:${port}:${proto}`) ??
        (flags & SVC_F_NODEPORT ? names.get(`nodeport:${port}:${proto}`) : undefined);
      if (name !== undefined) Object.assign(entry, { name }, splitServicePortName(name));
      services.push(entry);
    }
  }
  services.sort(
    (a, b) =>
      a.protoNum - b.protoNum ||
      cmpAddr(a.vip, b.vip) ||
      a.port - b.port ||
      a.flags.length - b.flags.length,
  );
  return { connTableSize: dp.ct.capacity, services };
}

/** IPv4 before IPv6 ("[...]"), each in address order. */
function cmpAddr(a: string, b: string): number {
  const a6 = a.startsWith('[');
  const b6 = b.startsWith('[');
  if (a6 !== b6) return a6 ? 1 : -1;
  if (!a6) return ipv4ToU32(a) - ipv4ToU32(b);
  const wa = ipv6ToWords(a.slice(1, -1));
  const wb = ipv6ToWords(b.slice(1, -1));
  for (let k = 0; k < 4; k++) if (wa[k] !== wb[k]) return (wa[k]! >>> 0) - (wb[k]! >>> 0);
  return 0;
}

/** Largest `ct` answer by default: one JSON line, so bounded (the socket is not a bulk API). */
export const CT_LIST_LIMIT = 100_000;

/**
 * The inspect commands of the control socket; undefined for any other command.
 *
 *   {"cmd":"ct", "filter"?: CtFilterSpec, "limit"?: n}  -> {entries: CtEntry[], total}
 *   {"cmd":"ct-count", "filter"?}                        -> {count, max, max6} (capacities of the
 *                                                           IPv4 and the IPv6 table)
 *   {"cmd":"ct-flush", "filter"?}                        -> {deleted}
 *   {"cmd":"svc"}                                        -> SvcReport
 *
 * Filters are validated before anything is touched; a bad one is an error naming the field.
 */
export function inspectAnswer(
  dp: Datapath,
  req: Record<string, unknown>,
  nowSec: number,
  ports: readonly ResolvedServicePort[] = [],
): unknown {
  const cmd = String(req.cmd);
  switch (cmd) {
    case 'ct': {
      const filter = parseCtFilter(req.filter, 'ct: filter');
      const limit = req.limit === undefined ? CT_LIST_LIMIT : Number(req.limit);
      if (!Number.isInteger(limit) || limit < 0)
        throw new Error('ct: limit must be an integer >= 0');
      const entries = ctEntries(dp, nowSec, limit, filter);
      return { entries, total: ctCount(dp, nowSec, filter) };
    }
    case 'ct-count':
      return {
        count: ctCount(dp, nowSec, parseCtFilter(req.filter, 'ct-count: filter')),
        max: dp.ct.capacity,
        max6: dp.ct6.capacity,
      };
    case 'ct-flush':
      return { deleted: ctFlush(dp, nowSec, parseCtFilter(req.filter, 'ct-flush: filter')) };
    case 'svc':
      return svcReport(dp, nowSec, servicePortNames(ports));
    default:
      return undefined;
  }
}

/** Every datapath reason by name, zeros included (a stable shape for scripts and diffs). */
export function reasonTable(dp: Datapath): Record<string, number> {
  return countersToRecord(dp.counters);
}

export function agentTable(agent: Float64Array): Record<string, number> {
  const out: Record<string, number> = {};
  AGENT_COUNTER_NAMES.forEach((name, i) => {
    out[name] = agent[i];
  });
  return out;
}

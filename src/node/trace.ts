// `kubetun trace`: what the data plane would do with one packet now, and why — without doing
// it. The agent builds the packet (TCP SYN, UDP datagram or ICMP echo), runs the real program
// (dpProcess) on a dry-run copy of its datapath (src/datapath/state/dry-run.ts: conntrack,
// affinity, SNAT, scheduler state and RNG copied; the service maps shared read-only) and
// reports, beside the program's own result, the control plane's view of the same service:
// its endpoints, which are eligible for new flows and why the others are not (kube-proxy's
// CategorizeEndpoints, src/endpoints/select.ts), the scheduler and the affinity entry. The
// live datapath is only read: its maps, counters and RNG are exactly as before. Either family:
// `--from`/`--to` IPv4 (IP[:PORT]) or IPv6 ([IP]:PORT, or a bare IP), both of one family; an
// IPv6 probe is a TCP SYN, a UDP datagram or an ICMPv6 echo, run through the IPv6 program.
import { dpProcess } from '../datapath/program.ts';
import type { Datapath } from '../datapath/state/datapath.ts';
import { dpDryRunCopy } from '../datapath/state/dry-run.ts';
import { REASON_NAMES, REASONS } from '../datapath/state/reasons.ts';
import { portPolicy, selectPortEndpoints } from '../endpoints/select.ts';
import { SVC_F_AFFINITY } from '../maps/services.ts';
import type { ResolvedEndpoint, ResolvedServicePort } from '../model.ts';
import { SCHED_NAMES } from '../sched/kinds.ts';
import { ipv4ToU32, u32ToIpv4 } from '../wire/addr.ts';
import { canonIpv6, ipv6ToWords, wordsToIpv6 } from '../wire/addr6.ts';
import { read16, read32s } from '../wire/bytes.ts';
import { l4FillCsum } from '../wire/checksum.ts';
import { l4v6FillCsum } from '../wire/checksum6.ts';
import { ipv4FillCsum } from '../wire/ipv4.ts';
import {
  IPPROTO_ICMP,
  IPPROTO_ICMPV6,
  IPPROTO_TCP,
  IPPROTO_UDP,
  protoName,
} from '../wire/proto.ts';
import { ctStateName } from './inspect.ts';

const PROTOS: Record<string, number> = { tcp: IPPROTO_TCP, udp: IPPROTO_UDP, icmp: IPPROTO_ICMP };
const VERDICTS = ['PASS', 'TX', 'REPLY', 'DROP'];
/** the client port when --from gives none (an ephemeral port, as a client's kernel picks) */
export const TRACE_DEFAULT_SPORT = 43210;

export interface TraceTuple {
  src: string;
  dst: string;
  sport: number;
  dport: number;
}

export interface TraceEndpoint {
  ip: string;
  port: number;
  node?: string;
  zone?: string;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  eligible: boolean;
  /** why not eligible for new flows */
  why?: string;
}

export interface TraceReport {
  node: string;
  proto: string;
  packet: TraceTuple;
  service?: {
    name: string;
    frontend: string;
    scheduler: string;
    affinityTimeoutSec: number;
    internalTrafficPolicy: string;
    externalTrafficPolicy: string;
    terminatingFallback: boolean;
    endpoints: TraceEndpoint[];
  };
  affinity?: { backend: string; ageSec: number; timeoutSec: number; fresh: boolean };
  conntrack: { hit: boolean; created: boolean; entry: number; state?: string };
  backend?: string;
  backendId: number;
  rewrite: { after: TraceTuple; changed: boolean };
  verdict: string;
  reason: string;
  reasonDoc: string;
  /** always true: the live maps, counters and RNG were not touched */
  dryRun: true;
}

interface TraceReq {
  /** IPPROTO_ICMP for an IPv4 ping, IPPROTO_ICMPV6 for an IPv6 one */
  proto: number;
  ipv6: boolean;
  /** IPv4 addresses (u32); 0 for IPv6 */
  src: number;
  dst: number;
  /** IPv6 addresses as four words; empty for IPv4 */
  src6: Int32Array;
  dst6: Int32Array;
  sport: number;
  dport: number;
}

interface HostPort {
  ipv6: boolean;
  ip: number;
  ip6: Int32Array;
  port: number;
}

/** "IP", "IP:PORT", "[IPv6]:PORT" or a bare IPv6 address. */
function hostPort(s: unknown, what: string, needPort: boolean): HostPort {
  if (typeof s !== 'string' || s === '')
    throw new Error(`${what}: missing (IP, IP:PORT, or [IPv6]:PORT)`);
  const bracket = /^\[([^\]]+)\](?::(.*))?$/.exec(s);
  const bare6 = !bracket && s.indexOf(':') !== s.lastIndexOf(':');
  const ipv6 = bracket !== null || bare6;
  const [ipPart, portPart] = bracket
    ? [bracket[1]!, bracket[2]]
    : bare6
      ? [s, undefined]
      : (s.split(':') as [string, string | undefined]);
  let ip = 0;
  let ip6: Int32Array = new Int32Array(0);
  try {
    if (ipv6) ip6 = ipv6ToWords(ipPart);
    else ip = ipv4ToU32(ipPart);
  } catch {
    throw new Error(
      `${what}: ${JSON.stringify(ipPart)} is not an ${ipv6 ? 'IPv6' : 'IPv4'} address`,
    );
  }
  if (portPart === undefined) {
    if (needPort)
      throw new Error(
        `${what}: ${JSON.stringify(s)} needs a port (${ipv6 ? '[IP]:PORT' : 'IP:PORT'})`,
      );
    return { ipv6, ip, ip6, port: 0 };
  }
  const port = /^[0-9]+$/.test(portPart) ? Number(portPart) : Number.NaN;
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new Error(`${what}: port ${JSON.stringify(portPart)} is not 1..65535`);
  }
  return { ipv6, ip, ip6, port };
}

/** The request's fields checked; throws naming the field. */
export function parseTraceReq(req: Record<string, unknown>): TraceReq {
  const name = String(req.proto ?? 'tcp').toLowerCase();
  let proto = PROTOS[name];
  if (proto === undefined) throw new Error(`proto: ${JSON.stringify(req.proto)}: tcp, udp or icmp`);
  const from = hostPort(req.from, 'from', false);
  const icmp = proto === IPPROTO_ICMP;
  const to = hostPort(req.to, 'to', !icmp);
  if (from.ipv6 !== to.ipv6)
    throw new Error(`from, to: one is IPv4 and the other IPv6; trace one family at a time`);
  if (icmp && to.ipv6) proto = IPPROTO_ICMPV6;
  return {
    proto,
    ipv6: to.ipv6,
    src: from.ip,
    dst: to.ip,
    src6: from.ip6,
    dst6: to.ip6,
    sport: icmp ? 0 : from.port || TRACE_DEFAULT_SPORT,
    dport: icmp ? 0 : to.port,
  };
}

/** The probe packet: a TCP SYN, an empty UDP datagram or an ICMP(v6) echo request. */
export function tracePacket(t: TraceReq): Uint8Array {
  const ih = t.ipv6 ? 40 : 20;
  const l4 = t.proto === IPPROTO_TCP ? 20 : 8;
  const p = new Uint8Array(ih + l4);
  const put32 = (at: number, v: number) => {
    p[at] = v >>> 24;
    p[at + 1] = (v >>> 16) & 0xff;
    p[at + 2] = (v >>> 8) & 0xff;
    p[at + 3] = v & 0xff;
  };
  if (t.ipv6) {
    p[0] = 0x60;
    p[4] = l4 >>> 8;
    p[5] = l4 & 0xff;
    p[6] = t.proto;
    p[7] = 64;
    for (let k = 0; k < 4; k++) {
      put32(8 + 4 * k, t.src6[k]!);
      put32(24 + 4 * k, t.dst6[k]!);
    }
  } else {
    p[0] = 0x45;
    p[2] = p.length >>> 8;
    p[3] = p.length & 0xff;
    p[6] = 0x40; // DF
    p[8] = 64;
    p[9] = t.proto;
    put32(12, t.src);
    put32(16, t.dst);
  }
  if (t.proto === IPPROTO_ICMP || t.proto === IPPROTO_ICMPV6) {
    p[ih] = t.ipv6 ? 128 : 8; // echo request, id 1 seq 1
    p[ih + 5] = 1;
    p[ih + 7] = 1;
  } else {
    p[ih] = t.sport >>> 8;
    p[ih + 1] = t.sport & 0xff;
    p[ih + 2] = t.dport >>> 8;
    p[ih + 3] = t.dport & 0xff;
    if (t.proto === IPPROTO_TCP) {
      put32(ih + 4, 1); // seq
      p[ih + 12] = 0x50; // data offset 5
      p[ih + 13] = 0x02; // SYN
      p[ih + 14] = 0xff;
      p[ih + 15] = 0xff;
    } else {
      p[ih + 5] = 8; // UDP length
    }
  }
  if (t.ipv6) {
    l4v6FillCsum(p, 0, ih, p.length, t.proto);
  } else {
    ipv4FillCsum(p, 0);
    l4FillCsum(p, 0);
  }
  return p;
}

/** The ctl answer to {"cmd":"trace", from, to, proto}. */
export function traceAnswer(
  dp: Datapath,
  req: Record<string, unknown>,
  nowMs: number,
  ports: readonly ResolvedServicePort[],
  where: { node: string; zone?: string },
): TraceReport | { error: string } {
  let t: TraceReq;
  try {
    t = parseTraceReq(req);
  } catch (err) {
    return { error: `trace: ${(err as Error).message}` };
  }
  return traceRun(dp, t, nowMs, ports, where);
}

export function traceRun(
  dp: Datapath,
  t: TraceReq,
  nowMs: number,
  ports: readonly ResolvedServicePort[],
  where: { node: string; zone?: string },
): TraceReport {
  const pkt = tracePacket(t);
  const copy = dpDryRunCopy(dp);
  const v = dpProcess(copy, pkt, 0, pkt.length, nowMs);
  const r = copy.lastReason;
  const tx = VERDICTS[v] === 'TX';
  const before = tupleOf(t);
  const after: TraceTuple = tx ? packetTuple(t, pkt) : before;
  const ct = copy.lastCtIdx;
  const cmap = t.ipv6 ? copy.ct6 : copy.ct;
  const report: TraceReport = {
    node: where.node,
    proto: protoName(t.proto).toLowerCase(),
    packet: before,
    conntrack: {
      hit: ct >= 0 && copy.lastCtNew === 0,
      created: ct >= 0 && copy.lastCtNew === 1,
      entry: ct,
      ...(ct >= 0 ? { state: ctStateName(cmap.proto(ct), cmap.flags(ct)) } : {}),
    },
    backendId: copy.lastBackendId,
    rewrite: { after, changed: JSON.stringify(after) !== JSON.stringify(before) },
    verdict: VERDICTS[v] ?? String(v),
    reason: REASON_NAMES[r] ?? String(r),
    reasonDoc: REASONS[r]?.doc ?? '',
    dryRun: true,
  };
  if (copy.lastBackendId) {
    const backend = backendText(dp, t.ipv6, copy.lastBackendId);
    if (backend) report.backend = backend;
  }
  const svc = serviceView(dp, t, ports, where);
  if (svc) report.service = svc;
  const aff = affinityView(dp, t, Math.floor(nowMs / 1000));
  if (aff) report.affinity = aff;
  return report;
}

/** Backend `id` of the family's map as "ip:port" ("[ip]:port" for IPv6), or undefined. */
function backendText(dp: Datapath, ipv6: boolean, id: number): string | undefined {
  const be = ipv6 ? dp.be6 : dp.be;
  const b = be.lookup(id);
  if (b < 0) return undefined;
  if (!ipv6) return `${u32ToIpv4(be.addr(b) >>> 0)}:${be.port(b)}`;
  return `[${wordsToIpv6([0, 1, 2, 3].map((k) => be.addrWord(b, k)))}]:${be.port(b)}`;
}

function addrText(t: TraceReq, which: 'src' | 'dst'): string {
  return t.ipv6
    ? wordsToIpv6(which === 'src' ? t.src6 : t.dst6)
    : u32ToIpv4(which === 'src' ? t.src : t.dst);
}

function tupleOf(t: TraceReq): TraceTuple {
  return { src: addrText(t, 'src'), dst: addrText(t, 'dst'), sport: t.sport, dport: t.dport };
}

/** The probe's tuple as the program left it (rewritten in place). */
function packetTuple(t: TraceReq, pkt: Uint8Array): TraceTuple {
  const icmp = t.proto === IPPROTO_ICMP || t.proto === IPPROTO_ICMPV6;
  const l4 = t.ipv6 ? 40 : 20;
  const word = (at: number) => read32s(pkt, at);
  return {
    src: t.ipv6 ? wordsToIpv6([8, 12, 16, 20].map(word)) : u32ToIpv4(word(12) >>> 0),
    dst: t.ipv6 ? wordsToIpv6([24, 28, 32, 36].map(word)) : u32ToIpv4(word(16) >>> 0),
    sport: icmp ? 0 : read16(pkt, l4),
    dport: icmp ? 0 : read16(pkt, l4 + 2),
  };
}

/** The service port the packet's destination names, with the frontend kind that matched. */
function findPort(
  dp: Datapath,
  t: TraceReq,
  ports: readonly ResolvedServicePort[],
): { rsp: ResolvedServicePort; frontend: string } | undefined {
  const dst = addrText(t, 'dst');
  const same = (ips: readonly string[]) =>
    ips.some((ip) => (t.ipv6 ? canonIpv6(ip) === dst : ip === dst));
  const proto = protoName(t.proto); // Kubernetes' spelling, as ServicePort.protocol
  const atNode = t.ipv6
    ? dp.nat.hasNode6 === 1 && [0, 1, 2, 3].every((k) => t.dst6[k] === dp.nat.nodeIp6[k])
    : (t.dst | 0) === dp.nat.nodeIp;
  for (const rsp of ports) {
    if (rsp.port.protocol !== proto) continue;
    const s = rsp.service;
    if (rsp.port.port === t.dport) {
      if (same(s.clusterIPs)) return { rsp, frontend: 'ClusterIP' };
      if (same(s.externalIPs)) return { rsp, frontend: 'externalIP' };
      if (same(s.loadBalancerIPs)) return { rsp, frontend: 'LoadBalancer' };
    }
    if (rsp.port.nodePort && rsp.port.nodePort === t.dport && atNode) {
      return { rsp, frontend: 'NodePort' };
    }
  }
  return undefined;
}

/** The master entry of the packet's frontend in its family's service map, or -1. */
function masterOf(dp: Datapath, t: TraceReq): number {
  return t.ipv6
    ? dp.svc6.lookup6(t.dst6, 0, t.dport, t.proto, 0)
    : dp.svc.lookup(t.dst, t.dport, t.proto, 0);
}

function serviceView(
  dp: Datapath,
  t: TraceReq,
  ports: readonly ResolvedServicePort[],
  where: { node: string; zone?: string },
): TraceReport['service'] {
  const found = findPort(dp, t, ports);
  if (!found) return undefined;
  const { frontend } = found;
  // the family's endpoints, as the loader takes them (src/loader/load.ts)
  const rsp = t.ipv6 ? { ...found.rsp, endpoints: found.rsp.endpoints6 ?? [] } : found.rsp;
  const s = rsp.service;
  // the loader's choice (src/loader/load.ts): kube-proxy's categories, the ClusterIP taking
  // the local set under internalTrafficPolicy Local, external frontends under ETP Local
  const sel = selectPortEndpoints(rsp, { nodeName: where.node, nodeZone: where.zone });
  const policy = portPolicy(rsp, where.node);
  const useLocal = frontend === 'ClusterIP' ? policy.internalLocal : policy.externalLocal;
  const list = useLocal ? sel.local : sel.cluster;
  const fallback = useLocal ? sel.localTerminating : sel.clusterTerminating;
  const chosen = new Set(list);
  const endpoints = rsp.endpoints.map((e) =>
    endpointView(e, chosen.has(e), fallback, useLocal, where),
  );
  const m = masterOf(dp, t);
  const svcMap = t.ipv6 ? dp.svc6 : dp.svc;
  return {
    name: rsp.servicePortName,
    frontend,
    scheduler: m >= 0 ? (SCHED_NAMES[svcMap.scheduler(m)] ?? '?') : 'random',
    affinityTimeoutSec: s.sessionAffinity === 'ClientIP' ? s.affinityTimeoutSeconds : 0,
    internalTrafficPolicy: s.internalTrafficPolicy,
    externalTrafficPolicy: s.externalTrafficPolicy,
    terminatingFallback: fallback,
    endpoints,
  };
}

function endpointView(
  e: ResolvedEndpoint,
  eligible: boolean,
  fallback: boolean,
  localOnly: boolean,
  where: { node: string; zone?: string },
): TraceEndpoint {
  const v: TraceEndpoint = {
    ip: e.ip,
    port: e.port,
    ready: e.ready,
    serving: e.serving,
    terminating: e.terminating,
    eligible,
    ...(e.nodeName ? { node: e.nodeName } : {}),
    ...(e.zone ? { zone: e.zone } : {}),
  };
  if (eligible) return v;
  if (localOnly && e.nodeName !== where.node) {
    v.why = `not local (traffic policy Local, on ${e.nodeName ?? 'no node'})`;
  } else if (e.ready) v.why = 'topology hints send new flows to other endpoints';
  else if (e.terminating && !fallback) v.why = 'terminating (ready endpoints exist)';
  else if (!e.serving) v.why = 'not ready';
  else v.why = 'not selected (topology)';
  return v;
}

/** The live affinity entry of (client, service), read only. */
function affinityView(dp: Datapath, t: TraceReq, nowSec: number): TraceReport['affinity'] {
  const svc = t.ipv6 ? dp.svc6 : dp.svc;
  const aff = t.ipv6 ? dp.aff6 : dp.aff;
  const m = masterOf(dp, t);
  if (m < 0 || (svc.flags(m) & SVC_F_AFFINITY) === 0) return undefined;
  const i = t.ipv6 ? aff.lookup6(t.src6, 0, svc.revNat(m)) : aff.lookup(t.src, svc.revNat(m));
  if (i < 0) return undefined;
  const timeout = svc.affinityTimeout(m);
  const ageSec = nowSec - aff.lastUsed(i);
  const id = aff.backendId(i);
  const backend = backendText(dp, t.ipv6, id) ?? `#${id}`;
  return { backend, ageSec, timeoutSec: timeout, fresh: ageSec < timeout };
}

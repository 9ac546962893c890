// `kubetun trace`: what the data plane would do with one packet now, and why — without doing
// it. The agent builds the packet (TCP SYN, UDP datagram or ICMP echo), runs the real program
// (dpProcess) on a dry-run copy of its datapath (src/datapath/state/dry-run.ts: conntrack,
// affinity, SNAT, scheduler state and RNG copied; the service maps shared read-only) and
// reports, beside the program's own result, the control plane's view of the same service:
// its endpoints, which are eligible for new flows and why the others are not (kube-proxy's
// CategorizeEndpoints, src/endpoints/select.ts), the scheduler and the affinity entry. The
// live datapath is only read: its maps, counters and RNG are exactly as before.
import { dpProcess } from '../datapath/program.ts';
import type { Datapath } from '../datapath/state/datapath.ts';
import { dpDryRunCopy } from '../datapath/state/dry-run.ts';
import { REASON_NAMES, REASONS } from '../datapath/state/reasons.ts';
import { portPolicy, selectPortEndpoints } from '../endpoints/select.ts';
import { SVC_F_AFFINITY } from '../maps/services.ts';
import type { ResolvedEndpoint, ResolvedServicePort } from '../model.ts';
import { SCHED_NAMES } from '../sched/kinds.ts';
import { ipv4ToU32, u32ToIpv4 } from '../wire/addr.ts';
import { read16, read32s } from '../wire/bytes.ts';
import { l4FillCsum } from '../wire/checksum.ts';
import { ipv4FillCsum } from '../wire/ipv4.ts';
import { IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP, protoName } from '../wire/proto.ts';
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
  proto: number;
  src: number;
  sport: number;
  dst: number;
  dport: number;
}

function hostPort(s: unknown, what: string, needPort: boolean): { ip: number; port: number } {
  if (typeof s !== 'string' || s === '') throw new Error(`${what}: missing (IP or IP:PORT)`);
  const [ipPart, portPart, extra] = s.split(':');
  if (extra !== undefined) throw new Error(`${what}: ${JSON.stringify(s)}: IPv4 only, IP[:PORT]`);
  let ip: number;
  try {
    ip = ipv4ToU32(ipPart!);
  } catch {
    throw new Error(`${what}: ${JSON.stringify(ipPart)} is not an IPv4 address`);
  }
  if (portPart === undefined) {
    if (needPort) throw new Error(`${what}: ${JSON.stringify(s)} needs a port (IP:PORT)`);
    return { ip, port: 0 };
  }
  const port = Number(portPart);
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new Error(`${what}: port ${JSON.stringify(portPart)} is not 1..65535`);
  }
  return { ip, port };
}

/** The request's fields checked; throws naming the field. */
export function parseTraceReq(req: Record<string, unknown>): TraceReq {
  const proto = PROTOS[String(req.proto ?? 'tcp').toLowerCase()];
  if (proto === undefined) throw new Error(`proto: ${JSON.stringify(req.proto)}: tcp, udp or icmp`);
  const from = hostPort(req.from, 'from', false);
  const icmp = proto === IPPROTO_ICMP;
  const to = hostPort(req.to, 'to', !icmp);
  return {
    proto,
    src: from.ip,
    sport: icmp ? 0 : from.port || TRACE_DEFAULT_SPORT,
    dst: to.ip,
    dport: icmp ? 0 : to.port,
  };
}

/** The probe packet: a TCP SYN, an empty UDP datagram or an ICMP echo request. */
export function tracePacket(t: TraceReq): Uint8Array {
  const l4 = t.proto === IPPROTO_TCP ? 20 : 8;
  const p = new Uint8Array(20 + l4);
  p[0] = 0x45;
  p[2] = p.length >>> 8;
  p[3] = p.length & 0xff;
  p[6] = 0x40; // DF
  p[8] = 64;
  p[9] = t.proto;
  const put32 = (at: number, v: number) => {
    p[at] = v >>> 24;
    p[at + 1] = (v >>> 16) & 0xff;
    p[at + 2] = (v >>> 8) & 0xff;
    p[at + 3] = v & 0xff;
  };
  put32(12, t.src);
  put32(16, t.dst);
  if (t.proto === IPPROTO_ICMP) {
    p[20] = 8; // echo request, id 1 seq 1
    p[25] = 1;
    p[27] = 1;
  } else {
    p[20] = t.sport >>> 8;
    p[21] = t.sport & 0xff;
    p[22] = t.dport >>> 8;
    p[23] = t.dport & 0xff;
    if (t.proto === IPPROTO_TCP) {
      put32(24, 1); // seq
      p[32] = 0x50; // data offset 5
      p[33] = 0x02; // SYN
      p[34] = 0xff;
      p[35] = 0xff;
    } else {
      p[25] = 8; // UDP length
    }
  }
  ipv4FillCsum(p, 0);
  l4FillCsum(p, 0);
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
  const after: TraceTuple = tx
    ? {
        src: u32ToIpv4(read32s(pkt, 12) >>> 0),
        dst: u32ToIpv4(read32s(pkt, 16) >>> 0),
        sport: t.proto === IPPROTO_ICMP ? 0 : read16(pkt, 20),
        dport: t.proto === IPPROTO_ICMP ? 0 : read16(pkt, 22),
      }
    : tupleOf(t);
  const before = tupleOf(t);
  const ct = copy.lastCtIdx;
  const report: TraceReport = {
    node: where.node,
    proto: protoName(t.proto).toLowerCase(),
    packet: before,
    conntrack: {
      hit: ct >= 0 && copy.lastCtNew === 0,
      created: ct >= 0 && copy.lastCtNew === 1,
      entry: ct,
      ...(ct >= 0 ? { state: ctStateName(copy.ct.proto(ct), copy.ct.flags(ct)) } : {}),
    },
    backendId: copy.lastBackendId,
    rewrite: { after, changed: JSON.stringify(after) !== JSON.stringify(before) },
    verdict: VERDICTS[v] ?? String(v),
    reason: REASON_NAMES[r] ?? String(r),
    reasonDoc: REASONS[r]?.doc ?? '',
    dryRun: true,
  };
  const b = copy.lastBackendId ? dp.be.lookup(copy.lastBackendId) : -1;
  if (b >= 0) report.backend = `${u32ToIpv4(dp.be.addr(b) >>> 0)}:${dp.be.port(b)}`;
  const svc = serviceView(dp, t, ports, where);
  if (svc) report.service = svc;
  const aff = affinityView(dp, t, Math.floor(nowMs / 1000));
  if (aff) report.affinity = aff;
  return report;
}

function tupleOf(t: TraceReq): TraceTuple {
  return { src: u32ToIpv4(t.src), dst: u32ToIpv4(t.dst), sport: t.sport, dport: t.dport };
}

/** The service port the packet's destination names, with the frontend kind that matched. */
function findPort(
  dp: Datapath,
  t: TraceReq,
  ports: readonly ResolvedServicePort[],
): { rsp: ResolvedServicePort; frontend: string } | undefined {
  const dst = u32ToIpv4(t.dst);
  const proto = protoName(t.proto); // Kubernetes' spelling, as ServicePort.protocol
  for (const rsp of ports) {
    if (rsp.port.protocol !== proto) continue;
    const s = rsp.service;
    if (rsp.port.port === t.dport) {
      if (s.clusterIPs.includes(dst)) return { rsp, frontend: 'ClusterIP' };
      if (s.externalIPs.includes(dst)) return { rsp, frontend: 'externalIP' };
      if (s.loadBalancerIPs.includes(dst)) return { rsp, frontend: 'LoadBalancer' };
    }
    if (rsp.port.nodePort && rsp.port.nodePort === t.dport && (t.dst | 0) === dp.nat.nodeIp) {
      return { rsp, frontend: 'NodePort' };
    }
  }
  return undefined;
}

function serviceView(
  dp: Datapath,
  t: TraceReq,
  ports: readonly ResolvedServicePort[],
  where: { node: string; zone?: string },
): TraceReport['service'] {
  const found = findPort(dp, t, ports);
  if (!found) return undefined;
  const { rsp, frontend } = found;
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
  const m = dp.svc.lookup(t.dst, t.dport, t.proto, 0);
  return {
    name: rsp.servicePortName,
    frontend,
    scheduler: m >= 0 ? (SCHED_NAMES[dp.svc.scheduler(m)] ?? '?') : 'random',
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
  const m = dp.svc.lookup(t.dst, t.dport, t.proto, 0);
  if (m < 0 || (dp.svc.flags(m) & SVC_F_AFFINITY) === 0) return undefined;
  const i = dp.aff.lookup(t.src, dp.svc.revNat(m));
  if (i < 0) return undefined;
  const timeout = dp.svc.affinityTimeout(m);
  const ageSec = nowSec - dp.aff.lastUsed(i);
  const b = dp.be.lookup(dp.aff.backendId(i));
  const backend =
    b >= 0 ? `${u32ToIpv4(dp.be.addr(b) >>> 0)}:${dp.be.port(b)}` : `#${dp.aff.backendId(i)}`;
  return { backend, ageSec, timeoutSec: timeout, fresh: ageSec < timeout };
}

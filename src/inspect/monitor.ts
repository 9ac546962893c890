// `kubetun monitor` and `kubetun tap` on the CLI side: the event a running agent streams
// (MonitorEvent, one JSON line each, src/node/monitor.ts), the filter flags turned into the
// request, and the one-line text form in the style of `cilium monitor`:
//
//   12:01:02.345 node1 -> trace TX_DNAT_NEW svc default/web:http backend 10.244.2.5:8080 ct new:
//       tcp 10.244.1.10:40000 -> 10.96.0.10:80 => 10.244.1.10:40000 -> 10.244.2.5:8080
//   12:01:02.351 node1 xx drop (DROP_ECHO_TO_VIP): icmp 10.244.1.10 -> 10.96.0.10
import { REASON_NAMES } from '../datapath/state/reasons.ts';
import { UsageError } from '../errors.ts';
import { ipv4ToU32 } from '../wire/addr.ts';
import { IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP } from '../wire/proto.ts';

export interface MonitorTuple {
  src: string;
  dst: string;
  sport: number;
  dport: number;
}

export interface MonitorEvent {
  /** "drop" (verdict DROP) or "trace" (everything else), as cilium monitor's event types */
  type: 'drop' | 'trace';
  seq: number;
  /** ms since the epoch, the packet's clock */
  time: number;
  node: string;
  reason: string;
  verdict: 'PASS' | 'TX' | 'REPLY' | 'DROP';
  proto: string;
  stages: string[];
  before: MonitorTuple;
  after: MonitorTuple;
  backendId: number;
  /** the backend's address:port when the packet used one */
  backend?: string;
  /** conntrack entry used or created, -1 none */
  ct: number;
  ctNew: boolean;
  /** revNat id of the flow's service, 0 none; its ServicePortName when the agent knows it */
  serviceId: number;
  service?: string;
  len: number;
  /** events this stream lost so far (ring overwrites + a reader that fell behind) */
  lost: number;
  /** tap only: the packet as received and as written (base64; out absent for a drop) */
  pkt?: { in: string; out?: string; snap: number };
}

/** A stream's periodic status line (also the last line when the agent stops the stream). */
export interface MonitorStatus {
  type: 'status';
  lost: number;
  events: number;
}

export interface MonitorFilterReq {
  type?: 'drop' | 'trace';
  proto?: number;
  addr?: string;
  port?: number;
  reasons?: string[];
}

const PROTOS: Record<string, number> = { tcp: IPPROTO_TCP, udp: IPPROTO_UDP, icmp: IPPROTO_ICMP };

/** --drops, --type, --proto, --addr, --port, --reason → the request's filter (names checked). */
export function monitorFilterFromFlags(o: Record<string, unknown>): MonitorFilterReq {
  const f: MonitorFilterReq = {};
  const type = o.drops ? 'drop' : (o.type as string | undefined);
  if (type !== undefined) {
    if (type !== 'drop' && type !== 'trace') {
      throw new UsageError(`--type: ${JSON.stringify(type)}: use drop or trace`);
    }
    f.type = type;
  }
  if (o.proto !== undefined) {
    const p = PROTOS[String(o.proto).toLowerCase()];
    if (p === undefined)
      throw new UsageError(`--proto: ${JSON.stringify(o.proto)}: use tcp, udp or icmp`);
    f.proto = p;
  }
  if (o.addr !== undefined) {
    try {
      ipv4ToU32(String(o.addr));
    } catch {
      throw new UsageError(`--addr: ${JSON.stringify(o.addr)} is not an IPv4 address`);
    }
    f.addr = String(o.addr);
  }
  if (o.port !== undefined) {
    const n = Number(o.port);
    if (!Number.isInteger(n) || n < 1 || n > 65535) {
      throw new UsageError(`--port: ${JSON.stringify(o.port)} is not a port (1..65535)`);
    }
    f.port = n;
  }
  if (o.reason !== undefined) {
    const names = String(o.reason)
      .split(',')
      .map((s) => s.trim().toUpperCase())
      .filter(Boolean);
    for (const n of names) {
      if (!REASON_NAMES.includes(n)) {
        throw new UsageError(
          `--reason: ${n} is not a reason; see docs/reasons.md (e.g. DROP_ECHO_TO_VIP, TX_DNAT_NEW)`,
        );
      }
    }
    f.reasons = names;
  }
  return f;
}

function hhmmss(ms: number): string {
  const d = new Date(ms);
  const p = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

export function formatTuple(proto: string, t: MonitorTuple): string {
  const ports = proto === 'tcp' || proto === 'udp';
  return ports
    ? `${hostPort(t.src, t.sport)} -> ${hostPort(t.dst, t.dport)}`
    : `${t.src} -> ${t.dst}`;
}

/** "ip:port", or "[ip]:port" for an IPv6 address (RFC 3986's form, as ipvsadm prints it). */
export function hostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

function sameTuple(a: MonitorTuple, b: MonitorTuple): boolean {
  return a.src === b.src && a.dst === b.dst && a.sport === b.sport && a.dport === b.dport;
}

/** One line per event, cilium monitor's shape: time, node, verdict and reason, before => after. */
export function formatMonitorEvent(e: MonitorEvent): string {
  const head =
    e.type === 'drop'
      ? `xx drop (${e.reason})`
      : `-> ${e.verdict === 'PASS' ? 'pass' : e.verdict === 'REPLY' ? 'reply' : 'trace'} ${e.reason}`;
  const parts = [head];
  if (e.service) parts.push(`svc ${e.service}`);
  else if (e.serviceId) parts.push(`svc #${e.serviceId}`);
  if (e.backend) parts.push(`backend ${e.backend}`);
  if (e.ct >= 0) parts.push(e.ctNew ? 'ct new' : 'ct hit');
  const before = `${e.proto} ${formatTuple(e.proto, e.before)}`;
  const after = sameTuple(e.before, e.after) ? '' : ` => ${formatTuple(e.proto, e.after)}`;
  return `${hhmmss(e.time)} ${e.node} ${parts.join(' ')}: ${before}${after}`;
}

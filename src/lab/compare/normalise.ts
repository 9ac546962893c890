// Normalisation: two runs of the same scenario differ in what is legitimately random, and only
// in that. Each rule below is listed in every report (NORMALISATIONS), so a reader knows
// exactly what was ignored; everything else in a packet must match.
import type { Pkt } from './packets.ts';

export const NORMALISATIONS: readonly string[] = [
  'capture times are dropped; packet order is kept within each flow, and flows are listed one after the other in the order of their first packet (how two back-to-back connections interleave is timing, not the data plane)',
  'IP identification is dropped (the sender picks it)',
  'ephemeral ports (client ports and SNAT ports: every port >= 1024 that is neither a pod server port nor in the NodePort range 30000-32767) become eph1, eph2, … in order of first appearance in the run',
  'ICMP echo identifiers become id1, id2, … in order of first appearance',
  'TCP sequence and acknowledgement numbers are relative to each direction’s ISN (its first packet at that capture point)',
  'TCP timestamp values are dropped (the option’s presence and position are kept)',
  'TCP window values are dropped (the kernels’ socket buffers, not the data plane, choose them)',
];

/** One packet after normalisation: the text compared, and the parts a ladder diagram draws. */
export interface NPkt {
  text: string;
  src: string;
  dst: string;
  /** arrow label: ports, protocol and flags */
  label: string;
  /**
   * The text without what a documented deliberate difference may change: for ICMP errors the
   * outer source address and TTL (docs/compare.md). Equal loose texts with different texts are
   * reported as a deliberate difference, never as "same".
   */
  loose: string;
  /** the flow's ephemeral-port symbol (eph1…), '' when none: flows are grouped by it */
  flow: string;
}

/** Pod server ports when the caller does not say (the lab's HTTP and UDP servers). */
export const DEFAULT_SERVER_PORTS: ReadonlySet<number> = new Set([8080, 5353]);

/**
 * Client and SNAT ports: kernel MASQUERADE --random-fully picks from 1024-65535, kubetun from
 * its reserved range, clients from ip_local_port_range; service, server and NodePorts are fixed.
 */
export function isEphemeral(port: number, serverPorts: ReadonlySet<number>): boolean {
  return port >= 1024 && !serverPorts.has(port) && !(port >= 30000 && port <= 32767);
}

/** Symbol tables shared by every capture point of one run, so eph1 is the same port everywhere. */
export class Normaliser {
  constructor(private readonly serverPorts: ReadonlySet<number> = DEFAULT_SERVER_PORTS) {}

  private readonly ports = new Map<number, string>();
  private readonly ids = new Map<number, string>();
  /** per capture point: a flow's packets seen elsewhere first must not shift its ISN here */
  private readonly isn = new Map<string, number>();

  startPoint(): void {
    this.isn.clear();
  }

  port(p: number | undefined): string {
    if (p === undefined) return '';
    if (!isEphemeral(p, this.serverPorts)) return String(p);
    let s = this.ports.get(p);
    if (!s) {
      s = `eph${this.ports.size + 1}`;
      this.ports.set(p, s);
    }
    return s;
  }

  icmpId(id: number): string {
    let s = this.ids.get(id);
    if (!s) {
      s = `id${this.ids.size + 1}`;
      this.ids.set(id, s);
    }
    return s;
  }

  /** seq relative to the sender's ISN (first seen, the SYN's), ack to the peer's. */
  private rel(p: Pkt): { seq: number; ack: number } {
    const fwd = `${p.src}:${p.sport}>${p.dst}:${p.dport}`;
    const rev = `${p.dst}:${p.dport}>${p.src}:${p.sport}`;
    if (!this.isn.has(fwd)) this.isn.set(fwd, p.seq ?? 0);
    const seq = ((p.seq ?? 0) - this.isn.get(fwd)! + 2 ** 32) % 2 ** 32;
    const peer = this.isn.get(rev);
    const ack = peer === undefined ? -1 : ((p.ack ?? 0) - peer + 2 ** 32) % 2 ** 32;
    return { seq, ack };
  }

  packet(p: Pkt): NPkt {
    const ep = (ip: string, port: number | undefined) =>
      port === undefined ? ip : `${ip}.${this.port(port)}`;
    const head = `${ep(p.src, p.sport)} > ${ep(p.dst, p.dport)}`;
    const ip = `ttl ${p.ttl}${p.df ? ' DF' : ''}${p.ipCsumOk ? '' : ' BAD-IP-CSUM'}`;
    let label: string;
    let rest: string;
    if (p.proto === 'tcp') {
      const { seq, ack } = this.rel(p);
      const hasAck = p.flags?.includes('.');
      label = `${this.port(p.sport)}→${this.port(p.dport)} [${p.flags}]${p.len ? ` len ${p.len}` : ''}`;
      rest = `tcp [${p.flags}] seq ${seq}${hasAck ? ` ack ${ack < 0 ? '?' : ack}` : ''} len ${p.len}${p.opts ? ` <${p.opts}>` : ''}`;
    } else if (p.proto === 'udp') {
      label = `udp ${this.port(p.sport)}→${this.port(p.dport)} len ${p.len}`;
      rest = `udp len ${p.len}`;
    } else if (p.proto === 'icmp') {
      ({ label, rest } = this.icmp(p));
    } else {
      label = `proto ${p.proto}`;
      rest = label;
    }
    const text = `${head}: ${rest} ${ip}`;
    const isError = p.proto === 'icmp' && p.icmpType !== 0 && p.icmpType !== 8;
    const loose = isError ? `ICMP-ERROR-SOURCE > ${ep(p.dst, p.dport)}: ${rest}` : text;
    const ports = [p.sport, p.dport, p.inner?.sport, p.inner?.dport];
    const eph = ports.find((x) => x !== undefined && isEphemeral(x, this.serverPorts));
    const flow = eph === undefined ? '' : this.port(eph);
    return { text, src: p.src, dst: p.dst, label, loose, flow };
  }

  private icmp(p: Pkt): { label: string; rest: string } {
    const t = p.icmpType;
    if (t === 8 || t === 0) {
      const kind = t === 8 ? 'echo request' : 'echo reply';
      const id = this.icmpId(p.icmpId ?? 0);
      return {
        label: `icmp ${kind} seq ${p.icmpSeq}`,
        rest: `icmp ${kind} ${id} seq ${p.icmpSeq} len ${p.len}`,
      };
    }
    const name = t === 3 ? `unreachable code ${p.icmpCode}` : `type ${t} code ${p.icmpCode}`;
    const i = p.inner;
    const about = i
      ? ` about [${i.src}${i.sport === undefined ? '' : `.${this.port(i.sport)}`} > ${i.dst}${i.dport === undefined ? '' : `.${this.port(i.dport)}`} ${i.proto}]`
      : '';
    return { label: `icmp ${name}`, rest: `icmp ${name}${about}` };
  }
}

/** Normalises the capture points of one run, in the given order (which fixes eph1, eph2…). */
export function normaliseRun(
  points: readonly { name: string; packets: Pkt[] }[],
  serverPorts: ReadonlySet<number> = DEFAULT_SERVER_PORTS,
): { name: string; packets: NPkt[] }[] {
  const n = new Normaliser(serverPorts);
  const runs = points.map((cp) => {
    n.startPoint();
    return { name: cp.name, packets: cp.packets.map((p) => n.packet(p)) };
  });
  return runs.map((cp) => ({ name: cp.name, packets: groupByFlow(cp.packets) }));
}

/** Stable: flows in order of their first packet, each flow's packets in capture order. */
export function groupByFlow(pkts: NPkt[]): NPkt[] {
  const first = new Map<string, number>();
  pkts.forEach((p, i) => {
    if (!first.has(p.flow)) first.set(p.flow, i);
  });
  return pkts
    .map((p, i) => ({ p, i }))
    .sort((a, b) => first.get(a.p.flow)! - first.get(b.p.flow)! || a.i - b.i)
    .map((x) => x.p);
}

// Normalisation: two runs of the same scenario differ in what is legitimately random, and only
// in that. Each rule below is listed in every report (NORMALISATIONS), so a reader knows
// exactly what was ignored; everything else in a packet must match.
import { ICMP_ECHO, ICMP_ECHO_REPLY } from '../../wire/icmp.ts';
import { tcpdumpEndpoint, tcpdumpIcmp } from '../../wire/tcpdump.ts';
import type { Pkt } from './packets.ts';

export const NORMALISATIONS: readonly string[] = [
  'capture times are dropped; packet order is kept within each flow, and flows are listed one after the other in the order of their first packet (how two back-to-back connections interleave is timing, not the data plane)',
  'IP identification is dropped (the sender picks it)',
  'ephemeral ports — the port of the end that opened each flow (the SYN’s sender, a query’s sender): client ports and SNAT ports, which kernel MASQUERADE --random-fully takes from anywhere in 1024-65535 — become eph1, eph2, … in order of first appearance in the run; server ports are kept',
  'ICMP echo identifiers become id1, id2, … in order of first appearance',
  'TCP sequence and acknowledgement numbers are relative to each direction’s ISN (its first packet at that capture point)',
  'TCP timestamp values are dropped (the option’s presence and position are kept)',
  'TCP window values are dropped (the kernels’ socket buffers, not the data plane, choose them)',
  'a pure ACK directly followed (or, captured out of order, directly preceded), in the same direction, by a FIN with the same sequence and acknowledgement numbers counts as that FIN: an endpoint acknowledges a FIN and sends its own in one packet or two depending on whether its application closed before its delayed ACK left (timing, not the data plane)',
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

/** Symbol tables shared by every capture point of one run, so eph1 is the same port everywhere. */
export class Normaliser {
  private readonly ports = new Map<number, string>();
  private readonly ids = new Map<number, string>();
  /** per capture point: a flow's packets seen elsewhere first must not shift its ISN here */
  private readonly isn = new Map<string, number>();

  /** per capture point: flow key -> the endpoint ("ip:port") that opened the flow */
  private readonly initiators = new Map<string, string>();

  startPoint(): void {
    this.isn.clear();
    this.initiators.clear();
  }

  /**
   * Which end opened the flow: the SYN's sender (the SYN-ACK's receiver); otherwise the sender
   * of the first packet seen (a UDP query, a mid-stream pickup). Its port is the ephemeral one.
   */
  private initiator(p: Pkt): string {
    const key = flowKey(p);
    let who = this.initiators.get(key);
    if (who === undefined) {
      const synAck = p.proto === 'tcp' && p.flags?.startsWith('S') && p.flags.includes('.');
      who = synAck ? `${p.dst}:${p.dport}` : `${p.src}:${p.sport}`;
      this.initiators.set(key, who);
    }
    return who;
  }

  /** A port as printed: the initiator's (client or SNAT port) as eph1…, a server's as is. */
  private endpoint(p: Pkt, ip: string, port: number | undefined): string {
    if (port === undefined) return ip;
    return this.initiator(p) === `${ip}:${port}` ? this.eph(port) : String(port);
  }

  private eph(p: number): string {
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
      tcpdumpEndpoint(ip, port === undefined ? undefined : this.endpoint(p, ip, port));
    const sp = this.endpoint(p, p.src, p.sport);
    const dp = this.endpoint(p, p.dst, p.dport);
    const head = `${ep(p.src, p.sport)} > ${ep(p.dst, p.dport)}`;
    const ip = `ttl ${p.ttl}${p.df ? ' DF' : ''}${p.ipCsumOk ? '' : ' BAD-IP-CSUM'}`;
    let label: string;
    let rest: string;
    if (p.proto === 'tcp') {
      const { seq, ack } = this.rel(p);
      const hasAck = p.flags?.includes('.');
      label = `${sp}→${dp} [${p.flags}]${p.len ? ` len ${p.len}` : ''}`;
      rest = `tcp [${p.flags}] seq ${seq}${hasAck ? ` ack ${ack < 0 ? '?' : ack}` : ''} len ${p.len}${p.opts ? ` <${p.opts}>` : ''}`;
    } else if (p.proto === 'udp') {
      label = `udp ${sp}→${dp} len ${p.len}`;
      rest = `udp len ${p.len}`;
    } else if (p.proto === 'icmp') {
      ({ label, rest } = this.icmp(p));
    } else if (p.proto === 'icmp6') {
      ({ label, rest } = this.icmp6(p));
    } else {
      label = `proto ${p.proto}`;
      rest = label;
    }
    const text = `${head}: ${rest} ${ip}`;
    const isError =
      (p.proto === 'icmp' && p.icmpType !== ICMP_ECHO_REPLY && p.icmpType !== ICMP_ECHO) ||
      (p.proto === 'icmp6' && (p.icmpType ?? 0) < 128);
    const loose = isError ? `ICMP-ERROR-SOURCE > ${ep(p.dst, p.dport)}: ${rest}` : text;
    const opener = p.sport === undefined ? p.inner : p;
    // the initiator is "ip:port", the ip an IPv6 one too: the port is after the last colon
    const initiator = opener?.sport === undefined ? undefined : this.initiator(opener);
    const flow =
      initiator === undefined
        ? ''
        : this.eph(Number(initiator.slice(initiator.lastIndexOf(':') + 1)));
    return { text, src: p.src, dst: p.dst, label, loose, flow };
  }

  /** ICMPv6 by type and code (echo: its identifier symbol and sequence; an error: what it quotes). */
  private icmp6(p: Pkt): { label: string; rest: string } {
    const kind = `icmp6 type ${p.icmpType ?? '?'} code ${p.icmpCode ?? '?'}`;
    if (p.icmpSeq !== undefined) {
      const id = this.icmpId(p.icmpId ?? 0);
      return {
        label: `${kind} seq ${p.icmpSeq}`,
        rest: `${kind} ${id} seq ${p.icmpSeq} len ${p.len}`,
      };
    }
    const i = p.inner;
    const ep = (ip: string, port?: number) =>
      tcpdumpEndpoint(ip, port === undefined || !i ? undefined : this.endpoint(i, ip, port));
    const about = i ? ` about [${ep(i.src, i.sport)} > ${ep(i.dst, i.dport)} ${i.proto}]` : '';
    return { label: kind, rest: `${kind}${about}` };
  }

  private icmp(p: Pkt): { label: string; rest: string } {
    const t = p.icmpType ?? -1;
    const kind = tcpdumpIcmp(t, p.icmpCode ?? 0);
    if (t === ICMP_ECHO || t === ICMP_ECHO_REPLY) {
      const id = this.icmpId(p.icmpId ?? 0);
      return {
        label: `icmp ${kind} seq ${p.icmpSeq}`,
        rest: `icmp ${kind} ${id} seq ${p.icmpSeq} len ${p.len}`,
      };
    }
    const i = p.inner;
    const ep = (ip: string, port?: number) =>
      tcpdumpEndpoint(ip, port === undefined || !i ? undefined : this.endpoint(i, ip, port));
    const about = i ? ` about [${ep(i.src, i.sport)} > ${ep(i.dst, i.dport)} ${i.proto}]` : '';
    return { label: `icmp ${kind}`, rest: `icmp ${kind}${about}` };
  }
}

/** Normalises the capture points of one run, in the given order (which fixes eph1, eph2…). */
export function normaliseRun(
  points: readonly { name: string; packets: Pkt[] }[],
): { name: string; packets: NPkt[] }[] {
  const n = new Normaliser();
  const runs = points.map((cp) => {
    n.startPoint();
    return { name: cp.name, packets: foldAckBeforeFin(cp.packets).map((p) => n.packet(p)) };
  });
  return runs.map((cp) => ({ name: cp.name, packets: groupByFlow(cp.packets) }));
}

/**
 * Drops a pure ACK whose next packet in the same direction is a FIN with the same seq and ack
 * (NORMALISATIONS: the endpoint's split or combined close) — or whose previous one is: the two
 * leave the endpoint back to back, and on a machine of more than one CPU a capture point can
 * see them in either order (each veth hop queues to the backlog of the CPU that sent it).
 */
export function foldAckBeforeFin(pkts: readonly Pkt[]): Pkt[] {
  const dir = (p: Pkt) => `${p.src}:${p.sport}>${p.dst}:${p.dport}`;
  const sameFin = (p: Pkt, q: Pkt | undefined) =>
    q?.flags?.includes('F') === true && q.seq === p.seq && q.ack === p.ack;
  return pkts.filter((p, i) => {
    if (p.proto !== 'tcp' || p.flags !== '.' || p.len !== 0) return true;
    const mine = (q: Pkt) => q.proto === 'tcp' && dir(q) === dir(p);
    const next = pkts.slice(i + 1).find(mine);
    let prev: Pkt | undefined;
    for (let k = i - 1; k >= 0 && !prev; k--) if (mine(pkts[k]!)) prev = pkts[k];
    return !(sameFin(p, next) || sameFin(p, prev));
  });
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

/** Both directions of a flow give the same key. */
export function flowKey(p: Pkt): string {
  const a = `${p.src}:${p.sport}`;
  const b = `${p.dst}:${p.dport}`;
  return a < b ? `${a}|${b}` : `${b}|${a}`;
}

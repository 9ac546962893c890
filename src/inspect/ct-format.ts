// `kubetun ct list` text: one line per flow in the layout of `conntrack -L` (libnetfilter_conntrack's
// default output with nf_conntrack_acct=1), so the lines diff against a kernel node's:
//
//   tcp      6 86397 ESTABLISHED src=10.244.1.3 dst=10.96.0.10 sport=43512 dport=80 packets=6 bytes=420
//     src=10.244.2.2 dst=10.244.1.3 sport=8080 dport=43512 packets=4 bytes=512 [ASSURED] mark=0 use=1
//
//   (one line; wrapped here) = protocol name padded to 8, protocol number, seconds to expiry,
//   TCP or SCTP state, original tuple + counters, [UNREPLIED] if no reply yet, reply tuple +
//   counters, [ASSURED], mark, use. The datapath tracks TCP, UDP and SCTP flows only (no ICMP entry
//   exists: echo to a VIP is answered or dropped, errors ride the flow they quote).
// kubetun has no packet marks and one reference per flow: mark=0 use=1 always.
import type { CtEntry, CtTuple } from './types.ts';
import { IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from '../wire/proto.ts';

function tuple(protoNum: number, t: CtTuple): string {
  const addrs = `src=${t.src} dst=${t.dst}`;
  const counters = `packets=${t.packets} bytes=${t.bytes}`;
  if (protoNum === IPPROTO_TCP || protoNum === IPPROTO_UDP || protoNum === IPPROTO_SCTP) {
    return `${addrs} sport=${t.sport} dport=${t.dport} ${counters}`;
  }
  return `${addrs} ${counters}`;
}

/** One `conntrack -L` line (no newline). */
export function formatCtEntry(e: CtEntry): string {
  const p = e.protoNum;
  const stateful = p === IPPROTO_TCP || p === IPPROTO_SCTP;
  const name = stateful || p === IPPROTO_UDP ? e.proto : 'unknown';
  const parts = [`${name.toLowerCase().padEnd(8)} ${p}`, String(e.expiresInSec)];
  if (stateful) parts.push(e.state);
  parts.push(tuple(e.protoNum, e.orig));
  if (!e.seenReply) parts.push('[UNREPLIED]');
  parts.push(tuple(e.protoNum, e.reply));
  if (e.assured) parts.push('[ASSURED]');
  parts.push('mark=0 use=1');
  return parts.join(' ');
}

/** conntrack's closing line on stderr, e.g. "... 3 flow entries have been shown." */
export function ctSummary(n: number, verb: 'shown' | 'deleted'): string {
  return `kubetun (conntrack-tools style): ${n} flow entries have been ${verb}.`;
}

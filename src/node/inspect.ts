// Answers of the control socket, built from the datapath's maps and counters (slow world).
import { CT_F_CLOSING, CT_F_SEEN_NON_SYN, CT_F_SEEN_REPLY } from '../datapath/ct.ts';
import type { Datapath } from '../datapath/datapath.ts';
import { REASON_NAMES } from '../datapath/reasons.ts';
import { u32ToIpv4 } from '../wire/addr.ts';
import { AGENT_COUNTER_NAMES } from './loop.ts';

export interface CtTuple {
  src: string;
  dst: string;
  sport: number;
  dport: number;
}

export interface CtEntry {
  proto: string;
  state: string;
  expiresInSec: number;
  orig: CtTuple;
  reply: CtTuple;
  backendId: number;
  packets: number;
  bytes: number;
}

const PROTO_NAMES: Record<number, string> = { 1: 'ICMP', 6: 'TCP', 17: 'UDP' };

/** conntrack(8)-like state names, from the flags the datapath keeps per flow. */
export function ctStateName(proto: number, flags: number): string {
  if (proto === 6) {
    if ((flags & CT_F_CLOSING) === CT_F_CLOSING) return 'CLOSE';
    if (flags & CT_F_CLOSING) return 'FIN_WAIT';
    if (flags & CT_F_SEEN_NON_SYN) return 'ESTABLISHED';
    return flags & CT_F_SEEN_REPLY ? 'SYN_RECV' : 'SYN_SENT';
  }
  return flags & CT_F_SEEN_REPLY ? 'REPLIED' : 'UNREPLIED';
}

/** Live (unexpired) flows, at most `limit`. */
export function ctEntries(dp: Datapath, nowSec: number, limit: number): CtEntry[] {
  const ct = dp.ct;
  const out: CtEntry[] = [];
  for (let i = ct.next(0); i >= 0 && out.length < limit; i = ct.next(i + 1)) {
    const expires = ct.expires(i);
    if (expires <= nowSec) continue;
    const proto = ct.proto(i);
    out.push({
      proto: PROTO_NAMES[proto] ?? String(proto),
      state: ctStateName(proto, ct.flags(i)),
      expiresInSec: expires - nowSec,
      orig: {
        src: u32ToIpv4(ct.saddr(i)),
        dst: u32ToIpv4(ct.daddr(i)),
        sport: ct.sport(i),
        dport: ct.dport(i),
      },
      reply: {
        src: u32ToIpv4(ct.baddr(i)),
        dst: u32ToIpv4(ct.saddr(i)),
        sport: ct.bport(i),
        dport: ct.sport(i),
      },
      backendId: ct.backendId(i),
      packets: ct.pktsOrig(i) + ct.pktsReply(i),
      bytes: ct.bytesOrig(i) + ct.bytesReply(i),
    });
  }
  return out;
}

/** Every datapath reason by name, zeros included (a stable shape for scripts and diffs). */
export function reasonTable(dp: Datapath): Record<string, number> {
  const out: Record<string, number> = {};
  REASON_NAMES.forEach((name, i) => {
    out[name] = dp.counters[i];
  });
  return out;
}

export function agentTable(agent: Float64Array): Record<string, number> {
  const out: Record<string, number> = {};
  AGENT_COUNTER_NAMES.forEach((name, i) => {
    out[name] = agent[i];
  });
  return out;
}

// Conntrack stage of the ClusterIP program: lookup in both directions, create, and the per-packet
// update of state, counters and lifetime. One entry per flow (ConntrackMap indexes it from both
// the client->VIP and the backend->client tuple).
//
// TCP follows nf_conntrack's state machine (nf_conntrack_proto_tcp.c), without window tracking:
//
//   event (dir)      NONE     SYN_SENT SYN_RECV ESTAB    FIN_WAIT  CLOSE_WAIT LAST_ACK TIME_WAIT CLOSE
//   SYN (orig)       SYN_SENT SYN_SENT  -        -        -         -          -        new flow  new flow
//   SYN+ACK (reply)  INVALID  SYN_RECV SYN_RECV  -        -         -          -        -         -
//   FIN (dir d)      pickup** INVALID  FIN_WAIT FIN_WAIT LAST_ACK* LAST_ACK   -        -         -
//   ACK (orig)       pickup** INVALID  ESTAB    -        CLOSE_WAIT*         TIME_WAIT*
//   ACK (reply)      -        INVALID  -        -        CLOSE_WAIT*         TIME_WAIT*
//   RST (any)        INVALID  CLOSE    CLOSE    CLOSE    CLOSE     CLOSE      CLOSE    CLOSE     -
//     "-" = no change; * only from the side that did not send the (last) FIN: FIN_WAIT + FIN
//     from the same side stays FIN_WAIT, and an ACK moves FIN_WAIT -> CLOSE_WAIT and
//     LAST_ACK -> TIME_WAIT only when it comes from the other side.
//     ** a non-SYN first packet is INVALID (nothing legitimate starts that way); unless
//     ctDropInvalid is set it is still picked up mid-stream as ESTABLISHED (the kernel's
//     nf_conntrack_tcp_loose), but keeps the syn_recv lifetime until a reply is seen.
//
// INVALID packets change neither state nor lifetime; they are counted (dp.ctInvalid) and, when
// configured, dropped (kube-proxy's `-m conntrack --ctstate INVALID -j DROP`).
//
// Lifetimes per state come from a preallocated table (ctTimeoutTable, DatapathConfig) with
// kube-proxy's settings as defaults: established 86400 s and close_wait 3600 s (the kernel's own
// defaults are 432000 and 60); UDP 30 s, 120 s once replied; ICMP 30 s.
//
// The TCP state lives in the high nibble of the entry's flags byte, the seen-bits in the low
// nibble, so every view of a flow (inspect, filters) reads both from one field. SCTP keeps
// nf_conntrack's SCTP states in the same nibble (ct-sctp.ts), with the kernel's lifetimes.

import { CT_CLASH, CT_FULL, type ConntrackMap } from '../../maps/conntrack.ts';
import { IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from '../../wire/proto.ts';
import { TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN } from '../../wire/tcp.ts';
import {
  CT_DEFAULT_TIMEOUTS,
  CT_DIR_ORIG,
  CT_DIR_REPLY,
  CT_F_BITS,
  CT_F_CLOSING,
  CT_F_RX_CLOSING,
  CT_F_SEEN_NON_SYN,
  CT_F_SEEN_REPLY,
  CT_F_TX_CLOSING,
  CT_STATE_SHIFT,
  CT_TCP_CLOSE,
  CT_TCP_CLOSE_WAIT,
  CT_TCP_ESTABLISHED,
  CT_TCP_FIN_WAIT,
  CT_TCP_LAST_ACK,
  CT_TCP_LAST_ACK_R,
  CT_TCP_NONE,
  CT_TCP_SYN_RECV,
  CT_TCP_SYN_SENT,
  CT_TCP_TIME_WAIT,
  CT_TMO_OTHER,
  CT_TMO_SCTP,
  CT_TMO_UDP,
  CT_TMO_UDP_STREAM,
  type CtGcState,
} from '../state/ct-state.ts';
import { A6_BE, A6_DST, A6_SRC, type Datapath } from '../state/datapath.ts';
import { CT_SCTP_KEEP_EXPIRY, ctSctpNext } from './ct-sctp.ts';

/** Lifetime in seconds of an entry with these flags (state in the high nibble). */
export function ctTimeout(proto: number, flags: number, tmo = CT_DEFAULT_TIMEOUTS): number {
  if (proto === IPPROTO_TCP) {
    const s = flags >>> CT_STATE_SHIFT;
    // a mid-stream pickup nobody answered must not hold an entry for a day
    if (s === CT_TCP_ESTABLISHED && (flags & CT_F_SEEN_REPLY) === 0) return tmo[CT_TCP_SYN_RECV];
    return tmo[s];
  }
  if (proto === IPPROTO_UDP) {
    return (flags & CT_F_SEEN_REPLY) !== 0 ? tmo[CT_TMO_UDP_STREAM] : tmo[CT_TMO_UDP];
  }
  if (proto === IPPROTO_SCTP) return tmo[CT_TMO_SCTP + (flags >>> CT_STATE_SHIFT)];
  return tmo[CT_TMO_OTHER];
}

/** Entries live while now < expires. */
export function ctExpired(ct: ConntrackMap, i: number, nowSec: number): boolean {
  return ct.expires(i) <= nowSec;
}

/**
 * Find the flow of a client->service packet. An expired entry is deleted and reported as a
 * miss (GC may not have run yet); so is a TIME_WAIT/CLOSE entry hit by a pure SYN (port
 * reuse: a new connection, which may get a new backend).
 */
export function ct4LookupOrig(
  ct: ConntrackMap,
  proto: number,
  saddr: number,
  daddr: number,
  sport: number,
  dport: number,
  tcpFlags: number,
  nowSec: number,
): number {
  const i = ct.lookupOrig(proto, saddr, daddr, sport, dport);
  return ctOrigHit(ct, i, proto, tcpFlags, nowSec);
}

/** ct4LookupOrig for an IPv6 packet: its addresses at dp.a6[A6_SRC], dp.a6[A6_DST]. */
export function ct6LookupOrig(dp: Datapath): number {
  const { ct6: ct, proto } = dp;
  const i = ct.lookupOrig6(proto, dp.a6, A6_SRC, A6_DST, dp.sport, dp.dport);
  return ctOrigHit(ct, i, proto, dp.tcpFlags, dp.nowSec);
}

// The rules of a hit, both families: the entry, or -1 when there is none or it is deleted —
// expired, or (orig) reopened by a pure SYN, or (reply) a SYN-ACK to a closed flow. Two
// functions, not one taking the direction: each lookup inlines only the check it needs (the
// hot path's inlining budget, src/datapath/tune.ts).

function ctOrigHit(
  ct: ConntrackMap,
  i: number,
  proto: number,
  tcpFlags: number,
  nowSec: number,
): number {
  if (i < 0) return -1;
  if (ctExpired(ct, i, nowSec) || ct4Reopens(ct, i, proto, tcpFlags)) {
    ct.delete(i);
    return -1;
  }
  return i;
}

function ctReplyHit(
  ct: ConntrackMap,
  i: number,
  proto: number,
  tcpFlags: number,
  nowSec: number,
): number {
  if (i < 0) return -1;
  if (ctExpired(ct, i, nowSec) || ct4AnswersAnother(ct, i, proto, tcpFlags)) {
    ct.delete(i);
    return -1;
  }
  return i;
}

/**
 * Find the flow of a backend->client packet; expired entries are deleted (a miss), and so is a
 * closed TCP flow answered by a SYN-ACK: that answers a new connection the client opened
 * straight to the backend from the same port (the kernel picks ephemeral ports per
 * destination, so a VIP flow's port comes round again toward its backend), whose SYN never
 * crossed the TUN — translated, the client would see its SYN-ACK come from the VIP and the
 * direct connection time out. The kernel's conntrack tells them apart by the SYN it saw.
 */
export function ct4LookupReply(
  ct: ConntrackMap,
  proto: number,
  saddr: number,
  daddr: number,
  sport: number,
  dport: number,
  tcpFlags: number,
  nowSec: number,
): number {
  const i = ct.lookupReply(proto, saddr, daddr, sport, dport);
  return ctReplyHit(ct, i, proto, tcpFlags, nowSec);
}

/** ct4LookupReply for an IPv6 packet. */
export function ct6LookupReply(dp: Datapath): number {
  const { ct6: ct, proto } = dp;
  const i = ct.lookupReply6(proto, dp.a6, A6_SRC, A6_DST, dp.sport, dp.dport);
  return ctReplyHit(ct, i, proto, dp.tcpFlags, dp.nowSec);
}

/** A SYN-ACK to a TIME_WAIT/CLOSE flow: the backend answering a new connection (above). */
function ct4AnswersAnother(ct: ConntrackMap, i: number, proto: number, tcpFlags: number): boolean {
  const synAck = TCP_SYN | TCP_ACK;
  if (proto !== IPPROTO_TCP || (tcpFlags & (synAck | TCP_RST)) !== synAck) return false;
  const s = ct.flags(i) >>> CT_STATE_SHIFT;
  return s === CT_TCP_TIME_WAIT || s === CT_TCP_CLOSE;
}

function ct4Reopens(ct: ConntrackMap, i: number, proto: number, tcpFlags: number): boolean {
  if (proto !== IPPROTO_TCP || (tcpFlags & (TCP_SYN | TCP_ACK | TCP_RST)) !== TCP_SYN) return false;
  const s = ct.flags(i) >>> CT_STATE_SHIFT;
  return s === CT_TCP_TIME_WAIT || s === CT_TCP_CLOSE;
}

/** Whether the first packet of a new TCP flow may create an entry (a SYN), else INVALID. */
export function ctTcpMayStart(tcpFlags: number): boolean {
  return (tcpFlags & (TCP_SYN | TCP_ACK | TCP_RST | TCP_FIN)) === TCP_SYN;
}

/**
 * Create the entry of the packet's flow (the tuple parsed into dp) to backend `backendId` at
 * baddr:bport. Returns the entry, or CT_FULL / CT_CLASH (< 0). An expired flow still holding
 * the reply tuple (not yet collected) is deleted and the create retried; a full table gets one
 * bounded GC step (`dp.ctGc.batch` positions from its cursor, as Cilium triggers GC on a
 * failed insert), is flagged for the agent's GC, and one retry.
 */
export function ct4Create(
  dp: Datapath,
  backendId: number,
  baddr: number,
  bport: number,
  revNat: number,
): number {
  const { ct, proto, saddr, daddr, sport, dport, nowSec } = dp;
  const expires = nowSec + ctTimeout(proto, 0, dp.ctTimeouts);
  let i = ct.create(proto, saddr, daddr, sport, dport, baddr, bport, backendId, revNat, expires);
  if (i >= 0) return i;
  const owner = i === CT_CLASH ? ct.lookupReply(proto, baddr, saddr, bport, sport) : -1;
  if (!ctCreateRecover(ct, dp.ctGc, i, owner, nowSec)) return i;
  i = ct.create(proto, saddr, daddr, sport, dport, baddr, bport, backendId, revNat, expires);
  return i;
}

/** ct4Create for an IPv6 packet, the backend's address at dp.a6[A6_BE]. */
export function ct6Create(dp: Datapath, backendId: number, bport: number, revNat: number): number {
  const { ct6: ct, a6, proto, sport, dport, nowSec } = dp;
  const expires = nowSec + ctTimeout(proto, 0, dp.ctTimeouts);
  const s = A6_SRC;
  let i = ct.create6(proto, a6, s, A6_DST, sport, dport, A6_BE, bport, backendId, revNat, expires);
  if (i >= 0) return i;
  const owner = i === CT_CLASH ? ct.lookupReply6(proto, a6, A6_BE, s, bport, sport) : -1;
  if (!ctCreateRecover(ct, dp.ct6Gc, i, owner, nowSec)) return i;
  i = ct.create6(proto, a6, s, A6_DST, sport, dport, A6_BE, bport, backendId, revNat, expires);
  return i;
}

/**
 * After a failed create (`code`), both families: whether one retry may succeed. A clash with an
 * expired flow (`owner`, the entry holding the reply tuple) deletes it; a full table gets one
 * bounded GC step and is flagged for the agent's GC.
 */
function ctCreateRecover(
  ct: ConntrackMap,
  gc: CtGcState,
  code: number,
  owner: number,
  nowSec: number,
): boolean {
  if (code === CT_CLASH) {
    if (owner < 0 || !ctExpired(ct, owner, nowSec)) return false;
    ct.delete(owner);
    return true;
  }
  if (code !== CT_FULL) return false;
  gc.insertFailures++;
  if (gc.batch === 0) return false;
  gc.cursor = ct.scan(gc.cursor, gc.batch, nowSec);
  return true;
}

/**
 * Account one packet of `bytes` in direction `dir`, advance the TCP or SCTP state and refresh
 * the lifetime. `event` is the packet's TCP flags, or for SCTP its chunk summary (sctpChunks).
 * Returns 1, or 0 for an INVALID packet (then state and lifetime are unchanged).
 * A GSO super-packet counts as the `pkts` segments the wire carries, its `bytes` with the
 * headers they repeat; its TCP flags advance the state once, as its segments' would (SYN and
 * RST never ride on one; FIN and PSH sit on its last segment, which ends it).
 */
export function ctUpdate(
  ct: ConntrackMap,
  i: number,
  dir: number,
  proto: number,
  event: number,
  bytes: number,
  nowSec: number,
  tmo = CT_DEFAULT_TIMEOUTS,
  pkts = 1,
): number {
  let flags = ct.flags(i);
  const old = flags;
  if (dir === CT_DIR_ORIG) {
    ct.addOrig(i, bytes, pkts);
  } else {
    ct.addReply(i, bytes, pkts);
    flags |= CT_F_SEEN_REPLY;
  }
  if (proto === IPPROTO_TCP) {
    flags = ctTcpNext(flags, dir, event);
    if (flags < 0) return 0;
  } else if (proto === IPPROTO_SCTP) {
    const n = ctSctpNext(flags, dir, event);
    if (n < 0) return 0;
    flags = n & 0xff;
    if ((n & CT_SCTP_KEEP_EXPIRY) !== 0) {
      if (flags !== old) ct.setFlags(i, flags);
      return 1;
    }
  }
  if (flags !== old) ct.setFlags(i, flags);
  ct.setExpires(i, nowSec + ctTimeout(proto, flags, tmo));
  return 1;
}

/** Flags byte after a TCP packet with `tcpFlags` in `dir`; -1 when the packet is INVALID. */
export function ctTcpNext(flags: number, dir: number, tcpFlags: number): number {
  const s = flags >>> CT_STATE_SHIFT;
  let bits = flags & CT_F_BITS;
  if ((tcpFlags & TCP_SYN) === 0) bits |= CT_F_SEEN_NON_SYN;
  if ((tcpFlags & TCP_RST) !== 0) {
    if (s === CT_TCP_NONE) return -1;
    return ((CT_TCP_CLOSE << CT_STATE_SHIFT) | bits | CT_F_CLOSING) >>> 0;
  }
  let n: number;
  if ((tcpFlags & TCP_SYN) !== 0) n = ct4OnSyn(s, dir, tcpFlags);
  else if ((tcpFlags & TCP_FIN) !== 0) n = ct4OnFin(s, dir, bits);
  else n = ct4OnAck(s, dir, bits);
  if (n < 0) return -1;
  if ((tcpFlags & (TCP_SYN | TCP_FIN)) === TCP_FIN)
    bits |= dir === CT_DIR_ORIG ? CT_F_TX_CLOSING : CT_F_RX_CLOSING;
  return (n << CT_STATE_SHIFT) | bits;
}

function ct4OnSyn(s: number, dir: number, tcpFlags: number): number {
  const synAck = (tcpFlags & TCP_ACK) !== 0;
  if (dir === CT_DIR_ORIG) {
    if (synAck) return s === CT_TCP_NONE ? -1 : s;
    return s === CT_TCP_NONE ? CT_TCP_SYN_SENT : s;
  }
  if (!synAck) return s === CT_TCP_NONE ? -1 : s; // simultaneous open: ignored
  if (s === CT_TCP_SYN_SENT || s === CT_TCP_SYN_RECV) return CT_TCP_SYN_RECV;
  return s === CT_TCP_NONE ? -1 : s;
}

function ct4OnFin(s: number, dir: number, bits: number): number {
  const mine = dir === CT_DIR_ORIG ? CT_F_TX_CLOSING : CT_F_RX_CLOSING;
  switch (s) {
    case CT_TCP_SYN_RECV:
    case CT_TCP_ESTABLISHED:
      return CT_TCP_FIN_WAIT;
    case CT_TCP_FIN_WAIT:
    case CT_TCP_CLOSE_WAIT:
      if ((bits & mine) !== 0) return s; // a retransmitted FIN from the same side
      return dir === CT_DIR_ORIG ? CT_TCP_LAST_ACK : CT_TCP_LAST_ACK_R;
    case CT_TCP_NONE:
      return CT_TCP_FIN_WAIT; // mid-stream pickup of a closing connection
    case CT_TCP_SYN_SENT:
      return -1;
    default:
      return s;
  }
}

function ct4OnAck(s: number, dir: number, bits: number): number {
  switch (s) {
    case CT_TCP_NONE:
      return CT_TCP_ESTABLISHED; // mid-stream pickup (the caller decides whether to allow it)
    case CT_TCP_SYN_SENT:
      return -1;
    case CT_TCP_SYN_RECV:
      return dir === CT_DIR_ORIG ? CT_TCP_ESTABLISHED : s;
    case CT_TCP_FIN_WAIT: {
      // the other side acknowledging the FIN
      const finBy = (bits & CT_F_TX_CLOSING) !== 0 ? CT_DIR_ORIG : CT_DIR_REPLY;
      return dir !== finBy ? CT_TCP_CLOSE_WAIT : s;
    }
    case CT_TCP_LAST_ACK:
      return dir === CT_DIR_REPLY ? CT_TCP_TIME_WAIT : s;
    case CT_TCP_LAST_ACK_R:
      return dir === CT_DIR_ORIG ? CT_TCP_TIME_WAIT : s;
    default:
      return s;
  }
}

/**
 * Count an INVALID packet; true when it must be dropped (cfg.ctDropInvalid, or `always`). The
 * callers' `always`: an RST for no flow (nothing to reset, and unNATed it would go nowhere), a
 * first packet whose flags conntrack never tracks (tcpFlagsValid).
 */
export function ctInvalid(dp: Datapath, always: boolean): boolean {
  dp.ctInvalid++;
  return always || dp.cfg.ctDropInvalid;
}

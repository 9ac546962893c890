// Conntrack stage of the ClusterIP program: lookup in both directions, create, and the per-packet
// update of flags, counters and lifetime. One entry per flow (ConntrackMap indexes it from both
// the client->VIP and the backend->client tuple).
//
// Lifetimes are deliberately simple here (Cilium-like, kube-proxy's timeouts), and live in this
// file so a fuller TCP state machine can replace ct4Update later without touching the program:
//
//   TCP  not yet established .............. 60 s      (CT_TIMEOUT_TCP_SYN)
//        a non-SYN packet and a reply seen  86400 s   (kube-proxy: tcp_timeout_established)
//        FIN/RST seen in both directions .. 10 s      (RST closes both at once)
//   UDP  no reply yet ..................... 30 s      (kernel nf_conntrack_udp_timeout)
//        reply seen ....................... 120 s     (nf_conntrack_udp_timeout_stream)
//
// "Established" needs a reply as well as a non-SYN packet (Cilium only asks for the non-SYN):
// a stray ACK to a VIP picked up mid-stream, never answered, then lives 60 s, not a day.
//
// A pure SYN on an entry closing in both directions starts a new connection on a reused port
// (the kernel's TIME_WAIT reopen): the old entry is deleted and the flow is treated as new.

import { CT_CLASH, CT_FULL, type ConntrackMap } from '../maps/conntrack.ts';
import { TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN } from '../wire/tcp.ts';

export const CT_TIMEOUT_TCP_SYN = 60;
export const CT_TIMEOUT_TCP_ESTABLISHED = 86400;
export const CT_TIMEOUT_TCP_CLOSE = 10;
export const CT_TIMEOUT_UDP = 30;
export const CT_TIMEOUT_UDP_STREAM = 120;
export const CT_TIMEOUT_OTHER = 60;

// Entry flags (ConntrackMap.flags): what has been seen on the flow.
/** a TCP packet without SYN has been seen (handshake done, or a mid-stream pickup) */
export const CT_F_SEEN_NON_SYN = 1;
/** a packet in the reply direction has been seen */
export const CT_F_SEEN_REPLY = 2;
/** FIN or RST seen client -> service */
export const CT_F_TX_CLOSING = 4;
/** FIN or RST seen backend -> client */
export const CT_F_RX_CLOSING = 8;
export const CT_F_CLOSING = CT_F_TX_CLOSING | CT_F_RX_CLOSING;

export const CT_DIR_ORIG = 0;
export const CT_DIR_REPLY = 1;

const IPPROTO_TCP = 6;
const IPPROTO_UDP = 17;

/** Lifetime in seconds of an entry with these flags. */
export function ct4Timeout(proto: number, flags: number): number {
  if (proto === IPPROTO_TCP) {
    if ((flags & CT_F_CLOSING) === CT_F_CLOSING) return CT_TIMEOUT_TCP_CLOSE;
    const est = CT_F_SEEN_NON_SYN | CT_F_SEEN_REPLY;
    return (flags & est) === est ? CT_TIMEOUT_TCP_ESTABLISHED : CT_TIMEOUT_TCP_SYN;
  }
  if (proto === IPPROTO_UDP) {
    return (flags & CT_F_SEEN_REPLY) !== 0 ? CT_TIMEOUT_UDP_STREAM : CT_TIMEOUT_UDP;
  }
  return CT_TIMEOUT_OTHER;
}

/** Entries live while now < expires. */
export function ct4Expired(ct: ConntrackMap, i: number, nowSec: number): boolean {
  return ct.expires(i) <= nowSec;
}

/**
 * Find the flow of a client->service packet. An expired entry is deleted and reported as a
 * miss (GC may not have run yet); so is a closed TCP entry hit by a pure SYN (port reuse).
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
  if (i < 0) return -1;
  if (ct4Expired(ct, i, nowSec) || ct4Reopens(ct, i, proto, tcpFlags)) {
    ct.delete(i);
    return -1;
  }
  return i;
}

/** Find the flow of a backend->client packet; expired entries are deleted (a miss). */
export function ct4LookupReply(
  ct: ConntrackMap,
  proto: number,
  saddr: number,
  daddr: number,
  sport: number,
  dport: number,
  nowSec: number,
): number {
  const i = ct.lookupReply(proto, saddr, daddr, sport, dport);
  if (i < 0) return -1;
  if (ct4Expired(ct, i, nowSec)) {
    ct.delete(i);
    return -1;
  }
  return i;
}

function ct4Reopens(ct: ConntrackMap, i: number, proto: number, tcpFlags: number): boolean {
  return (
    proto === IPPROTO_TCP &&
    (tcpFlags & (TCP_SYN | TCP_ACK)) === TCP_SYN &&
    (ct.flags(i) & CT_F_CLOSING) === CT_F_CLOSING
  );
}

/**
 * Create the entry of a new service flow. Returns the entry, or CT_FULL / CT_CLASH (< 0).
 * An expired flow still holding the reply tuple (not yet collected) is deleted and the create
 * retried; a full table gets one bounded GC step (`gcBatch` positions from `gc.cursor`, as
 * Cilium triggers GC on a failed insert) and one retry.
 */
export function ct4Create(
  ct: ConntrackMap,
  gc: Ct4GcState,
  proto: number,
  saddr: number,
  daddr: number,
  sport: number,
  dport: number,
  baddr: number,
  bport: number,
  backendId: number,
  revNat: number,
  nowSec: number,
): number {
  const expires = nowSec + ct4Timeout(proto, 0);
  let i = ct.create(proto, saddr, daddr, sport, dport, baddr, bport, backendId, revNat, expires);
  if (i >= 0) return i;
  if (i === CT_CLASH) {
    const owner = ct.lookupReply(proto, baddr, saddr, bport, sport);
    if (owner < 0 || !ct4Expired(ct, owner, nowSec)) return CT_CLASH;
    ct.delete(owner);
  } else if (i === CT_FULL) {
    if (gc.batch === 0) return CT_FULL;
    gc.cursor = ct.scan(gc.cursor, gc.batch, nowSec);
  } else {
    return i;
  }
  i = ct.create(proto, saddr, daddr, sport, dport, baddr, bport, backendId, revNat, expires);
  return i;
}

/** Where the datapath's inline GC continues, and how far one step goes (0 = never inline). */
export interface Ct4GcState {
  cursor: number;
  batch: number;
}

/** Account one packet of `bytes` in direction `dir` and refresh the lifetime. */
export function ct4Update(
  ct: ConntrackMap,
  i: number,
  dir: number,
  proto: number,
  tcpFlags: number,
  bytes: number,
  nowSec: number,
): void {
  let flags = ct.flags(i);
  const old = flags;
  if (dir === CT_DIR_ORIG) {
    ct.addOrig(i, bytes);
  } else {
    ct.addReply(i, bytes);
    flags |= CT_F_SEEN_REPLY;
  }
  if (proto === IPPROTO_TCP) flags = ct4TcpFlags(flags, dir, tcpFlags);
  if (flags !== old) ct.setFlags(i, flags);
  ct.setExpires(i, nowSec + ct4Timeout(proto, flags));
}

function ct4TcpFlags(flags: number, dir: number, tcpFlags: number): number {
  if ((tcpFlags & TCP_SYN) === 0) flags |= CT_F_SEEN_NON_SYN;
  if ((tcpFlags & TCP_RST) !== 0) return flags | CT_F_CLOSING;
  if ((tcpFlags & TCP_FIN) !== 0) flags |= dir === CT_DIR_ORIG ? CT_F_TX_CLOSING : CT_F_RX_CLOSING;
  return flags;
}

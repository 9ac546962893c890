// The conntrack entry's flags byte and lifetimes: datapath state, shared by the conntrack stage
// (ct.ts), the loader, housekeeping and inspect. The TCP state lives in the high nibble of the
// entry's flags byte, the seen-bits in the low nibble, so every view of a flow (inspect,
// filters) reads both from one field. Lifetimes per state come from a preallocated table
// (ctTimeoutTable of DatapathConfig) with kube-proxy's settings as defaults.

// ---- TCP states (the flags byte's high nibble)
export const CT_TCP_NONE = 0;
export const CT_TCP_SYN_SENT = 1;
export const CT_TCP_SYN_RECV = 2;
export const CT_TCP_ESTABLISHED = 3;
export const CT_TCP_FIN_WAIT = 4;
export const CT_TCP_CLOSE_WAIT = 5;
/** both sides sent FIN, the last one from the client */
export const CT_TCP_LAST_ACK = 6;
export const CT_TCP_TIME_WAIT = 7;
export const CT_TCP_CLOSE = 8;
/** both sides sent FIN, the last one from the backend (shown as LAST_ACK) */
export const CT_TCP_LAST_ACK_R = 9;
export const CT_STATE_SHIFT = 4;

// ---- SCTP states (the same high nibble; nf_conntrack_sctp's numbering and names)
export const CT_SCTP_NONE = 0;
export const CT_SCTP_CLOSED = 1;
export const CT_SCTP_COOKIE_WAIT = 2;
export const CT_SCTP_COOKIE_ECHOED = 3;
export const CT_SCTP_ESTABLISHED = 4;
export const CT_SCTP_SHUTDOWN_SENT = 5;
export const CT_SCTP_SHUTDOWN_RECD = 6;
export const CT_SCTP_SHUTDOWN_ACK_SENT = 7;
export const CT_SCTP_HEARTBEAT_SENT = 8;
export const CT_SCTP_STATES = 9;

// Entry flags (low nibble): what has been seen on the flow.
/** a TCP packet without SYN has been seen (handshake done, or a mid-stream pickup) */
export const CT_F_SEEN_NON_SYN = 1;
/** a packet in the reply direction has been seen */
export const CT_F_SEEN_REPLY = 2;
/** FIN or RST seen client -> service */
export const CT_F_TX_CLOSING = 4;
/** FIN or RST seen backend -> client */
export const CT_F_RX_CLOSING = 8;
export const CT_F_CLOSING = CT_F_TX_CLOSING | CT_F_RX_CLOSING;
export const CT_F_BITS = 0x0f;
/**
 * SCTP: the flow has been ESTABLISHED (nf_conntrack's IPS_ASSURED, which then stays set). SCTP
 * has no SYN, so it shares that bit; TCP's assured rule (reply seen + a non-SYN) then holds too.
 */
export const CT_F_SCTP_ASSURED = CT_F_SEEN_NON_SYN;

export const CT_DIR_ORIG = 0;
export const CT_DIR_REPLY = 1;

/** TCP state of a flags byte. */
export function ctTcpState(flags: number): number {
  return flags >>> CT_STATE_SHIFT;
}

// ---- timeout table: index = TCP state (0..9), then these
export const CT_TMO_UDP = 10;
export const CT_TMO_UDP_STREAM = 11;
// No ICMP lifetime: the datapath tracks no ICMP flow (echo to a VIP is answered or dropped,
// errors ride the flow they quote), so no entry of protocol 1 ever exists.
export const CT_TMO_OTHER = 12;
/** SCTP state s has its lifetime at CT_TMO_SCTP + s */
export const CT_TMO_SCTP = 13;
const CT_TMO_SIZE = CT_TMO_SCTP + CT_SCTP_STATES;

// kube-proxy's settings (kernel defaults in the comments), seconds
export const CT_TIMEOUT_TCP_SYN_SENT = 120;
export const CT_TIMEOUT_TCP_SYN_RECV = 60;
export const CT_TIMEOUT_TCP_ESTABLISHED = 86400; // kernel 432000
export const CT_TIMEOUT_TCP_FIN_WAIT = 120;
export const CT_TIMEOUT_TCP_CLOSE_WAIT = 3600; // kernel 60
export const CT_TIMEOUT_TCP_LAST_ACK = 30;
export const CT_TIMEOUT_TCP_TIME_WAIT = 120;
export const CT_TIMEOUT_TCP_CLOSE = 10;
export const CT_TIMEOUT_UDP = 30;
export const CT_TIMEOUT_UDP_STREAM = 120;
export const CT_TIMEOUT_OTHER = 60;
// SCTP: the kernel's defaults (nf_conntrack_proto_sctp.c sctp_timeouts, the
// net.netfilter.nf_conntrack_sctp_timeout_* sysctls; kube-proxy sets none of them). NONE, the
// state of a flow before its first packet is counted, has CLOSED's (nf_conntrack_sctp_init_net).
export const CT_TIMEOUT_SCTP: Readonly<Record<number, number>> = {
  [CT_SCTP_NONE]: 10,
  [CT_SCTP_CLOSED]: 10,
  [CT_SCTP_COOKIE_WAIT]: 3,
  [CT_SCTP_COOKIE_ECHOED]: 3,
  [CT_SCTP_ESTABLISHED]: 210,
  [CT_SCTP_SHUTDOWN_SENT]: 3,
  [CT_SCTP_SHUTDOWN_RECD]: 3,
  [CT_SCTP_SHUTDOWN_ACK_SENT]: 3,
  [CT_SCTP_HEARTBEAT_SENT]: 30,
};
/** an unreplied flow's lifetime before the handshake completes (old name, = syn_sent) */
export const CT_TIMEOUT_TCP_SYN = CT_TIMEOUT_TCP_SYN_SENT;

/** Lifetimes in seconds, as DatapathConfig names them. */
export interface CtTimeouts {
  ctTcpSynSent: number;
  ctTcpSynRecv: number;
  ctTcpEstablished: number;
  ctTcpFinWait: number;
  ctTcpCloseWait: number;
  ctTcpLastAck: number;
  ctTcpTimeWait: number;
  ctTcpClose: number;
  ctUdp: number;
  ctUdpStream: number;
}

export const DEFAULT_CT_TIMEOUTS: Readonly<CtTimeouts> = {
  ctTcpSynSent: CT_TIMEOUT_TCP_SYN_SENT,
  ctTcpSynRecv: CT_TIMEOUT_TCP_SYN_RECV,
  ctTcpEstablished: CT_TIMEOUT_TCP_ESTABLISHED,
  ctTcpFinWait: CT_TIMEOUT_TCP_FIN_WAIT,
  ctTcpCloseWait: CT_TIMEOUT_TCP_CLOSE_WAIT,
  ctTcpLastAck: CT_TIMEOUT_TCP_LAST_ACK,
  ctTcpTimeWait: CT_TIMEOUT_TCP_TIME_WAIT,
  ctTcpClose: CT_TIMEOUT_TCP_CLOSE,
  ctUdp: CT_TIMEOUT_UDP,
  ctUdpStream: CT_TIMEOUT_UDP_STREAM,
};

/** Build the per-state lifetime table the fast path indexes (slow world, once). */
export function ctTimeoutTable(t: CtTimeouts): Uint32Array {
  const a = new Uint32Array(CT_TMO_SIZE);
  a[CT_TCP_NONE] = t.ctTcpSynSent;
  a[CT_TCP_SYN_SENT] = t.ctTcpSynSent;
  a[CT_TCP_SYN_RECV] = t.ctTcpSynRecv;
  a[CT_TCP_ESTABLISHED] = t.ctTcpEstablished;
  a[CT_TCP_FIN_WAIT] = t.ctTcpFinWait;
  a[CT_TCP_CLOSE_WAIT] = t.ctTcpCloseWait;
  a[CT_TCP_LAST_ACK] = t.ctTcpLastAck;
  a[CT_TCP_LAST_ACK_R] = t.ctTcpLastAck;
  a[CT_TCP_TIME_WAIT] = t.ctTcpTimeWait;
  a[CT_TCP_CLOSE] = t.ctTcpClose;
  a[CT_TMO_UDP] = t.ctUdp;
  a[CT_TMO_UDP_STREAM] = t.ctUdpStream;
  a[CT_TMO_OTHER] = CT_TIMEOUT_OTHER;
  for (let s = 0; s < CT_SCTP_STATES; s++) a[CT_TMO_SCTP + s] = CT_TIMEOUT_SCTP[s];
  return a;
}

export const CT_DEFAULT_TIMEOUTS: Uint32Array = ctTimeoutTable(DEFAULT_CT_TIMEOUTS);

/**
 * Where the datapath's inline GC continues, how far one step goes (0 = never inline), and how
 * many creates found the table full (the agent's GC runs at once when this grows).
 */
export interface CtGcState {
  cursor: number;
  batch: number;
  insertFailures: number;
}

// What the control socket answers for the inspect views (`ct`, `ct-count`, `ct-flush`, `svc`):
// plain JSON, the contract between the agent (src/node/inspect.ts) and the CLI formatters here.

/** One direction of a flow as seen on the wire, with its own counters. */
export interface CtTuple {
  src: string;
  dst: string;
  sport: number;
  dport: number;
  /** packets and bytes in this direction (u32, wrap) */
  packets: number;
  bytes: number;
}

export interface CtEntry {
  /** "TCP", "UDP", "ICMP", or the number as text */
  proto: string;
  protoNum: number;
  /** set on IPv6 flows (conntrack -o extended's "ipv6"); IPv4 flows have none */
  family?: 'ipv6';
  /** TCP: conntrack's state names (SYN_SENT, SYN_RECV, ESTABLISHED, FIN_WAIT, CLOSE_WAIT,
   * CLOSE); others: REPLIED / UNREPLIED */
  state: string;
  expiresInSec: number;
  /** client -> VIP */
  orig: CtTuple;
  /** backend -> client, or -> the SNAT address and port of a masqueraded flow */
  reply: CtTuple;
  backendId: number;
  revNat: number;
  /** masqueraded flows: the source the backend sees (node or gateway address, SNAT port) */
  snat?: { addr: string; port: number };
  /** both directions together */
  packets: number;
  bytes: number;
  /** a packet was seen in the reply direction (no [UNREPLIED]) */
  seenReply: boolean;
  /** conntrack's [ASSURED]: TCP once established both ways, other protocols once replied */
  assured: boolean;
}

export interface SvcBackend {
  id: number;
  addr: string;
  port: number;
  /** IPVS weight: 1, or 0 for a terminating backend (kube-proxy's graceful termination) */
  weight: number;
  /** "active", "terminating", "quarantined" */
  state: string;
  /** runs on this node */
  local: boolean;
  /** TCP flows in ESTABLISHED to this backend of this service (IPVS ActiveConn) */
  active: number;
  /** every other live flow (IPVS InActConn) */
  inactive: number;
}

export interface SvcEntry {
  vip: string;
  port: number;
  proto: string;
  protoNum: number;
  /** scheduler name of the service master entry ("random" unless the service asks) */
  scheduler: string;
  /** service flags by name: nodeport, external-ip, loadbalancer, etp-local, itp-local,
   * affinity, source-range; local-scope for the external entry of an externalTrafficPolicy:
   * Local service (local endpoints only) */
  flags: string[];
  /** ClientIP affinity timeout in seconds (0 without affinity) */
  affinityTimeoutSec: number;
  revNat: number;
  /** kube-proxy's ServicePortName ("ns/name:port") when the agent knows it */
  name?: string;
  /** the Service's namespace and name, with `name` */
  namespace?: string;
  service?: string;
  /** in slot order */
  backends: SvcBackend[];
}

export interface SvcReport {
  /** conntrack capacity: the "size=" of ipvsadm's header */
  connTableSize: number;
  services: SvcEntry[];
}

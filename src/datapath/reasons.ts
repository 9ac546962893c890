// Why the datapath did what it did. Every packet ends with exactly one reason; each reason has a
// counter (dp.counters[reason]) so drops are never silent. Cilium's drop-reason idea, with the
// non-drop outcomes counted the same way so `inspect` can show where all packets went.
//
// The numbers are indexes into REASON_NAMES and the counters array; append, never renumber
// (counters exported as metrics keep their meaning across versions).

// ---- passed unchanged
/** Not to a service VIP and not a reply of a tracked service flow. */
export const PASS_NOT_SERVICE = 0;
/** A non-first IPv4 fragment: it carries no L4 header, so no tuple to look up. Passed as is. */
export const PASS_NON_FIRST_FRAGMENT = 1;

// ---- rewritten in place
/** Packet of a tracked flow, client -> VIP: DNAT to the backend stored in conntrack. */
export const TX_DNAT = 2;
/** First packet of a new flow: backend selected, conntrack entry created, DNAT. */
export const TX_DNAT_NEW = 3;
/** Reply of a tracked flow, backend -> client: source restored to VIP:port. */
export const TX_REVNAT = 4;

// ---- answered with a generated packet (dp.out)
/** Service port with no eligible endpoint: ICMP port unreachable (kube-proxy REJECT). */
export const REPLY_REJECT_NO_ENDPOINTS = 5;
/** Known VIP, port not served (nftables mode rejects unused ports of a ClusterIP). */
export const REPLY_REJECT_UNKNOWN_PORT = 6;
/** Known VIP, an L4 protocol no service uses (not TCP/UDP/ICMP): rejected like an unknown port. */
export const REPLY_REJECT_UNKNOWN_PROTO = 7;

// ---- dropped: malformed
/** Fewer than 20 bytes, or fewer than IHL*4. */
export const DROP_TRUNCATED_IPV4 = 8;
/** IP version is not 4. */
export const DROP_BAD_VERSION = 9;
/** IHL < 5. */
export const DROP_BAD_IHL = 10;
/** Total length beyond the buffer, or smaller than the header. */
export const DROP_BAD_TOTLEN = 11;
/** IPv4 header checksum does not verify. */
export const DROP_BAD_IP_CSUM = 12;
/** TCP/UDP/ICMP header does not fit in the IP payload. */
export const DROP_TRUNCATED_L4 = 13;
/** TCP data offset < 5 words or beyond the payload. */
export const DROP_BAD_TCP_DOFF = 14;
/** UDP length field disagrees with the IP payload. */
export const DROP_BAD_UDP_LEN = 15;

// ---- dropped: policy
/** ICMP echo request to a VIP: iptables mode neither translates nor answers it. */
export const DROP_ECHO_TO_VIP = 16;
/** Other ICMP to a VIP (errors included): not answered (never an ICMP error about ICMP). */
export const DROP_ICMP_TO_VIP = 17;

// ---- dropped: resources / state
/** Conntrack table full: fail closed, as Cilium does (DROP_CT_CREATE_FAILED). */
export const DROP_CT_FULL = 18;
/** A slot or backend entry is missing for a master that counts it (maps inconsistent). */
export const DROP_NO_BACKEND = 19;
/** A reject was due but RFC 1122 forbids an ICMP error here (source not unicast, …). */
export const DROP_REJECT_SUPPRESSED = 20;
/** A reject was due but the ICMP error rate limit (icmp_msgs_per_sec) was exhausted. */
export const DROP_ICMP_RATELIMIT = 21;
/** A reject was due but the error packet could not be built (scratch buffer too small). */
export const DROP_REJECT_FAILED = 22;

/** A new flow's reply tuple belongs to another live flow (same client ip:port, same backend
 * ip:port, different VIP): replies could not be told apart without SNAT. */
export const DROP_CT_CLASH = 23;

/** internalTrafficPolicy: Local and no endpoint on this node: kube-proxy DROPs (no reject). */
export const DROP_NO_LOCAL_ENDPOINTS = 24;

// ---- conntrack (ct.ts), ICMP errors (icmp-error.ts), fragments (frag.ts)
/** Conntrack INVALID (e.g. a non-SYN first packet, an RST for no flow) and ctDropInvalid set. */
export const DROP_CT_INVALID = 25;
/** A later fragment of a datagram whose first fragment was translated: same address rewrite. */
export const TX_FRAG = 26;
/** A later fragment to a VIP arriving before its first fragment (no tuple yet): dropped. */
export const DROP_FRAG_OUT_OF_ORDER = 27;
/** An ICMP error about a DNATed flow (from the backend or a router): outer source and quoted
 * destination restored to the VIP (nf_nat_icmp_reply_translation). */
export const TX_ICMP_ERR_REVNAT = 28;
/** An ICMP error from the client about a reply of a service flow: sent on to the backend. */
export const TX_ICMP_ERR_DNAT = 29;

// ---- NAT: masquerade, NodePort, external IPs (nat.ts, nodeport.ts)
/** Reply of a masqueraded flow (backend -> node:snatPort): client and VIP/NodePort restored. */
export const TX_REVSNAT = 30;
/** Masquerade due but no free SNAT port for (node address, backend) in the range: dropped. */
export const DROP_NAT_NO_PORT = 31;
/** Masquerade due but the SNAT table is full: dropped (fail closed, like conntrack). */
export const DROP_SNAT_FULL = 32;
/** LoadBalancer IP with loadBalancerSourceRanges: the client is outside every range. */
export const DROP_SOURCE_RANGE = 33;
/** externalTrafficPolicy: Local, external client, no endpoint on this node: kube-proxy DROPs. */
export const DROP_ETP_NO_LOCAL_ENDPOINTS = 34;

export const REASON_COUNT = 35;

export const REASON_NAMES: readonly string[] = [
  'PASS_NOT_SERVICE',
  'PASS_NON_FIRST_FRAGMENT',
  'TX_DNAT',
  'TX_DNAT_NEW',
  'TX_REVNAT',
  'REPLY_REJECT_NO_ENDPOINTS',
  'REPLY_REJECT_UNKNOWN_PORT',
  'REPLY_REJECT_UNKNOWN_PROTO',
  'DROP_TRUNCATED_IPV4',
  'DROP_BAD_VERSION',
  'DROP_BAD_IHL',
  'DROP_BAD_TOTLEN',
  'DROP_BAD_IP_CSUM',
  'DROP_TRUNCATED_L4',
  'DROP_BAD_TCP_DOFF',
  'DROP_BAD_UDP_LEN',
  'DROP_ECHO_TO_VIP',
  'DROP_ICMP_TO_VIP',
  'DROP_CT_FULL',
  'DROP_NO_BACKEND',
  'DROP_REJECT_SUPPRESSED',
  'DROP_ICMP_RATELIMIT',
  'DROP_REJECT_FAILED',
  'DROP_CT_CLASH',
  'DROP_NO_LOCAL_ENDPOINTS',
  'DROP_CT_INVALID',
  'TX_FRAG',
  'DROP_FRAG_OUT_OF_ORDER',
  'TX_ICMP_ERR_REVNAT',
  'TX_ICMP_ERR_DNAT',
  'TX_REVSNAT',
  'DROP_NAT_NO_PORT',
  'DROP_SNAT_FULL',
  'DROP_SOURCE_RANGE',
  'DROP_ETP_NO_LOCAL_ENDPOINTS',
];

// Reasons appended after the first drops are not all drops: decide by name, once.
const IS_DROP = Uint8Array.from(REASON_NAMES, (n) => (n.startsWith('DROP_') ? 1 : 0));

export function reasonIsDrop(reason: number): boolean {
  return IS_DROP[reason] === 1;
}

/** Counters as a plain record for inspect/metrics (slow world). */
export function countersToRecord(counters: Float64Array): Record<string, number> {
  const out: Record<string, number> = {};
  for (let r = 0; r < REASON_COUNT; r++) out[REASON_NAMES[r]] = counters[r];
  return out;
}

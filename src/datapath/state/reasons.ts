// Why the datapath did what it did: the one table of reasons. Every packet ends with exactly one
// reason; the reason decides the verdict (REASON_VERDICT) and has a counter (dp.counters[reason]),
// so drops are never silent. Cilium's drop-reason idea, with the non-drop outcomes counted the
// same way so `inspect` can show where all packets went.
//
// Stages return a reason (or R_CONTINUE: "no opinion, go on"); dpProcess alone counts it and
// turns it into a verdict — the single exit, as Cilium's programs end in one drop/ok path.
//
// The constants are indexes into REASONS and the counters array: append, never renumber
// (counters exported as metrics keep their meaning across versions). Counters, metrics, the
// replay and inspect output and docs/reasons.md (scripts/gen-reasons-doc.ts) all read REASONS.

import { V_DROP, V_PASS, V_REPLY, V_TX } from './verdict.ts';

/** Returned by a stage that has no opinion about the packet: the next stage decides. */
export const R_CONTINUE = -1;

export const PASS_NOT_SERVICE = 0;
export const PASS_NON_FIRST_FRAGMENT = 1;
export const TX_DNAT = 2;
export const TX_DNAT_NEW = 3;
export const TX_REVNAT = 4;
export const REPLY_REJECT_NO_ENDPOINTS = 5;
export const REPLY_REJECT_UNKNOWN_PORT = 6;
export const REPLY_REJECT_UNKNOWN_PROTO = 7;
export const DROP_TRUNCATED_IPV4 = 8;
export const DROP_BAD_VERSION = 9;
export const DROP_BAD_IHL = 10;
export const DROP_BAD_TOTLEN = 11;
export const DROP_BAD_IP_CSUM = 12;
export const DROP_TRUNCATED_L4 = 13;
export const DROP_BAD_TCP_DOFF = 14;
export const DROP_BAD_UDP_LEN = 15;
export const DROP_ECHO_TO_VIP = 16;
export const DROP_ICMP_TO_VIP = 17;
export const DROP_CT_FULL = 18;
export const DROP_NO_BACKEND = 19;
export const DROP_REJECT_SUPPRESSED = 20;
export const DROP_ICMP_RATELIMIT = 21;
export const DROP_REJECT_FAILED = 22;
export const DROP_CT_CLASH = 23;
export const DROP_NO_LOCAL_ENDPOINTS = 24;
export const DROP_CT_INVALID = 25;
export const TX_FRAG = 26;
export const DROP_FRAG_OUT_OF_ORDER = 27;
export const TX_ICMP_ERR_REVNAT = 28;
export const TX_ICMP_ERR_DNAT = 29;
export const TX_REVSNAT = 30;
export const DROP_NAT_NO_PORT = 31;
export const DROP_SNAT_FULL = 32;
export const DROP_SOURCE_RANGE = 33;
export const DROP_ETP_NO_LOCAL_ENDPOINTS = 34;
export const REPLY_ECHO_FROM_VIP = 35;
export const DROP_BAD_SCTP_CHUNK = 36;
export const DROP_BAD_SCTP_CSUM = 37;
export const DROP_SCTP_FRAGMENT = 38;
export const DROP_MARTIAN_ZERONET = 39;
export const DROP_MARTIAN_LOOPBACK = 40;
export const DROP_MARTIAN_MULTICAST = 41;
export const DROP_MARTIAN_CLASS_E = 42;
export const DROP_MARTIAN_BROADCAST = 43;
export const DROP_MARTIAN_VIP_SOURCE = 44;
export const DROP_BAD_L4_CSUM = 45;
export const REPLY_TTL_EXCEEDED = 46;
export const DROP_TRUNCATED_IPV6 = 47;
export const DROP_BAD_PAYLOAD_LEN = 48;
export const DROP_BAD_EXT_HDR = 49;
export const DROP_EXT_HDR_CHAIN = 50;
export const DROP_MARTIAN6_UNSPECIFIED = 51;
export const DROP_MARTIAN6_LOOPBACK = 52;
export const DROP_MARTIAN6_MULTICAST = 53;
export const PASS_ND_MLD = 54;
export const DROP_UDP6_ZERO_CSUM = 55;

export interface ReasonInfo {
  readonly name: string;
  /** V_PASS, V_TX, V_REPLY or V_DROP: what dpProcess returns for this reason */
  readonly verdict: number;
  /** one line for docs, `kubetun inspect` and metrics help */
  readonly doc: string;
}

const row = (name: string, verdict: number, doc: string): ReasonInfo => ({ name, verdict, doc });

/** Indexed by reason. */
export const REASONS: readonly ReasonInfo[] = [
  row(
    'PASS_NOT_SERVICE',
    V_PASS,
    'Not to a service VIP and not a reply of a tracked service flow.',
  ),
  row(
    'PASS_NON_FIRST_FRAGMENT',
    V_PASS,
    'A non-first fragment (IPv4, or IPv6 by its Fragment header) of no translated datagram and not to a VIP: it carries no L4 header, so no tuple to look up. Passed as is.',
  ),
  row(
    'TX_DNAT',
    V_TX,
    'Packet of a tracked flow, client -> VIP: DNAT to the backend stored in conntrack.',
  ),
  row(
    'TX_DNAT_NEW',
    V_TX,
    'First packet of a new flow: backend selected, conntrack entry created, DNAT.',
  ),
  row(
    'TX_REVNAT',
    V_TX,
    'Reply of a tracked flow, backend -> client: source restored to VIP:port.',
  ),
  row(
    'REPLY_REJECT_NO_ENDPOINTS',
    V_REPLY,
    'Service port with no eligible endpoint: ICMP port unreachable, over IPv6 ICMPv6 destination unreachable code 4 (kube-proxy REJECT).',
  ),
  row(
    'REPLY_REJECT_UNKNOWN_PORT',
    V_REPLY,
    'Known VIP, port not served (nftables mode rejects unused ports of a ClusterIP).',
  ),
  row(
    'REPLY_REJECT_UNKNOWN_PROTO',
    V_REPLY,
    'Known VIP, an L4 protocol no service uses (not TCP/UDP/SCTP/ICMP): rejected like an unknown port.',
  ),
  row('DROP_TRUNCATED_IPV4', V_DROP, 'Fewer than 20 bytes, or fewer than IHL*4.'),
  row('DROP_BAD_VERSION', V_DROP, 'IP version is neither 4 nor 6.'),
  row('DROP_BAD_IHL', V_DROP, 'IPv4 header length (IHL) below 5 words.'),
  row('DROP_BAD_TOTLEN', V_DROP, 'Total length beyond the buffer, or smaller than the header.'),
  row('DROP_BAD_IP_CSUM', V_DROP, 'IPv4 header checksum does not verify.'),
  row(
    'DROP_TRUNCATED_L4',
    V_DROP,
    'TCP/UDP/SCTP/ICMP/ICMPv6 header does not fit in the IP payload.',
  ),
  row('DROP_BAD_TCP_DOFF', V_DROP, 'TCP data offset < 5 words or beyond the payload.'),
  row('DROP_BAD_UDP_LEN', V_DROP, 'UDP length field disagrees with the IP payload.'),
  row(
    'DROP_ECHO_TO_VIP',
    V_DROP,
    'ICMP (or ICMPv6) echo request to a VIP: iptables mode neither translates nor answers it.',
  ),
  row(
    'DROP_ICMP_TO_VIP',
    V_DROP,
    'Other ICMP to a VIP (errors included): not answered (never an ICMP error about ICMP).',
  ),
  row(
    'DROP_CT_FULL',
    V_DROP,
    'Conntrack table full: fail closed, as Cilium does (DROP_CT_CREATE_FAILED).',
  ),
  row(
    'DROP_NO_BACKEND',
    V_DROP,
    'A slot or backend entry is missing for a master that counts it (maps inconsistent).',
  ),
  row(
    'DROP_REJECT_SUPPRESSED',
    V_DROP,
    'A reject was due but RFC 1122 (IPv6: RFC 4443 2.4(e)) forbids an ICMP error here (source not unicast, …).',
  ),
  row(
    'DROP_ICMP_RATELIMIT',
    V_DROP,
    'A reject was due but the ICMP error rate limit (icmp_msgs_per_sec) was exhausted.',
  ),
  row(
    'DROP_REJECT_FAILED',
    V_DROP,
    'A reject was due but the error packet could not be built (scratch buffer too small).',
  ),
  row(
    'DROP_CT_CLASH',
    V_DROP,
    "A new flow's reply tuple belongs to another live flow (same client ip:port, same backend ip:port, different VIP): replies could not be told apart without SNAT.",
  ),
  row(
    'DROP_NO_LOCAL_ENDPOINTS',
    V_DROP,
    'internalTrafficPolicy: Local and no endpoint on this node: kube-proxy DROPs (no reject).',
  ),
  row(
    'DROP_CT_INVALID',
    V_DROP,
    'Conntrack INVALID: a non-SYN first packet or a transition conntrack refuses, with ctDropInvalid set; always an RST for no flow and a first packet with a flag combination conntrack never tracks (SYN|FIN, no flag, FIN without ACK).',
  ),
  row(
    'TX_FRAG',
    V_TX,
    'A later fragment of a datagram whose first fragment was translated: same address rewrite.',
  ),
  row(
    'DROP_FRAG_OUT_OF_ORDER',
    V_DROP,
    'A later fragment to a VIP arriving before its first fragment (no tuple yet): dropped.',
  ),
  row(
    'TX_ICMP_ERR_REVNAT',
    V_TX,
    'An ICMP error about a DNATed flow (from the backend or a router): outer source and quoted destination restored to the VIP (nf_nat_icmp_reply_translation).',
  ),
  row(
    'TX_ICMP_ERR_DNAT',
    V_TX,
    'An ICMP error from the client about a reply of a service flow: sent on to the backend.',
  ),
  row(
    'TX_REVSNAT',
    V_TX,
    'Reply of a masqueraded flow (backend -> node:snatPort): client and VIP/NodePort restored.',
  ),
  row(
    'DROP_NAT_NO_PORT',
    V_DROP,
    'Masquerade due but no free SNAT port for (node address, backend) in the range: dropped.',
  ),
  row(
    'DROP_SNAT_FULL',
    V_DROP,
    'Masquerade due but the SNAT table is full: dropped (fail closed, like conntrack).',
  ),
  row(
    'DROP_SOURCE_RANGE',
    V_DROP,
    'LoadBalancer IP with loadBalancerSourceRanges: the client is outside every range.',
  ),
  row(
    'DROP_ETP_NO_LOCAL_ENDPOINTS',
    V_DROP,
    'externalTrafficPolicy: Local, external client, no endpoint on this node: kube-proxy DROPs.',
  ),
  row(
    'REPLY_ECHO_FROM_VIP',
    V_REPLY,
    '--vip-echo (off by default): a ping to a VIP answered from the VIP, as IPVS mode answers for every ClusterIP bound to kube-ipvs0.',
  ),
  row(
    'DROP_BAD_SCTP_CHUNK',
    V_DROP,
    'SCTP packet without a chunk, or a chunk length below 4 or beyond the IP payload.',
  ),
  row(
    'DROP_BAD_SCTP_CSUM',
    V_DROP,
    'SCTP CRC32c does not verify (nf_conntrack_sctp: "bad CRC", INVALID); never laundered by a NAT recompute.',
  ),
  row(
    'DROP_SCTP_FRAGMENT',
    V_DROP,
    'An IP-fragmented SCTP packet: its CRC32c covers the whole packet, which needs reassembly (not done; SCTP fragments itself into chunks below the path MTU).',
  ),
  row(
    'DROP_MARTIAN_ZERONET',
    V_DROP,
    'A service packet from 0.0.0.0/8: a martian source the kernel drops (ip_route_input, ipv4_is_zeronet); never translated.',
  ),
  row(
    'DROP_MARTIAN_LOOPBACK',
    V_DROP,
    'A service packet from 127.0.0.0/8 arriving from outside: martian (route_localnet off); never translated.',
  ),
  row(
    'DROP_MARTIAN_MULTICAST',
    V_DROP,
    'A service packet from a multicast source (224.0.0.0/4): martian; never translated.',
  ),
  row(
    'DROP_MARTIAN_CLASS_E',
    V_DROP,
    'A service packet from the reserved 240.0.0.0/4 (class E): no host sends from it; never translated.',
  ),
  row(
    'DROP_MARTIAN_BROADCAST',
    V_DROP,
    'A service packet from 255.255.255.255: martian (ipv4_is_lbcast); never translated.',
  ),
  row(
    'DROP_MARTIAN_VIP_SOURCE',
    V_DROP,
    'A service packet whose source is a ClusterIP: no host owns a VIP, so it is spoofed; never translated.',
  ),
  row(
    'DROP_BAD_L4_CSUM',
    V_DROP,
    'The first packet of a would-be flow with a bad TCP/UDP checksum: conntrack INVALID (nf_conntrack_checksum=1, counted in ctInvalid); no flow is created.',
  ),
  row(
    'REPLY_TTL_EXCEEDED',
    V_REPLY,
    'TTL (IPv6: hop limit) <= 1 toward a service: ICMP time exceeded, quoting the packet as the client sent it (to the VIP), as the kernel does after its NAT; no flow is created.',
  ),
  row('DROP_TRUNCATED_IPV6', V_DROP, 'An IPv6 packet shorter than its 40-byte fixed header.'),
  row(
    'DROP_BAD_PAYLOAD_LEN',
    V_DROP,
    'IPv6 Payload Length 0 (a jumbogram, RFC 2675: never on a TUN here) or beyond the bytes read.',
  ),
  row(
    'DROP_BAD_EXT_HDR',
    V_DROP,
    'An IPv6 extension header cut short by the payload, or Hop-by-Hop not directly after the fixed header (RFC 8200 4.3).',
  ),
  row(
    'DROP_EXT_HDR_CHAIN',
    V_DROP,
    'More than 8 IPv6 extension headers before the upper layer: no real packet carries that many; the walk stays bounded.',
  ),
  row(
    'DROP_MARTIAN6_UNSPECIFIED',
    V_DROP,
    'A service packet from :: (the unspecified address, RFC 4291 2.5.2: never a source of a forwarded packet); never translated.',
  ),
  row(
    'DROP_MARTIAN6_LOOPBACK',
    V_DROP,
    'A service packet from ::1 arriving from outside (RFC 4291 2.5.3: never leaves a node); never translated.',
  ),
  row(
    'DROP_MARTIAN6_MULTICAST',
    V_DROP,
    'A service packet from a multicast source (ff00::/8, RFC 4291 2.7: never a source); never translated.',
  ),
  row(
    'PASS_ND_MLD',
    V_PASS,
    'ICMPv6 Neighbor Discovery (133-137) or MLD (130-132, 143): the link traffic of the node itself, never translated, passed as is.',
  ),
  row(
    'DROP_UDP6_ZERO_CSUM',
    V_DROP,
    'UDP over IPv6 with checksum 0: invalid (RFC 8200 8.1, the receiver discards it); a NAT rewrite would launder it.',
  ),
];

export const REASON_COUNT = REASONS.length;

export const REASON_NAMES: readonly string[] = REASONS.map((r) => r.name);

/** Verdict per reason, for the fast path (one typed-array load in dpProcess). */
export const REASON_VERDICT: Uint8Array = Uint8Array.from(REASONS, (r) => r.verdict);

export function reasonIsDrop(reason: number): boolean {
  return REASON_VERDICT[reason] === V_DROP;
}

/** Counters as a plain record for inspect/metrics (slow world). */
export function countersToRecord(counters: Float64Array): Record<string, number> {
  const out: Record<string, number> = {};
  for (let r = 0; r < REASON_COUNT; r++) out[REASON_NAMES[r]] = counters[r];
  return out;
}

// IP protocol numbers (IANA "Assigned Internet Protocol Numbers"; the IPv4 Protocol field, the
// IPv6 Next Header field) and their names, declared once for every layer: the datapath, the
// loader (a Service port's `protocol` → number), conntrack views, inspect and the lab.
//
// Two spellings of a name exist on purpose: Kubernetes writes a port's protocol in capitals
// ("TCP", "UDP", "SCTP": core/v1 Protocol), conntrack -L and tcpdump in lower case.

export const IPPROTO_ICMP = 1;
export const IPPROTO_TCP = 6;
export const IPPROTO_UDP = 17;
export const IPPROTO_ICMPV6 = 58;
export const IPPROTO_SCTP = 132;

/** Kubernetes' protocol names (core/v1 Protocol) → protocol number. */
export const PROTO_BY_K8S_NAME: Readonly<Record<string, number>> = {
  TCP: IPPROTO_TCP,
  UDP: IPPROTO_UDP,
  SCTP: IPPROTO_SCTP,
};

const NAMES: Readonly<Record<number, string>> = {
  [IPPROTO_ICMP]: 'ICMP',
  [IPPROTO_TCP]: 'TCP',
  [IPPROTO_UDP]: 'UDP',
  [IPPROTO_ICMPV6]: 'ICMPv6',
  [IPPROTO_SCTP]: 'SCTP',
};

/** Protocol number → its name in capitals, or the number as text for one not listed here. */
export function protoName(proto: number): string {
  return NAMES[proto] ?? String(proto);
}

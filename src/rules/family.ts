// The IP family a renderer writes for. kube-proxy runs one proxier per family, and each sees
// only its family's addresses (ClusterIP, external and LB IPs, endpoints, source ranges, node
// IPs, --nodeport-addresses); what differs in the output is here: the address text (an IPv6
// endpoint is "[ip]:port", as net.JoinHostPort writes it), the loopback range, and the nftables
// table family and address type (pkg/proxy/nftables: "ip"/"ipv4_addr" or "ip6"/"ipv6_addr").

import type { IPFamily } from '../model.ts';
import { canonIpv6, cidr6Contains, ipv6Groups, parseCidr6 } from '../wire/addr6.ts';
import { canonIpv4, cidr4Contains, parseCidr4Sloppy, parseIpv4Sloppy } from './ipv4.ts';

/** A CIDR of the renderer's family: its canonical text and a membership test on address text. */
export interface FamilyCidr {
  text: string;
  contains(ip: string): boolean;
}

export interface RulesFamily {
  name: IPFamily;
  /** canonical text of an address of this family (sloppy IPv4 as kube-proxy reads it), or null */
  canon(s: string): string | null;
  /** a CIDR of this family (host bits cleared, blanks trimmed), or null */
  cidr(s: string): FamilyCidr | null;
  /** "ip:port", "[ip]:port" for IPv6 */
  hostPort(ip: string, port: number): string;
  /** the loopback range, for localhost NodePort rules, and its one address kube-proxy checks */
  loopback: string;
  loopbackIP: string;
  isLoopback(ip: string): boolean;
  /** nftables table family and address type */
  nft: 'ip' | 'ip6';
  nftAddr: 'ipv4_addr' | 'ipv6_addr';
}

export const IPV4: RulesFamily = {
  name: 'IPv4',
  canon: canonIpv4,
  cidr(s) {
    const c = parseCidr4Sloppy(s);
    if (c === null) return null;
    return {
      text: c.text,
      contains: (ip) => {
        const v = parseIpv4Sloppy(ip);
        return v !== null && cidr4Contains(c, v);
      },
    };
  },
  hostPort: (ip, port) => `${ip}:${port}`,
  loopback: '127.0.0.0/8',
  loopbackIP: '127.0.0.1',
  isLoopback: (ip) => (parseIpv4Sloppy(ip) ?? 0) >>> 24 === 127,
  nft: 'ip',
  nftAddr: 'ipv4_addr',
};

export const IPV6: RulesFamily = {
  name: 'IPv6',
  canon: (s) => canonIpv6(s.trim()),
  cidr(s) {
    const c = parseCidr6(s.trim());
    if (c === null) return null;
    return {
      text: c.text,
      contains: (ip) => {
        const g = ipv6Groups(ip);
        return g !== null && cidr6Contains(c, g);
      },
    };
  },
  hostPort: (ip, port) => `[${ip}]:${port}`,
  loopback: '::1/128',
  loopbackIP: '::1',
  isLoopback: (ip) => canonIpv6(ip) === '::1',
  nft: 'ip6',
  nftAddr: 'ipv6_addr',
};

export function rulesFamily(f: IPFamily | undefined): RulesFamily {
  return f === 'IPv6' ? IPV6 : IPV4;
}

/**
 * kube-proxy's NodePortAddresses for one family: the CIDRs of --nodeport-addresses in that
 * family, or null for "every local address" (none of that family given, or one is 0.0.0.0/0
 * or ::/0).
 */
export function familyNodePortCidrs(
  fam: RulesFamily,
  addresses: readonly string[],
): FamilyCidr[] | null {
  const cidrs = addresses.map((a) => fam.cidr(a)).filter((c) => c !== null);
  return cidrs.length === 0 || cidrs.some((c) => c.text.endsWith('/0')) ? null : cidrs;
}

/** kube-proxy's nodeIP for this family's proxier: the first node IP of the family, or null. */
export function familyNodeIP(nodeIPs: readonly string[], fam: RulesFamily): string | null {
  for (const ip of nodeIPs) if (fam.canon(ip) !== null) return ip;
  return null;
}

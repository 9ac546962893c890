// Address syntax checks for the control plane. Strict like the API server since Kubernetes 1.33:
// no leading zeros ("010.0.0.1" is octal to some parsers and decimal to others), no IPv6 where
// kubetun needs IPv4 (the datapath is IPv4-only).
import { isIPv6 } from 'node:net';
import { cidrContains, ipv4ToU32, parseCidr, u32ToIpv4 } from '../wire/addr.ts';

const DOTTED_QUAD = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** Why `s` is not an IPv4 address, or null when it is one. */
export function ipv4Problem(s: string): string | null {
  const m = DOTTED_QUAD.exec(s);
  if (!m) {
    if (isIPv6(s)) return `"${s}" is an IPv6 address; kubetun is IPv4-only`;
    return `"${s}" is not a valid IPv4 address`;
  }
  for (let i = 1; i <= 4; i++) {
    const octet = m[i];
    if (octet.length > 1 && octet[0] === '0') {
      return `"${s}" is not a valid IPv4 address (leading zero in "${octet}")`;
    }
    if (Number(octet) > 255) return `"${s}" is not a valid IPv4 address (${octet} > 255)`;
  }
  return null;
}

/** Why `s` is not an IPv4 CIDR ("a.b.c.d/n"), or null when it is one. */
export function ipv4CidrProblem(s: string): string | null {
  const slash = s.indexOf('/');
  if (slash < 0) return `"${s}" is not a CIDR (missing "/prefix")`;
  const addr = ipv4Problem(s.slice(0, slash));
  if (addr) return `"${s}" is not a valid IPv4 CIDR: ${addr}`;
  const prefix = s.slice(slash + 1);
  if (!/^\d{1,2}$/.test(prefix) || Number(prefix) > 32) {
    return `"${s}" is not a valid IPv4 CIDR (prefix must be 0..32)`;
  }
  return null;
}

/** Why `s` is not an IPv6 address (for IPv6 EndpointSlices, which kubetun loads but skips). */
export function ipv6Problem(s: string): string | null {
  return isIPv6(s) && !s.includes('%') ? null : `"${s}" is not a valid IPv6 address`;
}

// ---- address rules shared by the manifests readers and the lab's admission --------------------

/**
 * The addresses a service CIDR hands out as ClusterIPs (the apiserver's ipallocator): all but
 * the network and the broadcast address; a /31 or /32 has none. `first` is a u32 address.
 */
export function serviceIPRange(serviceCidr: string): { first: number; size: number } {
  const c = parseCidr(serviceCidr);
  const size = 2 ** (32 - c.prefix);
  return { first: c.addr + 1, size: Math.max(0, size - 2) };
}

/** Why `ip` (valid IPv4 text) cannot be a ClusterIP of `serviceCidr`, or null. */
export function clusterIPRangeProblem(ip: string, serviceCidr: string): string | null {
  const { first, size } = serviceIPRange(serviceCidr);
  const n = ipv4ToU32(ip);
  if (n >= first && n < first + size) return null;
  const c = parseCidr(serviceCidr);
  const why =
    n === c.addr
      ? ' (the network address is never allocated)'
      : cidrContains(c, n)
        ? ' (the broadcast address is never allocated)'
        : '';
  return `provided IP is not in the valid range. The range of valid IPs is ${u32ToIpv4(c.addr)}/${c.prefix}${why}`;
}

/**
 * Why an IPv4 address cannot be an endpoint or an external IP (the apiserver's
 * ValidateEndpointIP: unspecified, loopback 127/8, link-local 169.254/16, link-local multicast
 * 224.0.0.0/24), or null. kubetun also refuses the rest of multicast 224/4 and 255.255.255.255,
 * which the apiserver lets through but no Service can forward to.
 */
export function endpointIPProblem(ip: string): string | null {
  const n = ipv4ToU32(ip);
  const a = n >>> 24;
  if (n === 0) return `"${ip}" may not be unspecified (0.0.0.0)`;
  if (a === 127) return `"${ip}" may not be in the loopback range (127.0.0.0/8)`;
  if (n >>> 16 === 0xa9fe) return `"${ip}" may not be in the link-local range (169.254.0.0/16)`;
  if (n >>> 8 === 0xe00000) {
    return `"${ip}" may not be in the link-local multicast range (224.0.0.0/24)`;
  }
  if (a >= 224 && a <= 239) return `"${ip}" may not be a multicast address (224.0.0.0/4)`;
  if (n === 0xffffffff) return `"${ip}" may not be the broadcast address (255.255.255.255)`;
  return null;
}

/** Whether valid IPv4 text `ip` lies in CIDR text `cidr`. */
export function ipInCidr(ip: string, cidr: string): boolean {
  return cidrContains(parseCidr(cidr), ipv4ToU32(ip));
}

// Address syntax checks for the control plane. Strict like the API server since Kubernetes 1.33:
// no leading zeros ("010.0.0.1" is octal to some parsers and decimal to others). Both families
// are accepted where the API accepts both; ipv4Problem is for the places that need IPv4.
import type { IPFamily } from '../model.ts';
import { cidrContains, type Cidr, ipv4ToU32, parseCidr, u32ToIpv4 } from '../wire/addr.ts';
import {
  type Cidr6,
  cidr6Contains,
  groupsToIpv6,
  ipv6Groups,
  ipv6Low32,
  parseCidr6,
} from '../wire/addr6.ts';

const DOTTED_QUAD = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** Why `s` is not an IPv4 address, or null when it is one. */
export function ipv4Problem(s: string): string | null {
  const m = DOTTED_QUAD.exec(s);
  if (!m) {
    if (ipv6Groups(s)) return `"${s}" is an IPv6 address; an IPv4 address is needed here`;
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

/** Why `s` is not an IPv6 address (zones such as "%eth0" refused), or null when it is one. */
export function ipv6Problem(s: string): string | null {
  return ipv6Groups(s) ? null : `"${s}" is not a valid IPv6 address`;
}

/** The family of address text `s` (strict, as ipv4Problem / ipv6Problem), or null. */
export function ipFamilyOf(s: string): IPFamily | null {
  if (ipv4Problem(s) === null) return 'IPv4';
  return ipv6Groups(s) ? 'IPv6' : null;
}

/** Why `s` is an address of neither family, or null. */
export function ipProblem(s: string): string | null {
  if (ipFamilyOf(s)) return null;
  return /^[0-9.]+$/.test(s) ? ipv4Problem(s) : `"${s}" is not a valid IP address`;
}

/** Why `s` is a CIDR of neither family ("a.b.c.d/n", "x::/n"), or null. */
export function cidrProblem(s: string): string | null {
  if (!s.includes(':')) return ipv4CidrProblem(s);
  if (!s.includes('/')) return `"${s}" is not a CIDR (missing "/prefix")`;
  return parseCidr6(s) ? null : `"${s}" is not a valid IPv6 CIDR (address, then prefix 0..128)`;
}

// ---- the service CIDRs (kube-apiserver --service-cluster-ip-range) ----------------------------

/** One service CIDR per configured family; the first one given is the primary family. */
export interface ServiceCidrs {
  primary: IPFamily;
  v4?: Cidr;
  v6?: Cidr6;
}

/**
 * Parse --service-cluster-ip-range text: one CIDR, or two of different families separated by a
 * comma (the apiserver's dual-stack form). IPv6 ranges must be /108 or longer and IPv4 ones /12
 * or longer, as kube-apiserver requires (its allocator bitmap holds at most 2^20 addresses).
 * Throws RangeError with a one-line reason.
 */
export function parseServiceCidrs(text: string): ServiceCidrs {
  const parts = text.split(',').map((p) => p.trim());
  if (parts.length > 2) throw new RangeError(`"${text}": at most two CIDRs, one per IP family`);
  const out: Partial<ServiceCidrs> = {};
  for (const p of parts) {
    const bad = cidrProblem(p);
    if (bad) throw new RangeError(bad);
    const fam: IPFamily = p.includes(':') ? 'IPv6' : 'IPv4';
    if ((fam === 'IPv4' && out.v4) || (fam === 'IPv6' && out.v6)) {
      throw new RangeError(`"${text}": two ${fam} CIDRs (give at most one per family)`);
    }
    out.primary ??= fam;
    if (fam === 'IPv4') {
      out.v4 = parseCidr(p);
      if (out.v4.prefix < 12) throw new RangeError(`"${p}" is too large: the mask must be >= 12`);
    } else {
      out.v6 = parseCidr6(p) ?? undefined;
      if (out.v6 && out.v6.prefix < 108) {
        throw new RangeError(`"${p}" is too large: for 128-bit addresses the mask must be >= 108`);
      }
    }
  }
  return out as ServiceCidrs;
}

/** The families a set of service CIDRs configures, primary first. */
export function serviceFamilies(c: ServiceCidrs): IPFamily[] {
  const all: IPFamily[] = [];
  if (c.v4) all.push('IPv4');
  if (c.v6) all.push('IPv6');
  return c.primary === 'IPv6' ? all.reverse() : all;
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

/**
 * Why `ip` (valid IPv4 or IPv6 text) cannot be a ClusterIP of the service CIDRs, or null. The
 * IPv6 allocator skips the network address only: IPv6 has no broadcast address.
 */
export function clusterIPRangeProblem(ip: string, cidrs: ServiceCidrs | string): string | null {
  const c = typeof cidrs === 'string' ? parseServiceCidrs(cidrs) : cidrs;
  if (ip.includes(':')) {
    if (!c.v6) return 'IPv6 is not configured on this cluster';
    const g = ipv6Groups(ip) ?? [];
    const range = `The range of valid IPs is ${c.v6.text}`;
    if (!cidr6Contains(c.v6, g)) return `provided IP is not in the valid range. ${range}`;
    if (ipv6Low32(g) === ipv6Low32(c.v6.groups)) {
      return `provided IP is not in the valid range. ${range} (the network address is never allocated)`;
    }
    return null;
  }
  if (!c.v4) return 'IPv4 is not configured on this cluster';
  return clusterIPv4RangeProblem(ip, `${u32ToIpv4(c.v4.addr)}/${c.v4.prefix}`);
}

function clusterIPv4RangeProblem(ip: string, serviceCidr: string): string | null {
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

/**
 * Why an IPv6 address cannot be an endpoint or an external IP, or null: the apiserver's
 * ValidateEndpointIP for IPv6 (unspecified ::, loopback ::1, link-local fe80::/10, link-local
 * multicast ff02::/16), and, as for IPv4, kubetun refuses the rest of multicast ff00::/8.
 */
export function endpointIPv6Problem(ip: string): string | null {
  const g = ipv6Groups(ip);
  if (!g) return `"${ip}" is not a valid IPv6 address`;
  const canon = groupsToIpv6(g);
  if (canon === '::') return `"${ip}" may not be unspecified (::)`;
  if (canon === '::1') return `"${ip}" may not be in the loopback range (::1/128)`;
  if ((g[0] & 0xffc0) === 0xfe80) return `"${ip}" may not be in the link-local range (fe80::/10)`;
  if ((g[0] & 0xff0f) === 0xff02) {
    return `"${ip}" may not be in the link-local multicast range (ff02::/16)`;
  }
  if (g[0] >>> 8 === 0xff) return `"${ip}" may not be a multicast address (ff00::/8)`;
  return null;
}

/** endpointIPProblem or endpointIPv6Problem, by the family of valid address text `ip`. */
export function anyEndpointIPProblem(ip: string): string | null {
  return ip.includes(':') ? endpointIPv6Problem(ip) : endpointIPProblem(ip);
}

/** Whether valid address text `ip` lies in CIDR text `cidr` (false across families). */
export function ipInCidr(ip: string, cidr: string): boolean {
  const v6 = ip.includes(':');
  if (v6 !== cidr.includes(':')) return false;
  if (!v6) return cidrContains(parseCidr(cidr), ipv4ToU32(ip));
  const c = parseCidr6(cidr);
  const g = ipv6Groups(ip);
  return c !== null && g !== null && cidr6Contains(c, g);
}

/** Whether valid address text `ip` lies in any CIDR of the service CIDRs. */
export function ipInServiceCidrs(ip: string, c: ServiceCidrs): boolean {
  if (!ip.includes(':')) return c.v4 !== undefined && cidrContains(c.v4, ipv4ToU32(ip));
  const g = ipv6Groups(ip);
  return c.v6 !== undefined && g !== null && cidr6Contains(c.v6, g);
}

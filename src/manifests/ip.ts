// Address syntax checks for the control plane. Strict like the API server since Kubernetes 1.33:
// no leading zeros ("010.0.0.1" is octal to some parsers and decimal to others), no IPv6 where
// kubetun needs IPv4 (the datapath is IPv4-only).
import { isIPv6 } from 'node:net';

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

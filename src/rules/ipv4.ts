// Address handling for the renderer. kube-proxy reads Service and EndpointSlice addresses with
// netutils.ParseIPSloppy / ParseCIDRSloppy (leading zeros are decimal: "172.30.0.041" is
// 172.30.0.41) and prints them back in canonical form, CIDRs masked to their network
// ("203.0.113.000/025" -> "203.0.113.0/25"). The manifest loader already rejects such
// spellings; the renderer still canonicalizes so model objects from any source print the same.

const QUAD = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/;

/** Parse an IPv4 address sloppily; null if it is not one (IPv6 included). */
export function parseIpv4Sloppy(s: string): number | null {
  const m = QUAD.exec(s.trim());
  if (!m) return null;
  let v = 0;
  for (let i = 1; i <= 4; i++) {
    const octet = Number.parseInt(m[i], 10);
    if (octet > 255) return null;
    v = v * 256 + octet;
  }
  return v >>> 0;
}

export function u32ToDotted(n: number): string {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

/** Canonical dotted quad, or null when `s` is not IPv4. */
export function canonIpv4(s: string): string | null {
  const v = parseIpv4Sloppy(s);
  return v === null ? null : u32ToDotted(v);
}

export interface Cidr4 {
  addr: number;
  prefix: number;
  /** canonical "a.b.c.d/n" with host bits cleared */
  text: string;
}

export function prefixMask(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

/** Parse "a.b.c.d/n" sloppily (surrounding whitespace ignored); null if not an IPv4 CIDR. */
export function parseCidr4Sloppy(s: string): Cidr4 | null {
  const t = s.trim();
  const slash = t.indexOf('/');
  if (slash < 0) return null;
  const addr = parseIpv4Sloppy(t.slice(0, slash));
  const prefixText = t.slice(slash + 1);
  if (addr === null || !/^\d+$/.test(prefixText)) return null;
  const prefix = Number.parseInt(prefixText, 10);
  if (prefix > 32) return null;
  const net = (addr & prefixMask(prefix)) >>> 0;
  return { addr: net, prefix, text: `${u32ToDotted(net)}/${prefix}` };
}

export function cidr4Contains(c: Cidr4, addr: number): boolean {
  return (addr & prefixMask(c.prefix)) >>> 0 === c.addr;
}

/**
 * kube-proxy's NodePortAddresses for the IPv4 proxier: the IPv4 CIDRs of --nodeport-addresses,
 * or null for "every local address" (no IPv4 CIDR given, or one of them is 0.0.0.0/0).
 */
export function nodePortCidrs(addresses: readonly string[]): Cidr4[] | null {
  const cidrs = addresses.map(parseCidr4Sloppy).filter((c) => c !== null);
  return cidrs.length === 0 || cidrs.some((c) => c.prefix === 0) ? null : cidrs;
}

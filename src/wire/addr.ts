// IPv4 addresses as 32-bit numbers: the big-endian bytes read as one number. The slow world
// (control plane, tests, logs) uses the unsigned form (`>>> 0`, ipv4ToU32); the fast path
// (wire getters, map columns, the datapath) the signed int32 one (`| 0`), which V8 never boxes.
// Both name the same address: everything here accepts either.

const OCTET = /^(0|[1-9][0-9]{0,2})$/;

/**
 * Parse dotted-quad text ("10.96.0.10"). Throws Error on anything else: missing or extra
 * octets, values above 255, signs, spaces, and leading zeros (which some parsers, like
 * inet_aton, read as octal — refusing them avoids two tools disagreeing about one address).
 */
export function ipv4ToU32(s: string): number {
  const n = dottedQuad(s);
  return n >= 0 ? n : ipv4ToU32Checked(s);
}

/**
 * ipv4ToU32's fast path (a loader parses every endpoint of 10k services): the address, or -1
 * for anything it does not accept at a glance, which ipv4ToU32Checked then parses or refuses
 * with its reason. It accepts only what the regex does (no leading zero, four octets <= 255).
 */
function dottedQuad(s: string): number {
  const len = s.length;
  if (len < 7 || len > 15) return -1;
  let n = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i < len; i++) {
    const c = s.charCodeAt(i);
    if (c === 46) {
      if (digits === 0 || dots === 3) return -1;
      n = n * 256 + octet;
      octet = 0;
      digits = 0;
      dots++;
    } else if (c >= 48 && c <= 57) {
      if (digits === 3 || (digits === 1 && octet === 0)) return -1; // 4 digits, a leading zero
      octet = octet * 10 + (c - 48);
      if (octet > 255) return -1;
      digits++;
    } else return -1;
  }
  if (dots !== 3 || digits === 0) return -1;
  return (n * 256 + octet) >>> 0;
}

/** The rule itself, and every refusal's message. */
function ipv4ToU32Checked(s: string): number {
  const parts = s.split('.');
  if (parts.length !== 4) throw new Error(`invalid IPv4 address ${JSON.stringify(s)}`);
  let n = 0;
  for (const p of parts) {
    if (!OCTET.test(p)) throw new Error(`invalid IPv4 address ${JSON.stringify(s)}`);
    const v = Number(p);
    if (v > 255) throw new Error(`invalid IPv4 address ${JSON.stringify(s)}: octet ${p} > 255`);
    n = n * 256 + v;
  }
  return n >>> 0;
}

/** Dotted quad of an address in either form (u32 or the fast path's int32). */
export function u32ToIpv4(n: number): string {
  n >>>= 0;
  return `${n >>> 24}.${(n >>> 16) & 0xff}.${(n >>> 8) & 0xff}.${n & 0xff}`;
}

export interface Cidr {
  /** network address, host bits cleared */
  addr: number;
  prefix: number;
  mask: number;
}

/** Mask of a prefix length 0..32 as an unsigned 32-bit number. */
export function prefixMask(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

/**
 * Parse "a.b.c.d/p". Host bits are cleared (like Go's net.ParseCIDR), so "10.96.0.10/12"
 * yields 10.96.0.0/12. Throws Error on bad text or a prefix outside 0..32.
 */
export function parseCidr(s: string): Cidr {
  const slash = s.indexOf('/');
  if (slash < 0) throw new Error(`invalid CIDR ${JSON.stringify(s)}: missing /prefix`);
  const pfx = s.slice(slash + 1);
  if (!/^(0|[1-9][0-9]?)$/.test(pfx) || Number(pfx) > 32) {
    throw new Error(`invalid CIDR ${JSON.stringify(s)}: prefix must be 0..32`);
  }
  const prefix = Number(pfx);
  const mask = prefixMask(prefix);
  return { addr: (ipv4ToU32(s.slice(0, slash)) & mask) >>> 0, prefix, mask };
}

/** Whether `addr` (u32 or int32) is inside c. */
export function cidrContains(c: Cidr, addr: number): boolean {
  return (addr & c.mask) >>> 0 === c.addr;
}

export function cidrToString(c: Cidr): string {
  return `${u32ToIpv4(c.addr)}/${c.prefix}`;
}

// IPv6 addresses as text and as eight 16-bit groups, for the slow world (control plane, rules
// renderer, tests). The datapath reads addresses from packet bytes as four 32-bit words and
// never goes through text; this file is where text comes in and goes out.
//
// Text out is RFC 5952's canonical form (what Go's net.IP.String() and `ip -6` print):
// lowercase, no leading zeros in a group, the longest run of two or more zero groups (the
// first one on a tie) replaced by "::", and "::ffff:a.b.c.d" for IPv4-mapped addresses.

const HEXGROUP = /^[0-9a-fA-F]{1,4}$/;
const QUAD = /^(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})$/;

/** Eight groups of `s`, or null when it is not IPv6 text (zones "%eth0" are refused too). */
export function ipv6Groups(s: string): number[] | null {
  if (s.length < 2 || s.length > 45 || s.includes('%')) return null;
  const halves = s.split('::');
  if (halves.length > 2) return null;
  const parse = (part: string, allowQuad: boolean): number[] | null => {
    if (part === '') return [];
    const out: number[] = [];
    const items = part.split(':');
    for (let i = 0; i < items.length; i++) {
      const it = items[i];
      if (allowQuad && i === items.length - 1 && it.includes('.')) {
        const m = QUAD.exec(it);
        if (!m) return null;
        const b = [m[1], m[2], m[3], m[4]].map(Number);
        if (b.some((x) => x > 255)) return null;
        out.push((b[0] << 8) | b[1], (b[2] << 8) | b[3]);
      } else if (HEXGROUP.test(it)) out.push(Number.parseInt(it, 16));
      else return null;
    }
    return out;
  };
  if (halves.length === 1) {
    const g = parse(s, true);
    return g && g.length === 8 ? g : null;
  }
  const head = parse(halves[0], false);
  const tail = parse(halves[1], true);
  if (!head || !tail || head.length + tail.length > 7) return null;
  return [...head, ...new Array(8 - head.length - tail.length).fill(0), ...tail];
}

/** RFC 5952 text of eight groups. */
export function groupsToIpv6(g: readonly number[]): string {
  if (g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0xffff) {
    return `::ffff:${g[6] >>> 8}.${g[6] & 255}.${g[7] >>> 8}.${g[7] & 255}`;
  }
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (a: readonly number[]) => a.map((x) => x.toString(16)).join(':');
  if (best < 0) return hex(g);
  return `${hex(g.slice(0, best))}::${hex(g.slice(best + bestLen))}`;
}

/** Canonical text of IPv6 text `s`, or null when it is not IPv6. */
export function canonIpv6(s: string): string | null {
  const g = ipv6Groups(s);
  return g ? groupsToIpv6(g) : null;
}

export interface Cidr6 {
  /** network address's groups, host bits cleared */
  groups: number[];
  prefix: number;
  /** canonical "addr/prefix" */
  text: string;
}

/** Parse "addr/prefix" (0..128), host bits cleared as Go's net.ParseCIDR does; null if not. */
export function parseCidr6(s: string): Cidr6 | null {
  const slash = s.indexOf('/');
  if (slash < 0) return null;
  const g = ipv6Groups(s.slice(0, slash));
  const p = s.slice(slash + 1);
  if (!g || !/^(0|[1-9][0-9]{0,2})$/.test(p) || Number(p) > 128) return null;
  const prefix = Number(p);
  const groups = g.map((x, i) => x & groupMask(prefix, i));
  return { groups, prefix, text: `${groupsToIpv6(groups)}/${prefix}` };
}

function groupMask(prefix: number, i: number): number {
  const bits = Math.max(0, Math.min(16, prefix - 16 * i));
  return bits === 0 ? 0 : (0xffff << (16 - bits)) & 0xffff;
}

/** Whether the address with groups `g` lies in `c`. */
export function cidr6Contains(c: Cidr6, g: readonly number[]): boolean {
  for (let i = 0; i < 8; i++) if ((g[i] & groupMask(c.prefix, i)) !== c.groups[i]) return false;
  return true;
}

/** The low 32 bits of an address (its offset within a /96 or longer prefix). */
export function ipv6Low32(g: readonly number[]): number {
  return ((g[6] << 16) | g[7]) >>> 0;
}

// ---- the fast path's form: four int32 words, most significant first -------------------------

/**
 * An IPv6 address as the datapath and its maps hold it: four int32 words (`| 0`), most
 * significant first. Throws Error naming the text when it is not an IPv6 address.
 */
export function ipv6ToWords(s: string): Int32Array {
  const g = ipv6Groups(s);
  if (!g) throw new Error(`invalid IPv6 address ${JSON.stringify(s)}`);
  return groupsToWords(g);
}

function groupsToWords(g: readonly number[]): Int32Array {
  const w = new Int32Array(4);
  for (let k = 0; k < 4; k++) w[k] = (g[2 * k] << 16) | g[2 * k + 1];
  return w;
}

/** RFC 5952 text of the four words a[at..at+4) (int32 or u32 words). */
export function wordsToIpv6(a: ArrayLike<number>, at = 0): string {
  const g: number[] = [];
  for (let k = 0; k < 4; k++) g.push((a[at + k] >>> 16) & 0xffff, a[at + k] & 0xffff);
  return groupsToIpv6(g);
}

/** A CIDR as the fast path compares it: (addr[k] & mask[k]) === net[k] for k = 0..3. */
export interface Cidr6Words {
  net: Int32Array;
  mask: Int32Array;
  prefix: number;
}

/** Parse "addr/prefix" into words (host bits cleared). Throws Error naming the text. */
export function parseCidr6Words(s: string): Cidr6Words {
  const c = parseCidr6(s);
  if (!c) throw new Error(`invalid IPv6 CIDR ${JSON.stringify(s)}`);
  const mask = new Int32Array(4);
  for (let k = 0; k < 4; k++) {
    const bits = Math.max(0, Math.min(32, c.prefix - 32 * k));
    mask[k] = bits === 0 ? 0 : bits === 32 ? -1 : -1 << (32 - bits);
  }
  return { net: groupsToWords(c.groups), mask, prefix: c.prefix };
}

// sh and dh: net/netfilter/ipvs/ip_vs_sh.c and ip_vs_dh.c. A 256-bucket table maps a hash of
// the client's source address (sh) or the packet's destination address (dh) to a candidate.
//
// Bucket fill (control plane), as the kernel's *_reassign walks its destination list:
//   sh: each candidate takes `weight` consecutive buckets, cycling through the list until all
//       256 are taken; a weight-0 candidate still takes one bucket per cycle (the kernel's
//       `++d_count >= weight` is true at once) and that bucket then finds no one.
//   dh: one bucket per candidate per cycle; the kernel's dh ignores weights when filling.
//
// Bucket of an address (host-order u32, as ntohl gives):
//   current kernels: hash_32(addr + port, 8) = top 8 bits of (addr + port) * 0x61C88647
//   SH_F_LEGACY_HASH, older kernels' ip_vs_sh_hashkey: (addr + port) * 2654435761 & 255.
//     Only the low 8 bits of the address reach the low 8 bits of that product, so the bucket
//     is a function of the last octet alone; it is here for parity with old kernels.
// port is the client's source port when SH_F_PORT is set (IP_VS_SVC_F_SCHED_SH_PORT, TCP/UDP/
// SCTP only), else 0. The `offset` term is only non-zero in the fallback walk.
//
// Pick: the bucket's candidate unless its weight is 0; with SH_F_FALLBACK (IP_VS_SVC_F_SCHED_
// SH_FALLBACK) the kernel then walks hashkey(addr, port, (ihash + k) & 255), k = 0..255, and
// takes the first candidate with weight > 0 (it adds ihash twice; kept, as it changes which
// bucket is tried first). O(1) per pick without fallback, no allocation.

import { IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from '../wire/proto.ts';

export const SH_TAB_BITS = 8;
export const SH_TAB_SIZE = 1 << SH_TAB_BITS;
const SH_TAB_MASK = SH_TAB_SIZE - 1;

/** Hash the source port too (ipvsadm --sched-flags sh-port). */
export const SH_F_PORT = 1;
/** Look for another bucket when the hashed candidate has weight 0 (sh-fallback). */
export const SH_F_FALLBACK = 2;
/** The pre-hash_32 kernel formula, (addr + port) * 2654435761 & 255. */
export const SH_F_LEGACY_HASH = 4;

const KNUTH = 2654435761 | 0;

/** ip_vs_sh_hashkey(addr, port, offset) for the given flags. */
export function shHashKey(addr: number, port: number, offset: number, flags: number): number {
  const v = (addr + port) | 0;
  const h = flags & SH_F_LEGACY_HASH ? Math.imul(v, KNUTH) : Math.imul(v, 0x61c88647) >>> 24;
  return (offset + h) & SH_TAB_MASK;
}

/** ip_vs_dh_hashkey: hash_32(addr, 8) (or the legacy product). */
export function dhHashKey(addr: number, flags: number): number {
  return shHashKey(addr, 0, 0, flags & SH_F_LEGACY_HASH);
}

/** ip_vs_sh_reassign: 256 candidate indices (control plane). Empty table when n = 0. */
export function shBuild(weights: Int32Array, n: number): Uint16Array {
  if (n === 0) return new Uint16Array(0);
  const t = new Uint16Array(SH_TAB_SIZE);
  let p = 0;
  let count = 0;
  for (let b = 0; b < SH_TAB_SIZE; b++) {
    t[b] = p;
    if (++count >= weights[p]) {
      p = p + 1 === n ? 0 : p + 1;
      count = 0;
    }
  }
  return t;
}

/** ip_vs_dh_reassign: candidates in turn, one bucket each, weights ignored. */
export function dhBuild(n: number): Uint16Array {
  if (n === 0) return new Uint16Array(0);
  const t = new Uint16Array(SH_TAB_SIZE);
  for (let b = 0; b < SH_TAB_SIZE; b++) t[b] = b % n;
  return t;
}

function portOf(proto: number, sport: number, flags: number): number {
  if (!(flags & SH_F_PORT)) return 0;
  return proto === IPPROTO_TCP || proto === IPPROTO_UDP || proto === IPPROTO_SCTP ? sport : 0;
}

/** ip_vs_sh_schedule: candidate index for the client (saddr, sport), or -1. */
export function shPick(
  table: Uint16Array,
  weights: Int32Array,
  saddr: number,
  sport: number,
  proto: number,
  flags: number,
): number {
  if (table.length === 0) return -1;
  const port = portOf(proto, sport, flags);
  const ihash = shHashKey(saddr, port, 0, flags);
  const d = table[ihash];
  if (weights[d] > 0) return d;
  if (!(flags & SH_F_FALLBACK)) return -1;
  for (let off = 0; off < SH_TAB_SIZE; off++) {
    const c = table[shHashKey(saddr, port, (off + ihash) & SH_TAB_MASK, flags)];
    if (weights[c] > 0) return c;
  }
  return -1;
}

/** ip_vs_dh_schedule: candidate index for the destination address, or -1. */
export function dhPick(
  table: Uint16Array,
  weights: Int32Array,
  daddr: number,
  flags: number,
): number {
  if (table.length === 0) return -1;
  const d = table[dhHashKey(daddr, flags)];
  return weights[d] > 0 ? d : -1;
}

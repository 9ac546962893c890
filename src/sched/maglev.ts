// Maglev consistent hashing (Eisenbud et al., NSDI 2016 §3.4) as Cilium builds it
// (pkg/maglev/maglev.go), so a table here is the table Cilium computes for the same backends.
//
// Build (control plane, allocates):
//   - Backends are ordered by name, Cilium's hash string "[10.0.0.1:8080/TCP,State:active]",
//     so every node builds the same table whatever order the endpoints arrived in.
//   - Per backend: (h1, h2) = MurmurHash3_x64_128(name, seed.murmur);
//     offset = h1 % M, skip = h2 % (M - 1) + 1, preference list perm[j] = (offset + j*skip) % M
//     (a permutation of 0..M-1 because M is prime).
//   - Turns: for slot n = 0..M-1 the turn is backend n % N, which claims its next preferred
//     slot not yet taken. Weights skip turns: backend i passes while (n+1)*w_i < cntr_i, where
//     cntr_i starts at w_i/N and grows by sum(w) at each claim (Cilium's scheme, from Envoy).
//     Cilium applies it only when sum(w)/N > 1 (integer division: weights 1 and 2 would be
//     ignored); here it applies whenever the weights differ. With equal weights both are the
//     plain round of turns, and each backend gets floor(M/N) or ceil(M/N) slots.
//   - Weight-0 backends get no turns (as IPVS mh); they are not in the table.
//
// Lookup (per packet): table[jhash_3words(saddr, dport << 16 | sport, proto, seed.jhash0) % M],
// Cilium's hash_from_tuple_v4 with the fields as a little-endian node loads them. The VIP is
// not hashed (Cilium's choice: a client keeps its backend across the VIPs of one service).
// O(1), no allocation.

import { bswap16, bswap32, jhash3, jhashTupleV6, murmur3x64_128 } from './hash.ts';
import { IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP, protoName } from '../wire/proto.ts';

export const MAGLEV_DEFAULT_M = 16381;
/** Cilium's DefaultHashSeed: 12 bytes, base64. */
export const MAGLEV_DEFAULT_SEED = 'JLfvgnHc2kaSUFaI';
/** Table sizes Cilium accepts (--bpf-lb-maglev-table-size). */
export const MAGLEV_PRIMES: readonly number[] = [
  251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071,
];

const EMPTY = 0xffff;

export interface MaglevSeed {
  /** murmur3 seed for offset/skip (bytes 0..3, big-endian) */
  murmur: number;
  /** jhash seed of the flow hash (bytes 4..7) */
  jhash0: number;
  /** bytes 8..11; Cilium's IPv6 address seed, unused for IPv4 */
  jhash1: number;
}

/** Decode a Cilium-style seed (base64 of 12 bytes). Throws naming the problem. */
export function maglevSeed(b64: string): MaglevSeed {
  const d = Buffer.from(b64, 'base64');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64) || d.length !== 12) {
    throw new Error(`maglev hash seed ${JSON.stringify(b64)}: expected base64 of 12 bytes`);
  }
  return { murmur: d.readUInt32BE(0), jhash0: d.readUInt32BE(4), jhash1: d.readUInt32BE(8) };
}

// Cilium names the L4 protocol of ported backends; anything else is ANY
const PORTED = new Set([IPPROTO_TCP, IPPROTO_UDP, IPPROTO_SCTP]);

/**
 * The hash string of an IPv6 backend: the IPv4 one's format with Cilium's IPv6 L3n4Addr
 * notation, the address in brackets ("[[fd00::7]:8080/TCP,State:active]"), from its RFC 5952
 * text. By analogy with the IPv4 string; not checked against a Cilium node's table.
 */
export function maglevBackendName6(addrText: string, port: number, proto: number): string {
  return `[[${addrText}]:${port}/${PORTED.has(proto) ? protoName(proto) : 'ANY'},State:active]`;
}

/** Cilium's BackendInfo hash string for an IPv4 backend (cluster scope, external). */
export function maglevBackendName(addr: number, port: number, proto: number): string {
  const a = `${addr >>> 24}.${(addr >>> 16) & 255}.${(addr >>> 8) & 255}.${addr & 255}`;
  return `[${a}:${port}/${PORTED.has(proto) ? protoName(proto) : 'ANY'},State:active]`;
}

export function isPrime(m: number): boolean {
  if (!Number.isInteger(m) || m < 2) return false;
  for (let d = 2; d * d <= m; d++) if (m % d === 0) return false;
  return true;
}

/** Offset and skip of one backend name. */
export function maglevOffsetSkip(name: string, m: number, seed: MaglevSeed): [number, number] {
  const [h1, h2] = murmur3x64_128(new TextEncoder().encode(name), seed.murmur);
  return [Number(h1 % BigInt(m)), Number(h2 % BigInt(m - 1)) + 1];
}

/**
 * The lookup table: M candidate indices (positions in `names`/`weights`). Empty (length 0)
 * when no candidate has a positive weight. Throws on a bad M or duplicate names.
 */
export function maglevBuild(
  names: readonly string[],
  weights: Int32Array,
  n: number,
  m: number,
  seed: MaglevSeed,
): Uint16Array {
  if (!isPrime(m) || m < 3) throw new Error(`maglev table size ${m}: must be a prime >= 3`);
  if (n >= EMPTY) throw new Error(`maglev: ${n} backends, at most ${EMPTY - 1}`);
  const order: number[] = [];
  for (let i = 0; i < n; i++) if (weights[i] > 0) order.push(i);
  if (order.length === 0) return new Uint16Array(0);
  if (order.length > m) throw new Error(`maglev: ${order.length} backends > table size ${m}`);
  order.sort((a, b) => (names[a] < names[b] ? -1 : names[a] > names[b] ? 1 : 0));
  for (let k = 1; k < order.length; k++) {
    if (names[order[k]] === names[order[k - 1]]) {
      throw new Error(`maglev: backend name ${names[order[k]]} appears twice`);
    }
  }
  return fillTable(order, weights, m, seed, names);
}

function fillTable(
  order: number[],
  weights: Int32Array,
  m: number,
  seed: MaglevSeed,
  names: readonly string[],
): Uint16Array {
  const l = order.length;
  const pos = new Float64Array(l); // perm[next[i]]: the next preferred slot of backend i
  const skip = new Float64Array(l);
  const w = new Float64Array(l);
  const cntr = new Float64Array(l);
  let wsum = 0;
  for (let i = 0; i < l; i++) {
    [pos[i], skip[i]] = maglevOffsetSkip(names[order[i]], m, seed);
    w[i] = weights[order[i]];
    wsum += w[i];
    cntr[i] = w[i] / l;
  }
  let weighted = false;
  for (let i = 1; i < l; i++) if (w[i] !== w[0]) weighted = true;
  const table = new Uint16Array(m).fill(EMPTY);
  for (let n = 0; n < m; n++) {
    let i = n % l;
    if (weighted) {
      // Pass the turn on while this backend is ahead of its share. Bounded: Cilium's loop has
      // no bound; 2l passes without a taker cannot happen with positive weights.
      for (let k = 0; k < 2 * l && (n + 1) * w[i] < Math.trunc(cntr[i]); k++) i = (i + 1) % l;
      cntr[i] += wsum;
    }
    let c = pos[i];
    while (table[c] !== EMPTY) c = (c + skip[i]) % m;
    table[c] = order[i];
    pos[i] = (c + skip[i]) % m;
  }
  return table;
}

/** Candidate index for the flow, or -1 for an empty table. */
export function maglevPick(
  table: Uint16Array,
  saddr: number,
  sport: number,
  dport: number,
  proto: number,
  jhashSeed: number,
): number {
  const m = table.length;
  if (m === 0) return -1;
  const ports = ((bswap16(dport) << 16) | bswap16(sport)) >>> 0;
  return table[jhash3(bswap32(saddr), ports, proto, jhashSeed) % m];
}

/**
 * Candidate index for an IPv6 flow (source a[at..at+4)), or -1 for an empty table: Cilium's
 * hash_from_tuple_v6 with HASH_INIT6_SEED (`seed`, the seed's bytes 8..11).
 */
export function maglevPick6(
  table: Uint16Array,
  a: Int32Array,
  at: number,
  sport: number,
  dport: number,
  proto: number,
  seed: number,
): number {
  const m = table.length;
  if (m === 0) return -1;
  const ports = (bswap16(dport) << 16) | bswap16(sport);
  const w0 = bswap32(a[at]) | 0;
  const w1 = bswap32(a[at + 1]) | 0;
  const w2 = bswap32(a[at + 2]) | 0;
  const w3 = bswap32(a[at + 3]) | 0;
  return table[jhashTupleV6(w0, w1, w2, w3, ports, proto, seed) % m];
}

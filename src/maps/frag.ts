// IP fragment tracking: which translation the later fragments of a datagram get.
//
// Only the first fragment of a fragmented datagram carries the TCP/UDP ports, so only it can be
// matched to a conntrack flow. The datapath remembers, per datagram, the address rewrite the
// first fragment got, keyed by what identifies the datagram on the wire (RFC 791: source,
// destination, identification, protocol), and applies it to the later fragments.
//
//   key   saddr i32 | daddr i32 | id << 8 | proto u32        (the fragments as received)
//   value newSrc i32 | newDst i32 (the first fragment's addresses after all translation)
//         expires u32 (seconds)
//
// Set-associative, 4 ways per bucket, over typed arrays: a lookup reads at most 4 entries, an
// insert takes the same key's way, else an empty/expired way, else evicts the way that expires
// first (counted in `evictions`). Nothing to collect: entries simply expire (30 s, the kernel's
// ipfrag_time). No allocation, no throw after construction.
//
// IPv6 (`new FragMap(n, true)`): the datagram is (source, destination, Fragment Identification)
// — RFC 8200 4.5: "the original packet is reassembled only from fragment packets that have the
// same Source Address, Destination Address, and Fragment Identification" — so the key word is
// the full 32-bit identification (no protocol), the addresses and the remembered new addresses
// four int32 words each (48 B + 8 per entry). The `…6` methods take addresses as four words of
// an Int32Array at an offset.

import {
  ADDR6_WORDS,
  addr6Eq,
  addr6Put,
  hash4,
  hashAddr6,
  hashEnd,
  hashStep,
  roundCapacity,
} from './hashtab.ts';

/** the kernel's net.ipv4.ipfrag_time (net.ipv6.ip6frag_time is 60; the shorter one here) */
export const FRAG_TIMEOUT = 30;

const WAYS = 4;
const SEED = 0x66726167; // 'frag'

export class FragMap {
  readonly capacity: number;
  /** addresses are IPv6 (four words each): use the `…6` methods */
  readonly ipv6: boolean;
  /** live entries overwritten because their bucket was full */
  evictions = 0;
  private readonly mask: number;
  private readonly saddrs: Int32Array;
  private readonly daddrs: Int32Array;
  private readonly idProto: Int32Array;
  private readonly srcs: Int32Array;
  private readonly dsts: Int32Array;
  private readonly expiry: Uint32Array;
  /**
   * 1: the first fragment's TTL / hop limit was given back (nat.ts natRestoreTtl), so is every
   * later one's. Set by the caller on the entry insert returns.
   */
  readonly ttlRestored: Uint8Array;

  constructor(capacity: number, ipv6 = false) {
    const cap = Math.max(roundCapacity(capacity, 'FragMap'), WAYS);
    const words = ipv6 ? ADDR6_WORDS : 1;
    this.ipv6 = ipv6;
    this.capacity = cap;
    this.mask = cap / WAYS - 1;
    this.saddrs = new Int32Array(cap * words);
    this.daddrs = new Int32Array(cap * words);
    this.idProto = new Int32Array(cap);
    this.srcs = new Int32Array(cap * words);
    this.dsts = new Int32Array(cap * words);
    this.expiry = new Uint32Array(cap);
    this.ttlRestored = new Uint8Array(cap);
  }

  private bucket6(a: Int32Array, sAt: number, dAt: number, id: number): number {
    const h = hashStep(hashAddr6(hashAddr6(SEED, a, sAt), a, dAt), id);
    return (hashEnd(h, 9) & this.mask) * WAYS;
  }

  /** IPv6: entry of the datagram (a[sAt], a[dAt], id) live at `now`, or -1. */
  lookup6(a: Int32Array, sAt: number, dAt: number, id: number, now: number): number {
    id |= 0; // int32 on the fast path: a u32 identification >= 2^31 would be a heap number
    const b = this.bucket6(a, sAt, dAt, id);
    for (let w = b; w < b + WAYS; w++) {
      if (
        this.expiry[w] > now &&
        this.idProto[w] === id &&
        addr6Eq(this.saddrs, w, a, sAt) &&
        addr6Eq(this.daddrs, w, a, dAt)
      ) {
        return w;
      }
    }
    return -1;
  }

  /**
   * IPv6: remember (or refresh) the datagram (a[sAt], a[dAt], id)'s new addresses a[nsAt] and
   * a[ndAt]; returns its entry. Never fails (evicts as `insert`).
   */
  insert6(
    a: Int32Array,
    sAt: number,
    dAt: number,
    id: number,
    nsAt: number,
    ndAt: number,
    expires: number,
    now: number,
  ): number {
    id |= 0;
    const b = this.bucket6(a, sAt, dAt, id);
    let pick = -1;
    let soonest = b;
    for (let w = b; w < b + WAYS; w++) {
      const live = this.expiry[w] > now;
      if (
        live &&
        this.idProto[w] === id &&
        addr6Eq(this.saddrs, w, a, sAt) &&
        addr6Eq(this.daddrs, w, a, dAt)
      ) {
        pick = w;
        break;
      }
      if (!live && pick < 0) pick = w;
      if (this.expiry[w] < this.expiry[soonest]) soonest = w;
    }
    if (pick < 0) {
      pick = soonest;
      this.evictions++;
    }
    addr6Put(this.saddrs, pick, a, sAt);
    addr6Put(this.daddrs, pick, a, dAt);
    this.idProto[pick] = id;
    addr6Put(this.srcs, pick, a, nsAt);
    addr6Put(this.dsts, pick, a, ndAt);
    this.expiry[pick] = expires >>> 0;
    return pick;
  }

  /** Word k (0..3) of an IPv6 entry's new source. */
  newSrcWord(i: number, k: number): number {
    return this.srcs[(i << 2) + k];
  }
  /** Word k (0..3) of an IPv6 entry's new destination. */
  newDstWord(i: number, k: number): number {
    return this.dsts[(i << 2) + k];
  }

  private bucket(saddr: number, daddr: number, key: number): number {
    return (hash4(SEED, saddr, daddr, key, 0) & this.mask) * WAYS;
  }

  /** Entry of the datagram (saddr, daddr, id, proto) live at `now`, or -1. */
  lookup(saddr: number, daddr: number, id: number, proto: number, now: number): number {
    saddr |= 0;
    daddr |= 0;
    const key = ((id & 0xffff) << 8) | (proto & 0xff);
    const b = this.bucket(saddr, daddr, key);
    for (let w = b; w < b + WAYS; w++) {
      if (
        this.expiry[w] > now &&
        this.idProto[w] === key &&
        this.saddrs[w] === saddr &&
        this.daddrs[w] === daddr
      ) {
        return w;
      }
    }
    return -1;
  }

  /** Remember (or refresh) a datagram's new addresses; returns its entry. Never fails. */
  insert(
    saddr: number,
    daddr: number,
    id: number,
    proto: number,
    newSrc: number,
    newDst: number,
    expires: number,
    now: number,
  ): number {
    saddr |= 0;
    daddr |= 0;
    const key = ((id & 0xffff) << 8) | (proto & 0xff);
    const b = this.bucket(saddr, daddr, key);
    let pick = -1;
    let soonest = b;
    for (let w = b; w < b + WAYS; w++) {
      const live = this.expiry[w] > now;
      if (live && this.idProto[w] === key && this.saddrs[w] === saddr && this.daddrs[w] === daddr) {
        pick = w;
        break;
      }
      if (!live && pick < 0) pick = w;
      if (this.expiry[w] < this.expiry[soonest]) soonest = w;
    }
    if (pick < 0) {
      pick = soonest;
      this.evictions++;
    }
    this.saddrs[pick] = saddr;
    this.daddrs[pick] = daddr;
    this.idProto[pick] = key;
    this.srcs[pick] = newSrc | 0;
    this.dsts[pick] = newDst | 0;
    this.expiry[pick] = expires >>> 0;
    return pick;
  }

  newSrc(i: number): number {
    return this.srcs[i];
  }
  newDst(i: number): number {
    return this.dsts[i];
  }
  expires(i: number): number {
    return this.expiry[i];
  }

  /** Entries live at `now` (slow: walks the table; for inspect and tests). */
  countLive(now: number): number {
    let n = 0;
    for (let i = 0; i < this.capacity; i++) if (this.expiry[i] > now) n++;
    return n;
  }

  clear(): void {
    this.expiry.fill(0);
    this.evictions = 0;
  }
}

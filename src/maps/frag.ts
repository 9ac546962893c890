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

import { hash4, roundCapacity } from './hashtab.ts';

/** the kernel's net.ipv4.ipfrag_time */
export const FRAG_TIMEOUT = 30;

const WAYS = 4;
const SEED = 0x66726167; // 'frag'

export class FragMap {
  readonly capacity: number;
  /** live entries overwritten because their bucket was full */
  evictions = 0;
  private readonly mask: number;
  private readonly saddrs: Int32Array;
  private readonly daddrs: Int32Array;
  private readonly idProto: Uint32Array;
  private readonly srcs: Int32Array;
  private readonly dsts: Int32Array;
  private readonly expiry: Uint32Array;

  constructor(capacity: number) {
    const cap = Math.max(roundCapacity(capacity, 'FragMap'), WAYS);
    this.capacity = cap;
    this.mask = cap / WAYS - 1;
    this.saddrs = new Int32Array(cap);
    this.daddrs = new Int32Array(cap);
    this.idProto = new Uint32Array(cap);
    this.srcs = new Int32Array(cap);
    this.dsts = new Int32Array(cap);
    this.expiry = new Uint32Array(cap);
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

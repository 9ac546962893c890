// The session-affinity map (Cilium's lb4_affinity, kube-proxy's `-m recent --name KUBE-SEP-..`):
// which backend a client last used for a service, and when.
//
//   key                          value
//   +-------------+----------+   +---------------+-----------------+
//   | client u32  | revNat   |   | backendId u32 | lastUsed u32 (s)|
//   |             | u16      |   |               |                 |
//   +-------------+----------+   +---------------+-----------------+
//
// Columns: client u32, revNat u16, backendId u32 (also the free-list link), lastUsed u32.
// Index and pool as in hashtab.ts (load factor <= 0.5). The timeout is the service's
// (`affinityTimeout` of its master entry), so it is not stored per entry: a reader compares
// `now - lastUsed` with it. Expired entries are misses; `expire` removes them (agent GC) and
// `deleteBackend` removes a departed backend's entries (control plane).
//
// IPv6 (`{ ipv6: true }`, Cilium's lb6_affinity): the client column holds four int32 words per
// entry (most significant first) and the key is hashed over five words; lookup6 / upsert6 take
// the client as four words of an Int32Array at an offset. Everything else is shared.

import {
  ADDR6_WORDS,
  addr6Eq,
  addr6Put,
  type Carver,
  EntryPool,
  H_WORDS,
  HashIndex,
  hash3,
  hashAddr6,
  hashEnd,
  hashStep,
  type MapOptions,
  openHashedMap,
} from './hashtab.ts';

const MAGIC = 0x41464631; // 'AFF1'
const MAGIC6 = 0x41464636; // 'AFF6'

function layout(c: Carver, cap: number, words: number) {
  return {
    hdr: c.u32(H_WORDS),
    index: c.u32(cap * 2),
    live: c.u32((cap + 31) >>> 5),
    client: c.i32(cap * words),
    backend: c.u32(cap),
    lastUsed: c.u32(cap),
    revNat: c.u16(cap),
  };
}

export class AffinityMap {
  readonly capacity: number;
  readonly buffer: ArrayBuffer | SharedArrayBuffer;
  readonly seed: number;
  /** clients are IPv6 (four words each): use the `…6` methods */
  readonly ipv6: boolean;
  readonly index: HashIndex;
  private readonly pool: EntryPool;
  private readonly client_: Int32Array;
  private readonly backend_: Uint32Array;
  private readonly lastUsed_: Uint32Array;
  private readonly revNat_: Uint16Array;

  constructor(capacity: number, opts?: MapOptions) {
    const ipv6 = opts?.ipv6 === true;
    const words = ipv6 ? ADDR6_WORDS : 1;
    const lay = (c: Carver, n: number) => layout(c, n, words);
    const m = openHashedMap(capacity, lay, ipv6 ? MAGIC6 : MAGIC, opts, 'AffinityMap');
    const { cap, views: v } = m;
    this.ipv6 = ipv6;
    this.capacity = cap;
    this.buffer = m.buffer;
    this.seed = m.seed;
    this.client_ = v.client;
    this.backend_ = v.backend;
    this.lastUsed_ = v.lastUsed;
    this.revNat_ = v.revNat;
    this.pool = new EntryPool(v.hdr, v.live, v.backend, cap);
    this.index = new HashIndex(v.index, {
      entryHash: ipv6
        ? (e) => this.hash6(this.client_, e << 2, this.revNat_[e])
        : (e) => hash3(this.seed, this.client_[e], this.revNat_[e], 0),
    });
  }

  private hash6(a: Int32Array, at: number, revNat: number): number {
    return hashEnd(hashStep(hashAddr6(this.seed, a, at), revNat), 5);
  }

  /** IPv6: entry of (client a[at..at+4), revNat), or -1. No allocation, no throw. */
  lookup6(a: Int32Array, at: number, revNat: number): number {
    revNat &= 0xffff;
    const slots = this.index.slots;
    const mask = this.index.mask;
    for (let i = this.hash6(a, at, revNat) & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (this.revNat_[e] === revNat && addr6Eq(this.client_, e, a, at)) return e;
    }
  }

  /** IPv6 lookupFresh. */
  lookupFresh6(a: Int32Array, at: number, revNat: number, now: number, timeout: number): number {
    const e = this.lookup6(a, at, revNat);
    if (e < 0) return -1;
    return now - this.lastUsed_[e] < timeout ? e : -1;
  }

  /** IPv6 upsert: client a[at..at+4). False when the table is full. No allocation, no throw. */
  upsert6(a: Int32Array, at: number, revNat: number, backendId: number, now: number): boolean {
    let e = this.lookup6(a, at, revNat);
    if (e < 0) {
      e = this.pool.alloc();
      if (e < 0) return false;
      addr6Put(this.client_, e, a, at);
      this.revNat_[e] = revNat & 0xffff;
      this.index.insert(this.hash6(a, at, revNat & 0xffff), e);
    }
    this.backend_[e] = backendId >>> 0;
    this.lastUsed_[e] = now >>> 0;
    return true;
  }

  /** Word k (0..3, most significant first) of an IPv6 entry's client. */
  clientWord(i: number, k: number): number {
    return this.client_[(i << 2) + k];
  }

  get size(): number {
    return this.pool.size;
  }

  /** Entry of (client, revNat), or -1. Fast path: no allocation, no throw. */
  lookup(client: number, revNat: number): number {
    client |= 0;
    revNat &= 0xffff;
    const slots = this.index.slots;
    const mask = this.index.mask;
    for (let i = hash3(this.seed, client, revNat, 0) & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (this.client_[e] === client && this.revNat_[e] === revNat) return e;
    }
  }

  /** Live entry of (client, revNat) used within `timeout` seconds of `now`, or -1. */
  lookupFresh(client: number, revNat: number, now: number, timeout: number): number {
    const e = this.lookup(client, revNat);
    if (e < 0) return -1;
    return now - this.lastUsed_[e] < timeout ? e : -1;
  }

  client(i: number): number {
    return this.client_[i];
  }
  revNat(i: number): number {
    return this.revNat_[i];
  }
  backendId(i: number): number {
    return this.backend_[i];
  }
  lastUsed(i: number): number {
    return this.lastUsed_[i];
  }
  touch(i: number, now: number): void {
    this.lastUsed_[i] = now;
  }

  /**
   * Record that client uses backendId for revNat at `now`. False when the table is full (the
   * client then simply has no affinity until GC frees room). No allocation, no throw.
   */
  upsert(client: number, revNat: number, backendId: number, now: number): boolean {
    let e = this.lookup(client, revNat);
    if (e < 0) {
      e = this.pool.alloc();
      if (e < 0) return false;
      this.client_[e] = client | 0;
      this.revNat_[e] = revNat & 0xffff;
      this.index.insert(hash3(this.seed, client | 0, revNat & 0xffff, 0), e);
    }
    this.backend_[e] = backendId >>> 0;
    this.lastUsed_[e] = now >>> 0;
    return true;
  }

  deleteAt(i: number): void {
    this.index.remove(i);
    this.pool.release(i);
  }

  delete(client: number, revNat: number): boolean {
    const e = this.lookup(client, revNat);
    if (e < 0) return false;
    this.deleteAt(e);
    return true;
  }

  next(from: number): number {
    return this.pool.nextLive(from);
  }

  /**
   * Remove entries idle for their service's timeout (`timeoutOf(revNat)`, 0 = the service has
   * none any more). Slow world: a full pass. Returns how many were removed.
   */
  expire(now: number, timeoutOf: (revNat: number) => number): number {
    let n = 0;
    for (let i = this.next(0); i >= 0; i = this.next(i + 1)) {
      if (now - this.lastUsed_[i] < timeoutOf(this.revNat_[i])) continue;
      this.deleteAt(i);
      n++;
    }
    return n;
  }

  /** Remove entries whose (revNat, backend) pair `keep` rejects. Returns how many. */
  retain(keep: (revNat: number, backendId: number) => boolean): number {
    let n = 0;
    for (let i = this.next(0); i >= 0; i = this.next(i + 1)) {
      if (keep(this.revNat_[i], this.backend_[i])) continue;
      this.deleteAt(i);
      n++;
    }
    return n;
  }

  clear(): void {
    this.index.clear();
    this.pool.clear();
  }
}

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

import {
  type Carver,
  EntryPool,
  H_WORDS,
  HashIndex,
  hash3,
  type MapOptions,
  openHashedMap,
} from './hashtab.ts';

const MAGIC = 0x41464631; // 'AFF1'

function layout(c: Carver, cap: number) {
  return {
    hdr: c.u32(H_WORDS),
    index: c.u32(cap * 2),
    live: c.u32((cap + 31) >>> 5),
    client: c.i32(cap),
    backend: c.u32(cap),
    lastUsed: c.u32(cap),
    revNat: c.u16(cap),
  };
}

export class AffinityMap {
  readonly capacity: number;
  readonly buffer: ArrayBuffer | SharedArrayBuffer;
  readonly seed: number;
  readonly index: HashIndex;
  private readonly pool: EntryPool;
  private readonly client_: Int32Array;
  private readonly backend_: Uint32Array;
  private readonly lastUsed_: Uint32Array;
  private readonly revNat_: Uint16Array;

  constructor(capacity: number, opts?: MapOptions) {
    const m = openHashedMap(capacity, layout, MAGIC, opts, 'AffinityMap');
    const { cap, views: v } = m;
    this.capacity = cap;
    this.buffer = m.buffer;
    this.seed = m.seed;
    this.client_ = v.client;
    this.backend_ = v.backend;
    this.lastUsed_ = v.lastUsed;
    this.revNat_ = v.revNat;
    this.pool = new EntryPool(v.hdr, v.live, v.backend, cap);
    this.index = new HashIndex(v.index, {
      entryHash: (e) => hash3(this.seed, this.client_[e], this.revNat_[e], 0),
    });
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

// The services map (Cilium's lb4_services): one master entry per (VIP, port, protocol) and one
// entry per backend slot, all in one hash table keyed by (vip, port, proto, slot).
//
//   key                                  value (slot 0 = master)           value (slot i > 0)
//   +-------+-------+-------+-------+    +---------+---------+---------+   +--------------+
//   | vip u32                       |    | count   | revNat  | flags   |   | backendId u32|
//   +-------+-------+-------+-------+    |   u16   |   u16   |   u16   |   +--------------+
//   | port u16      | slot u16      |    +---------+---------+---------+
//   +-------+-------+-------+-------+    | sched u8| affinityTimeout u32 |
//   | proto u8 |                         +---------+---------------------+
//
// Stored as columns: vip u32, portSlot u32 (port << 16 | slot), proto u8, val u32
// (affinityTimeout for a master, backendId for a slot), count u16, revNat u16, flags u16,
// sched u8. Index and pool as in hashtab.ts (load factor <= 0.5).
//
// Reader-safe update order (from Cilium): write slots 1..N, then the master with count N,
// then delete slots above N. A reader then never sees a count larger than the slots written.
//
// A wildcard master (port 0, proto 0, SVC_F_WILDCARD) marks a VIP as known so that packets to
// its unknown ports can be rejected instead of passed.
//
// IPv6 (`{ ipv6: true }`, Cilium's lb6_services): the same entries with a 128-bit VIP, stored
// as four int32 words per entry (vip column of 4 x capacity, most significant word first), and
// hashed over the six key words (four VIP words, port << 16 | slot, proto). Bytes per entry:
// IPv4 vip 4 + portSlot 4 + val 4 + count/revNat/flags 6 + proto/sched 2 + live bit + index 8
// = 28.125; IPv6 = 40.125. Lookups go through lookup6 (the VIP as four words in an Int32Array
// at an offset, the fast path's scratch); the writers take the VIP as four words.

import {
  ADDR6_WORDS,
  addr6Eq,
  addr6Put,
  type Carver,
  checkAddr,
  checkRange,
  EntryPool,
  H_WORDS,
  HashIndex,
  hash3,
  hashAddr6,
  hashEnd,
  hashStep,
  type MapAddr,
  type MapOptions,
  openHashedMap,
} from './hashtab.ts';

export const SVC_F_NODEPORT = 1 << 0;
export const SVC_F_EXTERNAL_IP = 1 << 1;
export const SVC_F_LOADBALANCER = 1 << 2;
export const SVC_F_ETP_LOCAL = 1 << 3;
export const SVC_F_ITP_LOCAL = 1 << 4;
export const SVC_F_AFFINITY = 1 << 5;
export const SVC_F_SOURCE_RANGE = 1 << 6;
export const SVC_F_WILDCARD = 1 << 7;
/** Frontends reached from outside the cluster (KUBE-EXT-*). */
export const SVC_F_EXTERNAL = SVC_F_NODEPORT | SVC_F_EXTERNAL_IP | SVC_F_LOADBALANCER;
/**
 * Added to the protocol byte of a service key: the local-endpoints scope of an external
 * frontend with externalTrafficPolicy: Local (Cilium's two-scope lookup). The plain key holds
 * every endpoint (pod and node sources); this one only this node's (external clients).
 */
export const SVC_SCOPE_LOCAL = 0x80;

// The scheduler byte of a master entry holds a SCHED_* kind of src/sched/kinds.ts (0 = random).

const MAGIC = 0x53564331; // 'SVC1'
const MAGIC6 = 0x53564336; // 'SVC6'

function layout(c: Carver, cap: number, words: number) {
  return {
    hdr: c.u32(H_WORDS),
    index: c.u32(cap * 2),
    live: c.u32((cap + 31) >>> 5),
    vip: c.i32(cap * words),
    portSlot: c.i32(cap),
    val: c.u32(cap),
    count: c.u16(cap),
    revNat: c.u16(cap),
    flags: c.u16(cap),
    proto: c.u8(cap),
    sched: c.u8(cap),
  };
}

export class ServiceMap {
  readonly capacity: number;
  readonly buffer: ArrayBuffer | SharedArrayBuffer;
  readonly seed: number;
  /** the VIPs are IPv6 (four words each): use the `…6` lookups */
  readonly ipv6: boolean;
  /** exposed for tests and introspection (probe lengths, wrap-around) */
  readonly index: HashIndex;
  private readonly pool: EntryPool;
  private readonly vip: Int32Array;
  private readonly portSlot: Int32Array;
  private readonly proto_: Uint8Array;
  private readonly val: Uint32Array;
  private readonly count_: Uint16Array;
  private readonly revNat_: Uint16Array;
  private readonly flags_: Uint16Array;
  private readonly sched: Uint8Array;

  constructor(capacity: number, opts?: MapOptions) {
    const ipv6 = opts?.ipv6 === true;
    const words = ipv6 ? ADDR6_WORDS : 1;
    const lay = (c: Carver, n: number) => layout(c, n, words);
    const m = openHashedMap(capacity, lay, ipv6 ? MAGIC6 : MAGIC, opts, 'ServiceMap');
    const { cap, views: v } = m;
    this.ipv6 = ipv6;
    this.capacity = cap;
    this.buffer = m.buffer;
    this.seed = m.seed;
    this.vip = v.vip;
    this.portSlot = v.portSlot;
    this.proto_ = v.proto;
    this.val = v.val;
    this.count_ = v.count;
    this.revNat_ = v.revNat;
    this.flags_ = v.flags;
    this.sched = v.sched;
    this.pool = new EntryPool(v.hdr, v.live, v.val, cap);
    this.index = new HashIndex(v.index, {
      entryHash: ipv6
        ? (e) => this.hash6(this.vip, e << 2, this.portSlot[e], this.proto_[e])
        : (e) => hash3(this.seed, this.vip[e], this.portSlot[e], this.proto_[e]),
    });
  }

  private hash6(a: Int32Array, at: number, ps: number, proto: number): number {
    return hashEnd(hashStep(hashStep(hashAddr6(this.seed, a, at), ps), proto), 6);
  }

  get size(): number {
    return this.pool.size;
  }

  /** Home hash of a key (tests use it to build colliding keys). */
  hashKey(vip: number, port: number, proto: number, slot: number): number {
    return hash3(this.seed, vip | 0, ((port & 0xffff) << 16) | (slot & 0xffff), proto & 0xff);
  }

  /** Home hash of an IPv6 key, the VIP at a[at..at+4). */
  hashKey6(a: Int32Array, at: number, port: number, proto: number, slot: number): number {
    return this.hash6(a, at, ((port & 0xffff) << 16) | (slot & 0xffff), proto & 0xff);
  }

  /**
   * IPv6: entry index of (vip, port, proto, slot), the VIP at a[at..at+4), or -1. Fast path:
   * no allocation, no throw.
   */
  lookup6(a: Int32Array, at: number, port: number, proto: number, slot: number): number {
    proto &= 0xff;
    const ps = ((port & 0xffff) << 16) | (slot & 0xffff);
    const slots = this.index.slots;
    const mask = this.index.mask;
    for (let i = this.hash6(a, at, ps, proto) & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (this.portSlot[e] === ps && this.proto_[e] === proto && addr6Eq(this.vip, e, a, at)) {
        return e;
      }
    }
  }

  /** Entry of a key whose VIP is a writer's MapAddr (either family; slow world). */
  lookupAny(vip: MapAddr, port: number, proto: number, slot: number): number {
    return typeof vip === 'number'
      ? this.lookup(vip, port, proto, slot)
      : this.lookup6(vip, 0, port, proto, slot);
  }

  /** Entry index of (vip, port, proto, slot), or -1. Fast path: no allocation, no throw. */
  lookup(vip: number, port: number, proto: number, slot: number): number {
    vip |= 0;
    proto &= 0xff; // fields masked to their stored widths, so an oversized slot cannot spill into the port
    const ps = ((port & 0xffff) << 16) | (slot & 0xffff);
    const slots = this.index.slots;
    const mask = this.index.mask;
    for (let i = hash3(this.seed, vip, ps, proto) & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (this.vip[e] === vip && this.portSlot[e] === ps && this.proto_[e] === proto) return e;
    }
  }

  count(i: number): number {
    return this.count_[i];
  }
  revNat(i: number): number {
    return this.revNat_[i];
  }
  flags(i: number): number {
    return this.flags_[i];
  }
  scheduler(i: number): number {
    return this.sched[i];
  }
  affinityTimeout(i: number): number {
    return this.val[i];
  }
  backendId(i: number): number {
    return this.val[i];
  }
  /** Key fields of an entry (listing / inspect). */
  vipOf(i: number): number {
    return this.vip[i];
  }
  /** Word k (0..3, most significant first) of an IPv6 entry's VIP. */
  vipWord(i: number, k: number): number {
    return this.vip[(i << 2) + k];
  }
  portOf(i: number): number {
    return this.portSlot[i] >>> 16;
  }
  protoOf(i: number): number {
    return this.proto_[i];
  }
  slotOf(i: number): number {
    return this.portSlot[i] & 0xffff;
  }

  /** First live entry index >= from, or -1 (iterate with `for (i = next(0); i >= 0; i = next(i + 1))`). */
  next(from: number): number {
    return this.pool.nextLive(from);
  }

  /** Insert or update the master (slot 0). False when the table is full. Throws on bad ranges. */
  upsertMaster(
    vip: MapAddr,
    port: number,
    proto: number,
    count: number,
    revNat: number,
    flags: number,
    scheduler: number,
    affinityTimeout: number,
  ): boolean {
    checkRange(count, 0, 0xffff, 'ServiceMap.upsertMaster: count');
    checkRange(revNat, 0, 0xffff, 'ServiceMap.upsertMaster: revNat');
    checkRange(flags, 0, 0xffff, 'ServiceMap.upsertMaster: flags');
    checkRange(scheduler, 0, 0xff, 'ServiceMap.upsertMaster: scheduler');
    checkRange(affinityTimeout, 0, 0xffffffff, 'ServiceMap.upsertMaster: affinityTimeout');
    const e = this.findOrInsert(vip, port, proto, 0);
    if (e < 0) return false;
    this.count_[e] = count;
    this.revNat_[e] = revNat;
    this.flags_[e] = flags;
    this.sched[e] = scheduler;
    this.val[e] = affinityTimeout;
    return true;
  }

  /** Insert or update backend slot `slot` (1..65535). False when the table is full. */
  upsertSlot(vip: MapAddr, port: number, proto: number, slot: number, backendId: number): boolean {
    checkRange(slot, 1, 0xffff, 'ServiceMap.upsertSlot: slot');
    checkRange(backendId, 0, 0xffffffff, 'ServiceMap.upsertSlot: backendId');
    const e = this.findOrInsert(vip, port, proto, slot);
    if (e < 0) return false;
    this.val[e] = backendId;
    return true;
  }

  /** Delete one entry (master or slot). False if it was not there. */
  delete(vip: MapAddr, port: number, proto: number, slot: number): boolean {
    if ((typeof vip === 'number') === this.ipv6)
      checkAddr(vip, this.ipv6, 'ServiceMap.delete: vip');
    const e = this.lookupAny(vip, port, proto, slot);
    if (e < 0) return false;
    this.index.remove(e);
    this.pool.release(e);
    return true;
  }

  clear(): void {
    this.index.clear();
    this.pool.clear();
  }

  private findOrInsert(vip: MapAddr, port: number, proto: number, slot: number): number {
    checkAddr(vip, this.ipv6, 'ServiceMap: vip');
    checkRange(port, 0, 0xffff, 'ServiceMap: port');
    checkRange(proto, 0, 0xff, 'ServiceMap: proto');
    checkRange(slot, 0, 0xffff, 'ServiceMap: slot');
    const found = this.lookupAny(vip, port, proto, slot);
    if (found >= 0) return found;
    const e = this.pool.alloc();
    if (e < 0) return -1;
    if (typeof vip === 'number') this.vip[e] = vip;
    else addr6Put(this.vip, e, vip, 0);
    this.portSlot[e] = (port << 16) | slot;
    this.proto_[e] = proto;
    this.count_[e] = 0;
    this.revNat_[e] = 0;
    this.flags_[e] = 0;
    this.sched[e] = 0;
    this.val[e] = 0;
    const h =
      typeof vip === 'number'
        ? this.hashKey(vip, port, proto, slot)
        : this.hashKey6(vip, 0, port, proto, slot);
    this.index.insert(h, e);
    return e;
  }
}

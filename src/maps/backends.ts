// The backends map (Cilium's lb4_backends): backend id -> where to send and in what state.
//
//   key              value
//   +------------+   +-------------+----------+----------+----------+----------+
//   | id u32 (≠0)|   | addr i32    | port u16 | proto u8 | state u8 | flags u8 |
//   +------------+   +-------------+----------+----------+----------+----------+
//
// Columns: id u32 (also the free-list link while an entry is free), addr i32, port u16,
// proto u8, state u8, flags u8. Index and pool as in hashtab.ts (load factor <= 0.5).
// Service slots and conntrack entries hold the id, so a backend's address can change, or the
// backend can drain (BE_TERMINATING), without touching either.
//
// IPv6 (`{ ipv6: true }`, Cilium's lb6_backends): the addr column holds four int32 words per
// entry (most significant first); everything else is the same. Bytes per entry: IPv4 4 + 4 + 2
// + 3 + live bit + index 8 = 21.125, IPv6 33.125. Ids are one space for both families (the
// loader hands them out), so a conntrack entry's backend id names one backend of its family.

import {
  ADDR6_WORDS,
  addr6Put,
  type Carver,
  checkAddr,
  checkRange,
  EntryPool,
  H_WORDS,
  HashIndex,
  hash1,
  type MapAddr,
  type MapOptions,
  openHashedMap,
} from './hashtab.ts';

export const BE_ACTIVE = 0;
export const BE_TERMINATING = 1;
export const BE_QUARANTINED = 2;

/** the backend runs on this node (externalTrafficPolicy / internalTrafficPolicy Local) */
export const BE_F_LOCAL = 1;

const MAGIC = 0x42454e31; // 'BEN1'
const MAGIC6 = 0x42454e36; // 'BEN6'

function layout(c: Carver, cap: number, words: number) {
  return {
    hdr: c.u32(H_WORDS),
    index: c.u32(cap * 2),
    live: c.u32((cap + 31) >>> 5),
    id: c.u32(cap),
    addr: c.i32(cap * words),
    port: c.u16(cap),
    proto: c.u8(cap),
    state: c.u8(cap),
    flags: c.u8(cap),
  };
}

export class BackendMap {
  readonly capacity: number;
  readonly buffer: ArrayBuffer | SharedArrayBuffer;
  readonly seed: number;
  /** addresses are IPv6 (four words each): addrWord, not addr */
  readonly ipv6: boolean;
  /** exposed for tests and introspection */
  readonly index: HashIndex;
  private readonly pool: EntryPool;
  private readonly id: Uint32Array;
  private readonly addr_: Int32Array;
  private readonly port_: Uint16Array;
  private readonly proto_: Uint8Array;
  private readonly state_: Uint8Array;
  private readonly flags_: Uint8Array;

  constructor(capacity: number, opts?: MapOptions) {
    const ipv6 = opts?.ipv6 === true;
    const words = ipv6 ? ADDR6_WORDS : 1;
    const lay = (c: Carver, n: number) => layout(c, n, words);
    const m = openHashedMap(capacity, lay, ipv6 ? MAGIC6 : MAGIC, opts, 'BackendMap');
    const { cap, views: v } = m;
    this.ipv6 = ipv6;
    this.capacity = cap;
    this.buffer = m.buffer;
    this.seed = m.seed;
    this.id = v.id;
    this.addr_ = v.addr;
    this.port_ = v.port;
    this.proto_ = v.proto;
    this.state_ = v.state;
    this.flags_ = v.flags;
    this.pool = new EntryPool(v.hdr, v.live, v.id, cap);
    this.index = new HashIndex(v.index, { entryHash: (e) => hash1(this.seed, this.id[e]) });
  }

  get size(): number {
    return this.pool.size;
  }

  /** Home hash of an id (tests use it to build colliding ids). */
  hashKey(id: number): number {
    return hash1(this.seed, id >>> 0);
  }

  /** Entry index of backend `id`, or -1 (always -1 for id 0). No allocation, no throw. */
  lookup(id: number): number {
    id >>>= 0;
    if (id === 0) return -1;
    const slots = this.index.slots;
    const mask = this.index.mask;
    for (let i = hash1(this.seed, id) & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      if (this.id[v - 1] === id) return v - 1;
    }
  }

  idOf(i: number): number {
    return this.id[i];
  }
  /** The address as int32 (`| 0`, the fast path's form); `>>> 0` for the unsigned one. */
  addr(i: number): number {
    return this.addr_[i];
  }
  /** Word k (0..3, most significant first) of an IPv6 backend's address, as int32. */
  addrWord(i: number, k: number): number {
    return this.addr_[(i << 2) + k];
  }
  port(i: number): number {
    return this.port_[i];
  }
  proto(i: number): number {
    return this.proto_[i];
  }
  state(i: number): number {
    return this.state_[i];
  }
  flags(i: number): number {
    return this.flags_[i];
  }

  /** First live entry index >= from, or -1. */
  next(from: number): number {
    return this.pool.nextLive(from);
  }

  /** Insert or update backend `id` (nonzero u32). False when full. Throws on bad ranges. */
  upsert(
    id: number,
    addr: MapAddr,
    port: number,
    proto: number,
    state: number,
    flags: number,
  ): boolean {
    checkRange(id, 1, 0xffffffff, 'BackendMap.upsert: id');
    checkAddr(addr, this.ipv6, 'BackendMap.upsert: addr');
    checkRange(port, 0, 0xffff, 'BackendMap.upsert: port');
    checkRange(proto, 0, 0xff, 'BackendMap.upsert: proto');
    checkRange(state, 0, 0xff, 'BackendMap.upsert: state');
    checkRange(flags, 0, 0xff, 'BackendMap.upsert: flags');
    let e = this.lookup(id);
    if (e < 0) {
      e = this.pool.alloc();
      if (e < 0) return false;
      this.id[e] = id;
      this.index.insert(this.hashKey(id), e);
    }
    if (typeof addr === 'number') this.addr_[e] = addr;
    else addr6Put(this.addr_, e, addr, 0);
    this.port_[e] = port;
    this.proto_[e] = proto;
    this.state_[e] = state;
    this.flags_[e] = flags;
    return true;
  }

  /** Delete backend `id`. False if it was not there. */
  delete(id: number): boolean {
    const e = this.lookup(id);
    if (e < 0) return false;
    this.index.remove(e);
    this.pool.release(e);
    return true;
  }

  clear(): void {
    this.index.clear();
    this.pool.clear();
  }
}

// Conntrack: one entry per service flow, findable from both directions through two indexes.
//
//   original tuple (as on the wire, client -> VIP):  proto, saddr, daddr, sport, dport
//   reply tuple    (as on the wire, backend -> client): proto, baddr, saddr, bport, sport
//
// Entry columns (struct of arrays), bytes per flow:
//
//   +--------------------------------+----+---------------------------------------------+
//   | column                         |  B | meaning                                     |
//   +--------------------------------+----+---------------------------------------------+
//   | saddr, daddr          i32 x 2  |  8 | client address, VIP                         |
//   | ports                 i32      |  4 | sport << 16 | dport (one compare on lookup)  |
//   | baddr                 i32      |  4 | backend address                             |
//   | bport, revNat         u16 x 2  |  4 | backend port, reverse-NAT id                |
//   | backendId             u32      |  4 | backend id (free-list link while free)      |
//   | expires               u32      |  4 | absolute expiry, seconds                    |
//   | pkts/bytes orig/reply u32 x 4  | 16 | counters, wrap modulo 2^32                  |
//   | proto, state, flags   u8 x 3   |  3 | IANA protocol, TCP state, datapath flags    |
//   | live bitmap           1 bit    | .125                                             |
//   | orig index, reply index        | 16 | 2 x (2 slots x u32), load factor <= 0.5     |
//   +--------------------------------+----+---------------------------------------------+
//   total 63.125 B per flow, plus a 32 B header and up to 7 B alignment padding per column.
//
// IPv6 (`{ ipv6: true }`, Cilium's ct6): the same entries with 128-bit addresses, saddr, daddr
// and baddr holding four int32 words per flow (most significant first) — 36 B more:
//
//   | saddr, daddr, baddr   i32 x 12 | 48 | client, VIP, backend (four words each)       |
//   total 99.125 B per IPv6 flow (the other columns and both indexes as above).
//
// Both tuples are hashed over ten words (two addresses, the ports word, proto). The `…6`
// methods take addresses as four words of an Int32Array at an offset (the datapath's scratch),
// so a lookup allocates nothing; saddrWord/daddrWord/baddrWord read them back. State, lifetime,
// counters, backend id and reverse-NAT id are the same columns and accessors in both families,
// so the conntrack stage (ctUpdate, the TCP and SCTP state machines) is one for both.
//
// For ICMP echo flows sport = dport = echo id. Time is u32 seconds; an entry is expired when
// expires <= now. The map never evicts a live entry: `create` fails with CT_FULL and the caller
// decides (drop, run GC early). Expired entries are removed only by `scan` (or `delete`).
//
// Two different flows must not share a reply tuple (C:p -> VIP1 and C:p -> VIP2 landing on the
// same backend address and port): replies could not be told apart, so `create` and `rebind`
// refuse with CT_CLASH rather than mis-translate. Such a flow needs SNAT to be told apart.

import {
  ADDR6_WORDS,
  addr6Eq,
  addr6Put,
  type Carver,
  EntryPool,
  H_BUMP,
  H_WORDS,
  HashIndex,
  hash4,
  hashAddr6,
  hashEnd,
  hashStep,
  type MapOptions,
  openHashedMap,
} from './hashtab.ts';

/** `create` results below zero. */
export const CT_FULL = -1;
/** the original tuple is already tracked (look up before creating) */
export const CT_EXISTS = -2;
/** another flow already owns the reply tuple */
export const CT_CLASH = -3;

const MAGIC = 0x43544b31; // 'CTK1'
const MAGIC6 = 0x43544b36; // 'CTK6'

function layout(c: Carver, cap: number, words = 1) {
  return {
    hdr: c.u32(H_WORDS),
    origIdx: c.u32(cap * 2),
    replyIdx: c.u32(cap * 2),
    live: c.u32((cap + 31) >>> 5),
    saddr: c.i32(cap * words),
    daddr: c.i32(cap * words),
    ports: c.i32(cap),
    baddr: c.i32(cap * words),
    backendId: c.u32(cap),
    expires: c.u32(cap),
    pktsOrig: c.u32(cap),
    pktsReply: c.u32(cap),
    bytesOrig: c.u32(cap),
    bytesReply: c.u32(cap),
    bport: c.u16(cap),
    revNat: c.u16(cap),
    proto: c.u8(cap),
    state: c.u8(cap),
    flags: c.u8(cap),
  };
}

type Views = ReturnType<typeof layout>;

export class ConntrackMap {
  readonly capacity: number;
  readonly buffer: ArrayBuffer | SharedArrayBuffer;
  readonly seed: number;
  /** addresses are IPv6 (four words each): use the `…6` methods */
  readonly ipv6: boolean;
  /** exposed for tests and introspection */
  readonly origIndex: HashIndex;
  readonly replyIndex: HashIndex;
  private readonly pool: EntryPool;
  private readonly hdr: Uint32Array;
  private readonly c: Views;

  constructor(capacity: number, opts?: MapOptions) {
    const ipv6 = opts?.ipv6 === true;
    const words = ipv6 ? ADDR6_WORDS : 1;
    const lay = (c: Carver, n: number) => layout(c, n, words);
    const m = openHashedMap(capacity, lay, ipv6 ? MAGIC6 : MAGIC, opts, 'ConntrackMap');
    const { cap, views } = m;
    this.ipv6 = ipv6;
    this.capacity = cap;
    this.buffer = m.buffer;
    this.c = views;
    this.hdr = views.hdr;
    this.seed = m.seed;
    this.pool = new EntryPool(views.hdr, views.live, views.backendId, cap);
    const v = views;
    if (ipv6) {
      this.origIndex = new HashIndex(v.origIdx, {
        entryHash: (e) => this.hash6(v.saddr, e << 2, v.daddr, e << 2, v.ports[e], v.proto[e]),
      });
      this.replyIndex = new HashIndex(v.replyIdx, {
        entryHash: (e) =>
          this.hash6(
            v.baddr,
            e << 2,
            v.saddr,
            e << 2,
            (v.bport[e] << 16) | (v.ports[e] >>> 16),
            v.proto[e],
          ),
      });
      return;
    }
    this.origIndex = new HashIndex(v.origIdx, {
      entryHash: (e) => hash4(this.seed, v.saddr[e], v.daddr[e], v.ports[e], v.proto[e]),
    });
    this.replyIndex = new HashIndex(v.replyIdx, {
      entryHash: (e) =>
        hash4(
          this.seed,
          v.baddr[e],
          v.saddr[e],
          (v.bport[e] << 16) | (v.ports[e] >>> 16),
          v.proto[e],
        ),
    });
  }

  get size(): number {
    return this.pool.size;
  }

  /** Bytes of typed arrays per flow at full capacity (header and alignment included). */
  bytesPerFlow(): number {
    return this.buffer.byteLength / this.capacity;
  }

  /** Home hash of a wire tuple in either index (tests use it to build colliding tuples). */
  hashTuple(proto: number, saddr: number, daddr: number, sport: number, dport: number): number {
    const ports = ((sport & 0xffff) << 16) | (dport & 0xffff);
    return hash4(this.seed, saddr | 0, daddr | 0, ports, proto & 0xff);
  }

  /** The ten-word IPv6 tuple hash: address s, address d, the ports word, proto. */
  private hash6(
    s: Int32Array,
    sAt: number,
    d: Int32Array,
    dAt: number,
    ports: number,
    proto: number,
  ): number {
    const h = hashAddr6(hashAddr6(this.seed, s, sAt), d, dAt);
    return hashEnd(hashStep(hashStep(h, ports), proto), 10);
  }

  /** IPv6: home hash of a wire tuple (addresses at a[sAt], a[dAt]) in either index. */
  hashTuple6(
    proto: number,
    a: Int32Array,
    sAt: number,
    dAt: number,
    sport: number,
    dport: number,
  ): number {
    const ports = ((sport & 0xffff) << 16) | (dport & 0xffff);
    return this.hash6(a, sAt, a, dAt, ports, proto & 0xff);
  }

  /**
   * IPv6: entry of the flow whose original (client -> VIP) tuple this is, or -1. The client
   * is a[sAt..sAt+4), the VIP a[dAt..dAt+4). No allocation, no throw.
   */
  lookupOrig6(
    proto: number,
    a: Int32Array,
    sAt: number,
    dAt: number,
    sport: number,
    dport: number,
  ): number {
    proto &= 0xff;
    const ports = ((sport & 0xffff) << 16) | (dport & 0xffff);
    const c = this.c;
    const slots = this.origIndex.slots;
    const mask = this.origIndex.mask;
    for (let i = this.hash6(a, sAt, a, dAt, ports, proto) & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (
        c.ports[e] === ports &&
        c.proto[e] === proto &&
        addr6Eq(c.saddr, e, a, sAt) &&
        addr6Eq(c.daddr, e, a, dAt)
      ) {
        return e;
      }
    }
  }

  /**
   * IPv6: entry of the flow whose reply (backend -> client) tuple this is, or -1: the backend
   * is a[sAt..sAt+4), the client a[dAt..dAt+4).
   */
  lookupReply6(
    proto: number,
    a: Int32Array,
    sAt: number,
    dAt: number,
    sport: number,
    dport: number,
  ): number {
    proto &= 0xff;
    sport &= 0xffff;
    dport &= 0xffff;
    const c = this.c;
    const slots = this.replyIndex.slots;
    const mask = this.replyIndex.mask;
    for (
      let i = this.hash6(a, sAt, a, dAt, (sport << 16) | dport, proto) & mask;
      ;
      i = (i + 1) & mask
    ) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (
        c.bport[e] === sport &&
        c.ports[e] >>> 16 === dport &&
        c.proto[e] === proto &&
        addr6Eq(c.baddr, e, a, sAt) &&
        addr6Eq(c.saddr, e, a, dAt)
      ) {
        return e;
      }
    }
  }

  /**
   * IPv6: track a new flow, client a[sAt], VIP a[dAt], backend a[bAt] (four words each).
   * Returns its entry, or CT_EXISTS / CT_CLASH / CT_FULL (< 0), as `create`.
   */
  create6(
    proto: number,
    a: Int32Array,
    sAt: number,
    dAt: number,
    sport: number,
    dport: number,
    bAt: number,
    bport: number,
    backendId: number,
    revNat: number,
    expires: number,
  ): number {
    proto &= 0xff;
    sport &= 0xffff;
    dport &= 0xffff;
    bport &= 0xffff;
    if (this.lookupOrig6(proto, a, sAt, dAt, sport, dport) >= 0) return CT_EXISTS;
    if (this.lookupReply6(proto, a, bAt, sAt, bport, sport) >= 0) return CT_CLASH;
    const e = this.pool.alloc();
    if (e < 0) return CT_FULL;
    const c = this.c;
    addr6Put(c.saddr, e, a, sAt);
    addr6Put(c.daddr, e, a, dAt);
    addr6Put(c.baddr, e, a, bAt);
    this.initEntry(e, proto, (sport << 16) | dport, bport, backendId, revNat, expires);
    this.origIndex.insert(this.hashTuple6(proto, a, sAt, dAt, sport, dport), e);
    this.replyIndex.insert(this.hashTuple6(proto, a, bAt, sAt, bport, sport), e);
    return e;
  }

  /** The columns every new entry sets, whatever its family. */
  private initEntry(
    e: number,
    proto: number,
    ports: number,
    bport: number,
    backendId: number,
    revNat: number,
    expires: number,
  ): void {
    const c = this.c;
    c.proto[e] = proto;
    c.ports[e] = ports;
    c.bport[e] = bport;
    c.backendId[e] = backendId;
    c.revNat[e] = revNat;
    c.expires[e] = expires;
    c.state[e] = 0;
    c.flags[e] = 0;
    c.pktsOrig[e] = 0;
    c.pktsReply[e] = 0;
    c.bytesOrig[e] = 0;
    c.bytesReply[e] = 0;
  }

  /** Entry of the flow whose original (client -> VIP) tuple this is, or -1. */
  lookupOrig(proto: number, saddr: number, daddr: number, sport: number, dport: number): number {
    // Inputs are masked to their stored widths everywhere (lookups, create, rebind), so a
    // key always hashes the way it is stored and out-of-range input cannot strand a slot.
    proto &= 0xff;
    saddr |= 0;
    daddr |= 0;
    const ports = ((sport & 0xffff) << 16) | (dport & 0xffff);
    const c = this.c;
    const slots = this.origIndex.slots;
    const mask = this.origIndex.mask;
    for (let i = hash4(this.seed, saddr, daddr, ports, proto) & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (
        c.saddr[e] === saddr &&
        c.daddr[e] === daddr &&
        c.ports[e] === ports &&
        c.proto[e] === proto
      ) {
        return e;
      }
    }
  }

  /** Entry of the flow whose reply (backend -> client) tuple this is, or -1. */
  lookupReply(proto: number, saddr: number, daddr: number, sport: number, dport: number): number {
    proto &= 0xff;
    saddr |= 0;
    daddr |= 0;
    sport &= 0xffff;
    dport &= 0xffff;
    const c = this.c;
    const slots = this.replyIndex.slots;
    const mask = this.replyIndex.mask;
    const h = hash4(this.seed, saddr, daddr, (sport << 16) | dport, proto);
    for (let i = h & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (
        c.baddr[e] === saddr &&
        c.saddr[e] === daddr &&
        c.bport[e] === sport &&
        c.ports[e] >>> 16 === dport &&
        c.proto[e] === proto
      ) {
        return e;
      }
    }
  }

  /**
   * Track a new flow. Returns its entry index, or CT_EXISTS / CT_CLASH / CT_FULL (< 0).
   * Counters, state and flags start at 0. Fast path: no allocation, no throw.
   */
  create(
    proto: number,
    saddr: number,
    daddr: number,
    sport: number,
    dport: number,
    baddr: number,
    bport: number,
    backendId: number,
    revNat: number,
    expires: number,
  ): number {
    proto &= 0xff;
    saddr |= 0;
    daddr |= 0;
    baddr |= 0;
    sport &= 0xffff;
    dport &= 0xffff;
    bport &= 0xffff;
    if (this.lookupOrig(proto, saddr, daddr, sport, dport) >= 0) return CT_EXISTS;
    if (this.lookupReply(proto, baddr, saddr, bport, sport) >= 0) return CT_CLASH;
    const e = this.pool.alloc();
    if (e < 0) return CT_FULL;
    const c = this.c;
    c.saddr[e] = saddr;
    c.daddr[e] = daddr;
    c.baddr[e] = baddr;
    this.initEntry(e, proto, (sport << 16) | dport, bport, backendId, revNat, expires);
    this.origIndex.insert(this.hashTuple(proto, saddr, daddr, sport, dport), e);
    this.replyIndex.insert(this.hashTuple(proto, baddr, saddr, bport, sport), e);
    return e;
  }

  /**
   * Move a flow to another backend (e.g. a new SYN after its backend went away), re-indexing
   * its reply tuple. False if `i` is not live or the new reply tuple belongs to another flow.
   */
  rebind(i: number, baddr: number, bport: number, backendId: number): boolean {
    if (!this.pool.isLive(i)) return false;
    const c = this.c;
    baddr |= 0;
    bport &= 0xffff;
    if (c.baddr[i] !== baddr || c.bport[i] !== bport) {
      const sport = c.ports[i] >>> 16;
      if (this.lookupReply(c.proto[i], baddr, c.saddr[i], bport, sport) >= 0) return false;
      this.replyIndex.remove(i);
      c.baddr[i] = baddr;
      c.bport[i] = bport;
      this.replyIndex.insert(this.hashTuple(c.proto[i], baddr, c.saddr[i], bport, sport), i);
    }
    c.backendId[i] = backendId;
    return true;
  }

  /** Forget a flow. No-op if `i` is not live. */
  delete(i: number): void {
    if (!this.pool.isLive(i)) return;
    this.origIndex.remove(i);
    this.replyIndex.remove(i);
    this.pool.release(i);
  }

  isLive(i: number): boolean {
    return this.pool.isLive(i);
  }

  /** First live entry >= from, or -1: `for (let i = ct.next(0); i >= 0; i = ct.next(i + 1))`. */
  next(from: number): number {
    return this.pool.nextLive(from);
  }

  /**
   * GC step, not for the hot path: examine up to `max` entry positions from `cursor`, delete
   * those with expires <= now (calling onExpired(i) first, while the fields are still valid).
   * Returns the cursor to continue from, 0 when the pass reached the end of the table.
   */
  scan(cursor: number, max: number, now: number, onExpired?: (i: number) => void): number {
    const bump = this.hdr[H_BUMP];
    const start = Math.max(cursor, 0);
    const end = Math.min(bump, start + Math.max(max, 0));
    const expires = this.c.expires;
    now >>>= 0;
    for (let e = this.pool.nextLive(start); e >= 0 && e < end; e = this.pool.nextLive(e + 1)) {
      if (expires[e] > now) continue;
      if (onExpired) onExpired(e);
      this.delete(e);
    }
    return end >= bump ? 0 : end;
  }

  clear(): void {
    this.origIndex.clear();
    this.replyIndex.clear();
    this.pool.clear();
  }

  proto(i: number): number {
    return this.c.proto[i];
  }
  /** Addresses come back as int32 (`| 0`); `>>> 0` gives the unsigned form. */
  saddr(i: number): number {
    return this.c.saddr[i];
  }
  daddr(i: number): number {
    return this.c.daddr[i];
  }
  /** Word k (0..3, most significant first) of an IPv6 flow's client address, as int32. */
  saddrWord(i: number, k: number): number {
    return this.c.saddr[(i << 2) + k];
  }
  /** Word k of an IPv6 flow's VIP (its original destination). */
  daddrWord(i: number, k: number): number {
    return this.c.daddr[(i << 2) + k];
  }
  /** Word k of an IPv6 flow's backend address. */
  baddrWord(i: number, k: number): number {
    return this.c.baddr[(i << 2) + k];
  }
  sport(i: number): number {
    return this.c.ports[i] >>> 16;
  }
  dport(i: number): number {
    return this.c.ports[i] & 0xffff;
  }
  baddr(i: number): number {
    return this.c.baddr[i];
  }
  bport(i: number): number {
    return this.c.bport[i];
  }
  backendId(i: number): number {
    return this.c.backendId[i];
  }
  revNat(i: number): number {
    return this.c.revNat[i];
  }
  expires(i: number): number {
    return this.c.expires[i];
  }
  setExpires(i: number, t: number): void {
    this.c.expires[i] = t;
  }
  state(i: number): number {
    return this.c.state[i];
  }
  setState(i: number, s: number): void {
    this.c.state[i] = s;
  }
  flags(i: number): number {
    return this.c.flags[i];
  }
  setFlags(i: number, f: number): void {
    this.c.flags[i] = f;
  }
  pktsOrig(i: number): number {
    return this.c.pktsOrig[i];
  }
  pktsReply(i: number): number {
    return this.c.pktsReply[i];
  }
  bytesOrig(i: number): number {
    return this.c.bytesOrig[i];
  }
  bytesReply(i: number): number {
    return this.c.bytesReply[i];
  }
  /** Count `pkts` packets (1; a GSO super-packet's segments) of `bytes` client -> backend (u32
   * counters wrap). */
  addOrig(i: number, bytes: number, pkts = 1): void {
    this.c.pktsOrig[i] += pkts;
    this.c.bytesOrig[i] += bytes;
  }
  /** Count `pkts` packets of `bytes` backend -> client (u32 counters wrap). */
  addReply(i: number, bytes: number, pkts = 1): void {
    this.c.pktsReply[i] += pkts;
    this.c.bytesReply[i] += bytes;
  }
}

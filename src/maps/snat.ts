// The SNAT (masquerade) table: one entry per masqueraded flow, findable from both directions
// (Cilium's SNAT_MAPPING_IPV4 forward + reverse pair, kept here as one entry in two indexes).
//
//   forward key (after DNAT, as the datapath sends it):  proto, saddr, sport, raddr, rport
//       -> natAddr, natPort        (rewrite the source of client -> backend packets)
//   reverse key (the reply as it arrives):              proto, raddr, rport, natAddr, natPort
//       -> saddr, sport, ctIdx     (restore the client of backend -> node packets)
//
// raddr/rport is the backend. The reverse key is what makes a NAT port "taken": the same
// nat port may serve two flows to different backends, as Linux NAT's full-tuple uniqueness
// allows. `ctIdx` ties the entry to its conntrack flow; the datapath checks the flow still
// exists before trusting the entry, and the GC step deletes entries whose flow is gone.
//
// Entry columns (struct of arrays), bytes per entry: saddr, raddr, natAddr i32, ctIdx u32 (16),
// ports i32 (sport << 16 | rport) (4), natPort u16 (2), proto u8 (1), live bit, two indexes of
// 2 slots x u32 (16): about 39 B per entry.
//
// IPv6 (`{ ipv6: true }`, Cilium's SNAT_MAPPING_IPV6): saddr, raddr and natAddr hold four int32
// words per entry (most significant first), 36 B more: about 75 B per entry. Both keys are
// hashed over ten words (two addresses, a ports word, proto); the `…6` methods take addresses
// as four words of an Int32Array at an offset, and saddrWord/raddrWord/natAddrWord read them.

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

const MAGIC = 0x534e4131; // 'SNA1'
const MAGIC6 = 0x534e4136; // 'SNA6'

function layout(c: Carver, cap: number, words: number) {
  return {
    hdr: c.u32(H_WORDS),
    fwdIdx: c.u32(cap * 2),
    revIdx: c.u32(cap * 2),
    live: c.u32((cap + 31) >>> 5),
    saddr: c.i32(cap * words),
    raddr: c.i32(cap * words),
    natAddr: c.i32(cap * words),
    ctIdx: c.u32(cap),
    ports: c.i32(cap),
    natPort: c.u16(cap),
    proto: c.u8(cap),
  };
}

type Views = ReturnType<typeof layout>;

export class SnatMap {
  readonly capacity: number;
  readonly buffer: ArrayBuffer | SharedArrayBuffer;
  readonly seed: number;
  /** addresses are IPv6 (four words each): use the `…6` methods */
  readonly ipv6: boolean;
  readonly fwdIndex: HashIndex;
  readonly revIndex: HashIndex;
  private readonly pool: EntryPool;
  private readonly hdr: Uint32Array;
  private readonly c: Views;
  /** free-list link column: its own, so ctIdx stays readable until an entry is reused */
  private readonly link: Uint32Array;

  constructor(capacity: number, opts?: MapOptions) {
    const ipv6 = opts?.ipv6 === true;
    const words = ipv6 ? ADDR6_WORDS : 1;
    const m = openHashedMap(
      capacity,
      (c, cap) => ({ ...layout(c, cap, words), link: c.u32(cap) }),
      ipv6 ? MAGIC6 : MAGIC,
      opts,
      'SnatMap',
    );
    const { cap, views } = m;
    this.ipv6 = ipv6;
    this.capacity = cap;
    this.buffer = m.buffer;
    this.c = views;
    this.hdr = views.hdr;
    this.link = views.link;
    this.seed = m.seed;
    this.pool = new EntryPool(views.hdr, views.live, this.link, cap);
    const v = views;
    if (ipv6) {
      this.fwdIndex = new HashIndex(v.fwdIdx, {
        entryHash: (e) => this.hash6(v.saddr, e << 2, v.raddr, e << 2, v.ports[e], v.proto[e]),
      });
      this.revIndex = new HashIndex(v.revIdx, {
        entryHash: (e) =>
          this.hash6(
            v.raddr,
            e << 2,
            v.natAddr,
            e << 2,
            ((v.ports[e] & 0xffff) << 16) | v.natPort[e],
            v.proto[e],
          ),
      });
      return;
    }
    this.fwdIndex = new HashIndex(v.fwdIdx, {
      entryHash: (e) => hash4(this.seed, v.saddr[e], v.raddr[e], v.ports[e], v.proto[e]),
    });
    this.revIndex = new HashIndex(v.revIdx, {
      entryHash: (e) =>
        hash4(
          this.seed,
          v.raddr[e],
          v.natAddr[e],
          ((v.ports[e] & 0xffff) << 16) | v.natPort[e],
          v.proto[e],
        ),
    });
  }

  get size(): number {
    return this.pool.size;
  }

  /** The ten-word IPv6 key hash: address s, address d, a ports word, proto. */
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

  /** IPv6 lookupFwd: client a[sAt]:sport -> backend a[rAt]:rport, or -1. */
  lookupFwd6(
    proto: number,
    a: Int32Array,
    sAt: number,
    sport: number,
    rAt: number,
    rport: number,
  ): number {
    proto &= 0xff;
    const ports = ((sport & 0xffff) << 16) | (rport & 0xffff);
    const c = this.c;
    const slots = this.fwdIndex.slots;
    const mask = this.fwdIndex.mask;
    for (let i = this.hash6(a, sAt, a, rAt, ports, proto) & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (
        c.ports[e] === ports &&
        c.proto[e] === proto &&
        addr6Eq(c.saddr, e, a, sAt) &&
        addr6Eq(c.raddr, e, a, rAt)
      ) {
        return e;
      }
    }
  }

  /** IPv6 lookupRev: the reply backend a[rAt]:rport -> a[nAt]:natPort, or -1. */
  lookupRev6(
    proto: number,
    a: Int32Array,
    rAt: number,
    rport: number,
    nAt: number,
    natPort: number,
  ): number {
    proto &= 0xff;
    rport &= 0xffff;
    natPort &= 0xffff;
    const c = this.c;
    const slots = this.revIndex.slots;
    const mask = this.revIndex.mask;
    const h = this.hash6(a, rAt, a, nAt, (rport << 16) | natPort, proto);
    for (let i = h & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (
        (c.ports[e] & 0xffff) === rport &&
        c.natPort[e] === natPort &&
        c.proto[e] === proto &&
        addr6Eq(c.raddr, e, a, rAt) &&
        addr6Eq(c.natAddr, e, a, nAt)
      ) {
        return e;
      }
    }
  }

  /**
   * IPv6 insert: client a[sAt]:sport, backend a[rAt]:rport, nat address a[nAt]:natPort. The
   * entry, or -1 when the table is full; as `insert`, the caller checked neither key exists.
   */
  insert6(
    proto: number,
    a: Int32Array,
    sAt: number,
    sport: number,
    rAt: number,
    rport: number,
    nAt: number,
    natPort: number,
    ctIdx: number,
  ): number {
    const e = this.pool.alloc();
    if (e < 0) return -1;
    const c = this.c;
    c.proto[e] = proto & 0xff;
    addr6Put(c.saddr, e, a, sAt);
    addr6Put(c.raddr, e, a, rAt);
    addr6Put(c.natAddr, e, a, nAt);
    c.ports[e] = ((sport & 0xffff) << 16) | (rport & 0xffff);
    c.natPort[e] = natPort & 0xffff;
    c.ctIdx[e] = ctIdx >>> 0;
    const p = c.proto[e];
    this.revIndex.insert(this.hash6(a, rAt, a, nAt, ((rport & 0xffff) << 16) | c.natPort[e], p), e);
    this.fwdIndex.insert(this.hash6(a, sAt, a, rAt, c.ports[e], p), e);
    return e;
  }

  /** Entry of the masqueraded flow client saddr:sport -> backend raddr:rport, or -1. */
  lookupFwd(proto: number, saddr: number, sport: number, raddr: number, rport: number): number {
    proto &= 0xff;
    saddr |= 0;
    raddr |= 0;
    const ports = ((sport & 0xffff) << 16) | (rport & 0xffff);
    const c = this.c;
    const slots = this.fwdIndex.slots;
    const mask = this.fwdIndex.mask;
    for (let i = hash4(this.seed, saddr, raddr, ports, proto) & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (
        c.saddr[e] === saddr &&
        c.raddr[e] === raddr &&
        c.ports[e] === ports &&
        c.proto[e] === proto
      ) {
        return e;
      }
    }
  }

  /** Entry whose reply (backend raddr:rport -> natAddr:natPort) this is, or -1. */
  lookupRev(proto: number, raddr: number, rport: number, natAddr: number, natPort: number): number {
    proto &= 0xff;
    raddr |= 0;
    natAddr |= 0;
    rport &= 0xffff;
    natPort &= 0xffff;
    const c = this.c;
    const slots = this.revIndex.slots;
    const mask = this.revIndex.mask;
    const h = hash4(this.seed, raddr, natAddr, (rport << 16) | natPort, proto);
    for (let i = h & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      const e = v - 1;
      if (
        c.raddr[e] === raddr &&
        c.natAddr[e] === natAddr &&
        (c.ports[e] & 0xffff) === rport &&
        c.natPort[e] === natPort &&
        c.proto[e] === proto
      ) {
        return e;
      }
    }
  }

  /**
   * Insert a mapping: the reverse index first (it is what claims the nat port), then the
   * forward index. Returns the entry, or -1 when the table is full. The caller has checked
   * that neither key is present. Fast path: no allocation, no throw.
   */
  insert(
    proto: number,
    saddr: number,
    sport: number,
    raddr: number,
    rport: number,
    natAddr: number,
    natPort: number,
    ctIdx: number,
  ): number {
    const e = this.pool.alloc();
    if (e < 0) return -1;
    const c = this.c;
    c.proto[e] = proto & 0xff;
    c.saddr[e] = saddr | 0;
    c.raddr[e] = raddr | 0;
    c.ports[e] = ((sport & 0xffff) << 16) | (rport & 0xffff);
    c.natAddr[e] = natAddr | 0;
    c.natPort[e] = natPort & 0xffff;
    c.ctIdx[e] = ctIdx >>> 0;
    this.revIndex.insert(
      hash4(
        this.seed,
        c.raddr[e],
        c.natAddr[e],
        ((rport & 0xffff) << 16) | c.natPort[e],
        c.proto[e],
      ),
      e,
    );
    this.fwdIndex.insert(hash4(this.seed, c.saddr[e], c.raddr[e], c.ports[e], c.proto[e]), e);
    return e;
  }

  delete(e: number): void {
    if (!this.pool.isLive(e)) return;
    this.fwdIndex.remove(e);
    this.revIndex.remove(e);
    this.pool.release(e);
  }

  isLive(e: number): boolean {
    return this.pool.isLive(e);
  }

  /** First live entry >= from, or -1. */
  next(from: number): number {
    return this.pool.nextLive(from);
  }

  /** Entry positions handed out so far (upper bound of a scan). */
  get used(): number {
    return this.hdr[H_BUMP];
  }

  clear(): void {
    this.fwdIndex.clear();
    this.revIndex.clear();
    this.pool.clear();
  }

  proto(e: number): number {
    return this.c.proto[e];
  }
  saddr(e: number): number {
    return this.c.saddr[e];
  }
  /** Word k (0..3, most significant first) of an IPv6 entry's client address. */
  saddrWord(e: number, k: number): number {
    return this.c.saddr[(e << 2) + k];
  }
  /** Word k of an IPv6 entry's backend address. */
  raddrWord(e: number, k: number): number {
    return this.c.raddr[(e << 2) + k];
  }
  /** Word k of an IPv6 entry's masquerade address. */
  natAddrWord(e: number, k: number): number {
    return this.c.natAddr[(e << 2) + k];
  }
  sport(e: number): number {
    return this.c.ports[e] >>> 16;
  }
  raddr(e: number): number {
    return this.c.raddr[e];
  }
  rport(e: number): number {
    return this.c.ports[e] & 0xffff;
  }
  natAddr(e: number): number {
    return this.c.natAddr[e];
  }
  natPort(e: number): number {
    return this.c.natPort[e];
  }
  ctIdx(e: number): number {
    return this.c.ctIdx[e];
  }
}

// The reverse-NAT map (Cilium's lb4_reverse_nat): rev-NAT id -> the (VIP, port) a reply's
// source is rewritten back to. Ids are u16, so the map is a direct-indexed array, not a hash:
// entry index = id, one probe, no collisions.
//
//   key            value
//   +----------+   +-------------+----------+
//   | id u16≠0 |   | vip u32     | port u16 |
//   +----------+   +-------------+----------+
//
// Columns over ids 0..capacity: vip u32, port u16, live u8 (7 B per id; 448 KiB for all
// 65535 ids). Id 0 is never valid: it means "no reverse NAT" in conntrack and services.
//
// IPv6 (`{ ipv6: true }`, Cilium's lb6_reverse_nat): the vip column holds four int32 words per
// id (19 B per id, 1.2 MiB for all). The ids are one space for both families (the loader hands
// them out; the scheduler table, affinity timeouts and source ranges are indexed by them), so
// an id is live in at most one of the two maps.

import {
  ADDR6_WORDS,
  addr6Put,
  type Carver,
  carve,
  checkAddr,
  checkRange,
  H_CAPACITY,
  H_MAGIC,
  H_SIZE,
  H_WORDS,
  isZeroHeader,
  type MapAddr,
  type MapOptions,
} from './hashtab.ts';

export const REVNAT_MAX_ID = 0xffff;

const MAGIC = 0x524e4131; // 'RNA1'
const MAGIC6 = 0x524e4136; // 'RNA6'

function layout(c: Carver, cap: number, words: number) {
  return {
    hdr: c.u32(H_WORDS),
    vip: c.i32((cap + 1) * words),
    port: c.u16(cap + 1),
    live: c.u8(cap + 1),
  };
}

export class RevNatMap {
  /** largest id accepted (ids are 1..capacity) */
  readonly capacity: number;
  readonly buffer: ArrayBuffer | SharedArrayBuffer;
  /** VIPs are IPv6 (four words each): vipWord, not vip */
  readonly ipv6: boolean;
  private readonly hdr: Uint32Array;
  private readonly vip_: Int32Array;
  private readonly port_: Uint16Array;
  private readonly live: Uint8Array;

  /** `capacity` = largest id (1..65535; larger values are clamped to 65535). */
  constructor(capacity: number = REVNAT_MAX_ID, opts?: MapOptions) {
    checkRange(capacity, 1, 0x10000, 'RevNatMap: capacity');
    const cap = Math.min(capacity, REVNAT_MAX_ID);
    const ipv6 = opts?.ipv6 === true;
    const words = ipv6 ? ADDR6_WORDS : 1;
    const { views: v, buffer } = carve((c) => layout(c, cap, words), opts, 'RevNatMap');
    const magic = ipv6 ? MAGIC6 : MAGIC;
    this.ipv6 = ipv6;
    this.capacity = cap;
    this.buffer = buffer;
    this.hdr = v.hdr;
    this.vip_ = v.vip;
    this.port_ = v.port;
    this.live = v.live;
    if (opts?.buffer && !isZeroHeader(v.hdr)) {
      if (v.hdr[H_MAGIC] !== magic || v.hdr[H_CAPACITY] !== cap) {
        throw new RangeError(`RevNatMap: attached buffer is not a RevNatMap of capacity ${cap}`);
      }
    } else {
      v.hdr[H_MAGIC] = magic;
      v.hdr[H_CAPACITY] = cap;
    }
  }

  get size(): number {
    return this.hdr[H_SIZE];
  }

  /** Entry index (= id) if `id` is present, else -1. No allocation, no throw. */
  lookup(id: number): number {
    return id >= 1 && id <= this.capacity && this.live[id] === 1 ? id : -1;
  }

  /** The VIP as int32 (`| 0`, the fast path's form); `>>> 0` for the unsigned one. */
  vip(i: number): number {
    return this.vip_[i];
  }
  /** Word k (0..3, most significant first) of an IPv6 id's VIP, as int32. */
  vipWord(i: number, k: number): number {
    return this.vip_[(i << 2) + k];
  }
  port(i: number): number {
    return this.port_[i];
  }

  /** Insert or update id (1..capacity). Always true: a direct-indexed map is never full. */
  upsert(id: number, vip: MapAddr, port: number): boolean {
    checkRange(id, 1, this.capacity, 'RevNatMap.upsert: id');
    checkAddr(vip, this.ipv6, 'RevNatMap.upsert: vip');
    checkRange(port, 0, 0xffff, 'RevNatMap.upsert: port');
    if (this.live[id] === 0) {
      this.live[id] = 1;
      this.hdr[H_SIZE]++;
    }
    if (typeof vip === 'number') this.vip_[id] = vip;
    else addr6Put(this.vip_, id, vip, 0);
    this.port_[id] = port;
    return true;
  }

  /** Delete id. False if it was not there. */
  delete(id: number): boolean {
    if (this.lookup(id) < 0) return false;
    this.live[id] = 0;
    this.hdr[H_SIZE]--;
    return true;
  }

  /** First present id >= from, or -1. */
  next(from: number): number {
    for (let id = Math.max(from, 1); id <= this.capacity; id++) if (this.live[id] === 1) return id;
    return -1;
  }

  clear(): void {
    this.live.fill(0);
    this.hdr[H_SIZE] = 0;
  }
}

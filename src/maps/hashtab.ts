// Shared core of the eBPF-style maps: one backing buffer per map, a hash index with open
// addressing, and an entry pool with stable entry indices.
//
// Shape of every hashed map (services, backends, conntrack):
//
//   index: Uint32Array[slots]      slots = 2 * capacity (power of two), max load factor 0.5
//            0 = empty, else entry + 1; linear probing; backward-shift deletion (no tombstones,
//            so probe chains never degrade with churn and no reclaim pass is needed)
//   entries: struct-of-arrays columns, one typed array per field, indexed by entry number
//   pool:  live bitmap (1 bit per entry) + free list threaded through one u32 column of the
//          owner's entries (the column is garbage while an entry is free)
//
// Entries never move: an entry index returned by a lookup stays valid until that entry is
// deleted, whatever else is inserted or deleted. Only index slots move on deletion.
//
// Why a load factor of 0.5: with linear probing the expected probe count is about
// 1/2 (1 + 1/(1-a)) for hits and 1/2 (1 + 1/(1-a)^2) for misses (Knuth); at a = 0.5 that is
// 1.5 and 2.5 slots, at 0.75 already 2.5 and 8.5. Conntrack does a miss (new flow) for every
// flow, so misses matter. The index then costs 8 bytes per entry.
//
// Capacity is rounded up to a power of two so the index is exactly twice the entry count
// (rounding the index instead would leave up to 4x slack and break conntrack's 64 B budget).
//
// Sharing: all state, including size, free list head and hash seed, lives in one ArrayBuffer
// or SharedArrayBuffer (`{ shared: true }`); another thread attaches with `{ buffer }`, and so
// does a restarted agent to a pinned map (a file mapping, src/node/pin.ts; an all-zero header
// there means a new map). A change to a map's columns changes its MAGIC: attaching refuses it.
// There is no locking: one writer at a time; readers in other threads may observe a slot
// mid-update and must tolerate a spurious miss.

export interface MapOptions {
  /**
   * the map's addresses are IPv6: four int32 words each, most significant first (Cilium's
   * lb6_* / ct6 maps). Such a map is used through its `…6` methods; the IPv4 ones are for
   * maps without this flag.
   */
  ipv6?: boolean;
  /** back the map with a SharedArrayBuffer so worker threads can attach to it */
  shared?: boolean;
  /** hash seed; default random per map (placement only, never observable in results) */
  seed?: number;
  /** attach to the backing buffer of an existing map of the same kind and capacity */
  buffer?: ArrayBuffer | SharedArrayBuffer;
}

/** Largest supported capacity: keeps the biggest map (conntrack) below 2 GiB of typed arrays. */
export const MAX_CAPACITY = 1 << 25;

/** Round a requested capacity up to a power of two; throws RangeError for nonsense. */
export function roundCapacity(requested: number, what: string): number {
  if (!Number.isInteger(requested) || requested < 1 || requested > MAX_CAPACITY) {
    throw new RangeError(
      `${what}: capacity must be an integer in 1..${MAX_CAPACITY}, got ${requested}`,
    );
  }
  let c = 1;
  while (c < requested) c *= 2;
  return c;
}

// ---------------------------------------------------------------------------------------------
// Hashing: MurmurHash3 (x86_32) body and finaliser over whole u32 words. Every IPv4 key is at
// most four words, so there is one entry point per word count and no key array; an IPv6 key
// (an address is four words) is hashed with hashStep / hashAddr6 / hashEnd, the same arithmetic.

const C1 = 0xcc9e2d51;
const C2 = 0x1b873593;

function mmStep(h: number, k: number): number {
  k = Math.imul(k, C1);
  k = (k << 15) | (k >>> 17);
  k = Math.imul(k, C2);
  h ^= k;
  h = (h << 13) | (h >>> 19);
  return (Math.imul(h, 5) + 0xe6546b64) | 0;
}

/**
 * The MurmurHash3 finaliser: full avalanche of a 32-bit value. Returns a signed int32 (smi on
 * 64-bit V8): callers only ever `& mask` it, and `>>> 0` would give a heap number for half of
 * all hashes whenever this is not inlined (measured: one boxing per lookup).
 */
export function mix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

export function hash1(seed: number, a: number): number {
  return mix32(mmStep(seed, a) ^ 4);
}

export function hash3(seed: number, a: number, b: number, c: number): number {
  return mix32(mmStep(mmStep(mmStep(seed, a), b), c) ^ 12);
}

export function hash4(seed: number, a: number, b: number, c: number, d: number): number {
  return mix32(mmStep(mmStep(mmStep(mmStep(seed, a), b), c), d) ^ 16);
}

/** One MurmurHash3 body step: fold word k into h (keys longer than four words). */
export function hashStep(h: number, k: number): number {
  return mmStep(h, k);
}

/** Fold the four words of the IPv6 address at a[at..at+4) into h. */
export function hashAddr6(h: number, a: Int32Array, at: number): number {
  return mmStep(mmStep(mmStep(mmStep(h, a[at]), a[at + 1]), a[at + 2]), a[at + 3]);
}

/** Finish a hash of `words` words begun at the seed (hashN(seed, …) is hashEnd of N steps). */
export function hashEnd(h: number, words: number): number {
  return mix32(h ^ (words << 2));
}

/** Words of one IPv6 address in a map column and in the fast path's scratch arrays. */
export const ADDR6_WORDS = 4;

/** Whether col[e*4..e*4+4) holds the address a[at..at+4). */
export function addr6Eq(col: Int32Array, e: number, a: Int32Array, at: number): boolean {
  const k = e << 2;
  return (
    col[k] === a[at] &&
    col[k + 1] === a[at + 1] &&
    col[k + 2] === a[at + 2] &&
    col[k + 3] === a[at + 3]
  );
}

/** Copy the address a[at..at+4) into col at entry e. */
export function addr6Put(col: Int32Array, e: number, a: Int32Array, at: number): void {
  const k = e << 2;
  col[k] = a[at];
  col[k + 1] = a[at + 1];
  col[k + 2] = a[at + 2];
  col[k + 3] = a[at + 3];
}

/**
 * An address as the slow world hands it to a map writer: a u32/int32 for IPv4, four int32 words
 * (most significant first) for IPv6. Which one a map takes follows its `ipv6` option.
 */
export type MapAddr = number | Int32Array;

/** Control-plane check of a writer's address argument against the map's family. Throws. */
export function checkAddr(a: MapAddr, ipv6: boolean, what: string): void {
  if (ipv6) {
    if (!(a instanceof Int32Array) || a.length !== ADDR6_WORDS) {
      throw new RangeError(`${what} must be an IPv6 address (four int32 words)`);
    }
  } else if (typeof a !== 'number') {
    throw new RangeError(`${what} must be an IPv4 address (a u32)`);
  } else {
    checkRange(a, 0, 0xffffffff, what);
  }
}

export function randomSeed(): number {
  return (Math.random() * 0x100000000) >>> 0;
}

// ---------------------------------------------------------------------------------------------
// Backing buffer: every column is a view at an 8-byte aligned offset of one buffer. A map lays
// itself out twice through the same function: once with a measuring carver, once for real.

export class Carver {
  private off = 0;
  constructor(private readonly buf: ArrayBuffer | SharedArrayBuffer | null) {}

  get bytes(): number {
    return this.off;
  }

  private take(bytes: number): number {
    const at = this.off;
    this.off += (bytes + 7) & ~7;
    return at;
  }

  u32(n: number): Uint32Array {
    const at = this.take(n * 4);
    return this.buf ? new Uint32Array(this.buf, at, n) : new Uint32Array(0);
  }

  /** Signed columns: addresses and packed ports, int32 on the fast path (never heap numbers). */
  i32(n: number): Int32Array {
    const at = this.take(n * 4);
    return this.buf ? new Int32Array(this.buf, at, n) : new Int32Array(0);
  }

  u16(n: number): Uint16Array {
    const at = this.take(n * 2);
    return this.buf ? new Uint16Array(this.buf, at, n) : new Uint16Array(0);
  }

  u8(n: number): Uint8Array {
    const at = this.take(n);
    return this.buf ? new Uint8Array(this.buf, at, n) : new Uint8Array(0);
  }
}

/** Run `layout` to measure, allocate (or validate an attached buffer), and run it for real. */
export function carve<T>(
  layout: (c: Carver) => T,
  opts: MapOptions | undefined,
  what: string,
): { views: T; buffer: ArrayBuffer | SharedArrayBuffer } {
  const measure = new Carver(null);
  layout(measure);
  let buffer = opts?.buffer;
  if (buffer) {
    if (buffer.byteLength !== measure.bytes) {
      throw new RangeError(
        `${what}: attached buffer is ${buffer.byteLength} bytes, layout needs ${measure.bytes}`,
      );
    }
  } else {
    buffer = opts?.shared ? new SharedArrayBuffer(measure.bytes) : new ArrayBuffer(measure.bytes);
  }
  return { views: layout(new Carver(buffer)), buffer };
}

// ---------------------------------------------------------------------------------------------
// Header words shared by the hashed maps (they live in the backing buffer).

export const H_MAGIC = 0;
export const H_CAPACITY = 1;
export const H_SIZE = 2;
export const H_FREE = 3; // free list head, entry + 1 (0 = empty list)
export const H_BUMP = 4; // entries [0, bump) have been handed out at least once
export const H_SEED = 5;
export const H_WORDS = 8;

/**
 * An attached buffer whose header is all zero is a new map (a pinned map's freshly created
 * file, src/node/pin.ts): it is initialised, not validated.
 */
export function isZeroHeader(hdr: Uint32Array): boolean {
  for (let i = 0; i < H_WORDS; i++) if (hdr[i] !== 0) return false;
  return true;
}

/** Initialise a fresh header, or validate an attached one. Returns the seed to use. */
export function initHeader(
  hdr: Uint32Array,
  magic: number,
  capacity: number,
  opts: MapOptions | undefined,
  what: string,
): number {
  if (opts?.buffer && !isZeroHeader(hdr)) {
    if (hdr[H_MAGIC] !== magic || hdr[H_CAPACITY] !== capacity) {
      throw new RangeError(`${what}: attached buffer is not a ${what} of capacity ${capacity}`);
    }
    return hdr[H_SEED];
  }
  hdr[H_MAGIC] = magic;
  hdr[H_CAPACITY] = capacity;
  hdr[H_SEED] = opts?.seed === undefined ? randomSeed() : opts.seed >>> 0;
  return hdr[H_SEED];
}

/**
 * Constructor prologue of every hashed map (control plane, may throw): round the capacity,
 * carve or attach the buffer for `layout`, then initialise or validate the header.
 */
export function openHashedMap<T extends { hdr: Uint32Array }>(
  capacity: number,
  layout: (c: Carver, cap: number) => T,
  magic: number,
  opts: MapOptions | undefined,
  what: string,
): { cap: number; views: T; buffer: ArrayBuffer | SharedArrayBuffer; seed: number } {
  const cap = roundCapacity(capacity, what);
  const { views, buffer } = carve((c) => layout(c, cap), opts, what);
  const seed = initHeader(views.hdr, magic, cap, opts, what);
  return { cap, views, buffer, seed };
}

// ---------------------------------------------------------------------------------------------

/** How an index finds the home slot of an entry it holds (needed by backward-shift delete). */
export interface EntryHasher {
  entryHash(e: number): number;
}

/**
 * Open-addressing index from hash to entry number. Lookups are written out in each map (a
 * monomorphic loop comparing that map's columns); this class owns insertion and deletion.
 * Callers keep the load factor below 1 (the pool capacity is half the slot count), so every
 * probe loop meets an empty slot and terminates.
 */
export class HashIndex {
  readonly mask: number;

  constructor(
    readonly slots: Uint32Array,
    private readonly hasher: EntryHasher,
  ) {
    this.mask = slots.length - 1;
  }

  /** Insert entry `e` whose hash is `h`. The key must not be present already. */
  insert(h: number, e: number): void {
    const slots = this.slots;
    const mask = this.mask;
    let i = h & mask;
    while (slots[i] !== 0) i = (i + 1) & mask;
    slots[i] = e + 1;
  }

  /** Slot holding entry `e`, or -1. Uses the entry's current key to find its chain. */
  slotOf(e: number): number {
    const slots = this.slots;
    const mask = this.mask;
    for (let i = this.hasher.entryHash(e) & mask; ; i = (i + 1) & mask) {
      const v = slots[i];
      if (v === 0) return -1;
      if (v === e + 1) return i;
    }
  }

  /** Remove entry `e` (by its current key). Returns false if it was not indexed. */
  remove(e: number): boolean {
    const i = this.slotOf(e);
    if (i < 0) return false;
    this.shiftBack(i);
    return true;
  }

  /**
   * Backward-shift deletion (Knuth 6.4 Algorithm R): empty slot `hole`, then walk the rest of
   * the cluster and move back every entry whose home slot does not lie cyclically in
   * (hole, j], so that no chain is broken by the hole.
   */
  private shiftBack(hole: number): void {
    const slots = this.slots;
    const mask = this.mask;
    for (let j = (hole + 1) & mask; ; j = (j + 1) & mask) {
      const v = slots[j];
      if (v === 0) break;
      const home = this.hasher.entryHash(v - 1) & mask;
      // distance from home to j versus distance from hole to j, both cyclic
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        slots[hole] = v;
        hole = j;
      }
    }
    slots[hole] = 0;
  }

  clear(): void {
    this.slots.fill(0);
  }
}

/**
 * Entry allocator over [0, capacity): a live bitmap and a free list threaded through a u32
 * column of the owner (`link`). Fresh entries come from a bump pointer so a new map needs no
 * initialisation pass over the free list.
 */
export class EntryPool {
  constructor(
    private readonly hdr: Uint32Array,
    readonly live: Uint32Array,
    private readonly link: Uint32Array,
    readonly capacity: number,
  ) {}

  get size(): number {
    return this.hdr[H_SIZE];
  }

  isLive(e: number): boolean {
    // (e | 0) === e rejects NaN and fractions, which would otherwise alias entry e & 31
    return (
      (e | 0) === e && e >= 0 && e < this.capacity && (this.live[e >>> 5] & (1 << (e & 31))) !== 0
    );
  }

  /** A free entry number, now live, or -1 when all `capacity` entries are live. */
  alloc(): number {
    const hdr = this.hdr;
    let e: number;
    if (hdr[H_FREE] !== 0) {
      e = hdr[H_FREE] - 1;
      hdr[H_FREE] = this.link[e];
    } else if (hdr[H_BUMP] < this.capacity) {
      e = hdr[H_BUMP]++;
    } else {
      return -1;
    }
    this.live[e >>> 5] |= 1 << (e & 31);
    hdr[H_SIZE]++;
    return e;
  }

  /** Return a live entry to the pool (caller checked isLive). Clobbers link[e]. */
  release(e: number): void {
    this.live[e >>> 5] &= ~(1 << (e & 31));
    this.link[e] = this.hdr[H_FREE];
    this.hdr[H_FREE] = e + 1;
    this.hdr[H_SIZE]--;
  }

  /** First live entry >= from, or -1. Skips whole empty bitmap words. */
  nextLive(from: number): number {
    const live = this.live;
    const end = this.hdr[H_BUMP];
    let e = Math.max(from, 0);
    while (e < end) {
      const word = live[e >>> 5] >>> (e & 31);
      if (word === 0) {
        e = (e | 31) + 1;
        continue;
      }
      return e + (31 - Math.clz32(word & -word));
    }
    return -1;
  }

  clear(): void {
    this.live.fill(0);
    this.hdr[H_SIZE] = 0;
    this.hdr[H_FREE] = 0;
    this.hdr[H_BUMP] = 0;
  }
}

/** Control-plane argument check: `v` must be an integer in [min, max]. Throws RangeError. */
export function checkRange(v: number, min: number, max: number, what: string): void {
  if (!Number.isInteger(v) || v < min || v > max) {
    throw new RangeError(`${what} must be an integer in ${min}..${max}, got ${v}`);
  }
}

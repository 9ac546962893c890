// The event ring: per-packet events of the datapath (verdict, reason, stages, the 5-tuple before
// and after, the map entries used, optionally the packet bytes as received and as written) in a
// fixed-size ring in one SharedArrayBuffer — what `kubetun monitor` and `kubetun tap` read.
// Cilium's perf ring of trace/drop notifications, in typed arrays.
//
// Contract:
//   - the writer (dpProcess, through stages/observe.ts) never allocates, never throws, never
//     waits: a full ring overwrites its oldest event; readers notice and count what they lost;
//   - events are filtered BEFORE emission: up to SUBSCRIBERS_MAX filters (reason set, address,
//     port, protocol, drops or traces only); an event no filter matches costs no slot, one that
//     matches carries a bit per matching subscriber (`mask`), so readers with different filters
//     share one ring;
//   - with nobody subscribed `on` is 0 and dpProcess takes its usual path: one branch;
//   - the buffer is a SharedArrayBuffer, so a reader may live in another worker: a slot's `seq`
//     word is written last (Atomics.store) and a reader checks it before and after copying.
//
// Slot layout (Int32 words; the time is in a Float64 column beside):
//   0 seq+1 · 1 subscriber mask · 2 reason · 3 verdict | stages << 8 | proto << 16 | ctNew << 24
//     | ipv6 << 25 (an IPv6 packet: the address words below are its addresses' low 32 bits)
//   4 saddr · 5 daddr · 6 sport << 16 | dport  (before: as received)
//   7 saddr · 8 daddr · 9 sport << 16 | dport  (after: as written; = before when not rewritten)
//   10 backend id · 11 conntrack entry (-1 none) · 12 service (revNat id, 0 none) · 13 length
//   14 captured bytes before · 15 captured bytes after (0 unless capture is on)

/** Slot words (see the layout above). */
export const EV_SEQ = 0;
export const EV_MASK = 1;
export const EV_REASON = 2;
export const EV_FLAGS = 3;
export const EV_SADDR = 4;
export const EV_DADDR = 5;
export const EV_PORTS = 6;
export const EV_A_SADDR = 7;
export const EV_A_DADDR = 8;
export const EV_A_PORTS = 9;
export const EV_BACKEND = 10;
export const EV_CT = 11;
export const EV_SERVICE = 12;
export const EV_LEN = 13;
export const EV_CAP_BEFORE = 14;
export const EV_CAP_AFTER = 15;
export const EV_WORDS = 16;

/** EV_FLAGS bit: the event is an IPv6 packet's (addresses hold the low 32 bits of each). */
export const EV_F_IPV6 = 1 << 25;

/** Stage bits in EV_FLAGS >> 8: which parts of the program the packet went through. */
export const ST_PARSE = 1;
export const ST_CT = 2;
export const ST_LB = 4;
export const ST_NAT = 8;
export const ST_REJECT = 16;
export const ST_FRAG = 32;
export const ST_ICMP = 64;
export const STAGE_NAMES: readonly string[] = [
  'parse',
  'ct',
  'lb',
  'nat',
  'reject',
  'frag',
  'icmp',
];

export const SUBSCRIBERS_MAX = 8;
/** Filter words per subscriber. */
const F_ACTIVE = 0;
/** 0 every event, 1 drops only, 2 everything but drops (`--type trace`) */
const F_TYPE = 1;
const F_PROTO = 2;
const F_ADDR = 3;
const F_ADDR_SET = 4;
const F_PORT = 5;
/** reason bitmap words (REASONS fit in 64 bits for now; 4 words leave room for 128) */
const F_REASONS = 6;
const F_REASON_WORDS = 4;
const F_WORDS = F_REASONS + F_REASON_WORDS;

export const FILTER_ALL = 0;
export const FILTER_DROPS = 1;
export const FILTER_TRACES = 2;

/** What one subscriber wants; every field optional (absent = any). */
export interface EventFilter {
  type?: typeof FILTER_ALL | typeof FILTER_DROPS | typeof FILTER_TRACES;
  proto?: number;
  /** int32 or u32 address; matches source or destination, before or after translation */
  addr?: number;
  /** matches source or destination port, before or after translation */
  port?: number;
  /** reason numbers (state/reasons.ts); empty or absent = every reason */
  reasons?: readonly number[];
}

/** Header words. */
const H_HEAD = 0; // events written (u32, wraps)
const H_SUBS = 1; // bitmask of active subscribers
const H_WORDS = 4;

export interface EventRingOptions {
  /** slots, a power of two (default 4096) */
  capacity?: number;
  /** bytes of each packet kept per side when capture is on (default 2048) */
  snap?: number;
}

export class EventRing {
  readonly capacity: number;
  readonly snap: number;
  readonly buffer: SharedArrayBuffer;
  /** 1 while any subscriber is active: dpProcess's one branch reads this */
  on = 0;
  /** 1 while any subscriber asked for packet bytes (tap) */
  capture = 0;
  private readonly mask: number;
  private readonly hdr: Int32Array;
  private readonly slots: Int32Array;
  private readonly times: Float64Array;
  private readonly filters: Int32Array;
  /** capture area: slot i's bytes before at i*2*snap, after at i*2*snap + snap */
  readonly bytes: Uint8Array;
  private readonly captureSubs: boolean[] = new Array<boolean>(SUBSCRIBERS_MAX).fill(false);

  constructor(opts: EventRingOptions = {}) {
    const cap = opts.capacity ?? 4096;
    if (!Number.isInteger(cap) || cap < 2 || cap > 1 << 20 || (cap & (cap - 1)) !== 0) {
      throw new RangeError(`EventRing: capacity must be a power of two in 2..2^20, got ${cap}`);
    }
    const snap = opts.snap ?? 2048;
    if (!Number.isInteger(snap) || snap < 0 || snap > 65535) {
      throw new RangeError(`EventRing: snap must be 0..65535 bytes, got ${snap}`);
    }
    this.capacity = cap;
    this.snap = snap;
    this.mask = cap - 1;
    const words = H_WORDS + SUBSCRIBERS_MAX * F_WORDS + cap * EV_WORDS;
    const timeBytes = cap * 8;
    const intBytes = words * 4;
    const timeAt = Math.ceil(intBytes / 8) * 8;
    const bytesAt = timeAt + timeBytes;
    this.buffer = new SharedArrayBuffer(bytesAt + cap * 2 * snap);
    this.hdr = new Int32Array(this.buffer, 0, H_WORDS);
    this.filters = new Int32Array(this.buffer, H_WORDS * 4, SUBSCRIBERS_MAX * F_WORDS);
    this.slots = new Int32Array(this.buffer, (H_WORDS + SUBSCRIBERS_MAX * F_WORDS) * 4);
    this.times = new Float64Array(this.buffer, timeAt, cap);
    this.bytes = new Uint8Array(this.buffer, bytesAt, cap * 2 * snap);
  }

  /** Events written so far (u32, wraps at 2^32). */
  get head(): number {
    return Atomics.load(this.hdr, H_HEAD) >>> 0;
  }

  // ---- fast path (dpProcess, via stages/observe.ts) -----------------------------------------

  /** Where the slot the next event would take keeps its bytes before (capture). */
  nextBytesAt(): number {
    return ((this.hdr[H_HEAD] >>> 0) & this.mask) * 2 * this.snap;
  }

  /**
   * The subscribers that want an event with these fields (bit per subscriber), 0 for none.
   * Addresses int32, ports 0..65535; allocation-free.
   */
  match(
    reason: number,
    drop: number,
    proto: number,
    s: number,
    d: number,
    ports: number,
    as: number,
    ad: number,
    aports: number,
  ): number {
    const subs = this.hdr[H_SUBS];
    const f = this.filters;
    let m = 0;
    for (let k = 0; k < SUBSCRIBERS_MAX; k++) {
      if ((subs & (1 << k)) === 0) continue;
      const b = k * F_WORDS;
      const type = f[b + F_TYPE];
      if (type === FILTER_DROPS && drop === 0) continue;
      if (type === FILTER_TRACES && drop !== 0) continue;
      const p = f[b + F_PROTO];
      if (p !== 0 && p !== proto) continue;
      if (f[b + F_ADDR_SET] !== 0) {
        const a = f[b + F_ADDR];
        if (a !== s && a !== d && a !== as && a !== ad) continue;
      }
      const port = f[b + F_PORT];
      if (port !== 0 && !portIn(port, ports) && !portIn(port, aports)) continue;
      if ((f[b + F_REASONS + (reason >>> 5)] & (1 << (reason & 31))) === 0) continue;
      m |= 1 << k;
    }
    return m;
  }

  /**
   * Writes one event into the next slot (words already matched by `match`). capBefore and
   * capAfter are byte counts the caller copied into this slot's capture area.
   */
  emit(
    mask: number,
    nowMs: number,
    reason: number,
    flags: number,
    s: number,
    d: number,
    ports: number,
    as: number,
    ad: number,
    aports: number,
    backend: number,
    ct: number,
    service: number,
    len: number,
    capBefore: number,
    capAfter: number,
  ): void {
    const head = this.hdr[H_HEAD] >>> 0;
    const w = (head & this.mask) * EV_WORDS;
    const sl = this.slots;
    Atomics.store(sl, w + EV_SEQ, 0); // a reader copying this slot now sees it change
    sl[w + EV_MASK] = mask;
    sl[w + EV_REASON] = reason;
    sl[w + EV_FLAGS] = flags;
    sl[w + EV_SADDR] = s;
    sl[w + EV_DADDR] = d;
    sl[w + EV_PORTS] = ports;
    sl[w + EV_A_SADDR] = as;
    sl[w + EV_A_DADDR] = ad;
    sl[w + EV_A_PORTS] = aports;
    sl[w + EV_BACKEND] = backend;
    sl[w + EV_CT] = ct;
    sl[w + EV_SERVICE] = service;
    sl[w + EV_LEN] = len;
    sl[w + EV_CAP_BEFORE] = capBefore;
    sl[w + EV_CAP_AFTER] = capAfter;
    this.times[head & this.mask] = nowMs;
    Atomics.store(sl, w + EV_SEQ, (head + 1) | 0);
    Atomics.store(this.hdr, H_HEAD, (head + 1) | 0);
  }

  // ---- slow path (the agent: subscribe, read) -----------------------------------------------

  /** Takes a free subscriber slot with this filter; returns its number, or -1 when all are taken. */
  subscribe(filter: EventFilter = {}, capture = false): number {
    const subs = this.hdr[H_SUBS];
    let k = 0;
    while (k < SUBSCRIBERS_MAX && (subs & (1 << k)) !== 0) k++;
    if (k === SUBSCRIBERS_MAX) return -1;
    const b = k * F_WORDS;
    const f = this.filters;
    f.fill(0, b, b + F_WORDS);
    f[b + F_ACTIVE] = 1;
    f[b + F_TYPE] = filter.type ?? FILTER_ALL;
    f[b + F_PROTO] = filter.proto ?? 0;
    f[b + F_ADDR_SET] = filter.addr === undefined ? 0 : 1;
    f[b + F_ADDR] = (filter.addr ?? 0) | 0;
    f[b + F_PORT] = filter.port ?? 0;
    const reasons = filter.reasons ?? [];
    if (reasons.length === 0) f.fill(-1, b + F_REASONS, b + F_REASONS + F_REASON_WORDS);
    for (const r of reasons) {
      if (!Number.isInteger(r) || r < 0 || r >= 32 * F_REASON_WORDS) {
        throw new RangeError(`EventRing: reason ${r} out of range`);
      }
      f[b + F_REASONS + (r >>> 5)] |= 1 << (r & 31);
    }
    this.captureSubs[k] = capture && this.snap > 0;
    Atomics.store(this.hdr, H_SUBS, subs | (1 << k));
    this.refresh();
    return k;
  }

  unsubscribe(k: number): void {
    if (k < 0 || k >= SUBSCRIBERS_MAX) return;
    this.filters[k * F_WORDS + F_ACTIVE] = 0;
    this.captureSubs[k] = false;
    Atomics.store(this.hdr, H_SUBS, this.hdr[H_SUBS] & ~(1 << k));
    this.refresh();
  }

  get subscribers(): number {
    let n = 0;
    for (let k = 0; k < SUBSCRIBERS_MAX; k++) if ((this.hdr[H_SUBS] & (1 << k)) !== 0) n++;
    return n;
  }

  private refresh(): void {
    this.on = this.hdr[H_SUBS] !== 0 ? 1 : 0;
    this.capture = this.captureSubs.some(Boolean) ? 1 : 0;
  }

  /**
   * Copies event number `seq` (0-based, u32) into `out` (EV_WORDS words); returns its time in
   * ms, or -1 when that event was overwritten meanwhile (the reader lost it) or not written yet.
   */
  read(seq: number, out: Int32Array): number {
    const i = (seq >>> 0) & this.mask;
    const w = i * EV_WORDS;
    const want = ((seq >>> 0) + 1) | 0;
    if (Atomics.load(this.slots, w + EV_SEQ) !== want) return -1;
    for (let k = 0; k < EV_WORDS; k++) out[k] = this.slots[w + k];
    const t = this.times[i];
    if (Atomics.load(this.slots, w + EV_SEQ) !== want) return -1;
    return t;
  }

  /** The captured bytes of event `seq` (copies; slow path): before and after. */
  capturedBytes(seq: number, before: number, after: number): [Uint8Array, Uint8Array] {
    const at = ((seq >>> 0) & this.mask) * 2 * this.snap;
    return [
      this.bytes.slice(at, at + before),
      this.bytes.slice(at + this.snap, at + this.snap + after),
    ];
  }
}

function portIn(port: number, packed: number): boolean {
  return packed >>> 16 === port || (packed & 0xffff) === port;
}

/**
 * A reader's position in the ring: events it has not read yet, events it lost (overwritten
 * before it came to them, or dropped by the reader itself because its client fell behind).
 */
export class RingCursor {
  next: number;
  lost = 0;
  constructor(readonly ring: EventRing) {
    this.next = ring.head;
  }

  /**
   * Calls `fn(seq, time, words)` for each event written since the last call (oldest first),
   * at most `max`; skips ahead past overwritten events, counting them lost. `words` is reused.
   */
  drain(
    words: Int32Array,
    fn: (seq: number, timeMs: number, w: Int32Array) => void,
    max = Number.MAX_SAFE_INTEGER,
  ): number {
    const head = this.ring.head;
    let behind = (head - this.next) >>> 0;
    if (behind > this.ring.capacity) {
      this.lost += behind - this.ring.capacity;
      this.next = (head - this.ring.capacity) >>> 0;
      behind = this.ring.capacity;
    }
    let n = 0;
    while (this.next !== head && n < max) {
      const t = this.ring.read(this.next, words);
      if (t < 0) this.lost++;
      else fn(this.next, t, words);
      this.next = (this.next + 1) >>> 0;
      n++;
    }
    return n;
  }
}

// The per-packet benchmark harness: packet sets, services seeded straight into the maps, and
// the timed loops around dpProcess. bench-datapath.ts uses it for its tables; bench-ab.ts loads
// two copies of it — this tree's and one copied into an extracted git revision — so each side
// gets its own loop functions (their own inline caches: one call site never sees both
// programs) over its own tree's program.
//
// Only tree-relative imports of modules that have existed since the datapath took its layered
// shape (state/, program.ts, maps/services.ts, wire/). bench-ab gives a revision from before the
// layering (51411f6) two re-export files at the new paths (layoutShims there); one missing
// anything else is refused with the import error. bench/count-child.ts runs this file under
// callgrind, one process per side and scenario.

import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { dpProcess } from '../../src/datapath/program.ts';
import { REASON_NAMES } from '../../src/datapath/state/reasons.ts';
import { SVC_F_WILDCARD } from '../../src/maps/services.ts';
import { ipv4FillCsum } from '../../src/wire/ipv4.ts';
import { l4FillCsum } from '../../src/wire/checksum.ts';

export type { Datapath };
export { dpProcess, createDatapath };

export const STRIDE = 64; // bytes per packet slot in the packet buffers
export const PKT = 40; // IPv4 + TCP, no options
export const BACKENDS_PER_SVC = 3;
export const NOW = 1_700_000_000_000;
export const SYN = 2;
export const ACK = 16;

const VIP_BASE = 0x0a600000; // 10.96.0.0
const BE_BASE = 0x0af40000; // 10.244.0.0
const CLIENT_BASE = 0x0a010000; // 10.1.0.0

export function clientOf(f: number): number {
  return (CLIENT_BASE + (f >>> 14)) >>> 0;
}
export function sportOf(f: number): number {
  return 1024 + (f & 0x3fff);
}
export function vipOf(i: number): number {
  return (VIP_BASE + i) >>> 0;
}
export function beOf(i: number, k: number): number {
  return (BE_BASE + i * BACKENDS_PER_SVC + k) >>> 0;
}

export function mpps(packets: number, ns: number): number {
  return (packets / ns) * 1e3;
}

// ---- packets ---------------------------------------------------------------------------------

function w16(b: Uint8Array, at: number, v: number): void {
  b[at] = v >>> 8;
  b[at + 1] = v;
}
function w32(b: Uint8Array, at: number, v: number): void {
  w16(b, at, v >>> 16);
  w16(b, at + 2, v & 0xffff);
}

/** A 40-byte IPv4/TCP packet with valid checksums at b[off..off+40). */
export function writeTcp(
  b: Uint8Array,
  off: number,
  src: number,
  dst: number,
  sport: number,
  dport: number,
  flags: number,
): void {
  b.fill(0, off, off + PKT);
  b[off] = 0x45;
  w16(b, off + 2, PKT);
  b[off + 8] = 64;
  b[off + 9] = 6;
  w32(b, off + 12, src);
  w32(b, off + 16, dst);
  w16(b, off + 20, sport);
  w16(b, off + 22, dport);
  w32(b, off + 24, 1000);
  b[off + 32] = 5 << 4;
  b[off + 33] = flags;
  w16(b, off + 34, 64240);
  ipv4FillCsum(b, off);
  l4FillCsum(b, off);
}

/** A buffer of n packet slots followed by n pristine copies (restored before each run). */
export interface PacketSet {
  buf: Uint8Array;
  /** the same memory as 32-bit words: restoring a packet is 10 word copies (copyWithin costs a
   * ~300 ns builtin call per packet, more than the program itself) */
  words: Uint32Array;
  n: number;
  /** bytes per packet (PKT, or PKT6 for harness6's IPv6 sets); a multiple of 4 */
  len: number;
}

export function packetSet(
  n: number,
  write: (b: Uint8Array, off: number, f: number) => void,
  len = PKT,
): PacketSet {
  // Slot k carries flow perm[k]: the buffer is walked in order, like a batch read from the TUN
  // (hot in cache), while consecutive packets belong to unrelated flows, as on a real link.
  const perm = new Uint32Array(n);
  for (let i = 0; i < n; i++) perm[i] = i;
  let s = 0x9e3779b9;
  for (let i = n - 1; i > 0; i--) {
    s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) | 0;
    const j = (s >>> 0) % (i + 1);
    const t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  const buf = new Uint8Array(2 * n * STRIDE);
  for (let k = 0; k < n; k++) write(buf, k * STRIDE, perm[k]);
  buf.copyWithin(n * STRIDE, 0, n * STRIDE);
  return { buf, words: new Uint32Array(buf.buffer), n, len };
}

// ---- services ----------------------------------------------------------------------------------

/** Seed `count` services straight into the maps (VIP i:80/TCP, 3 backends each), Cilium order. */
export function seedServices(dp: Datapath, count: number): void {
  seedInto(dp.svc, dp.be, count, vipOf, beOf);
}

/** seedServices into one family's service and backend maps, with its addresses. */
export function seedInto<A extends number | Int32Array>(
  svc: Datapath['svc'],
  be: Datapath['be'],
  count: number,
  vipAt: (i: number) => A,
  beAt: (i: number, k: number) => A,
): void {
  for (let i = 0; i < count; i++) {
    const vip = vipAt(i);
    for (let k = 0; k < BACKENDS_PER_SVC; k++) {
      const id = i * BACKENDS_PER_SVC + k + 1;
      be.upsert(id, beAt(i, k), 8080, 6, 0, 0);
      svc.upsertSlot(vip, 80, 6, k + 1, id);
    }
    svc.upsertMaster(vip, 80, 6, BACKENDS_PER_SVC, (i % 65535) + 1, 0, 0, 0);
    svc.upsertMaster(vip, 0, 0, 0, 0, SVC_F_WILDCARD, 0, 0);
  }
}

/** A datapath sized for `services`, seeded by `seed` (IPv4 by default). */
export function datapathFor(
  services: number,
  ctCapacity: number,
  seed: (dp: Datapath, count: number) => void = seedServices,
): Datapath {
  const dp = createDatapath({
    svcCapacity: services * (BACKENDS_PER_SVC + 2) + 16,
    beCapacity: services * BACKENDS_PER_SVC + 16,
    ctCapacity,
    seed: 1,
  });
  seed(dp, services);
  return dp;
}

/** n first packets (SYN) of new flows, flow f toward VIP (f * 7919) % services:80. */
export function synSet(services: number, n: number): PacketSet {
  return packetSet(n, (b, off, f) =>
    writeTcp(b, off, clientOf(f), vipOf((f * 7919) % services), sportOf(f), 80, SYN),
  );
}

/** Flow f of an established run: client (10.1.x.y, port) -> VIP (f % services):80. */
export function flowSet(services: number, flows: number, flags: number): PacketSet {
  return packetSet(flows, (b, off, f) =>
    writeTcp(b, off, clientOf(f), vipOf(f % services), sportOf(f), 80, flags),
  );
}

/** The replies of the flows of flowSet, from whichever backend each flow was given. */
export function replySet(dp: Datapath, services: number, flows: number): PacketSet {
  return packetSet(flows, (b, off, f) => {
    const i = dp.ct.lookupOrig(6, clientOf(f), vipOf(f % services), sportOf(f), 80);
    writeTcp(b, off, dp.ct.baddr(i), clientOf(f), 8080, sportOf(f), ACK);
  });
}

// ---- the event ring (issue 20) ------------------------------------------------------------------

/**
 * How the event ring is set for a run: `off` nobody listens (dpProcess's one branch); `none` a
 * subscriber whose filter matches none of the bench's packets (port 1: the filters run, nothing
 * is written); `all` one that takes every event; `capture` every event with tap's packet bytes.
 */
export type RingMode = 'off' | 'none' | 'all' | 'capture';
export const RING_MODES: readonly RingMode[] = ['off', 'none', 'all', 'capture'];

/** Subscribes as `mode` says; returns the subscriber (-1 for off), for dp.events.unsubscribe. */
export function ringOn(dp: Datapath, mode: RingMode): number {
  if (mode === 'off') return -1;
  // a revision from before the ring (21d185b) has no dp.events
  const ev = (dp as Partial<Datapath>).events;
  if (ev === undefined) throw new Error(`bench: this revision has no event ring (ring ${mode})`);
  return mode === 'none' ? ev.subscribe({ port: 1 }) : ev.subscribe({}, mode === 'capture');
}

// ---- timed loops (kept free of allocation) ---------------------------------------------------

/** Process every packet of `ps` in its order, restoring each from its pristine copy first. */
export function runSet(dp: Datapath, ps: PacketSet, rounds: number, now: number): number {
  const { buf, words, n, len } = ps;
  const pristine = (n * STRIDE) >>> 2;
  const lw = len >>> 2;
  let tx = 0;
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < n; k++) {
      const off = k * STRIDE;
      const w = off >>> 2;
      for (let j = 0; j < lw; j++) words[w + j] = words[pristine + w + j];
      if (dpProcess(dp, buf, off, len, now) === 1) tx++;
    }
  }
  return tx;
}

/** The same loop without dpProcess: the harness cost to subtract. */
export function runCopyOnly(ps: PacketSet, rounds: number): number {
  const { buf, words, n, len } = ps;
  const pristine = (n * STRIDE) >>> 2;
  const lw = len >>> 2;
  let x = 0;
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < n; k++) {
      const off = k * STRIDE;
      const w = off >>> 2;
      for (let j = 0; j < lw; j++) words[w + j] = words[pristine + w + j];
      x += buf[off + 19];
    }
  }
  return x;
}

/**
 * CPU time of this process (user + system), not wall time: "per core" means per CPU-second,
 * and it keeps the figures honest on a shared machine where wall time includes other tenants.
 * (Nothing else runs in the process during a timed loop: no allocation, so no GC threads.)
 */
export function timeIt(fn: () => number): { ns: number; wallNs: number; result: number } {
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const result = fn();
  const wallNs = Number(process.hrtime.bigint() - t0);
  const c = process.cpuUsage(c0);
  return { ns: (c.user + c.system) * 1000, wallNs, result };
}

/** Throws when a run did not give every packet the expected verdict (the figure would lie). */
export function checkAll(dp: Datapath, what: string, got: number, want: number): void {
  if (got !== want) {
    const counts = REASON_NAMES.map((n, i) => `${n}=${dp.counters[i]}`).filter(
      (s) => !s.endsWith('=0'),
    );
    throw new Error(`bench: expected ${want} × ${what}, got ${got} (${counts.join(' ')})`);
  }
}

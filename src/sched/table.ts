// Scheduler state for every service, indexed by reverse-NAT id (the service-port-VIP id the
// datapath already holds in the master entry and in every conntrack entry).
//
// Control plane: set(revNat, kind, backends) builds what the kind needs (eligible list, wrr
// mark, sh/dh buckets, Maglev table) in typed arrays and keeps, across rebuilds, what the
// kernel keeps across destination changes: connection counts per backend id, the rr cursor,
// the wrr current weight. Per packet: pick(...) reads those arrays and returns the candidate
// index (the position in the list given to set(), so slot = index + 1 when the caller lists
// backends in slot order) or -1. No allocation, no throw, O(1) except lc/wlc/sed/nq (O(n)).
//
// Connection counts are the caller's: IPVS counts a connection as active when it is TCP
// ESTABLISHED and inactive otherwise; the datapath calls connAdjust when a flow is created,
// changes class or expires.

import {
  dhBuild,
  dhPick,
  SH_F_FALLBACK,
  SH_F_LEGACY_HASH,
  SH_F_PORT,
  shBuild,
  shPick,
} from './hashing.ts';
import {
  SCHED_DH,
  SCHED_LC,
  SCHED_MAGLEV,
  SCHED_NAMES,
  SCHED_NQ,
  SCHED_RANDOM,
  SCHED_RR,
  SCHED_SED,
  SCHED_SH,
  SCHED_WLC,
  SCHED_WRR,
  type SchedRng,
} from './kinds.ts';
import { lcPick, nqPick, sedPick, wlcPick } from './lc.ts';
import {
  MAGLEV_DEFAULT_M,
  MAGLEV_DEFAULT_SEED,
  type MaglevSeed,
  maglevBackendName,
  maglevBuild,
  maglevPick,
  maglevPick6,
  maglevSeed,
} from './maglev.ts';
import { randomBuild, randomPick, rrPick } from './rr.ts';
import { WRR_WORDS, wrrInit, wrrPick, wrrUpdate } from './wrr.ts';

export interface SchedBackend {
  /** backend id (u32, nonzero), as in the backends map */
  id: number;
  /** 0..65535, default 1; 0 = quiesced (keeps its flows, gets no new ones) */
  weight?: number;
  /** Maglev name; default maglevBackendName(addr, port, proto) */
  name?: string;
  addr?: number;
  port?: number;
  proto?: number;
}

export interface SchedTableOptions {
  /** highest reverse-NAT id + 1; default 65536 */
  capacity?: number;
  /** Maglev M, a prime; default 16381 */
  maglevTableSize?: number;
  /** Maglev seed, base64 of 12 bytes (Cilium's --bpf-lb-maglev-hash-seed); same on every node */
  maglevSeed?: string;
}

/** One service's state. Fields are typed arrays built by the control plane. */
class SvcSched {
  constructor(
    readonly kind: number,
    readonly flags: number,
    readonly n: number,
    readonly ids: Uint32Array,
    readonly weights: Int32Array,
    readonly active: Int32Array,
    readonly inactive: Int32Array,
    /** random: eligible indices; sh/dh/maglev: the lookup table */
    readonly table: Uint16Array,
    /** rr: [cursor]; wrr: the mark (WRR_CL, WRR_CW, WRR_MW, WRR_DI) */
    readonly st: Int32Array,
    /** Maglev names (control plane only) */
    readonly names: readonly string[],
  ) {}
}

const NONE = new SvcSched(
  -1,
  0,
  0,
  new Uint32Array(0),
  new Int32Array(0),
  new Int32Array(0),
  new Int32Array(0),
  new Uint16Array(0),
  new Int32Array(WRR_WORDS),
  [],
);

const SH_FLAGS = SH_F_PORT | SH_F_FALLBACK | SH_F_LEGACY_HASH;

export class SchedulerTable {
  readonly capacity: number;
  readonly maglevTableSize: number;
  readonly seed: MaglevSeed;
  private readonly svcs: SvcSched[];

  constructor(opts: SchedTableOptions = {}) {
    this.capacity = opts.capacity ?? 65536;
    if (!Number.isInteger(this.capacity) || this.capacity < 2 || this.capacity > 65536) {
      throw new Error(`SchedulerTable: capacity must be 2..65536, got ${opts.capacity}`);
    }
    this.maglevTableSize = opts.maglevTableSize ?? MAGLEV_DEFAULT_M;
    this.seed = maglevSeed(opts.maglevSeed ?? MAGLEV_DEFAULT_SEED);
    // Validate M now rather than at the first Maglev service.
    maglevBuild([], new Int32Array(0), 0, this.maglevTableSize, this.seed);
    this.svcs = new Array<SvcSched>(this.capacity).fill(NONE);
  }

  /**
   * A table that picks what this one would pick next and whose picks leave this one as it is
   * (`kubetun trace`'s dry run): the per-pick state (rr cursor, wrr mark, connection counts)
   * copied, the tables built by the control plane shared (picks only read them).
   */
  copy(): SchedulerTable {
    const t = Object.create(SchedulerTable.prototype) as SchedulerTable;
    const svcs = this.svcs.map((s) =>
      s === NONE
        ? NONE
        : new SvcSched(
            s.kind,
            s.flags,
            s.n,
            s.ids,
            s.weights,
            s.active.slice(),
            s.inactive.slice(),
            s.table,
            s.st.slice(),
            s.names,
          ),
    );
    Object.assign(t, { ...this, svcs });
    return t;
  }

  /**
   * Build (or rebuild) a service's scheduler. Returns false, touching nothing, when kind, flags
   * and backends (ids, weights, Maglev names, in order) are what is already there: the kernel
   * only reruns a scheduler's update hook when a destination changed, and a periodic full
   * sync should not reset rr/wrr positions or rebuild Maglev tables. Throws naming the field;
   * the old state then stays.
   */
  set(revNat: number, kind: number, backends: readonly SchedBackend[], flags = 0): boolean {
    const where = `SchedulerTable.set(revNat ${revNat})`;
    this.checkRev(revNat, where);
    if (!Number.isInteger(kind) || SCHED_NAMES[kind] === undefined) {
      throw new Error(`${where}: unknown scheduler kind ${kind}`);
    }
    const allowed = kind === SCHED_SH ? SH_FLAGS : kind === SCHED_DH ? SH_F_LEGACY_HASH : 0;
    if ((flags & ~allowed) !== 0 || !Number.isInteger(flags)) {
      throw new Error(`${where}: flags ${flags} not valid for ${SCHED_NAMES[kind]}`);
    }
    const n = backends.length;
    if (n > 0xfffe) throw new Error(`${where}: ${n} backends, at most 65534`);
    const ids = new Uint32Array(n);
    const weights = new Int32Array(n);
    readBackends(backends, ids, weights, where);
    const names =
      kind === SCHED_MAGLEV
        ? backends.map((b, i) => maglevName(b, `${where}: backends[${i}]`))
        : [];
    const old = this.svcs[revNat];
    if (sameAs(old, kind, flags, ids, weights, names)) return false;
    const table = this.buildTable(kind, names, weights, n, where);
    const active = new Int32Array(n);
    const inactive = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      const j = indexIn(old.ids, old.n, ids[i]);
      if (j >= 0) {
        active[i] = old.active[j];
        inactive[i] = old.inactive[j];
      }
    }
    const st = nextState(old, kind, ids, weights);
    this.svcs[revNat] = new SvcSched(
      kind,
      flags,
      n,
      ids,
      weights,
      active,
      inactive,
      table,
      st,
      names,
    );
    return true;
  }

  private buildTable(
    kind: number,
    names: readonly string[],
    weights: Int32Array,
    n: number,
    where: string,
  ): Uint16Array {
    switch (kind) {
      case SCHED_RANDOM:
        return randomBuild(weights, n);
      case SCHED_SH:
        return shBuild(weights, n);
      case SCHED_DH:
        return dhBuild(n);
      case SCHED_MAGLEV:
        try {
          return maglevBuild(names, weights, n, this.maglevTableSize, this.seed);
        } catch (e) {
          throw new Error(`${where}: ${(e as Error).message}`);
        }
      default:
        return NONE.table;
    }
  }

  delete(revNat: number): boolean {
    if (!this.inRange(revNat) || this.svcs[revNat] === NONE) return false;
    this.svcs[revNat] = NONE;
    return true;
  }

  clear(): void {
    this.svcs.fill(NONE);
  }

  /** The service's kind, -1 when none is set. */
  kind(revNat: number): number {
    return this.inRange(revNat) ? this.svcs[revNat].kind : -1;
  }

  /** Number of candidates. */
  count(revNat: number): number {
    return this.inRange(revNat) ? this.svcs[revNat].n : 0;
  }

  flags(revNat: number): number {
    return this.inRange(revNat) ? this.svcs[revNat].flags : 0;
  }

  backendId(revNat: number, i: number): number {
    const s = this.withCandidate(revNat, i);
    return s === null ? 0 : s.ids[i];
  }

  weight(revNat: number, i: number): number {
    const s = this.withCandidate(revNat, i);
    return s === null ? 0 : s.weights[i];
  }

  /** Candidate index of a backend id, or -1. O(n). */
  indexOf(revNat: number, backendId: number): number {
    if (!this.inRange(revNat)) return -1;
    const s = this.svcs[revNat];
    return indexIn(s.ids, s.n, backendId >>> 0);
  }

  /**
   * The scheduler's choice for a new flow: a candidate index, or -1 (no service, no candidate
   * with a positive weight, or an sh/dh bucket whose candidate is quiesced). rng is only drawn
   * from by `random`. Per packet: no allocation, no throw.
   */
  pick(
    revNat: number,
    saddr: number,
    daddr: number,
    sport: number,
    dport: number,
    proto: number,
    rng: SchedRng,
  ): number {
    if (!this.inRange(revNat)) return -1;
    const s = this.svcs[revNat];
    switch (s.kind) {
      case SCHED_RANDOM:
        return randomPick(s.table, rng);
      case SCHED_RR: {
        const i = rrPick(s.weights, s.n, s.st[0]);
        if (i >= 0) s.st[0] = i;
        return i;
      }
      case SCHED_WRR:
        return wrrPick(s.weights, s.n, s.st);
      case SCHED_LC:
        return lcPick(s.weights, s.active, s.inactive, s.n);
      case SCHED_WLC:
        return wlcPick(s.weights, s.active, s.inactive, s.n);
      case SCHED_SED:
        return sedPick(s.weights, s.active, s.n);
      case SCHED_NQ:
        return nqPick(s.weights, s.active, s.n);
      case SCHED_SH:
        return shPick(s.table, s.weights, saddr, sport, proto, s.flags);
      case SCHED_DH:
        return dhPick(s.table, s.weights, daddr, s.flags);
      case SCHED_MAGLEV:
        return maglevPick(s.table, saddr, sport, dport, proto, this.seed.jhash0);
      default:
        return -1;
    }
  }

  /** pick(), as a backend id (0 when none). */
  pickId(
    revNat: number,
    saddr: number,
    daddr: number,
    sport: number,
    dport: number,
    proto: number,
    rng: SchedRng,
  ): number {
    const i = this.pick(revNat, saddr, daddr, sport, dport, proto, rng);
    return i < 0 ? 0 : this.svcs[revNat].ids[i];
  }

  /**
   * pickId() for an IPv6 flow, source a[sAt..sAt+4) and destination a[dAt..dAt+4): sh and dh
   * hash the XOR of the four words, as IPVS folds an IPv6 address (ip_vs_sh_hashkey,
   * ip_vs_dh_hashkey); Maglev uses Cilium's hash_from_tuple_v6; the other kinds do not look
   * at addresses. Per packet: no allocation, no throw.
   */
  pickId6(
    revNat: number,
    a: Int32Array,
    sAt: number,
    dAt: number,
    sport: number,
    dport: number,
    proto: number,
    rng: SchedRng,
  ): number {
    if (!this.inRange(revNat)) return 0;
    const s = this.svcs[revNat];
    if (s.kind === SCHED_MAGLEV) {
      const i = maglevPick6(s.table, a, sAt, sport, dport, proto, this.seed.jhash1);
      return i < 0 ? 0 : s.ids[i];
    }
    const sFold = a[sAt] ^ a[sAt + 1] ^ a[sAt + 2] ^ a[sAt + 3];
    const dFold = a[dAt] ^ a[dAt + 1] ^ a[dAt + 2] ^ a[dAt + 3];
    return this.pickId(revNat, sFold, dFold, sport, dport, proto, rng);
  }

  /**
   * Add dActive/dInactive to a backend's connection counts in a service (counts never go
   * below 0). False when the service or backend is unknown (e.g. a flow that outlived its
   * backend's removal). O(n), no allocation.
   */
  connAdjust(revNat: number, backendId: number, dActive: number, dInactive: number): boolean {
    const i = this.indexOf(revNat, backendId);
    if (i < 0) return false;
    const s = this.svcs[revNat];
    s.active[i] = Math.max(0, s.active[i] + dActive);
    s.inactive[i] = Math.max(0, s.inactive[i] + dInactive);
    return true;
  }

  /** Zero every connection count (before a recount from conntrack). */
  resetCounts(): void {
    for (const s of this.svcs) {
      if (s === NONE) continue;
      s.active.fill(0);
      s.inactive.fill(0);
    }
  }

  active(revNat: number, i: number): number {
    const s = this.withCandidate(revNat, i);
    return s === null ? 0 : s.active[i];
  }

  inactive(revNat: number, i: number): number {
    const s = this.withCandidate(revNat, i);
    return s === null ? 0 : s.inactive[i];
  }

  /** The service at `revNat` if it has a candidate `i`, else null (the per-candidate getters). */
  private withCandidate(revNat: number, i: number): SvcSched | null {
    if (!this.inRange(revNat)) return null;
    const s = this.svcs[revNat];
    return i >= 0 && i < s.n ? s : null;
  }

  private inRange(revNat: number): boolean {
    return revNat >= 1 && revNat < this.capacity && (revNat | 0) === revNat;
  }

  private checkRev(revNat: number, where: string): void {
    if (!this.inRange(revNat)) {
      throw new Error(`${where}: revNat must be an integer 1..${this.capacity - 1}`);
    }
  }
}

function readBackends(
  backends: readonly SchedBackend[],
  ids: Uint32Array,
  weights: Int32Array,
  where: string,
): void {
  const seen = new Set<number>();
  for (let i = 0; i < backends.length; i++) {
    const b = backends[i];
    if (!Number.isInteger(b.id) || b.id < 1 || b.id > 0xffffffff) {
      throw new Error(`${where}: backends[${i}].id must be 1..4294967295, got ${b.id}`);
    }
    const w = b.weight ?? 1;
    if (!Number.isInteger(w) || w < 0 || w > 0xffff) {
      throw new Error(`${where}: backends[${i}].weight must be 0..65535, got ${b.weight}`);
    }
    if (seen.has(b.id)) throw new Error(`${where}: backends[${i}].id ${b.id} repeated`);
    seen.add(b.id);
    ids[i] = b.id;
    weights[i] = w;
  }
}

function maglevName(b: SchedBackend, where: string): string {
  if (b.name !== undefined) return b.name;
  if (b.addr === undefined || b.port === undefined || b.proto === undefined) {
    throw new Error(`${where}: maglev needs a name or addr, port and proto`);
  }
  return maglevBackendName(b.addr >>> 0, b.port, b.proto);
}

function sameAs(
  old: SvcSched,
  kind: number,
  flags: number,
  ids: Uint32Array,
  weights: Int32Array,
  names: readonly string[],
): boolean {
  if (old.kind !== kind || old.flags !== flags || old.n !== ids.length) return false;
  for (let i = 0; i < old.n; i++) {
    if (old.ids[i] !== ids[i] || old.weights[i] !== weights[i]) return false;
  }
  return names.every((nm, i) => old.names[i] === nm);
}

/** rr/wrr position after a rebuild: what the kernel keeps across a destination change. */
function nextState(old: SvcSched, kind: number, ids: Uint32Array, weights: Int32Array): Int32Array {
  const st = new Int32Array(WRR_WORDS);
  const n = ids.length;
  if (kind === SCHED_RR) {
    st[0] = old.kind === SCHED_RR && old.st[0] >= 0 ? indexIn(ids, n, old.ids[old.st[0]]) : -1;
  } else if (kind === SCHED_WRR) {
    if (old.kind === SCHED_WRR) {
      st.set(old.st);
      wrrUpdate(weights, n, st);
    } else wrrInit(weights, n, st);
  }
  return st;
}

function indexIn(ids: Uint32Array, n: number, id: number): number {
  for (let i = 0; i < n; i++) if (ids[i] === id) return i;
  return -1;
}

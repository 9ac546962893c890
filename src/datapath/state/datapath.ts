// The Datapath: the maps a program reads, its counters, RNG, scratch buffer for generated
// packets, and the trace of the last packet. One instance per worker; the maps may be shared
// (SharedArrayBuffer) between instances, everything else is private to one thread.
//
// Per-packet values travel between stages in plain number fields of this object (the parsed
// tuple below) rather than in per-packet objects: a monomorphic class whose fields keep their
// representation is the allocation-free way to pass several results around in V8.

import { AffinityMap } from '../../maps/affinity.ts';
import { BackendMap } from '../../maps/backends.ts';
import { ConntrackMap } from '../../maps/conntrack.ts';
import { FragMap } from '../../maps/frag.ts';
import { RevNatMap } from '../../maps/revnat.ts';
import { ServiceMap } from '../../maps/services.ts';
import { SchedulerTable } from '../../sched/table.ts';
import { type CtGcState, ctTimeoutTable } from './ct-state.ts';
import { type DatapathConfig, resolveDatapathConfig } from './config.ts';
import { EventRing } from './events.ts';
import { NatState } from './nat-state.ts';
import { REASON_COUNT } from './reasons.ts';
import { Rng } from './rng.ts';

/**
 * Room for one generated packet: an ICMP error is at most 576 bytes (Linux icmp_send, RFC 1812
 * 4.3.2.3), but a --vip-echo reply is as large as the ping it answers (any IPv4 packet).
 */
export const DP_OUT_CAPACITY = 65535;

// The IPv6 scratch words (dp.a6): an address is four int32 words, and the `…6` map methods take
// it from an Int32Array at an offset, so the stages keep every address they work with here.
/** the packet's source and destination, as parsed (dp6Parse) */
export const A6_SRC = 0;
export const A6_DST = 4;
/** the backend a new flow goes to (lb6SelectBackend, the conntrack create) */
export const A6_BE = 8;
/** a masquerade address (nat6 stages) */
export const A6_NAT = 12;
/** the source and destination of the packet an ICMPv6 error quotes (icmp6RelatedError) */
export const A6_Q_SRC = 16;
export const A6_Q_DST = 20;
/** a fourth address for the stages that need one more (a flow's client, a rewrite's result) */
export const A6_T = 24;
const A6_WORDS = 28;

/** The maps a restart keeps (src/node/pin.ts pins them in a file), by name. */
export const PINNED_MAPS = [
  'svc',
  'be',
  'revnat',
  'ct',
  'aff',
  'snat',
  'svc6',
  'be6',
  'revnat6',
  'ct6',
  'aff6',
  'snat6',
] as const;
export type PinnedMapName = (typeof PINNED_MAPS)[number];
/** Backing buffers to attach the maps to (an all-zero buffer is a new map), by name. */
export type MapBuffers = Partial<Record<PinnedMapName, ArrayBuffer>>;

export class Datapath {
  readonly cfg: DatapathConfig;
  readonly svc: ServiceMap;
  readonly be: BackendMap;
  readonly revnat: RevNatMap;
  readonly ct: ConntrackMap;
  /** masquerade: SNAT table, node addresses, source ranges (nat.ts) */
  readonly nat: NatState;
  /** later fragments' translation, learnt from first fragments (frag.ts) */
  readonly frags: FragMap;
  /** conntrack lifetime per state (ctTimeoutTable of the config) */
  readonly ctTimeouts: Uint32Array;
  /** packets conntrack classified INVALID (dropped only with cfg.ctDropInvalid) */
  ctInvalid = 0;
  /** session affinity (client, revNat) -> backend, last used */
  readonly aff: AffinityMap;
  // ---- the IPv6 maps (Cilium's lb6_* / ct6): same kinds, addresses as four words. Reverse-NAT
  // and backend ids are one space across both families (the scheduler table and the affinity
  // timeouts are indexed by revNat), so an id lives in one family's maps only.
  readonly svc6: ServiceMap;
  readonly be6: BackendMap;
  readonly revnat6: RevNatMap;
  readonly ct6: ConntrackMap;
  readonly aff6: AffinityMap;
  readonly frags6: FragMap;
  /** inline GC of ct6 (as ctGc for ct) */
  readonly ct6Gc: CtGcState;
  /** IPv6 scratch: the addresses a packet's stages work with (A6_* offsets) */
  readonly a6: Int32Array;
  /** per-service scheduler state (rr/wrr/lc/../maglev), indexed by revNat */
  readonly sched: SchedulerTable;
  /** packets per reason, indexed by the constants of reasons.ts */
  readonly counters: Float64Array;
  readonly rng: Rng;
  /** per-packet events for monitor/tap (events.ts); `events.on` is 0 while nobody listens */
  readonly events: EventRing;
  /** generated packet (V_REPLY) lives in out[0..outLen) until the next dpProcess call */
  readonly out: Uint8Array;
  outLen = 0;

  // ---- trace of the last packet (set by every dpProcess call)
  lastReason = 0;
  /** conntrack entry used or created, -1 if none */
  lastCtIdx = -1;
  /** 1 when the last packet created its conntrack entry */
  lastCtNew = 0;
  /** 1 when the last packet's TTL / hop limit was given back (nat.ts natRestoreTtl) */
  ttlRestored = 0;
  /** backend the last packet was sent to (DNAT), 0 if none */
  lastBackendId = 0;

  // ---- parsed packet (scratch, valid during one dpProcess call)
  ipOff = 0;
  /** end of the IP datagram (ipOff + total length), not of the buffer */
  ipEnd = 0;
  l4Off = 0;
  proto = 0;
  saddr = 0;
  daddr = 0;
  sport = 0;
  dport = 0;
  tcpFlags = 0;
  /** SCTP: which chunk types the packet carries (sctpChunks of src/wire/sctp.ts) */
  sctpChunks = 0;
  /** backend id chosen by lb4SelectBackend */
  selBackendId = 0;
  /** 1 when MF is set (first fragment of a fragmented datagram), 2 for a later fragment */
  frag = 0;
  /** 1 when the packet is IPv6 (its addresses are dp.a6[A6_SRC], dp.a6[A6_DST]), else 0 */
  ipv6 = 0;
  /** IPv6: offset of the Fragment header, -1 when none */
  fragHdr = -1;
  /** packets the wire carries for this one: > 1 for a GSO super-packet (dpProcess argument) */
  segs = 1;
  /** bytes the wire carries beyond the super-packet: headers its later segments repeat */
  segExtraBytes = 0;
  /** 1 when the L4 checksum is partial or verified already (dpProcess argument) */
  csumTrusted = 0;
  /** the packet's clock in seconds (conntrack time) and milliseconds (rate limits) */
  nowSec = 0;
  nowMs = 0;

  /** inline conntrack GC (run when a create finds the table full) */
  readonly ctGc: CtGcState;

  // ---- ICMP error token bucket
  icmpTokens: number;
  icmpLastMs = 0;

  /** `buffers`: attach these maps to existing backing buffers (pinned maps) instead. */
  constructor(cfg: DatapathConfig, buffers: MapBuffers = {}) {
    this.cfg = cfg;
    const opts = (m: PinnedMapName) => ({ shared: cfg.shared, buffer: buffers[m] });
    this.svc = new ServiceMap(cfg.svcCapacity, opts('svc'));
    this.be = new BackendMap(cfg.beCapacity, opts('be'));
    this.revnat = new RevNatMap(cfg.revNatCapacity, opts('revnat'));
    this.ct = new ConntrackMap(cfg.ctCapacity, opts('ct'));
    this.nat = new NatState(cfg, this.revnat.capacity, buffers.snat, buffers.snat6);
    this.frags = new FragMap(cfg.fragCapacity);
    this.ctTimeouts = ctTimeoutTable(cfg);
    this.aff = new AffinityMap(cfg.affinityCapacity, opts('aff'));
    const v6 = (m: PinnedMapName) => ({ ...opts(m), ipv6: true });
    this.svc6 = new ServiceMap(cfg.svcCapacity, v6('svc6'));
    this.be6 = new BackendMap(cfg.beCapacity, v6('be6'));
    this.revnat6 = new RevNatMap(cfg.revNatCapacity, v6('revnat6'));
    this.ct6 = new ConntrackMap(cfg.ctCapacity, v6('ct6'));
    this.aff6 = new AffinityMap(cfg.affinityCapacity, v6('aff6'));
    this.frags6 = new FragMap(cfg.fragCapacity, true);
    this.ct6Gc = { cursor: 0, batch: cfg.ctGcBatch, insertFailures: 0 };
    this.a6 = new Int32Array(A6_WORDS);
    this.sched = new SchedulerTable({ capacity: Math.min(this.revnat.capacity + 1, 65536) });
    this.counters = new Float64Array(REASON_COUNT);
    this.rng = new Rng(cfg.seed);
    this.out = new Uint8Array(DP_OUT_CAPACITY);
    this.events = new EventRing({ capacity: cfg.eventRingCapacity, snap: cfg.eventRingSnap });
    this.icmpTokens = cfg.icmpBurst;
    this.ctGc = { cursor: 0, batch: cfg.ctGcBatch, insertFailures: 0 };
  }
}

export function createDatapath(cfg?: Partial<DatapathConfig>, buffers?: MapBuffers): Datapath {
  return new Datapath(resolveDatapathConfig(cfg), buffers);
}

/** Zero the counters (e.g. between benchmark phases); maps and flows are kept. */
export function dpResetCounters(dp: Datapath): void {
  dp.counters.fill(0);
}

// Control plane -> maps: the ClusterIP services from the model (src/model.ts), as a full load
// (dpLoadServices: everything, leftovers removed) or a partial one (dpUpdateServices: only the
// service ports that changed or went away). Slow world: plain objects and strings are fine here;
// the per-packet program never sees them.
//
// Two phases so bad input leaves the last good state in force: plan (parse and validate every
// address, annotation and id, count entries; throws naming the object and field; writes
// nothing) then apply (map writes only, in an order a concurrent reader can tolerate, Cilium's):
//
//   1. delete frontends that disappeared (master first, then its slots)
//   2. upsert backends and reverse-NAT entries
//   3. per frontend: slots 1..N, then the master with count N, then slots above N deleted;
//      its scheduler state (dp.sched) rebuilt only when candidates or weights changed
//   4. wildcard masters for VIPs that appeared; wildcards of VIPs nothing uses any more deleted
//   5. delete backends and reverse-NAT ids nothing refers to any more; affinity entries whose
//      backend left their service
//
// A partial load touches only the given service ports: its cost follows the change, not the
// number of services. Backends and VIPs shared between service ports are reference counted.
//
// Ids are deterministic and stable: a backend id is a hash of "ip:port:proto" and a reverse-NAT
// id a hash of "servicePortName:proto:vip", each probed linearly on collision, and an id once
// given keeps its owner for as long as the owner exists (kept per Datapath between loads), so
// conntrack entries holding ids stay meaningful across syncs; a restarted agent computes the
// same ids for the same services (collisions aside, resolved in sorted order on a full load).
// The backends live in a BackendTable (backend-table.ts: a row per backend in typed arrays, its
// id and reference count; a unit's plan lists rows), reverse-NAT ids in an IdTable (ids.ts).
// Ids given by an update that is then refused are taken back (test/datapath/load-golden.test.ts
// holds the maps' bytes: every write in the same order as before these tables).
//
// Both families: a service port is planned once per family it has a ClusterIP of — its IPv4
// ClusterIP with its IPv4 EndpointSlices' endpoints (`endpoints`) into the IPv4 maps, its IPv6
// ClusterIP with its IPv6 ones (`endpoints6`) into the IPv6 maps (dp.svc6, be6, revnat6) —
// as two units of the loader's state ("ns/name:port" and "ns/name:port (IPv6)"), each with
// the whole life above. Backend and reverse-NAT ids are one space over both families.

import { BE_ACTIVE, BE_F_LOCAL, BE_TERMINATING } from '../maps/backends.ts';
import type { MapAddr } from '../maps/hashtab.ts';
import { SVC_F_AFFINITY, SVC_F_ITP_LOCAL, SVC_F_WILDCARD } from '../maps/services.ts';
import {
  familyOfIP,
  hasFamily,
  type IPFamily,
  type ResolvedEndpoint,
  type ResolvedServicePort,
  type Service,
} from '../model.ts';
import { SCHED_ANNOTATION, SCHED_RANDOM, schedulerFromName } from '../sched/kinds.ts';
import { maglevBackendName6 } from '../sched/maglev.ts';
import { ipv4ToU32, u32ToIpv4 } from '../wire/addr.ts';
import { canonIpv6, ipv6ToWords, wordsToIpv6 } from '../wire/addr6.ts';
import { protoName } from '../wire/proto.ts';
import { DP_PROTO_NUM } from './protocols.ts';
import type { Datapath } from '../datapath/state/datapath.ts';
import { selectPortEndpoints } from '../endpoints/select.ts';
import { BackendTable } from './backend-table.ts';
import { FAMILIES, isIpv6Unit, portOfUnit, unitOf } from './family.ts';
import { fnv1a, IdTable } from './ids.ts';
import { checkExternal, type ExtFrontend, ExternalWriter } from './nodeport.ts';

/** Service annotation: per-endpoint weights, "ip-or-pod=weight,..." (0..65535, default 1). */
export const WEIGHTS_ANNOTATION = 'kubetun.io/weights';

export interface DpLoadOptions {
  /** this node's name: marks local backends and enables internalTrafficPolicy: Local */
  nodeName?: string;
  /** this node's zone (topology.kubernetes.io/zone): enables topology-aware routing */
  nodeZone?: string;
  /** honour EndpointSlice hints.forNodes (PreferSameNode); default true, as the rules */
  preferSameNode?: boolean;
  /** scheduler of services without a kubetun.io/scheduler annotation (SCHED_*; random) */
  defaultScheduler?: number;
}

export interface DpLoadStats {
  frontends: number;
  backends: number;
  vips: number;
  /** frontends removed by this load */
  removed: number;
  /** service ports planned and written by this load */
  written: number;
}

/** A ClusterIP a port plan's frontends use (its wildcard master marks it as a VIP). */
interface PlanVip {
  key: string;
  addr: MapAddr;
  v6: boolean;
}

interface PlanFrontend {
  key: string;
  vip: MapAddr;
  v6: boolean;
  port: number;
  proto: number;
  rnKey: string;
  revNat: number;
  flags: number;
  sched: number;
  affinityTimeout: number;
  /** backend rows (LoadState.backends) in slot order */
  rows: number[];
  weights: number[];
}

/** What one unit (a service port's half of one family: family.ts) programs. */
interface PortPlan {
  v6: boolean;
  frontends: PlanFrontend[];
  /** the unit's distinct backend rows, in the order first listed, and what the map gets */
  rows: number[];
  states: number[];
  flags: number[];
  /** ids of kube-proxy's local endpoints (externalTrafficPolicy Local's scoped key) */
  local: number[];
  /** internalTrafficPolicy Local: ids of kube-proxy's cluster set, for external traffic */
  cluster?: number[];
  vips: PlanVip[];
}

/** The maps of one family. */
interface FamilyMaps {
  svc: Datapath['svc'];
  be: Datapath['be'];
  revnat: Datapath['revnat'];
}

/** What the previous loads wrote, per Datapath. */
interface LoadState {
  ports: Map<string, PortPlan>;
  /** IPv6 units in `ports` (none: a port's IPv6 half is not even named) */
  v6Units: number;
  /** frontend key -> owning service port name */
  feOwner: Map<string, string>;
  vipRefs: Map<string, number>;
  /** every backend a unit uses, its id and reference count */
  backends: BackendTable;
  revNatIds: IdTable;
  /** affinity timeout per revNat (0 = none), for the affinity GC */
  affTimeout: Uint32Array;
  /** frontend of each revNat id in use */
  feByRevNat: Map<number, PlanFrontend>;
  /** the plan being made (BackendTable.seen: a row listed once per plan) */
  serial: number;
  maps4: FamilyMaps;
  maps6: FamilyMaps;
}

function newLoadState(dp: Datapath): LoadState {
  return {
    ports: new Map(),
    v6Units: 0,
    feOwner: new Map(),
    vipRefs: new Map(),
    // ids below 2^31: a backend id travels the per-packet path (slot -> conntrack -> trace),
    // where an id >= 2^31 would be a heap number across every call V8 did not inline
    backends: new BackendTable(0x7fffffff),
    revNatIds: new IdTable(Math.min(dp.revnat.capacity, 0xffff)),
    affTimeout: new Uint32Array(0x10000),
    feByRevNat: new Map(),
    serial: 0,
    maps4: { svc: dp.svc, be: dp.be, revnat: dp.revnat },
    maps6: { svc: dp.svc6, be: dp.be6, revnat: dp.revnat6 },
  };
}

/**
 * The one writer of a Datapath's service maps: it owns what earlier loads wrote (ids,
 * reference counts, plans), so create one per Datapath and keep it for the Datapath's life.
 */
export class DpLoader {
  private readonly st: LoadState;
  private readonly ext: ExternalWriter;

  constructor(readonly dp: Datapath) {
    this.st = newLoadState(dp);
    this.ext = new ExternalWriter(dp);
  }

  /**
   * Replace the datapath's services with `ports` (leftovers of earlier loads removed).
   * Throws (maps untouched) on bad input.
   */
  load(ports: readonly ResolvedServicePort[], opts: DpLoadOptions = {}): DpLoadStats {
    const names = new Set(ports.map((p) => p.servicePortName));
    const deleted = this.loaded().filter((spn) => !names.has(spn));
    return this.update(ports, deleted, opts);
  }

  /**
   * Partial load: write `changed` service ports (added or modified) and remove `deleted` ones
   * (service port names), leaving every other service untouched. Throws (maps untouched) on
   * bad input.
   */
  update(
    changed: readonly ResolvedServicePort[],
    deleted: readonly string[],
    opts: DpLoadOptions = {},
  ): DpLoadStats {
    return updateServices(this.dp, this.st, this.ext, changed, deleted, opts);
  }

  /** The service port names the maps hold (a full sync deletes those it no longer has). */
  loaded(): string[] {
    return [...new Set([...this.st.ports.keys()].map(portOfUnit))];
  }

  /** Session-affinity timeout of a reverse-NAT id's service, seconds (0 = none): affinity GC. */
  affinityTimeout(revNat: number): number {
    return this.st.affTimeout[revNat];
  }

  /** The external frontends currently loaded (tests, inspect). */
  externalFrontends(): ExtFrontend[] {
    return this.ext.frontends();
  }
}

function updateServices(
  dp: Datapath,
  st: LoadState,
  ext: ExternalWriter,
  changed: readonly ResolvedServicePort[],
  deleted: readonly string[],
  opts: DpLoadOptions,
): DpLoadStats {
  const marks = { be: st.backends.mark(), rn: st.revNatIds.mark() };
  let plans: Map<string, PortPlan | null>;
  try {
    plans = planUpdate(st, changed, deleted, opts);
    checkExternal(changed); // nodeport.ts: external addresses checked before any write
    checkConflicts(st, plans);
    checkCapacity(dp, st, plans);
  } catch (err) {
    // refused: the ids this update gave are taken back, the maps were not touched
    st.backends.rollback(marks.be);
    st.revNatIds.rollback(marks.rn);
    throw err;
  }
  st.backends.commit();
  st.revNatIds.commit();
  const stats = applyLoad(dp, st, plans);
  // NodePort, externalIPs, LoadBalancer (nodeport.ts)
  ext.update(changed, deleted, (unit) => st.ports.get(unit) ?? NO_BACKENDS);
  return stats;
}

const NO_BACKENDS = { local: [] };

/** Every unit the update touches: its new plan, or null (deleted, or nothing to write). */
function planUpdate(
  st: LoadState,
  changed: readonly ResolvedServicePort[],
  deleted: readonly string[],
  opts: DpLoadOptions,
): Map<string, PortPlan | null> {
  const plans = new Map<string, PortPlan | null>();
  for (const spn of deleted) for (const f of FAMILIES) plans.set(unitOf(spn, f), null);
  // In write order, so that ids picked after a hash collision do not depend on input order.
  for (const rsp of inWriteOrder(changed)) {
    for (const f of FAMILIES) {
      const plan = planServicePort(rsp, opts, st, f);
      // a half with nothing to write and nothing written before changes nothing: left out
      // (the IPv6 half of every single-stack port, not even named while no unit is IPv6)
      if (plan === null && f === 'IPv6' && st.v6Units === 0) continue;
      const unit = unitOf(rsp.servicePortName, f);
      if (plan !== null || st.ports.has(unit)) plans.set(unit, plan);
    }
  }
  return plans;
}

// ---- plan ------------------------------------------------------------------------------------

function checkConflicts(st: LoadState, plans: Map<string, PortPlan | null>): void {
  const seen = new Map<string, string>();
  for (const [spn, plan] of plans) {
    for (const f of plan?.frontends ?? []) {
      const other = seen.get(f.key) ?? st.feOwner.get(f.key);
      if (other !== undefined && other !== spn && (seen.has(f.key) || !plans.has(other))) {
        const at = f.v6 ? `[${wordsToIpv6(f.vip as Int32Array)}]` : u32ToIpv4(f.vip as number);
        throw new Error(
          `Service port ${portOfUnit(spn)}: ${at}:${f.port}/${protoName(f.proto)} is also ${portOfUnit(other)}`,
        );
      }
      seen.set(f.key, spn);
    }
  }
}

function checkCapacity(dp: Datapath, st: LoadState, plans: Map<string, PortPlan | null>): void {
  // [IPv4, IPv6]: service map entries and backends after the update, VIPs not yet known
  const needed = [dp.svc.size, dp.svc6.size];
  const bes = [dp.be.size, dp.be6.size];
  const newVips = [new Set<string>(), new Set<string>()];
  const refs = st.backends.refs;
  for (const [unit, plan] of plans) {
    const old = st.ports.get(unit);
    const k = ((plan ?? old)?.v6 ?? isIpv6Unit(unit)) ? 1 : 0;
    for (const f of old?.frontends ?? []) needed[k] -= 1 + f.rows.length;
    if (plan === null) continue;
    for (const f of plan.frontends) needed[k] += 1 + f.rows.length;
    for (const v of plan.vips) if (!st.vipRefs.has(v.key)) newVips[k].add(v.key);
    // a row no unit uses yet is a new backend (counted per unit that lists it, as ever)
    for (const r of plan.rows) if (refs[r] === 0) bes[k]++;
  }
  for (const k of [0, 1]) {
    const fam = k === 1 ? 'IPv6 ' : '';
    const { svc, be } = k === 1 ? st.maps6 : st.maps4;
    const n = needed[k] + newVips[k].size;
    if (n > svc.capacity) {
      throw new Error(
        `dpLoadServices: ${n} ${fam}service map entries needed, capacity ${svc.capacity}`,
      );
    }
    if (bes[k] > be.capacity) {
      throw new Error(`dpLoadServices: ${bes[k]} ${fam}backends, capacity ${be.capacity}`);
    }
  }
}

function planServicePort(
  rsp: ResolvedServicePort,
  opts: DpLoadOptions,
  st: LoadState,
  family: IPFamily,
): PortPlan | null {
  const svc = rsp.service;
  if (svc.type === 'ExternalName' || svc.clusterIPs.length === 0) return null; // headless / DNS
  // no ClusterIP of this family: nothing to program in it (asked before anything is allocated:
  // every single-stack port is asked once for the family it does not have)
  if (!hasFamily(svc.clusterIPs, family)) return null;
  // the message's "where", built only when one is thrown
  const where = () => describe(rsp);
  const v6 = family === 'IPv6';
  const vips: PlanVip[] = [];
  for (let k = 0; k < svc.clusterIPs.length; k++) {
    const ip = svc.clusterIPs[k];
    if (familyOfIP(ip) === family) vips.push(planVip(ip, family, where, k));
  }
  const plan: PortPlan = { v6, frontends: [], rows: [], states: [], flags: [], local: [], vips };
  const proto = DP_PROTO_NUM[rsp.port.protocol];
  if (proto === undefined) return plan; // not a protocol the datapath serves; the VIP is still known
  if (!isPort(rsp.port.port)) {
    fail(where, `spec.ports[${rsp.port.name || rsp.port.port}].port`, portWhy(rsp.port.port));
  }
  const sched = serviceScheduler(svc, opts, where);
  const weightOf = serviceWeights(svc, where);
  const itp = svc.internalTrafficPolicy === 'Local' && opts.nodeName !== undefined;
  // kube-proxy's endpoint selection over this family's endpoints (its proxier of this family)
  const famRsp = family === 'IPv4' ? rsp : { ...rsp, endpoints: rsp.endpoints6 ?? [] };
  const sel = selectPortEndpoints(famRsp, opts);
  const tbl = st.backends;
  const serial = ++st.serial;
  // The rows of `list` into rows/ws (same index); weight 0 skipped under `random`, where it
  // only means "no new flows". A row's first listing in the plan gives the map its state.
  const slots = (
    list: readonly ResolvedEndpoint[],
    terminating: boolean,
    rows: number[],
    ws: number[] | null,
  ) => {
    for (const ep of list) {
      const w = weightOf(ep);
      if (sched === SCHED_RANDOM && w === 0) continue;
      const row = planBackend(ep, proto, tbl, where, family);
      if (row < 0) continue;
      if (tbl.seen[row] !== serial) {
        tbl.seen[row] = serial;
        plan.rows.push(row);
        plan.states.push(terminating || (!ep.ready && ep.terminating) ? BE_TERMINATING : BE_ACTIVE);
        plan.flags.push(
          opts.nodeName !== undefined && ep.nodeName === opts.nodeName ? BE_F_LOCAL : 0,
        );
      }
      rows.push(row);
      ws?.push(w);
    }
  };
  // The ClusterIP frontend's slots: internalTrafficPolicy Local sends to this node's endpoints.
  const rows: number[] = [];
  const weights: number[] = [];
  if (itp) slots(sel.local, sel.localTerminating, rows, weights);
  else slots(sel.cluster, sel.clusterTerminating, rows, weights);
  // externalTrafficPolicy Local: external clients go to kube-proxy's local set (nodeport.ts).
  const local: number[] = [];
  slots(sel.local, sel.localTerminating, local, null);
  plan.local = local.map((r) => tbl.id[r]);
  // External traffic ignores internalTrafficPolicy: with Local, the NodePort, externalIPs and
  // LoadBalancer frontends get the cluster set, not the ClusterIP's local slots (picked at
  // random there, so weight 0 means no new flows as in `random`).
  if (itp) {
    const all: number[] = [];
    const ws: number[] = [];
    slots(sel.cluster, sel.clusterTerminating, all, ws);
    plan.cluster = all.filter((_, k) => ws[k] > 0).map((r) => tbl.id[r]);
  }
  // kube-proxy: internalTrafficPolicy Local drops when endpoints exist only elsewhere, but a
  // service with no endpoint anywhere is rejected like any other.
  let flags = itp && sel.hasAny ? SVC_F_ITP_LOCAL : 0;
  if (svc.sessionAffinity === 'ClientIP') flags |= SVC_F_AFFINITY;
  const affinityTimeout = flags & SVC_F_AFFINITY ? svc.affinityTimeoutSeconds : 0;
  for (const v of vips) {
    const key = `${v.key}:${rsp.port.port}:${proto}`;
    if (plan.frontends.some((f) => f.key === key)) continue; // the same clusterIP twice
    const rnKey = `${rsp.servicePortName}:${proto}:${v.key}`;
    const revNat = st.revNatIds.assign(rnKey, fnv1a(rnKey));
    const port = rsp.port.port;
    plan.frontends.push({
      key,
      vip: v.addr,
      v6,
      port,
      proto,
      rnKey,
      revNat,
      flags,
      sched,
      affinityTimeout,
      rows,
      weights,
    });
  }
  return plan;
}

/**
 * A ClusterIP of `family` as the maps and the loader's keys take it. The IPv4 key is the u32's
 * decimal text, as it always was (ids are hashes of keys: they stay what they were); IPv6's is
 * the bracketed RFC 5952 text.
 */
function planVip(ip: string, family: IPFamily, where: Where, k: number): PlanVip {
  try {
    if (family === 'IPv4') {
      const addr = ipv4ToU32(ip);
      return { key: String(addr), addr, v6: false };
    }
    const addr = ipv6ToWords(ip);
    return { key: `[${canonIpv6(ip)}]`, addr, v6: true };
  } catch (e) {
    fail(where, `spec.clusterIPs[${k}]`, (e as Error).message);
  }
}

function serviceScheduler(svc: Service, opts: DpLoadOptions, where: Where): number {
  const name = svc.annotations?.[SCHED_ANNOTATION];
  if (name === undefined) return opts.defaultScheduler ?? SCHED_RANDOM;
  try {
    return schedulerFromName(name.trim());
  } catch (e) {
    throw new Error(
      `${where()}: metadata.annotations["${SCHED_ANNOTATION}"]: ${(e as Error).message}`,
    );
  }
}

/** Parse kubetun.io/weights: "10.244.1.2=3,web-1=1" (endpoint IP or pod name = weight). */
export function serviceWeights(
  svc: Service,
  where: Where = () => '',
): (ep: ResolvedEndpoint) => number {
  const text = svc.annotations?.[WEIGHTS_ANNOTATION];
  if (text === undefined || text.trim() === '') return weightOne;
  const field = `${where()}: metadata.annotations["${WEIGHTS_ANNOTATION}"]`;
  const byName = new Map<string, number>();
  for (const part of text.split(',')) {
    const m = /^\s*([^=\s]+)\s*=\s*(\d+)\s*$/.exec(part);
    const w = m ? Number(m[2]) : Number.NaN;
    if (!m || !(w <= 0xffff)) {
      throw new Error(`${field}: ${JSON.stringify(part)} is not name=weight (weight 0..65535)`);
    }
    byName.set(m[1], w);
  }
  return (ep) => byName.get(ep.ip) ?? (ep.targetName ? byName.get(ep.targetName) : undefined) ?? 1;
}

/** Every endpoint's weight without the annotation (one function, not one per service port). */
const weightOne = () => 1;

/** The backend row of `ep` (made, with its id, when new), or -1 for the other family. */
function planBackend(
  ep: ResolvedEndpoint,
  proto: number,
  tbl: BackendTable,
  where: Where,
  family: IPFamily,
): number {
  if (familyOfIP(ep.ip) !== family) return -1; // an address of the other family
  const v6 = family === 'IPv6';
  let addr: MapAddr;
  try {
    addr = v6 ? ipv6ToWords(ep.ip) : ipv4ToU32(ep.ip);
  } catch (e) {
    fail(where, `endpoint ${ep.ip}`, (e as Error).message);
  }
  if (!isPort(ep.port)) fail(where, `endpoint ${ep.ip} port`, portWhy(ep.port));
  // IPv4: ipv4ToU32 accepts only the text u32ToIpv4 prints (no leading zeros), so the
  // endpoint's own text is the canonical one (test/wire/addr.test.ts holds the parser to it)
  if (!v6) return tbl.row4(addr as number, ep.ip, ep.port, proto);
  return tbl.row6(addr as Int32Array, canonIpv6(ep.ip) ?? ep.ip, ep.port, proto);
}

// ---- apply -----------------------------------------------------------------------------------

function applyLoad(dp: Datapath, st: LoadState, plans: Map<string, PortPlan | null>): DpLoadStats {
  const gone = removeGoneFrontends(st, plans);
  const written = writePlans(dp, st, plans);
  updateRefs(st, plans);
  for (const f of gone) {
    if (st.revNatIds.ids.get(f.rnKey) !== f.revNat) continue; // already released
    (f.v6 ? st.maps6 : st.maps4).revnat.delete(f.revNat);
    dp.sched.delete(f.revNat);
    st.affTimeout[f.revNat] = 0;
    st.feByRevNat.delete(f.revNat);
    st.revNatIds.release(f.rnKey, f.revNat);
  }
  if (dp.aff.size + dp.aff6.size > 0 && plans.size > 0) forgetStaleAffinity(dp, st);
  const ports = new Set<string>();
  if (written > 0) for (const [u, p] of plans) if (p !== null) ports.add(portOfUnit(u));
  return {
    frontends: st.feOwner.size,
    backends: st.backends.size,
    vips: st.vipRefs.size,
    removed: gone.length,
    written: ports.size,
  };
}

/** Step 1, frontends that disappeared: master first, so a reader never sees slots it cannot use. */
function removeGoneFrontends(st: LoadState, plans: Map<string, PortPlan | null>): PlanFrontend[] {
  const gone: PlanFrontend[] = [];
  for (const [spn, plan] of plans) {
    const old = st.ports.get(spn);
    if (old === undefined) continue; // nothing written before (a first load: every unit)
    for (const f of old.frontends) {
      if (plan?.frontends.some((p) => p.key === f.key)) continue;
      const svc = (f.v6 ? st.maps6 : st.maps4).svc;
      svc.delete(f.vip, f.port, f.proto, 0);
      for (let s = 1; s <= f.rows.length; s++) svc.delete(f.vip, f.port, f.proto, s);
      st.feOwner.delete(f.key);
      gone.push(f);
    }
  }
  return gone;
}

/**
 * Steps 2-3: backends and reverse NAT before anything points at them, then per frontend its
 * slots, master and stale slots. Returns the number of service ports written.
 */
function writePlans(dp: Datapath, st: LoadState, plans: Map<string, PortPlan | null>): number {
  const tbl = st.backends;
  for (const plan of plans.values()) {
    if (plan === null) continue;
    const { be, revnat } = plan.v6 ? st.maps6 : st.maps4;
    for (let k = 0; k < plan.rows.length; k++) {
      const r = plan.rows[k];
      const addr = plan.v6 ? tbl.addr6[r]! : tbl.addr4[r] >>> 0;
      if (!be.upsert(tbl.id[r], addr, tbl.port[r], tbl.proto[r], plan.states[k], plan.flags[k]))
        mapFull('backend');
    }
    for (const f of plan.frontends) revnat.upsert(f.revNat, f.vip, f.port);
  }
  let written = 0;
  for (const [spn, plan] of plans) {
    if (plan === null) continue;
    const old = st.ports.get(spn)?.frontends;
    for (const f of plan.frontends) {
      // a unit's frontends have distinct keys, and a few of them: a search, not a Map per unit
      const was = old?.find((o) => o.key === f.key);
      applyFrontend(dp, st, f, was?.rows.length ?? 0);
      st.feOwner.set(f.key, spn);
      st.feByRevNat.set(f.revNat, f);
    }
    written++;
  }
  return written;
}

/** Steps 4-5: reference counts of wildcards and backends; what nobody uses any more goes. */
function updateRefs(st: LoadState, plans: Map<string, PortPlan | null>): void {
  const refs = st.backends.refs;
  const deadVips = new Map<string, PlanVip>();
  // rows whose count reached 0, in that order; a row used again leaves (a Map: one that
  // reaches 0 a second time goes to the end, and the order of the deletions places entries)
  const dead = new Map<number, true>();
  for (const [spn, plan] of plans) {
    const old = st.ports.get(spn);
    for (const v of old?.vips ?? []) if (decRef(st.vipRefs, v.key)) deadVips.set(v.key, v);
    for (const r of old?.rows ?? []) if (--refs[r] === 0) dead.set(r, true);
    for (const v of plan?.vips ?? []) {
      if (incRef(st.vipRefs, v.key) === 1) deadVips.delete(v.key);
      const { svc } = v.v6 ? st.maps6 : st.maps4;
      if (!svc.upsertMaster(v.addr, 0, 0, 0, 0, SVC_F_WILDCARD, SCHED_RANDOM, 0))
        mapFull('service');
    }
    for (const r of plan?.rows ?? []) if (++refs[r] === 1) dead.delete(r);
    if (old?.v6) st.v6Units--;
    if (plan) {
      st.ports.set(spn, plan);
      if (plan.v6) st.v6Units++;
    } else st.ports.delete(spn);
  }
  for (const v of deadVips.values()) (v.v6 ? st.maps6 : st.maps4).svc.delete(v.addr, 0, 0, 0);
  const tbl = st.backends;
  for (const r of dead.keys()) {
    (tbl.isV6(r) ? st.maps6 : st.maps4).be.delete(tbl.id[r]);
    tbl.remove(r);
  }
}

/**
 * Affinity to a backend that left its service (or whose weight became 0) is forgotten
 * (kube-proxy: the SEP chain and its `recent` list go with the endpoint).
 */
function forgetStaleAffinity(dp: Datapath, st: LoadState): void {
  const ids = st.backends.id;
  const keep = (rn: number, id: number) => {
    const f = st.feByRevNat.get(rn);
    if (!f || f.affinityTimeout === 0) return false;
    const k = f.rows.findIndex((r) => ids[r] === id);
    return k >= 0 && f.weights[k] > 0;
  };
  dp.aff.retain(keep);
  dp.aff6.retain(keep);
}

function applyFrontend(dp: Datapath, st: LoadState, f: PlanFrontend, oldCount: number): void {
  const { svc } = f.v6 ? st.maps6 : st.maps4;
  const ids = st.backends.id;
  const n = f.rows.length;
  for (let s = 1; s <= n; s++) {
    if (!svc.upsertSlot(f.vip, f.port, f.proto, s, ids[f.rows[s - 1]])) mapFull('service');
  }
  // The scheduler table before the master: a reader that sees the new count also finds the
  // candidates it may pick. `random` needs none (it draws a slot): no per-service typed arrays,
  // which halves a 10k-service load.
  if (f.sched === SCHED_RANDOM) dp.sched.delete(f.revNat);
  else
    dp.sched.set(
      f.revNat,
      f.sched,
      f.rows.map((r, k) => schedBackend(st.backends, r, f.weights[k])),
    );
  st.affTimeout[f.revNat] = f.affinityTimeout;
  const ok = svc.upsertMaster(
    f.vip,
    f.port,
    f.proto,
    n,
    f.revNat,
    f.flags,
    f.sched,
    f.affinityTimeout,
  );
  if (!ok) mapFull('service');
  for (let s = n + 1; s <= oldCount; s++) svc.delete(f.vip, f.port, f.proto, s);
}

/** A backend as the scheduler table takes it (an IPv6 one named for Maglev by its text). */
function schedBackend(tbl: BackendTable, r: number, weight: number) {
  const v6 = tbl.isV6(r);
  const port = tbl.port[r];
  const proto = tbl.proto[r];
  const name = v6 ? maglevBackendName6(tbl.text6[r]!, port, proto) : undefined;
  const addr = v6 ? undefined : tbl.addr4[r] >>> 0;
  return { id: tbl.id[r], weight, name, addr, port, proto };
}

function incRef<K>(m: Map<K, number>, k: K): number {
  const n = (m.get(k) ?? 0) + 1;
  m.set(k, n);
  return n;
}

/** True when the count reached 0 (the key is then removed). */
function decRef<K>(m: Map<K, number>, k: K): boolean {
  const n = (m.get(k) ?? 0) - 1;
  if (n > 0) {
    m.set(k, n);
    return false;
  }
  m.delete(k);
  return true;
}

function mapFull(which: string): never {
  throw new Error(`dpLoadServices: ${which} map full while applying (state partially applied)`);
}

// ---- helpers ---------------------------------------------------------------------------------

/**
 * The order one update plans `changed` in (service port name, then protocol), so ids picked
 * after a hash collision are the same however the ports are split into writes
 * (datapath-sync.ts writes in slices of this order). Keys made once, not per comparison.
 */
export function inWriteOrder(changed: readonly ResolvedServicePort[]): ResolvedServicePort[] {
  const keyed = changed.map((p) => ({ p, k: `${p.servicePortName}:${p.port.protocol}` }));
  keyed.sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : 0));
  return keyed.map((x) => x.p);
}

function describe(rsp: ResolvedServicePort): string {
  const file = rsp.service.origin ? `${rsp.service.origin.file}: ` : '';
  return `${file}Service ${rsp.service.namespace}/${rsp.service.name} port ${rsp.port.name || rsp.port.port}`;
}

/** Where a plan is in the input (file, Service, port), for messages: made only on a throw. */
type Where = () => string;

/** The planner's one way to refuse: "<where>: <field>: <why>". */
function fail(where: Where, field: string, why: string): never {
  throw new Error(`${where()}: ${field}: ${why}`);
}

function isPort(port: number): boolean {
  return Number.isInteger(port) && port >= 1 && port <= 65535;
}

function portWhy(port: number): string {
  return `port must be 1..65535, got ${port}`;
}

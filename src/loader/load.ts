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
import { canonIpv6, ipv6ToWords } from '../wire/addr6.ts';
import { protoName } from '../wire/proto.ts';
import { DP_PROTO_NUM } from './protocols.ts';
import type { Datapath } from '../datapath/state/datapath.ts';
import { selectPortEndpoints } from '../endpoints/select.ts';
import { FAMILIES, isIpv6Unit, portOfUnit, unitOf } from './family.ts';
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

interface PlanBackend {
  key: string;
  id: number;
  /** a u32 (IPv4) or four int32 words (IPv6): the maps of `v6` take it */
  addr: MapAddr;
  /** the address as text (messages, Maglev names) */
  text: string;
  v6: boolean;
  port: number;
  proto: number;
  state: number;
  flags: number;
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
  vipText: string;
  v6: boolean;
  port: number;
  proto: number;
  rnKey: string;
  revNat: number;
  flags: number;
  sched: number;
  affinityTimeout: number;
  /** slot order */
  backends: PlanBackend[];
  weights: number[];
}

/** What one service port programs. */
interface PortPlan {
  frontends: PlanFrontend[];
  /** distinct backends of the port */
  backends: PlanBackend[];
  /** ids of kube-proxy's local endpoints (externalTrafficPolicy Local's scoped key) */
  local: number[];
  /** internalTrafficPolicy Local: ids of kube-proxy's cluster set, for external traffic */
  cluster?: number[];
  vips: PlanVip[];
}

/** What the previous loads wrote, per Datapath. */
interface LoadState {
  ports: Map<string, PortPlan>;
  /** frontend key -> owning service port name */
  feOwner: Map<string, string>;
  beRefs: Map<string, number>;
  vipRefs: Map<string, number>;
  backendIds: IdTable;
  revNatIds: IdTable;
  /** affinity timeout per revNat (0 = none), for the affinity GC */
  affTimeout: Uint32Array;
  /** frontend of each revNat id in use */
  feByRevNat: Map<number, PlanFrontend>;
}

function newLoadState(dp: Datapath): LoadState {
  return {
    ports: new Map(),
    feOwner: new Map(),
    beRefs: new Map(),
    vipRefs: new Map(),
    // ids below 2^31: a backend id travels the per-packet path (slot -> conntrack -> trace),
    // where an id >= 2^31 would be a heap number across every call V8 did not inline
    backendIds: new IdTable(0x7fffffff),
    revNatIds: new IdTable(Math.min(dp.revnat.capacity, 0xffff)),
    affTimeout: new Uint32Array(0x10000),
    feByRevNat: new Map(),
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
  const txn = { be: new IdTxn(st.backendIds), rn: new IdTxn(st.revNatIds) };
  const plans = new Map<string, PortPlan | null>();
  for (const spn of deleted) for (const f of FAMILIES) plans.set(unitOf(spn, f), null);
  // In write order, so that ids picked after a hash collision do not depend on input order.
  for (const rsp of inWriteOrder(changed)) {
    for (const f of FAMILIES) {
      const unit = unitOf(rsp.servicePortName, f);
      const plan = planServicePort(rsp, opts, txn, f);
      // a half with nothing to write and nothing written before changes nothing: left out
      // (the IPv6 half of every single-stack port), so no step below visits it
      if (plan !== null || st.ports.has(unit)) plans.set(unit, plan);
    }
  }
  checkExternal(changed); // nodeport.ts: external addresses checked before any write
  checkConflicts(st, plans);
  checkCapacity(dp, st, plans);
  txn.be.commit();
  txn.rn.commit();
  const stats = applyLoad(dp, st, plans);
  // NodePort, externalIPs, LoadBalancer (nodeport.ts)
  ext.update(changed, deleted, (unit) => st.ports.get(unit) ?? { local: [] });
  return stats;
}

/** The maps of one family. */
function mapsOf(dp: Datapath, v6: boolean) {
  return v6
    ? { svc: dp.svc6, be: dp.be6, revnat: dp.revnat6, aff: dp.aff6 }
    : { svc: dp.svc, be: dp.be, revnat: dp.revnat, aff: dp.aff };
}

// ---- plan ------------------------------------------------------------------------------------

function checkConflicts(st: LoadState, plans: Map<string, PortPlan | null>): void {
  const seen = new Map<string, string>();
  for (const [spn, plan] of plans) {
    for (const f of plan?.frontends ?? []) {
      const other = seen.get(f.key) ?? st.feOwner.get(f.key);
      if (other !== undefined && other !== spn && (seen.has(f.key) || !plans.has(other))) {
        const at = f.v6 ? `[${f.vipText}]` : f.vipText;
        throw new Error(
          `Service port ${portOfUnit(spn)}: ${at}:${f.port}/${protoName(f.proto)} is also ${portOfUnit(other)}`,
        );
      }
      seen.set(f.key, spn);
    }
  }
}

function checkCapacity(dp: Datapath, st: LoadState, plans: Map<string, PortPlan | null>): void {
  for (const v6 of [false, true]) {
    const { svc, be } = mapsOf(dp, v6);
    let needed = svc.size;
    let bes = be.size;
    const newVips = new Set<string>();
    for (const [unit, plan] of plans) {
      if (isIpv6Unit(unit) !== v6) continue;
      const old = st.ports.get(unit);
      for (const f of old?.frontends ?? []) needed -= 1 + f.backends.length;
      for (const f of plan?.frontends ?? []) needed += 1 + f.backends.length;
      for (const v of plan?.vips ?? []) if (!st.vipRefs.has(v.key)) newVips.add(v.key);
      for (const b of plan?.backends ?? []) if (!st.beRefs.has(b.key)) bes++;
    }
    needed += newVips.size;
    const fam = v6 ? 'IPv6 ' : '';
    if (needed > svc.capacity) {
      throw new Error(
        `dpLoadServices: ${needed} ${fam}service map entries needed, capacity ${svc.capacity}`,
      );
    }
    if (bes > be.capacity) {
      throw new Error(`dpLoadServices: ${bes} ${fam}backends, capacity ${be.capacity}`);
    }
  }
}

function planServicePort(
  rsp: ResolvedServicePort,
  opts: DpLoadOptions,
  txn: { be: IdTxn; rn: IdTxn },
  family: IPFamily,
): PortPlan | null {
  const svc = rsp.service;
  if (svc.type === 'ExternalName' || svc.clusterIPs.length === 0) return null; // headless / DNS
  // no ClusterIP of this family: nothing to program in it (asked before anything is allocated:
  // every single-stack port is asked once for the family it does not have)
  if (!hasFamily(svc.clusterIPs, family)) return null;
  // the message's "where", built only when one is thrown
  const where = () => describe(rsp);
  const vips: PlanVip[] = [];
  for (let k = 0; k < svc.clusterIPs.length; k++) {
    const ip = svc.clusterIPs[k];
    if (familyOfIP(ip) === family) vips.push(planVip(ip, family, where, k));
  }
  const plan: PortPlan = { frontends: [], backends: [], local: [], vips };
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
  const byKey = new Map<string, PlanBackend>();
  // The slots of `list` into bes/ws (same index); weight 0 skipped under `random`, where it
  // only means "no new flows".
  const slots = (
    list: readonly ResolvedEndpoint[],
    terminating: boolean,
    bes: PlanBackend[],
    ws: number[],
  ) => {
    for (const ep of list) {
      const w = weightOf(ep);
      if (sched === SCHED_RANDOM && w === 0) continue;
      const be = planBackend(ep, proto, terminating, opts, txn.be, where, family);
      if (!be) continue;
      const known = byKey.get(be.key) ?? be;
      byKey.set(be.key, known);
      bes.push(known);
      ws.push(w);
    }
  };
  // The ClusterIP frontend's slots: internalTrafficPolicy Local sends to this node's endpoints.
  const backends: PlanBackend[] = [];
  const weights: number[] = [];
  if (itp) slots(sel.local, sel.localTerminating, backends, weights);
  else slots(sel.cluster, sel.clusterTerminating, backends, weights);
  // externalTrafficPolicy Local: external clients go to kube-proxy's local set (nodeport.ts).
  const local: PlanBackend[] = [];
  slots(sel.local, sel.localTerminating, local, []);
  plan.local = local.map((b) => b.id);
  // External traffic ignores internalTrafficPolicy: with Local, the NodePort, externalIPs and
  // LoadBalancer frontends get the cluster set, not the ClusterIP's local slots (picked at
  // random there, so weight 0 means no new flows as in `random`).
  if (itp) {
    const all: PlanBackend[] = [];
    const ws: number[] = [];
    slots(sel.cluster, sel.clusterTerminating, all, ws);
    plan.cluster = all.filter((_, k) => ws[k] > 0).map((b) => b.id);
  }
  plan.backends = [...byKey.values()];
  // kube-proxy: internalTrafficPolicy Local drops when endpoints exist only elsewhere, but a
  // service with no endpoint anywhere is rejected like any other.
  let flags = itp && sel.hasAny ? SVC_F_ITP_LOCAL : 0;
  if (svc.sessionAffinity === 'ClientIP') flags |= SVC_F_AFFINITY;
  const affinityTimeout = flags & SVC_F_AFFINITY ? svc.affinityTimeoutSeconds : 0;
  const v6 = family === 'IPv6';
  for (const v of vips) {
    const key = `${v.key}:${rsp.port.port}:${proto}`;
    if (plan.frontends.some((f) => f.key === key)) continue; // the same clusterIP twice
    const rnKey = `${rsp.servicePortName}:${proto}:${v.key}`;
    const revNat = txn.rn.assign(rnKey, fnv1a(rnKey));
    const vipText = v6 ? v.key.slice(1, -1) : u32ToIpv4(v.addr as number);
    const port = rsp.port.port;
    plan.frontends.push({
      key,
      vip: v.addr,
      vipText,
      v6,
      port,
      proto,
      rnKey,
      revNat,
      flags,
      sched,
      affinityTimeout,
      backends,
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

function planBackend(
  ep: ResolvedEndpoint,
  proto: number,
  terminating: boolean,
  opts: DpLoadOptions,
  ids: IdTxn,
  where: Where,
  family: IPFamily,
): PlanBackend | undefined {
  if (familyOfIP(ep.ip) !== family) return undefined; // an address of the other family
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
  const text = v6 ? (canonIpv6(ep.ip) ?? ep.ip) : ep.ip;
  const key = v6 ? `[${text}]:${ep.port}:${proto}` : `${text}:${ep.port}:${proto}`;
  const flags = opts.nodeName !== undefined && ep.nodeName === opts.nodeName ? BE_F_LOCAL : 0;
  const state = terminating || (!ep.ready && ep.terminating) ? BE_TERMINATING : BE_ACTIVE;
  const id = ids.assign(key, fnv1a(key));
  return { key, id, addr, text, v6, port: ep.port, proto, state, flags };
}

// ---- apply -----------------------------------------------------------------------------------

function applyLoad(dp: Datapath, st: LoadState, plans: Map<string, PortPlan | null>): DpLoadStats {
  const gone = removeGoneFrontends(dp, st, plans);
  const written = writePlans(dp, st, plans);
  updateRefs(dp, st, plans);
  for (const f of gone) {
    if (st.revNatIds.ids.get(f.rnKey) !== f.revNat) continue; // already released
    mapsOf(dp, f.v6).revnat.delete(f.revNat);
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
    backends: st.beRefs.size,
    vips: st.vipRefs.size,
    removed: gone.length,
    written: ports.size,
  };
}

/** Step 1, frontends that disappeared: master first, so a reader never sees slots it cannot use. */
function removeGoneFrontends(
  dp: Datapath,
  st: LoadState,
  plans: Map<string, PortPlan | null>,
): PlanFrontend[] {
  const gone: PlanFrontend[] = [];
  for (const [spn, plan] of plans) {
    const old = st.ports.get(spn);
    if (old === undefined) continue; // nothing written before (a first load: every unit)
    for (const f of old.frontends) {
      if (plan?.frontends.some((p) => p.key === f.key)) continue;
      const svc = mapsOf(dp, f.v6).svc;
      svc.delete(f.vip, f.port, f.proto, 0);
      for (let s = 1; s <= f.backends.length; s++) svc.delete(f.vip, f.port, f.proto, s);
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
  for (const plan of plans.values()) {
    for (const be of plan?.backends ?? []) {
      const m = mapsOf(dp, be.v6).be;
      if (!m.upsert(be.id, be.addr, be.port, be.proto, be.state, be.flags)) mapFull('backend');
    }
    for (const f of plan?.frontends ?? []) mapsOf(dp, f.v6).revnat.upsert(f.revNat, f.vip, f.port);
  }
  let written = 0;
  for (const [spn, plan] of plans) {
    if (plan === null) continue;
    const old = st.ports.get(spn)?.frontends;
    for (const f of plan.frontends) {
      // a unit's frontends have distinct keys, and a few of them: a search, not a Map per unit
      const was = old?.find((o) => o.key === f.key);
      applyFrontend(dp, st, f, was?.backends.length ?? 0);
      st.feOwner.set(f.key, spn);
      st.feByRevNat.set(f.revNat, f);
    }
    written++;
  }
  return written;
}

/** Steps 4-5: reference counts of wildcards and backends; what nobody uses any more goes. */
function updateRefs(dp: Datapath, st: LoadState, plans: Map<string, PortPlan | null>): void {
  const deadVips = new Map<string, PlanVip>();
  const deadBes = new Map<string, PlanBackend>();
  for (const [spn, plan] of plans) {
    const old = st.ports.get(spn);
    for (const v of old?.vips ?? []) if (decRef(st.vipRefs, v.key)) deadVips.set(v.key, v);
    for (const b of old?.backends ?? []) if (decRef(st.beRefs, b.key)) deadBes.set(b.key, b);
    for (const v of plan?.vips ?? []) {
      if (incRef(st.vipRefs, v.key) === 1) deadVips.delete(v.key);
      const svc = mapsOf(dp, v.v6).svc;
      if (!svc.upsertMaster(v.addr, 0, 0, 0, 0, SVC_F_WILDCARD, SCHED_RANDOM, 0))
        mapFull('service');
    }
    for (const b of plan?.backends ?? []) if (incRef(st.beRefs, b.key) === 1) deadBes.delete(b.key);
    if (plan) st.ports.set(spn, plan);
    else st.ports.delete(spn);
  }
  for (const v of deadVips.values()) mapsOf(dp, v.v6).svc.delete(v.addr, 0, 0, 0);
  for (const [key, b] of deadBes) {
    mapsOf(dp, b.v6).be.delete(b.id);
    st.backendIds.release(key, b.id);
  }
}

/**
 * Affinity to a backend that left its service (or whose weight became 0) is forgotten
 * (kube-proxy: the SEP chain and its `recent` list go with the endpoint).
 */
function forgetStaleAffinity(dp: Datapath, st: LoadState): void {
  const keep = (rn: number, id: number) => {
    const f = st.feByRevNat.get(rn);
    if (!f || f.affinityTimeout === 0) return false;
    const k = f.backends.findIndex((b) => b.id === id);
    return k >= 0 && f.weights[k] > 0;
  };
  dp.aff.retain(keep);
  dp.aff6.retain(keep);
}

function applyFrontend(dp: Datapath, st: LoadState, f: PlanFrontend, oldCount: number): void {
  const svc = mapsOf(dp, f.v6).svc;
  const n = f.backends.length;
  for (let s = 1; s <= n; s++) {
    if (!svc.upsertSlot(f.vip, f.port, f.proto, s, f.backends[s - 1].id)) mapFull('service');
  }
  // The scheduler table before the master: a reader that sees the new count also finds the
  // candidates it may pick. `random` needs none (it draws a slot): no per-service typed arrays,
  // which halves a 10k-service load.
  if (f.sched === SCHED_RANDOM) dp.sched.delete(f.revNat);
  else
    dp.sched.set(
      f.revNat,
      f.sched,
      f.backends.map((b, k) => schedBackend(b, f.weights[k])),
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
function schedBackend(b: PlanBackend, weight: number) {
  const name = b.v6 ? maglevBackendName6(b.text, b.port, b.proto) : undefined;
  const addr = b.v6 ? undefined : (b.addr as number);
  return { id: b.id, weight, name, addr, port: b.port, proto: b.proto };
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

// ---- ids -------------------------------------------------------------------------------------

/** Hash-derived ids in 1..max with linear probing; an id keeps its owner while it exists. */
class IdTable {
  readonly ids = new Map<string, number>();
  readonly owner = new Map<number, string>();
  constructor(readonly max: number) {}

  release(key: string, id: number): void {
    if (this.ids.get(key) !== id) return;
    this.ids.delete(key);
    this.owner.delete(id);
  }
}

/** Ids picked while planning, committed to the table only once the plan is valid. */
class IdTxn {
  private readonly ids = new Map<string, number>();
  private readonly owner = new Map<number, string>();
  constructor(private readonly t: IdTable) {}

  assign(key: string, hash: number): number {
    const have = this.t.ids.get(key) ?? this.ids.get(key);
    if (have !== undefined) return have;
    const max = this.t.max;
    let id = (hash % max) + 1;
    for (let tries = 0; this.t.owner.has(id) || this.owner.has(id); tries++) {
      if (tries >= max)
        throw new Error(`dpLoadServices: no free id for ${key} (all ${max} in use)`);
      id = id === max ? 1 : id + 1;
    }
    this.ids.set(key, id);
    this.owner.set(id, key);
    return id;
  }

  commit(): void {
    for (const [k, id] of this.ids) {
      this.t.ids.set(k, id);
      this.t.owner.set(id, k);
    }
  }
}

/** FNV-1a, 32 bits, over the UTF-16 code units (keys here are ASCII). */
export function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
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

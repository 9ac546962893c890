// Control plane -> maps: a full load of the ClusterIP services from the model (src/model.ts).
// Slow world: plain objects and strings are fine here; the per-packet program never sees them.
//
// Two phases so bad input leaves the last good state in force: plan (parse and validate every
// address, pick ids, count entries; throws naming the object and field) then apply (map
// writes only, in an order a concurrent reader can tolerate, Cilium's):
//
//   1. delete frontends that disappeared (master first, then its slots)
//   2. upsert backends and reverse-NAT entries
//   3. per frontend: slots 1..N, then the master with count N, then slots above N deleted
//   4. wildcard masters for every VIP; stale wildcards deleted
//   5. delete backends and reverse-NAT ids nothing refers to any more
//
// Ids are deterministic and stable: a backend id is a hash of "ip:port:proto" and a reverse-NAT
// id a hash of "servicePortName:proto:vip", each probed linearly on collision, and an id once
// given keeps its owner for as long as the owner exists (kept per Datapath between loads), so
// conntrack entries holding ids stay meaningful across syncs.

import { BE_ACTIVE, BE_F_LOCAL, BE_TERMINATING } from '../maps/backends.ts';
import {
  SVC_F_AFFINITY,
  SVC_F_ITP_LOCAL,
  SVC_F_WILDCARD,
  SVC_SCHED_RANDOM,
} from '../maps/services.ts';
import type { ResolvedEndpoint, ResolvedServicePort } from '../model.ts';
import { ipv4ToU32, u32ToIpv4 } from '../wire/addr.ts';
import type { Datapath } from './datapath.ts';

export interface DpLoadOptions {
  /** this node's name: marks local backends and enables internalTrafficPolicy: Local */
  nodeName?: string;
}

export interface DpLoadStats {
  frontends: number;
  backends: number;
  vips: number;
  /** frontends removed since the previous load */
  removed: number;
}

interface PlanBackend {
  key: string;
  id: number;
  addr: number;
  port: number;
  proto: number;
  state: number;
  flags: number;
}

interface PlanFrontend {
  key: string;
  vip: number;
  port: number;
  proto: number;
  revNat: number;
  flags: number;
  affinityTimeout: number;
  backendIds: number[];
}

interface Plan {
  frontends: Map<string, PlanFrontend>;
  backends: Map<string, PlanBackend>;
  revNatKeys: Map<string, number>;
  vips: Set<number>;
  /** id assignments: copies of the LoadState's, committed only by applyLoad */
  ids: IdAllocator;
  rn: IdAllocator;
}

/** What the previous load wrote, per Datapath. */
interface LoadState {
  frontends: Map<string, { vip: number; port: number; proto: number; count: number }>;
  backendIds: Map<string, number>;
  backendOwner: Map<number, string>;
  revNatIds: Map<string, number>;
  revNatOwner: Map<number, string>;
  vips: Set<number>;
}

const states = new WeakMap<Datapath, LoadState>();

const PROTO_NUM: Record<string, number> = { TCP: 6, UDP: 17 };

/** Replace the datapath's ClusterIP services with `ports`. Throws (maps untouched) on bad input. */
export function dpLoadServices(
  dp: Datapath,
  ports: readonly ResolvedServicePort[],
  opts: DpLoadOptions = {},
): DpLoadStats {
  let st = states.get(dp);
  if (!st) {
    st = {
      frontends: new Map(),
      backendIds: new Map(),
      backendOwner: new Map(),
      revNatIds: new Map(),
      revNatOwner: new Map(),
      vips: new Set(),
    };
    states.set(dp, st);
  }
  const plan = planLoad(dp, st, ports, opts);
  return applyLoad(dp, st, plan);
}

// ---- plan ------------------------------------------------------------------------------------

function planLoad(
  dp: Datapath,
  st: LoadState,
  ports: readonly ResolvedServicePort[],
  opts: DpLoadOptions,
): Plan {
  const plan: Plan = {
    frontends: new Map(),
    backends: new Map(),
    revNatKeys: new Map(),
    vips: new Set(),
    ids: new IdAllocator(new Map(st.backendIds), new Map(st.backendOwner), 0xffffffff),
    rn: new IdAllocator(
      new Map(st.revNatIds),
      new Map(st.revNatOwner),
      Math.min(dp.revnat.capacity, 0xffff),
    ),
  };
  // Sorted so that ids picked after a hash collision do not depend on input order.
  const sorted = [...ports].sort((a, b) => cmp(portKey(a), portKey(b)));
  for (const rsp of sorted) planServicePort(plan, rsp, opts, plan.ids, plan.rn);
  const needed =
    plan.vips.size + [...plan.frontends.values()].reduce((n, f) => n + 1 + f.backendIds.length, 0);
  if (needed > dp.svc.capacity) {
    throw new Error(
      `dpLoadServices: ${needed} service map entries needed, capacity ${dp.svc.capacity}`,
    );
  }
  if (plan.backends.size > dp.be.capacity) {
    throw new Error(`dpLoadServices: ${plan.backends.size} backends, capacity ${dp.be.capacity}`);
  }
  return plan;
}

function planServicePort(
  plan: Plan,
  rsp: ResolvedServicePort,
  opts: DpLoadOptions,
  ids: IdAllocator,
  rn: IdAllocator,
): void {
  const svc = rsp.service;
  if (svc.type === 'ExternalName' || svc.clusterIPs.length === 0) return; // headless / DNS only
  const where = describe(rsp);
  const v4 = svc.clusterIPs.map((ip, k) => [ip, k] as const).filter(([ip]) => !ip.includes(':'));
  const vips = v4.map(([ip, k]) => parseAddr(ip, `${where}: spec.clusterIPs[${k}]`));
  for (const vip of vips) plan.vips.add(vip);
  const proto = PROTO_NUM[rsp.port.protocol];
  if (proto === undefined) return; // SCTP: no datapath support yet; the VIP is still known
  checkPort(rsp.port.port, `${where}: spec.ports[${rsp.port.name || rsp.port.port}].port`);
  const itpLocal = svc.internalTrafficPolicy === 'Local' && opts.nodeName !== undefined;
  const eps = eligibleEndpoints(rsp.endpoints, itpLocal ? opts.nodeName : undefined);
  const backendIds: number[] = [];
  for (const ep of eps.list) {
    const be = planBackend(plan, ep, proto, eps.terminating, opts, ids, where);
    if (be) backendIds.push(be.id);
  }
  let flags = itpLocal ? SVC_F_ITP_LOCAL : 0;
  if (svc.sessionAffinity === 'ClientIP') flags |= SVC_F_AFFINITY;
  for (const vip of vips) {
    const key = `${vip}:${rsp.port.port}:${proto}`;
    const prev = plan.frontends.get(key);
    if (prev)
      throw new Error(
        `${where}: ${u32ToIpv4(vip)}:${rsp.port.port}/${rsp.port.protocol} is also ${prev.key}`,
      );
    const rnKey = `${rsp.servicePortName}:${proto}:${vip}`;
    const revNat = rn.assign(rnKey, fnv1a(rnKey));
    plan.revNatKeys.set(rnKey, revNat);
    const affinityTimeout = flags & SVC_F_AFFINITY ? svc.affinityTimeoutSeconds : 0;
    plan.frontends.set(key, {
      key,
      vip,
      port: rsp.port.port,
      proto,
      revNat,
      flags,
      affinityTimeout,
      backendIds,
    });
  }
}

function planBackend(
  plan: Plan,
  ep: ResolvedEndpoint,
  proto: number,
  terminating: boolean,
  opts: DpLoadOptions,
  ids: IdAllocator,
  where: string,
): PlanBackend | undefined {
  if (ep.ip.includes(':')) return undefined; // IPv6 endpoint: IPv4-only datapath
  const addr = parseAddr(ep.ip, `${where}: endpoint ${ep.ip}`);
  checkPort(ep.port, `${where}: endpoint ${ep.ip} port`);
  const key = `${u32ToIpv4(addr)}:${ep.port}:${proto}`;
  let be = plan.backends.get(key);
  if (!be) {
    const flags = opts.nodeName !== undefined && ep.nodeName === opts.nodeName ? BE_F_LOCAL : 0;
    const state = terminating ? BE_TERMINATING : BE_ACTIVE;
    be = { key, id: ids.assign(key, fnv1a(key)), addr, port: ep.port, proto, state, flags };
    plan.backends.set(key, be);
  }
  return be;
}

/**
 * kube-proxy's choice: Ready endpoints; when none is Ready, the serving and terminating ones
 * (so connections drain gracefully during a rollout). `node` restricts to that node first
 * (internalTrafficPolicy: Local).
 */
export function eligibleEndpoints(
  eps: readonly ResolvedEndpoint[],
  node?: string,
): { list: ResolvedEndpoint[]; terminating: boolean } {
  const mine = node === undefined ? eps : eps.filter((e) => e.nodeName === node);
  const ready = mine.filter((e) => e.ready);
  if (ready.length > 0) return { list: ready, terminating: false };
  return { list: mine.filter((e) => e.serving && e.terminating), terminating: true };
}

// ---- apply -----------------------------------------------------------------------------------

function applyLoad(dp: Datapath, st: LoadState, plan: Plan): DpLoadStats {
  let removed = 0;
  for (const [key, old] of st.frontends) {
    if (plan.frontends.has(key)) continue;
    dp.svc.delete(old.vip, old.port, old.proto, 0);
    for (let s = 1; s <= old.count; s++) dp.svc.delete(old.vip, old.port, old.proto, s);
    st.frontends.delete(key);
    removed++;
  }
  for (const be of plan.backends.values()) {
    if (!dp.be.upsert(be.id, be.addr, be.port, be.proto, be.state, be.flags)) mapFull('backend');
  }
  for (const f of plan.frontends.values()) dp.revnat.upsert(f.revNat, f.vip, f.port);
  for (const f of plan.frontends.values()) applyFrontend(dp, st, f);
  for (const vip of plan.vips) {
    if (!dp.svc.upsertMaster(vip, 0, 0, 0, 0, SVC_F_WILDCARD, SVC_SCHED_RANDOM, 0))
      mapFull('service');
  }
  for (const vip of st.vips) if (!plan.vips.has(vip)) dp.svc.delete(vip, 0, 0, 0);
  st.vips = new Set(plan.vips);
  for (const [key, id] of plan.ids.ids) {
    if (plan.backends.has(key)) continue;
    dp.be.delete(id);
    plan.ids.release(key, id);
  }
  for (const [key, id] of plan.rn.ids) {
    if (plan.revNatKeys.has(key)) continue;
    dp.revnat.delete(id);
    plan.rn.release(key, id);
  }
  st.backendIds = plan.ids.ids;
  st.backendOwner = plan.ids.owner;
  st.revNatIds = plan.rn.ids;
  st.revNatOwner = plan.rn.owner;
  return {
    frontends: plan.frontends.size,
    backends: plan.backends.size,
    vips: plan.vips.size,
    removed,
  };
}

function applyFrontend(dp: Datapath, st: LoadState, f: PlanFrontend): void {
  const n = f.backendIds.length;
  for (let s = 1; s <= n; s++) {
    if (!dp.svc.upsertSlot(f.vip, f.port, f.proto, s, f.backendIds[s - 1])) mapFull('service');
  }
  const ok = dp.svc.upsertMaster(
    f.vip,
    f.port,
    f.proto,
    n,
    f.revNat,
    f.flags,
    SVC_SCHED_RANDOM,
    f.affinityTimeout,
  );
  if (!ok) mapFull('service');
  const old = st.frontends.get(f.key);
  for (let s = n + 1; old && s <= old.count; s++) dp.svc.delete(f.vip, f.port, f.proto, s);
  st.frontends.set(f.key, { vip: f.vip, port: f.port, proto: f.proto, count: n });
}

function mapFull(which: string): never {
  throw new Error(`dpLoadServices: ${which} map full while applying (state partially applied)`);
}

// ---- ids -------------------------------------------------------------------------------------

/** Hash-derived ids in 1..max with linear probing; an id keeps its owner while it exists. */
class IdAllocator {
  constructor(
    readonly ids: Map<string, number>,
    readonly owner: Map<number, string>,
    private readonly max: number,
  ) {}

  release(key: string, id: number): void {
    this.ids.delete(key);
    this.owner.delete(id);
  }

  assign(key: string, hash: number): number {
    const have = this.ids.get(key);
    if (have !== undefined) return have;
    let id = (hash % this.max) + 1;
    for (let tries = 0; this.owner.has(id); tries++) {
      if (tries >= this.max)
        throw new Error(`dpLoadServices: no free id for ${key} (all ${this.max} in use)`);
      id = id === this.max ? 1 : id + 1;
    }
    this.ids.set(key, id);
    this.owner.set(id, key);
    return id;
  }
}

/** FNV-1a, 32 bits, over the UTF-16 code units (keys here are ASCII). */
export function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

// ---- helpers ---------------------------------------------------------------------------------

function portKey(rsp: ResolvedServicePort): string {
  return `${rsp.servicePortName}:${rsp.port.protocol}`;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function describe(rsp: ResolvedServicePort): string {
  const file = rsp.service.origin ? `${rsp.service.origin.file}: ` : '';
  return `${file}Service ${rsp.service.namespace}/${rsp.service.name} port ${rsp.port.name || rsp.port.port}`;
}

function parseAddr(ip: string, where: string): number {
  try {
    return ipv4ToU32(ip);
  } catch (e) {
    throw new Error(`${where}: ${(e as Error).message}`);
  }
}

function checkPort(port: number, where: string): void {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new Error(`${where}: port must be 1..65535, got ${port}`);
  }
}

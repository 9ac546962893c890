// Control plane -> maps for the external frontends of a service port: the NodePort on this
// node's IP, spec.externalIPs and status.loadBalancer.ingress[].ip, and the
// loadBalancerSourceRanges. Runs after load.ts has written the ClusterIP frontends, and
// derives from them: the external frontends share the ClusterIP master's backends (its slots),
// reverse-NAT id, scheduler and affinity, so backend ids and scheduler state stay load.ts's.
//
//   key (addr, port, proto)            every endpoint (Cluster policy; pod and node sources):
//                                      kube-proxy's cluster set, also when the ClusterIP's
//                                      internalTrafficPolicy Local narrows it to this node
//   key (addr, port, proto | 0x80)     externalTrafficPolicy: Local only: this node's
//                                      endpoints, for external clients (nat.ts)
//
// Incremental like load.ts: changed service ports are rewritten, deleted ones removed, the rest
// untouched. Validation (addresses, CIDRs) happens before any map write.
//
// Per family (family.ts's units, as load.ts): the IPv4 frontends (NodePort on nodeIp, IPv4
// externalIPs and LB IPs, IPv4 source ranges) derive from the IPv4 ClusterIP in the IPv4 maps,
// the IPv6 ones (NodePort on nodeIp6, IPv6 external and LB IPs, IPv6 source ranges) from the
// IPv6 ClusterIP in dp.svc6 — kube-proxy's two proxiers, each seeing its family's addresses.
import {
  SVC_F_AFFINITY,
  SVC_F_ETP_LOCAL,
  SVC_F_EXTERNAL_IP,
  SVC_F_LOADBALANCER,
  SVC_F_NODEPORT,
  SVC_F_SOURCE_RANGE,
} from '../maps/services.ts';
import type { MapAddr } from '../maps/hashtab.ts';
import { familyOfIP, type IPFamily, type ResolvedServicePort } from '../model.ts';
import { type Cidr, ipv4ToU32, parseCidr } from '../wire/addr.ts';
import { type Cidr6Words, ipv6ToWords, parseCidr6Words, wordsToIpv6 } from '../wire/addr6.ts';
import type { Datapath } from '../datapath/state/datapath.ts';
import type { NatState } from '../datapath/state/nat-state.ts';
import { SVC_SCOPE_LOCAL } from '../maps/services.ts';
import { FAMILIES, unitOf } from './family.ts';
import { DP_PROTO_NUM } from './protocols.ts';

export interface ExtFrontend {
  /** a u32 (IPv4) or four int32 words (IPv6) */
  addr: MapAddr;
  /** the address as the frontend's key has it (IPv4: the u32's decimal; IPv6: "[text]") */
  text: string;
  v6: boolean;
  port: number;
  proto: number;
  flags: number;
  /** slots written under the plain key / the local scope key */
  count: number;
  localCount: number;
}

interface ExtPlan {
  frontends: ExtFrontend[];
  revNat: number;
  v6: boolean;
  /** loadBalancerSourceRanges of an IPv4 plan, [net, mask] u32 */
  ranges: [number, number][];
  /** loadBalancerSourceRanges of an IPv6 plan */
  ranges6: Cidr6Words[];
  /** the ClusterIP frontend the backends come from */
  vip: MapAddr;
  vport: number;
  /** backend ids of the local endpoints (src/endpoints/select.ts), for the scoped key */
  local: readonly number[];
  /** the plain key's ids when they are not the ClusterIP's slots (ExtBackends.cluster) */
  cluster: readonly number[] | undefined;
}

/** The backends load.ts planned for one service port's external frontends. */
export interface ExtBackends {
  /** kube-proxy's local set (externalTrafficPolicy Local's scoped key) */
  local: readonly number[];
  /**
   * kube-proxy's cluster set when the ClusterIP's slots differ from it (internalTrafficPolicy
   * Local): the plain key gets these, picked at random (the scheduler table of the shared
   * revNat id holds the ClusterIP's candidates). Unset: the ClusterIP's slots, its scheduler.
   */
  cluster?: readonly number[];
}

const NO_BACKENDS: ExtBackends = { local: [] };

/** The external frontends of one Datapath and what it last wrote for them (DpLoader's part). */
export class ExternalWriter {
  private readonly ports = new Map<string, ExtPlan>();

  constructor(private readonly dp: Datapath) {}

  /** The external frontends currently loaded. */
  frontends(): ExtFrontend[] {
    return [...this.ports.values()].flatMap((p) => p.frontends);
  }

  /**
   * Write the external frontends of `changed` service ports and remove those of `deleted`
   * ones (service port names). Call after load.ts has applied the same change. Throws (maps
   * untouched) on a bad address or CIDR, naming the object and field. `backends` gives a
   * port's backend ids as load.ts planned them (ExtBackends).
   */
  update(
    changed: readonly ResolvedServicePort[],
    deleted: readonly string[],
    backends: (unit: string) => ExtBackends = () => NO_BACKENDS,
  ): void {
    updateExternal(this.dp, this.ports, changed, deleted, backends);
  }
}

function updateExternal(
  dp: Datapath,
  ports: Map<string, ExtPlan>,
  changed: readonly ResolvedServicePort[],
  deleted: readonly string[],
  backends: (unit: string) => ExtBackends,
): void {
  const st = { ports };
  const plans = new Map<string, ExtPlan | null>();
  for (const spn of deleted) for (const f of FAMILIES) plans.set(unitOf(spn, f), null);
  for (const rsp of changed) {
    // most service ports have no external frontend and had none: nothing to plan or remove
    // (a 10k ClusterIP load asked 20k units here for nothing)
    if (!mayHaveExternal(rsp) && !hadExternal(ports, rsp.servicePortName)) continue;
    for (const f of FAMILIES) {
      const unit = unitOf(rsp.servicePortName, f);
      plans.set(unit, planExternal(dp, rsp, backends(unit), f));
    }
  }
  // the source ranges are rebuilt whole, so only when a unit that has or had some changed
  // (not for every partial sync: ~0.4 MB of arrays and a walk of every port each time)
  let rangesChanged = false;
  for (const [unit, plan] of plans) {
    const was = st.ports.get(unit);
    if (plan === null && was === undefined) continue;
    const keep = new Set(plan?.frontends.map(feKey));
    const old = new Map(was?.frontends.map((f) => [feKey(f), f]));
    for (const f of plan?.frontends ?? []) writeFrontend(dp, plan!, f, old.get(feKey(f)));
    for (const [k, f] of old) if (!keep.has(k)) removeFrontend(dp, f);
    const now = plan && plan.frontends.length > 0 ? plan : undefined;
    if (now) st.ports.set(unit, now);
    else st.ports.delete(unit);
    rangesChanged ||= hasRanges(was) || hasRanges(now);
  }
  if (!rangesChanged) return;
  const ranges = new Map<number, [number, number][]>();
  const ranges6 = new Map<number, Cidr6Words[]>();
  for (const p of st.ports.values()) {
    if (p.ranges.length > 0) ranges.set(p.revNat, p.ranges);
    if (p.ranges6.length > 0) ranges6.set(p.revNat, p.ranges6);
  }
  natSetSourceRanges(dp.nat, ranges, ranges6);
}

/** Whether either unit of service port `spn` has external frontends. */
function hadExternal(ports: Map<string, ExtPlan>, spn: string): boolean {
  return ports.size > 0 && FAMILIES.some((f) => ports.has(unitOf(spn, f)));
}

/** Whether a service port asks for any external frontend (planExternal's addresses). */
function mayHaveExternal(rsp: ResolvedServicePort): boolean {
  const svc = rsp.service;
  return (
    svc.externalIPs.length > 0 ||
    svc.type === 'LoadBalancer' ||
    (svc.type === 'NodePort' && rsp.port.nodePort > 0)
  );
}

function hasRanges(p: ExtPlan | undefined): boolean {
  return p !== undefined && p.ranges.length + p.ranges6.length > 0;
}

/** Validation only (no map access): throws on a bad external address or source range. */
export function checkExternal(changed: readonly ResolvedServicePort[]): void {
  for (const rsp of changed) {
    const svc = rsp.service;
    if (
      svc.externalIPs.length + svc.loadBalancerIPs.length + svc.loadBalancerSourceRanges.length ===
      0
    )
      continue;
    const where = serviceWhere(rsp);
    svc.externalIPs.forEach((ip, k) => {
      addr(ip, `${where}: spec.externalIPs[${k}]`);
    });
    svc.loadBalancerIPs.forEach((ip, k) => {
      addr(ip, `${where}: status.loadBalancer.ingress[${k}].ip`);
    });
    svc.loadBalancerSourceRanges.forEach((c, k) => {
      if (c.includes(':')) cidr6(c, `${where}: spec.loadBalancerSourceRanges[${k}]`);
      else cidr(c, `${where}: spec.loadBalancerSourceRanges[${k}]`);
    });
  }
}

/** "file: Service ns/name", for messages. */
function serviceWhere(rsp: ResolvedServicePort): string {
  const svc = rsp.service;
  return `${svc.origin ? `${svc.origin.file}: ` : ''}Service ${svc.namespace}/${svc.name}`;
}

function feKey(f: ExtFrontend): string {
  return `${f.text}:${f.port}:${f.proto}`;
}

function planExternal(
  dp: Datapath,
  rsp: ResolvedServicePort,
  { local, cluster }: ExtBackends,
  family: IPFamily,
): ExtPlan | null {
  const svc = rsp.service;
  const proto = DP_PROTO_NUM[rsp.port.protocol];
  const vipText = svc.clusterIPs.find((ip) => familyOfIP(ip) === family);
  if (proto === undefined || vipText === undefined) return null;
  const v6 = family === 'IPv6';
  const mine = (ip: string) => familyOfIP(ip) === family;
  const where = serviceWhere(rsp);
  const addrs: [MapAddr, number][] = []; // [addr, flag]
  const isLb = svc.type === 'LoadBalancer';
  const nodePort = (svc.type === 'NodePort' || isLb) && rsp.port.nodePort > 0;
  if (nodePort && !v6 && dp.nat.nodeIp !== 0) {
    addrs.push([dp.nat.nodeIp >>> 0, SVC_F_NODEPORT]); // u32, as the slow world's maps take it
  }
  if (nodePort && v6 && dp.nat.hasNode6 === 1) addrs.push([dp.nat.nodeIp6, SVC_F_NODEPORT]);
  svc.externalIPs.forEach((ip, k) => {
    if (mine(ip)) addrs.push([addr(ip, `${where}: spec.externalIPs[${k}]`), SVC_F_EXTERNAL_IP]);
  });
  const ranges: [number, number][] = [];
  const ranges6: Cidr6Words[] = [];
  if (isLb) {
    svc.loadBalancerIPs.forEach((ip, k) => {
      if (!mine(ip)) return;
      addrs.push([addr(ip, `${where}: status.loadBalancer.ingress[${k}].ip`), SVC_F_LOADBALANCER]);
    });
    svc.loadBalancerSourceRanges.forEach((c, k) => {
      const field = `${where}: spec.loadBalancerSourceRanges[${k}]`;
      if (c.includes(':')) {
        if (v6) ranges6.push(cidr6(c, field));
      } else if (!v6) {
        const r = cidr(c, field);
        ranges.push([r.addr >>> 0, r.mask >>> 0]);
      }
    });
  }
  const vip = addr(vipText, `${where}: spec.clusterIPs`);
  const map = v6 ? dp.svc6 : dp.svc;
  const m = map.lookupAny(vip, rsp.port.port, proto, 0);
  if (m < 0 || addrs.length === 0) return null;
  const etp = svc.externalTrafficPolicy === 'Local' ? SVC_F_ETP_LOCAL : 0;
  const base = (map.flags(m) & SVC_F_AFFINITY) | etp;
  const hasRanges = ranges.length + ranges6.length > 0;
  const frontends = addrs.map(([a, flag]): ExtFrontend => {
    let flags = base | flag;
    if (flag === SVC_F_LOADBALANCER && hasRanges) flags |= SVC_F_SOURCE_RANGE;
    const port = flag === SVC_F_NODEPORT ? rsp.port.nodePort : rsp.port.port;
    const text = typeof a === 'number' ? String(a) : `[${wordsToIpv6(a)}]`;
    return { addr: a, text, v6, port, proto, flags, count: 0, localCount: etp ? 0 : -1 };
  });
  const vport = rsp.port.port;
  const revNat = map.revNat(m);
  return { frontends, revNat, v6, ranges, ranges6, vip, vport, local, cluster };
}

/** An address of either family as the maps take it; throws naming `where`. */
function addr(ip: string, where: string): MapAddr {
  try {
    return ip.includes(':') ? ipv6ToWords(ip) : ipv4ToU32(ip);
  } catch (e) {
    throw new Error(`${where}: ${(e as Error).message}`);
  }
}

function cidr(s: string, where: string): Cidr {
  try {
    return parseCidr(s);
  } catch (e) {
    throw new Error(`${where}: ${(e as Error).message}`);
  }
}

function cidr6(s: string, where: string): Cidr6Words {
  try {
    return parseCidr6Words(s);
  } catch (e) {
    throw new Error(`${where}: ${(e as Error).message}`);
  }
}

/** Backend ids in the slots of the ClusterIP frontend the plan derives from. */
function clusterIds(dp: Datapath, p: ExtPlan, proto: number): number[] {
  const svc = p.v6 ? dp.svc6 : dp.svc;
  const m = svc.lookupAny(p.vip, p.vport, proto, 0);
  const ids: number[] = [];
  for (let s = 1; m >= 0 && s <= svc.count(m); s++) {
    const e = svc.lookupAny(p.vip, p.vport, proto, s);
    if (e >= 0) ids.push(svc.backendId(e));
  }
  return ids;
}

/** Reader-safe order as in load.ts: slots, then the master, then stale slots deleted. */
function writeKey(
  dp: Datapath,
  f: ExtFrontend,
  proto: number,
  ids: readonly number[],
  oldCount: number,
  m: number,
  ownSched = false,
): void {
  const svc = f.v6 ? dp.svc6 : dp.svc;
  for (let s = 1; s <= ids.length; s++) {
    if (!svc.upsertSlot(f.addr, f.port, proto, s, ids[s - 1]!)) mapFull();
  }
  const sched = m >= 0 && !ownSched && (proto & SVC_SCOPE_LOCAL) === 0 ? svc.scheduler(m) : 0;
  const aff = m >= 0 ? svc.affinityTimeout(m) : 0;
  const revNat = m >= 0 ? svc.revNat(m) : 0;
  if (!svc.upsertMaster(f.addr, f.port, proto, ids.length, revNat, f.flags, sched, aff)) mapFull();
  for (let s = ids.length + 1; s <= oldCount; s++) svc.delete(f.addr, f.port, proto, s);
}

function writeFrontend(dp: Datapath, p: ExtPlan, f: ExtFrontend, old?: ExtFrontend): void {
  const ids = p.cluster ?? clusterIds(dp, p, f.proto);
  const svc = p.v6 ? dp.svc6 : dp.svc;
  const m = svc.lookupAny(p.vip, p.vport, f.proto, 0);
  writeKey(dp, f, f.proto, ids, old?.count ?? 0, m, p.cluster !== undefined);
  f.count = ids.length;
  const scoped = f.proto | SVC_SCOPE_LOCAL;
  if (f.localCount >= 0) {
    const local = p.local;
    writeKey(dp, f, scoped, local, Math.max(old?.localCount ?? 0, 0), m);
    f.localCount = local.length;
  } else if (old && old.localCount >= 0) {
    svc.delete(f.addr, f.port, scoped, 0);
    for (let s = 1; s <= old.localCount; s++) svc.delete(f.addr, f.port, scoped, s);
  }
}

function removeFrontend(dp: Datapath, f: ExtFrontend): void {
  const svc = f.v6 ? dp.svc6 : dp.svc;
  svc.delete(f.addr, f.port, f.proto, 0);
  for (let s = 1; s <= f.count; s++) svc.delete(f.addr, f.port, f.proto, s);
  if (f.localCount >= 0) {
    const scoped = f.proto | SVC_SCOPE_LOCAL;
    svc.delete(f.addr, f.port, scoped, 0);
    for (let s = 1; s <= f.localCount; s++) svc.delete(f.addr, f.port, scoped, s);
  }
}

function mapFull(): never {
  throw new Error('dpUpdateExternal: service map full while applying (state partially applied)');
}

/**
 * Install loadBalancerSourceRanges (slow world): revNat id -> list of [net, mask] (IPv4 ids)
 * or of IPv6 CIDRs (IPv6 ids). One start/count per id indexes its family's arrays (an id is
 * one family's).
 */
export function natSetSourceRanges(
  nat: NatState,
  ranges: Map<number, [number, number][]>,
  ranges6: Map<number, Cidr6Words[]> = new Map(),
): void {
  let total = 0;
  for (const list of ranges.values()) total += list.length;
  let total6 = 0;
  for (const list of ranges6.values()) total6 += list.length;
  const net = new Int32Array(total);
  const mask = new Int32Array(total);
  const net6 = new Int32Array(total6 * 4);
  const mask6 = new Int32Array(total6 * 4);
  const start = new Uint32Array(nat.rangeStart.length);
  const count = new Uint16Array(nat.rangeCount.length);
  let k = 0;
  for (const [r, list] of ranges) {
    start[r] = k;
    count[r] = list.length;
    for (const [n, m] of list) {
      net[k] = n;
      mask[k] = m;
      k++;
    }
  }
  k = 0;
  for (const [r, list] of ranges6) {
    start[r] = k;
    count[r] = list.length;
    for (const c of list) {
      net6.set(c.net, 4 * k);
      mask6.set(c.mask, 4 * k);
      k++;
    }
  }
  // Swap whole arrays: a packet in between sees either the old or the new set.
  nat.rangeNet = net;
  nat.rangeMask = mask;
  nat.rangeNet6 = net6;
  nat.rangeMask6 = mask6;
  nat.rangeStart = start;
  nat.rangeCount = count;
}

// Change trackers, after kube-proxy's ServiceChangeTracker / EndpointsChangeTracker
// (pkg/proxy/servicechangetracker.go, endpointschangetracker.go, endpointslicecache.go).
//
// Sources report every object event as update(prev, cur): add = update(null, x), delete =
// update(x, null). A tracker keeps at most one pending {previous, current} per namespaced name,
// where `previous` is the last applied state, so a change that is a no-op for the data plane
// (labels, annotations, origin, an endpoint moved between slices...) or that cancels out before
// the next sync (add then delete, edit then revert) leaves nothing pending. checkout() applies
// every pending change and says what the sync has to do: which service ports to reprogram and
// which UDP conntrack entries have gone stale.

import type {
  EndpointSlice,
  IPFamily,
  ResolvedServicePort,
  Service,
  ServicePort,
} from '../model.ts';
import { servicePortName } from '../model.ts';
import { proxiedByKubeProxy } from '../manifests/proxied.ts';
import {
  buildEndpoints,
  type EndpointsEntry,
  endpointsKey,
  endpointString,
  sameEndpoints,
} from '../manifests/slices.ts';

export { buildEndpoints };

export function namespacedName(o: { namespace: string; name: string }): string {
  return `${o.namespace}/${o.name}`;
}

const IPV4_RE = /^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;
/** Whether an address (already validated as an IP) is IPv4. */
export const isIPv4 = (s: string): boolean => IPV4_RE.test(s);

/**
 * kube-proxy's ShouldSkipService over both families (the data plane serves IPv4 and IPv6):
 * ExternalName and headless services have no service ports on this node; nor have those
 * labelled for another proxy or as headless (src/manifests/proxied.ts, for every source). A
 * Service with a ClusterIP of either family has its service ports; the loader programs each
 * family's half (src/loader/family.ts).
 */
export function isProxiedService(svc: Service): boolean {
  if (!proxiedByKubeProxy(svc.labels)) return false;
  return svc.type !== 'ExternalName' && svc.clusterIPs.length > 0;
}

/**
 * Every address of `family` a service port answers on (cluster, external and load-balancer
 * IPs), or of both families: the stale-UDP cleanup's (conntrack-reconcile.ts).
 */
export function serviceIPs(svc: Service, family?: IPFamily): string[] {
  const all = [...svc.clusterIPs, ...svc.externalIPs, ...svc.loadBalancerIPs];
  return family === undefined ? all : all.filter((ip) => isIPv4(ip) === (family === 'IPv4'));
}

/**
 * One string per service port holding exactly the fields the data plane uses; two services
 * whose keys are equal program identical map entries. Labels, selector, origin and annotations
 * other than kubetun.io/* (scheduler, weights) are left out on purpose.
 */
export function servicePortKeys(svc: Service | null | undefined): Map<string, string> {
  const out = new Map<string, string>();
  if (!svc || !isProxiedService(svc)) return out;
  const common = JSON.stringify([
    svc.type,
    svc.clusterIPs,
    svc.externalIPs,
    svc.loadBalancerIPs,
    svc.loadBalancerSourceRanges,
    svc.sessionAffinity,
    svc.affinityTimeoutSeconds,
    svc.externalTrafficPolicy,
    svc.internalTrafficPolicy,
    svc.healthCheckNodePort,
    svc.trafficDistribution ?? '',
    // kubetun's own annotations (scheduler, weights) change what the maps hold
    Object.entries(svc.annotations ?? {})
      .filter(([k]) => k.startsWith('kubetun.io/'))
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
  ]);
  for (const p of svc.ports) {
    out.set(
      servicePortName(svc, p),
      common + JSON.stringify([p.protocol, p.port, p.targetPort, p.nodePort]),
    );
  }
  return out;
}

function sameKeys(a: ReadonlyMap<string, string>, b: ReadonlyMap<string, string>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (b.get(k) !== v) return false;
  return true;
}

/** The fields of a slice that can change endpoints; origin is left out. */
export function sliceKey(s: EndpointSlice | null | undefined): string {
  if (!s) return '';
  return JSON.stringify([s.serviceName, s.addressType, s.ports, s.endpoints.map(endpointFields)]);
}

function endpointFields(e: EndpointSlice['endpoints'][number]): unknown[] {
  const c = e.conditions;
  return [
    e.addresses,
    c.ready,
    c.serving,
    c.terminating,
    e.nodeName ?? '',
    e.zone ?? '',
    e.hintsForZones ?? [],
    e.hintsForNodes ?? [],
    e.targetName ?? '',
  ];
}

/** A UDP service address that no longer exists (service deleted, IP or port removed). */
export interface StaleServiceAddr {
  servicePortName: string;
  ip: string;
  port: number;
}

/** A UDP endpoint that was serving a service port and no longer is. */
export interface StaleEndpoint {
  servicePortName: string;
  /** "ip:port" */
  endpoint: string;
}

/** What a sync has to do, from checkout(). */
export interface SyncChanges {
  /** service ports whose service fields or endpoints changed, added ones included (sorted) */
  changedServicePorts: string[];
  /** service ports that existed at the previous checkout and are gone now (sorted) */
  deletedServicePorts: string[];
  /** namespaced names of the services concerned (sorted) */
  changedServices: string[];
  udpStaleEndpoints: StaleEndpoint[];
  udpStaleServiceAddrs: StaleServiceAddr[];
  /** NodePorts of UDP service ports that were deleted or moved */
  udpStaleNodePorts: number[];
  /** UDP service ports that went from no serving endpoint to some */
  udpNewlyActive: string[];
  /** any of the four UDP lists is non-empty */
  udpConntrackCleanup: boolean;
  /** checked-out (non no-op) changes, per kind */
  serviceChanges: number;
  endpointChanges: number;
  /**
   * When each checked-out EndpointSlice change was first seen (ms), for network programming
   * latency. kube-proxy takes these from the slices' last-change-trigger-time annotation, set
   * by the endpoints controller, and likewise counts endpoint changes only; the model has no
   * annotations on slices, so this is the time the change reached this process.
   */
  changeTimes: number[];
}

interface Pending<T, K> {
  current: T | null;
  since: number;
  /** comparison key of current, computed once at update() */
  key: K;
}

interface PortRef {
  service: Service;
  port: ServicePort;
}

export interface ChangeTrackerOptions {
  /** this node, to prefer its copy of a duplicated endpoint */
  nodeName?: string;
  /** ms clock for change timestamps */
  now?: () => number;
}

interface ObjectTracker<T> {
  update(prev: T | null, cur: T | null): boolean;
}

/**
 * The applied Services and EndpointSlices plus the pending changes to both. One object because
 * a sync needs both halves: an endpoint change matters only for an existing service port.
 */
export class ChangeTracker {
  /** update(prev, cur) for Services; returns whether any change is pending */
  readonly services: ObjectTracker<Service> = { update: (p, c) => this.updateService(p, c) };
  /** update(prev, cur) for EndpointSlices; returns whether any change is pending */
  readonly endpointSlices: ObjectTracker<EndpointSlice> = {
    update: (p, c) => this.updateEndpointSlice(p, c),
  };
  /** every update() call counts, no-ops included (kube-proxy's *_changes_total) */
  serviceChangesTotal = 0;
  endpointChangesTotal = 0;
  private readonly nodeName: string | undefined;
  private readonly now: () => number;
  private readonly svcPending = new Map<string, Pending<Service, ReadonlyMap<string, string>>>();
  private readonly slicePending = new Map<string, Pending<EndpointSlice, string>>();
  // The applied objects' comparison keys (servicePortKeys, sliceKey) are made from them when a
  // change asks, not kept: at 10k Services the kept keys were ~8 MiB, as much as the objects.
  private readonly svcApplied = new Map<string, Service>();
  private readonly sliceApplied = new Map<string, EndpointSlice>();
  // Per service: its slices' names (one name, the common case, or a Set) and its endpoints
  // entries as [key, entry] pairs — not a Set and a Map per service: at 10k Services those
  // were ~10 MiB of hash tables holding one or two entries each (issue 18).
  private readonly slicesBySvc = new Map<string, string | Set<string>>();
  private readonly portIndex = new Map<string, PortRef>();
  private readonly endpointsBySvc = new Map<string, [string, EndpointsEntry][]>();
  private readonly endpoints = new Map<string, EndpointsEntry>();
  /** resolve() results, dropped per changed service port, so resolveAll() stays cheap */
  private readonly resolved = new Map<string, ResolvedServicePort>();
  private sortedPorts: string[] | undefined;

  constructor(opts: ChangeTrackerOptions = {}) {
    this.nodeName = opts.nodeName;
    this.now = opts.now ?? Date.now;
  }

  updateService(prev: Service | null, cur: Service | null): boolean {
    const obj = cur ?? prev;
    if (!obj) return this.pendingChanges() > 0;
    this.serviceChangesTotal++;
    const name = namespacedName(obj);
    const key = servicePortKeys(cur);
    const applied = servicePortKeys(this.svcApplied.get(name));
    this.track(this.svcPending, name, sameKeys(key, applied), cur, key);
    return this.pendingChanges() > 0;
  }

  updateEndpointSlice(prev: EndpointSlice | null, cur: EndpointSlice | null): boolean {
    const obj = cur ?? prev;
    if (!obj) return this.pendingChanges() > 0;
    this.endpointChangesTotal++;
    const name = namespacedName(obj);
    const key = sliceKey(cur);
    this.track(this.slicePending, name, key === sliceKey(this.sliceApplied.get(name)), cur, key);
    return this.pendingChanges() > 0;
  }

  private track<T, K>(
    pending: Map<string, Pending<T, K>>,
    name: string,
    same: boolean,
    cur: T | null,
    key: K,
  ): void {
    const old = pending.get(name);
    if (same) pending.delete(name);
    else pending.set(name, { current: cur, since: old ? old.since : this.now(), key });
  }

  /** The pending {previous, current} of one Service, previous being the applied state. */
  pendingService(name: string): { previous: Service | null; current: Service | null } | undefined {
    const p = this.svcPending.get(name);
    return p && { previous: this.svcApplied.get(name) ?? null, current: p.current };
  }

  pendingEndpointSlice(
    name: string,
  ): { previous: EndpointSlice | null; current: EndpointSlice | null } | undefined {
    const p = this.slicePending.get(name);
    return p && { previous: this.sliceApplied.get(name) ?? null, current: p.current };
  }

  get pendingServiceChanges(): number {
    return this.svcPending.size;
  }

  get pendingEndpointChanges(): number {
    return this.slicePending.size;
  }

  pendingChanges(): number {
    return this.svcPending.size + this.slicePending.size;
  }

  /** First-seen time (ms) of the oldest pending change, or undefined when nothing is pending. */
  oldestPending(): number | undefined {
    let t: number | undefined;
    for (const p of this.svcPending.values()) if (t === undefined || p.since < t) t = p.since;
    for (const p of this.slicePending.values()) if (t === undefined || p.since < t) t = p.since;
    return t;
  }

  /** Applies every pending change and reports what the data plane has to redo. */
  checkout(): SyncChanges {
    const run = this.checkoutRun();
    run.services([...this.svcPending.keys()]);
    run.slices([...this.slicePending.keys()]);
    run.endpoints(run.affected());
    return run.finish();
  }

  /**
   * checkout() in steps of at most `step` objects, awaiting `turn()` between two: a directory
   * of 10k Services is ~100 ms of checkout at once, on the packet loop's thread (issue 18).
   * Each step takes the object's pending change as it is then, so a change that comes in
   * meanwhile is either taken (its object's step had not run) or left for the next sync.
   */
  async checkoutSliced(step: number, turn: () => Promise<void>): Promise<SyncChanges> {
    const run = this.checkoutRun();
    const steps = async (names: string[], fn: (names: string[]) => void) => {
      for (let i = 0; i < names.length; i += step) {
        fn(names.slice(i, i + step));
        await turn();
      }
    };
    await steps([...this.svcPending.keys()], run.services);
    await steps([...this.slicePending.keys()], run.slices);
    await steps(run.affected(), run.endpoints);
    return run.finish();
  }

  /** One checkout's steps: services, then slices, then the affected services' endpoints. */
  private checkoutRun() {
    const ch = emptyChanges();
    const changed = new Set<string>();
    const deleted = new Set<string>();
    const affected = new Set<string>();
    return {
      services: (names: string[]) => {
        for (const name of names) {
          const p = this.svcPending.get(name);
          if (!p) continue;
          this.svcPending.delete(name);
          this.applyService(ch, changed, deleted, name, p);
        }
      },
      slices: (names: string[]) => {
        for (const name of names) {
          const p = this.slicePending.get(name);
          if (!p) continue;
          this.slicePending.delete(name);
          this.applySlice(ch, affected, name, p);
        }
      },
      affected: () => [...affected],
      endpoints: (svcs: string[]) => {
        for (const svc of svcs) this.rebuildEndpoints(svc, ch, changed);
      },
      finish: () => this.finishCheckout(ch, changed, deleted),
    };
  }

  private finishCheckout(ch: SyncChanges, changed: Set<string>, deleted: Set<string>): SyncChanges {
    for (const spn of changed) {
      this.resolved.delete(spn);
      if (!this.portIndex.has(spn) && !deleted.has(spn)) changed.delete(spn);
    }
    ch.changedServicePorts = [...changed].sort();
    ch.deletedServicePorts = [...deleted].sort();
    // A namespaced name has no ':', so the service is what precedes the port name.
    ch.changedServices = [
      ...new Set(ch.changedServicePorts.map((spn) => spn.split(':')[0])),
    ].sort();
    ch.udpConntrackCleanup =
      ch.udpStaleEndpoints.length +
        ch.udpStaleServiceAddrs.length +
        ch.udpStaleNodePorts.length +
        ch.udpNewlyActive.length >
      0;
    return ch;
  }

  private applyService(
    ch: SyncChanges,
    changed: Set<string>,
    deleted: Set<string>,
    name: string,
    p: Pending<Service, ReadonlyMap<string, string>>,
  ): void {
    ch.serviceChanges++;
    const oldSvc = this.svcApplied.get(name) ?? null;
    const before = servicePortKeys(oldSvc);
    const after = p.key;
    for (const [spn, key] of after) if (before.get(spn) !== key) changed.add(spn);
    for (const spn of before.keys()) {
      if (after.has(spn)) continue;
      changed.add(spn);
      deleted.add(spn);
    }
    staleUdpServiceAddrs(ch, oldSvc, p.current, before, after);
    this.indexService(name, oldSvc, p.current, before, after);
  }

  private indexService(
    name: string,
    oldSvc: Service | null,
    svc: Service | null,
    before: ReadonlyMap<string, string>,
    after: ReadonlyMap<string, string>,
  ): void {
    if (before.size !== after.size || [...after.keys()].some((spn) => !before.has(spn))) {
      this.sortedPorts = undefined;
    }
    if (oldSvc) for (const spn of before.keys()) this.portIndex.delete(spn);
    if (svc) {
      this.svcApplied.set(name, svc);
      for (const port of svc.ports) {
        const spn = servicePortName(svc, port);
        if (after.has(spn)) this.portIndex.set(spn, { service: svc, port });
      }
    } else {
      this.svcApplied.delete(name);
    }
  }

  private applySlice(
    ch: SyncChanges,
    affected: Set<string>,
    name: string,
    p: Pending<EndpointSlice, string>,
  ): void {
    ch.endpointChanges++;
    ch.changeTimes.push(p.since);
    const old = this.sliceApplied.get(name);
    if (old) {
      const svc = `${old.namespace}/${old.serviceName}`;
      affected.add(svc);
      this.removeSliceName(svc, name);
    }
    if (p.current) {
      const svc = `${p.current.namespace}/${p.current.serviceName}`;
      affected.add(svc);
      this.addSliceName(svc, name);
      this.sliceApplied.set(name, p.current);
    } else {
      this.sliceApplied.delete(name);
    }
  }

  private addSliceName(svc: string, name: string): void {
    const had = this.slicesBySvc.get(svc);
    if (had === undefined || had === name) this.slicesBySvc.set(svc, name);
    else if (typeof had === 'string') this.slicesBySvc.set(svc, new Set([had, name]));
    else had.add(name);
  }

  private removeSliceName(svc: string, name: string): void {
    const had = this.slicesBySvc.get(svc);
    if (had === name) this.slicesBySvc.delete(svc);
    else if (typeof had !== 'string') had?.delete(name);
  }

  private rebuildEndpoints(svc: string, ch: SyncChanges, changed: Set<string>): void {
    const names = this.slicesBySvc.get(svc);
    const slices =
      names === undefined
        ? []
        : typeof names === 'string'
          ? [this.sliceApplied.get(names)!]
          : [...names].map((n) => this.sliceApplied.get(n)!);
    const before = this.endpointsBySvc.get(svc) ?? [];
    // both families, their entries under their own keys (endpointsKey's family)
    const after = buildEndpoints(slices, this.nodeName);
    if (slices.some((s) => s.addressType === 'IPv6'))
      for (const [k, e] of buildEndpoints(slices, this.nodeName, 'IPv6')) after.set(k, e);
    for (const [k, entry] of after) {
      const old = before.find((b) => b[0] === k)?.[1];
      if (old && sameEndpoints(old, entry)) continue;
      changed.add(entry.servicePortName);
      staleUdpEndpoints(ch, entry.servicePortName, old, entry);
    }
    for (const [k, old] of before) {
      if (after.has(k)) continue;
      changed.add(old.servicePortName);
      staleUdpEndpoints(ch, old.servicePortName, old, undefined);
    }
    for (const [k] of before) this.endpoints.delete(k);
    for (const [k, entry] of after) this.endpoints.set(k, entry);
    if (after.size > 0) this.endpointsBySvc.set(svc, [...after]);
    else this.endpointsBySvc.delete(svc);
    if (names !== undefined && typeof names !== 'string' && names.size === 0)
      this.slicesBySvc.delete(svc);
  }

  /** The applied state of one service port, ready for the map loader; undefined if none. */
  resolve(spn: string): ResolvedServicePort | undefined {
    const hit = this.resolved.get(spn);
    if (hit) return hit;
    const ref = this.portIndex.get(spn);
    if (!ref) return undefined;
    const proto = ref.port.protocol;
    const endpoints = this.endpoints.get(endpointsKey(spn, proto))?.endpoints ?? [];
    const endpoints6 = this.endpoints.get(endpointsKey(spn, proto, 'IPv6'))?.endpoints ?? [];
    const r = { service: ref.service, port: ref.port, servicePortName: spn, endpoints, endpoints6 };
    this.resolved.set(spn, r);
    return r;
  }

  /**
   * Every applied service port (for a full sync), sorted by service port name. The objects are
   * shared with later calls until their port changes: treat them as read-only.
   */
  resolveAll(): ResolvedServicePort[] {
    this.sortedPorts ??= [...this.portIndex.keys()].sort();
    return this.sortedPorts.map((spn) => this.resolve(spn)!);
  }

  /** Applied objects, for sources that diff snapshots and for inspection. */
  appliedService(name: string): Service | undefined {
    return this.svcApplied.get(name);
  }

  appliedEndpointSlice(name: string): EndpointSlice | undefined {
    return this.sliceApplied.get(name);
  }

  get servicePortCount(): number {
    return this.portIndex.size;
  }
}

function emptyChanges(): SyncChanges {
  return {
    changedServicePorts: [],
    deletedServicePorts: [],
    changedServices: [],
    udpStaleEndpoints: [],
    udpStaleServiceAddrs: [],
    udpStaleNodePorts: [],
    udpNewlyActive: [],
    udpConntrackCleanup: false,
    serviceChanges: 0,
    endpointChanges: 0,
    changeTimes: [],
  };
}

function portByName(svc: Service | null, spn: string): ServicePort | undefined {
  return svc?.ports.find((p) => servicePortName(svc, p) === spn);
}

/**
 * UDP has no connection end: a conntrack entry towards an address the service no longer has
 * would keep steering a client's datagrams (the DNS-after-restart class of bugs), so removed
 * addresses and NodePorts of UDP ports are reported for cleanup. TCP entries are left alone.
 */
function staleUdpServiceAddrs(
  ch: SyncChanges,
  oldSvc: Service | null,
  svc: Service | null,
  before: ReadonlyMap<string, string>,
  after: ReadonlyMap<string, string>,
): void {
  for (const spn of before.keys()) {
    const oldPort = portByName(oldSvc, spn);
    if (!oldSvc || !oldPort || oldPort.protocol !== 'UDP') continue;
    const newPort = after.has(spn) ? portByName(svc, spn) : undefined;
    const keep = newPort && newPort.protocol === 'UDP' && newPort.port === oldPort.port;
    const kept = new Set(keep && svc ? serviceIPs(svc) : []);
    for (const ip of serviceIPs(oldSvc)) {
      if (!kept.has(ip))
        ch.udpStaleServiceAddrs.push({ servicePortName: spn, ip, port: oldPort.port });
    }
    const nodePortKept =
      newPort && newPort.protocol === 'UDP' && newPort.nodePort === oldPort.nodePort;
    if (oldPort.nodePort && !nodePortKept) ch.udpStaleNodePorts.push(oldPort.nodePort);
  }
}

/**
 * kube-proxy's rule: an endpoint that was serving and is now gone or not serving may hold UDP
 * conntrack entries that must go; a UDP port that had no serving endpoint and now has one may
 * have entries recorded while it was rejecting.
 */
function staleUdpEndpoints(
  ch: SyncChanges,
  spn: string,
  old: EndpointsEntry | undefined,
  cur: EndpointsEntry | undefined,
): void {
  const oldUdp = old?.protocol === 'UDP' ? old.endpoints.filter((e) => e.serving) : [];
  const curUdp = cur?.protocol === 'UDP' ? cur.endpoints.filter((e) => e.serving) : [];
  const still = new Set(curUdp.map(endpointString));
  for (const e of oldUdp) {
    const s = endpointString(e);
    if (!still.has(s)) ch.udpStaleEndpoints.push({ servicePortName: spn, endpoint: s });
  }
  if (cur?.protocol === 'UDP' && oldUdp.length === 0 && curUdp.length > 0)
    ch.udpNewlyActive.push(spn);
}

// The EndpointSlice controller's reconcile, as kube-controller-manager runs it
// (pkg/controller/endpointslice, staging/src/k8s.io/endpointslice reconciler.go and utils.go).
// Pure: one Service, the Pods its selector matched, the Nodes, the slices that exist → what to
// create, update and delete. The store applies the plan; nothing here does I/O.
//
//   no slices at all     ExternalName Services; Services without a selector (their slices are
//                        written by hand and are never touched here)
//   which Pods           the selector's matches in the Service's namespace that have an IP and
//                        are not terminal (Succeeded/Failed); terminating Pods stay, marked so;
//                        a Pod whose Node does not exist is skipped unless publishNotReadyAddresses
//   address types        one set of slices per family of the Service's ipFamilies (default
//                        IPv4): IPv4 slices hold the Pods' IPv4 addresses, IPv6 slices their
//                        IPv6 ones (status.podIPs); slices of a family the Service lacks go
//   one endpoint         addresses [the Pod's IP of the slice's family]; conditions serving = Pod Ready, terminating =
//                        deletionTimestamp set, ready = publishNotReadyAddresses || (serving &&
//                        !terminating); nodeName; zone from the Node's topology.kubernetes.io/zone;
//                        targetRef Pod; hostname when the Pod's hostname is set and its subdomain
//                        is this Service's name
//   ports                per Pod: each Service port whose targetPort resolves (a number, or the
//                        name of a container port with the same protocol, sidecars included);
//                        Pods that resolve to
//                        different port lists go to different slices (a Pod that declares none
//                        of a named port lands in a slice without that port)
//   packing              at most maxEndpointsPerSlice (100) per slice. Existing slices keep the
//                        endpoints still wanted (updated in place); new endpoints fill the slices
//                        being updated first, fullest first, then the unchanged slice that ends
//                        closest to full, then new slices; a create beside a delete becomes an
//                        update of the slice that would be deleted (no churn)
//   placeholder          a Service whose selector matches nothing keeps one empty slice
//   labels               the Service's labels, plus kubernetes.io/service-name,
//                        endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io
//                        and service.kubernetes.io/headless for clusterIP None; generateName
//                        "<service>-"; ownerReference to the Service (controller: true)
//
// One difference: upstream pops endpoints from a hash set in no particular order; here they are
// placed in a stable order (Pod name, then address) so a plan is reproducible.
import { matchesSelector } from './selector.ts';
import {
  CONTROLLER_NAME,
  type EndpointPortSpec,
  type EndpointSlice,
  type EndpointSpec,
  LABEL_HEADLESS,
  LABEL_MANAGED_BY,
  LABEL_SERVICE_NAME,
  LABEL_ZONE,
  type Node,
  type Pod,
  type Service,
  type ServicePortSpec,
} from './types.ts';

export const MAX_ENDPOINTS_PER_SLICE = 100;

export interface SlicePlan {
  create: EndpointSlice[];
  update: EndpointSlice[];
  delete: EndpointSlice[];
}

export interface ReconcileOptions {
  /** kube-controller-manager --max-endpoints-per-slice (default 100) */
  maxEndpointsPerSlice?: number;
}

/** Whether the controller manages slices for this Service at all. */
export function controllerServes(svc: Service): boolean {
  const sel = svc.spec?.selector;
  return (
    svc.spec?.type !== 'ExternalName' &&
    sel !== undefined &&
    sel !== null &&
    Object.keys(sel).length > 0
  );
}

/** Slices written by this controller (hand-written ones carry another managed-by, or none). */
export function managedByController(slice: EndpointSlice): boolean {
  return slice.metadata.labels?.[LABEL_MANAGED_BY] === CONTROLLER_NAME;
}

export function reconcileSlices(
  svc: Service,
  pods: Pod[],
  nodes: Node[],
  existing: EndpointSlice[],
  opts: ReconcileOptions = {},
): SlicePlan {
  const plan: SlicePlan = { create: [], update: [], delete: [] };
  if (!controllerServes(svc)) return plan;
  const max = opts.maxEndpointsPerSlice ?? MAX_ENDPOINTS_PER_SLICE;
  const ns = svc.metadata.namespace ?? 'default';
  const mine = existing.filter(
    (s) =>
      managedByController(s) &&
      (s.metadata.namespace ?? 'default') === ns &&
      s.metadata.labels?.[LABEL_SERVICE_NAME] === svc.metadata.name,
  );
  const byPorts = new Map<string, EndpointSlice[]>();
  const families = serviceFamilies(svc);
  for (const s of mine) {
    if (!ownedBy(s, svc) || !(families as string[]).includes(s.addressType)) {
      plan.delete.push(s);
      continue;
    }
    pushTo(byPorts, groupKey(s.addressType as Family, s.ports ?? []), s);
  }
  const desired = new Map<string, Group>();
  for (const f of families)
    for (const [k, g] of desiredEndpoints(svc, pods, nodes, f)) desired.set(k, g);
  for (const [key, want] of desired) {
    const slices = byPorts.get(key) ?? [];
    const r = reconcileGroup(svc, slices, want.ports, want.endpoints, max, want.family);
    plan.create.push(...r.create);
    plan.update.push(...r.update);
    plan.delete.push(...r.delete);
  }
  for (const [key, slices] of byPorts) if (!desired.has(key)) plan.delete.push(...slices);
  addPlaceholder(svc, mine, plan);
  reuseDeleted(svc, plan);
  // A Service being deleted gets no new slices: the garbage collector is removing its slices
  // and a create now would race it (finalize() in the reconciler).
  if (svc.metadata.deletionTimestamp) plan.create = [];
  return plan;
}

// ---- desired state ---------------------------------------------------------------------------

type Family = 'IPv4' | 'IPv6';

interface Group {
  family: Family;
  ports: EndpointPortSpec[];
  endpoints: Map<string, EndpointSpec>;
}

/** The address types the Service's slices have: its ipFamilies (getAddressTypesForService). */
export function serviceFamilies(svc: Service): Family[] {
  const f = (svc.spec.ipFamilies ?? []).filter((x): x is Family => x === 'IPv4' || x === 'IPv6');
  return f.length > 0 ? f : ['IPv4'];
}

/** Slices of one address type with the same ports are one group. */
function groupKey(family: Family, ports: EndpointPortSpec[]): string {
  return `${family} ${portsKey(ports)}`;
}

function desiredEndpoints(
  svc: Service,
  pods: Pod[],
  nodes: Node[],
  family: Family,
): Map<string, Group> {
  const nodeByName = new Map(nodes.map((n) => [n.metadata.name, n]));
  const ns = svc.metadata.namespace ?? 'default';
  const groups = new Map<string, Group>();
  const sorted = [...pods].sort((a, b) => cmp(a.metadata.name, b.metadata.name));
  for (const pod of sorted) {
    if ((pod.metadata.namespace ?? 'default') !== ns) continue;
    if (!matchesSelector(pod.metadata.labels, svc.spec.selector)) continue;
    if (!shouldPodBeInEndpoints(pod)) continue;
    const ports = endpointPorts(svc, pod);
    const key = groupKey(family, ports);
    if (!groups.has(key)) groups.set(key, { family, ports, endpoints: new Map() });
    const node = nodeByName.get(pod.spec?.nodeName ?? '');
    if (!node && !svc.spec.publishNotReadyAddresses) continue; // upstream logs and requeues
    const ep = podToEndpoint(pod, node, svc, family);
    if (ep.addresses.length > 0) groups.get(key)?.endpoints.set(endpointKey(ep), ep);
  }
  return groups;
}

/** Has an IP and is not terminal (terminating Pods are kept, with terminating: true). */
export function shouldPodBeInEndpoints(pod: Pod): boolean {
  const phase = pod.status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed') return false;
  return podIP(pod, 'IPv4') !== undefined;
}

/** The Pod's address of a family (status.podIPs, else status.podIP). */
function podIP(pod: Pod, family: Family): string | undefined {
  const ips = pod.status?.podIPs?.map((p) => p.ip) ?? [];
  if (ips.length === 0 && pod.status?.podIP) ips.push(pod.status.podIP);
  return ips.find((ip) => ip.includes(family === 'IPv4' ? '.' : ':'));
}

export function isPodReady(pod: Pod): boolean {
  return (pod.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

export function podToEndpoint(
  pod: Pod,
  node: Node | undefined,
  svc: Service,
  family: Family = 'IPv4',
): EndpointSpec {
  const serving = isPodReady(pod);
  const terminating =
    pod.metadata.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null;
  // "ready" is never true for a terminating Pod, unless publishNotReadyAddresses says publish.
  const ready = svc.spec.publishNotReadyAddresses === true || (serving && !terminating);
  const ip = podIP(pod, family);
  const ep: EndpointSpec = {
    addresses: ip ? [ip] : [],
    conditions: { ready, serving, terminating },
    targetRef: {
      kind: 'Pod',
      namespace: pod.metadata.namespace ?? 'default',
      name: pod.metadata.name,
      ...(pod.metadata.uid ? { uid: pod.metadata.uid } : {}),
    },
  };
  if (pod.spec?.nodeName) ep.nodeName = pod.spec.nodeName;
  const zone = node?.metadata.labels?.[LABEL_ZONE];
  if (zone) ep.zone = zone;
  if (shouldSetHostname(pod, svc)) ep.hostname = pod.spec.hostname;
  return ep;
}

/** The Pod's hostname is published when its subdomain names this Service (same namespace). */
export function shouldSetHostname(pod: Pod, svc: Service): boolean {
  return (
    (pod.spec?.hostname ?? '') !== '' &&
    pod.spec.subdomain === svc.metadata.name &&
    (pod.metadata.namespace ?? 'default') === (svc.metadata.namespace ?? 'default')
  );
}

/** The Service's ports as this Pod serves them; ports the Pod cannot resolve are left out. */
export function endpointPorts(svc: Service, pod: Pod): EndpointPortSpec[] {
  const out: EndpointPortSpec[] = [];
  for (const sp of svc.spec.ports ?? []) {
    const port = findPort(pod, sp);
    if (port === undefined) continue;
    const ep: EndpointPortSpec = { name: sp.name ?? '', port, protocol: sp.protocol ?? 'TCP' };
    if (sp.appProtocol !== undefined) ep.appProtocol = sp.appProtocol;
    out.push(ep);
  }
  return out;
}

/** podutil.FindPort: a number as is; a name → the container port of that name and protocol. */
export function findPort(pod: Pod, sp: ServicePortSpec): number | undefined {
  const t = sp.targetPort ?? sp.port;
  if (typeof t === 'number') return t;
  const proto = sp.protocol ?? 'TCP';
  // Sidecars (init containers with restartPolicy Always) serve ports too, as upstream reads them.
  const sidecars = (pod.spec?.initContainers ?? []).filter((c) => c.restartPolicy === 'Always');
  for (const c of [...(pod.spec?.containers ?? []), ...sidecars]) {
    for (const p of c.ports ?? []) {
      if (p.name === t && (p.protocol ?? 'TCP') === proto) return p.containerPort;
    }
  }
  return undefined;
}

// ---- one group of slices with the same ports -------------------------------------------------

function reconcileGroup(
  svc: Service,
  slices: EndpointSlice[],
  ports: EndpointPortSpec[],
  want: Map<string, EndpointSpec>,
  max: number,
  family: Family,
): SlicePlan {
  const left = new Map(want);
  const toUpdate: EndpointSlice[] = [];
  const unchanged: EndpointSlice[] = [];
  const toDelete: EndpointSlice[] = [];
  // 1. keep the wanted endpoints of each slice, in their slice, refreshed
  for (const s of slices) {
    const kept: EndpointSpec[] = [];
    let changed = false;
    for (const ep of s.endpoints ?? []) {
      const k = endpointKey(ep);
      const got = left.get(k);
      if (!got) continue;
      kept.push(got);
      if (!sameBeyondKey(got, ep)) changed = true;
      left.delete(k);
    }
    const labels = sliceLabels(svc, s.metadata.labels);
    const labelsChanged = !sameMap(labels, s.metadata.labels ?? {});
    if (changed || kept.length !== (s.endpoints ?? []).length) {
      if (kept.length === 0) toDelete.push(s);
      else toUpdate.push(withEndpoints(s, kept, labels));
    } else if (labelsChanged) {
      toUpdate.push(withEndpoints(s, kept, labels));
    } else unchanged.push(s);
  }
  // 2. fill the slices being updated, fullest first
  const queue = [...left.values()];
  toUpdate.sort((a, b) => b.endpoints.length - a.endpoints.length);
  for (const s of toUpdate) {
    while (queue.length > 0 && s.endpoints.length < max)
      s.endpoints.push(queue.shift() as EndpointSpec);
  }
  // 3. the rest: into the unchanged slice that ends closest to full, else new slices
  const create: EndpointSlice[] = [];
  while (queue.length > 0) {
    let target: EndpointSlice | undefined;
    if (queue.length < max && unchanged.length > 0) {
      const pick = sliceToFill(unchanged, queue.length, max);
      if (pick) {
        unchanged.splice(unchanged.indexOf(pick), 1);
        target = withEndpoints(pick, [...pick.endpoints], pick.metadata.labels ?? {});
        toUpdate.push(target);
      }
    }
    if (!target) {
      target = newSlice(svc, ports, family);
      create.push(target);
    }
    while (queue.length > 0 && target.endpoints.length < max)
      target.endpoints.push(queue.shift() as EndpointSpec);
  }
  return { create, update: toUpdate, delete: toDelete };
}

/** The slice that will be closest to full once `n` endpoints are added (getSliceToFill). */
function sliceToFill(slices: EndpointSlice[], n: number, max: number): EndpointSlice | undefined {
  let best: EndpointSlice | undefined;
  let bestDiff = max;
  for (const s of slices) {
    const diff = max - (n + s.endpoints.length);
    if (diff >= 0 && diff < bestDiff) {
      bestDiff = diff;
      best = s;
      if (diff === 0) break;
    }
  }
  return best;
}

function addPlaceholder(svc: Service, mine: EndpointSlice[], plan: SlicePlan): void {
  if (mine.length !== plan.delete.length || plan.create.length > 0) return;
  const placeholder = newSlice(svc, []);
  const only = plan.delete.length === 1 ? plan.delete[0] : undefined;
  if (only && isPlaceholderOf(only, placeholder, svc)) {
    plan.delete = []; // the existing placeholder stays, not deleted and re-created
  } else plan.create.push(placeholder);
}

function isPlaceholderOf(s: EndpointSlice, p: EndpointSlice, svc: Service): boolean {
  return (
    (s.endpoints ?? []).length === 0 &&
    (s.ports ?? []).length === 0 &&
    ownedBy(s, svc) &&
    sameMap(s.metadata.labels ?? {}, p.metadata.labels ?? {})
  );
}

/** finalize(): each create next to a delete of an owned slice becomes an update of that slice. */
function reuseDeleted(svc: Service, plan: SlicePlan): void {
  for (let i = 0; i < plan.delete.length && plan.create.length > 0; ) {
    const old = plan.delete[i];
    // the last create of the same address type (a slice never changes its type)
    const j = plan.create.map((c) => c.addressType).lastIndexOf(old.addressType);
    if (j >= 0 && ownedBy(old, svc)) {
      const s = plan.create.splice(j, 1)[0] as EndpointSlice;
      const { generateName: _, ...meta } = s.metadata;
      plan.update.push({ ...s, metadata: { ...old.metadata, ...meta, name: old.metadata.name } });
      plan.delete.splice(i, 1);
    } else i++;
  }
}

// ---- slice objects ---------------------------------------------------------------------------

export function sliceLabels(
  svc: Service,
  current: Record<string, string> = {},
): Record<string, string> {
  const reserved = [LABEL_SERVICE_NAME, LABEL_MANAGED_BY, LABEL_HEADLESS];
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(svc.metadata.labels ?? {}))
    if (!reserved.includes(k)) out[k] = v;
  for (const k of reserved) if (k in current) out[k] = current[k];
  if (svc.spec.clusterIP === 'None') out[LABEL_HEADLESS] = '';
  else delete out[LABEL_HEADLESS];
  out[LABEL_SERVICE_NAME] = svc.metadata.name;
  out[LABEL_MANAGED_BY] = CONTROLLER_NAME;
  return out;
}

function newSlice(svc: Service, ports: EndpointPortSpec[], family: Family = 'IPv4'): EndpointSlice {
  const owner = {
    apiVersion: 'v1',
    kind: 'Service',
    name: svc.metadata.name,
    uid: svc.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: true,
  };
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: '',
      generateName: `${svc.metadata.name}-`,
      namespace: svc.metadata.namespace ?? 'default',
      labels: sliceLabels(svc),
      ownerReferences: [owner],
    },
    addressType: family,
    endpoints: [],
    ports: ports.map((p) => ({ ...p })),
  };
}

function withEndpoints(
  s: EndpointSlice,
  endpoints: EndpointSpec[],
  labels: Record<string, string>,
): EndpointSlice {
  return { ...structuredClone(s), metadata: { ...structuredClone(s.metadata), labels }, endpoints };
}

/** Owned: an ownerReference to this Service (by uid when the Service has one, else by name). */
export function ownedBy(s: EndpointSlice, svc: Service): boolean {
  return (s.metadata.ownerReferences ?? []).some(
    (o) =>
      o.kind === 'Service' &&
      o.apiVersion === 'v1' &&
      (svc.metadata.uid ? o.uid === svc.metadata.uid : o.name === svc.metadata.name),
  );
}

/**
 * A stand-in for metadata.generateName as the apiserver expands it: the prefix and five
 * characters from its alphabet (no vowels, no look-alikes). `taken` says which names exist.
 */
export function expandGenerateName(
  prefix: string,
  taken: (name: string) => boolean,
  random: () => number = Math.random,
): string {
  const alphabet = 'bcdfghjklmnpqrstvwxz2456789';
  for (;;) {
    let suffix = '';
    for (let i = 0; i < 5; i++) suffix += alphabet[Math.floor(random() * alphabet.length)];
    const name = `${prefix.slice(0, 58)}${suffix}`;
    if (!taken(name)) return name;
  }
}

// ---- keys and comparisons ------------------------------------------------------------------

/** Endpoints are the same endpoint when addresses, hostname and target Pod agree (hashEndpoint). */
function endpointKey(ep: EndpointSpec): string {
  const ref = ep.targetRef;
  return JSON.stringify([ep.addresses, ep.hostname ?? '', ref?.namespace ?? '', ref?.name ?? '']);
}

function sameBeyondKey(a: EndpointSpec, b: EndpointSpec): boolean {
  const c = (e: EndpointSpec) => e.conditions ?? {};
  return (
    c(a).ready === c(b).ready &&
    c(a).serving === c(b).serving &&
    c(a).terminating === c(b).terminating &&
    (a.zone ?? '') === (b.zone ?? '') &&
    (a.nodeName ?? '') === (b.nodeName ?? '') &&
    JSON.stringify(a.hints ?? null) === JSON.stringify(b.hints ?? null) &&
    JSON.stringify(a.targetRef ?? null) === JSON.stringify(b.targetRef ?? null)
  );
}

/** Slices with the same ports, in any order, are one group (NewPortMapKey). */
function portsKey(ports: EndpointPortSpec[]): string {
  return JSON.stringify(
    ports
      .map((p) => [p.name ?? '', p.protocol ?? 'TCP', p.port ?? 0, p.appProtocol ?? ''])
      .sort((a, b) => cmp(JSON.stringify(a), JSON.stringify(b))),
  );
}

function sameMap(a: Record<string, string>, b: Record<string, string>): boolean {
  const ka = Object.keys(a);
  return (
    ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && a[k] === b[k])
  );
}

/** Appends v to the list m holds under k. */
export function pushTo<K, V>(m: Map<K, V[]>, k: K, v: V): void {
  const list = m.get(k);
  if (list) list.push(v);
  else m.set(k, [v]);
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

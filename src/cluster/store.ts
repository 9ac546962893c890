// The lab's object store: the apiserver's part of the lab control plane.
//
//   write (apply, create, update) ─▶ admission (admission.ts: default, validate, allocate)
//                                 ─▶ metadata the apiserver owns (uid, resourceVersion,
//                                    creationTimestamp, generation, generateName)
//                                 ─▶ stored, persisted (dir/store.json), watchers told
//   status writes (kubelet, controllers) replace .status only, as the status subresource does
//   delete: Pods get deletionTimestamp + grace and stay until their kubelet removes them
//           (graceful deletion); other objects go at once; dependents (ownerReferences) follow,
//           as the garbage collector's background propagation does
//
// The allocator's state is persisted with the objects, so a ClusterIP or NodePort handed out
// once is the same after `lab down` / `lab up` — allocation survives lab restarts.
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type AdmissionError, admit } from './admission.ts';
import {
  Allocator,
  type AllocatorJSON,
  DEFAULT_NODE_PORT_RANGE,
  type PortRange,
} from './allocator.ts';
import { expandGenerateName } from './endpointslice-controller.ts';
import { CLUSTER_SCOPED, type KObject, objectName } from './types.ts';

export type WatchType = 'ADDED' | 'MODIFIED' | 'DELETED';
export type Watcher = (type: WatchType, obj: KObject) => void;

export type WriteResult =
  | { action: 'created' | 'configured' | 'unchanged'; object: KObject }
  | { errors: AdmissionError[] }
  | { ignored: string };

export interface StoreOptions {
  /** where store.json lives (undefined: memory only, for tests) */
  dir?: string;
  serviceCidr: string;
  /** a dual-stack lab's IPv6 service CIDR (IPv6 ClusterIPs) */
  serviceCidrV6?: string;
  clusterCidr?: string;
  nodePortRange?: PortRange;
}

interface Saved {
  version: 1;
  resourceVersion: number;
  allocator: AllocatorJSON;
  objects: KObject[];
}

export function storeKey(kind: string, namespace: string | undefined, name: string): string {
  return CLUSTER_SCOPED.has(kind)
    ? `${kind}//${name}`
    : `${kind}/${namespace || 'default'}/${name}`;
}

const keyOf = (o: KObject) => storeKey(o.kind, o.metadata.namespace, o.metadata.name);

export class Store {
  private readonly objects = new Map<string, KObject>();
  /** the same objects by kind, so list() never walks the other kinds */
  private readonly byKind = new Map<string, Map<string, KObject>>();
  /**
   * list()'s sorted answers per kind and namespace (undefined: all), dropped when an object of the
   * kind changes: a controller pass lists the same kinds once per Service, and re-sorting 10k
   * slices each time made a pass over 10k Services take minutes
   */
  private readonly listed = new Map<string, Map<string | undefined, KObject[]>>();
  private readonly watchers = new Set<Watcher>();
  private readonly allocator: Allocator;
  private rv = 0;
  private saveTimer: NodeJS.Timeout | undefined;

  constructor(private readonly o: StoreOptions) {
    const file = o.dir ? join(o.dir, 'store.json') : undefined;
    const saved =
      file && existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Saved) : undefined;
    const range = o.nodePortRange ?? DEFAULT_NODE_PORT_RANGE;
    const cidrs = { serviceCidr: o.serviceCidr, serviceCidrV6: o.serviceCidrV6 };
    this.allocator = saved
      ? Allocator.fromJSON(saved.allocator, { ...cidrs, nodePortRange: range })
      : new Allocator({ ...cidrs, nodePortRange: range });
    this.rv = saved?.resourceVersion ?? 0;
    for (const obj of saved?.objects ?? []) this.index(obj);
  }

  get(kind: string, namespace: string | undefined, name: string): KObject | undefined {
    return this.objects.get(storeKey(kind, namespace, name));
  }

  /** Objects of a kind, in one namespace or all, sorted by namespace and name. */
  list<T extends KObject = KObject>(kind: string, namespace?: string): T[] {
    const perNs = this.listed.get(kind) ?? new Map<string | undefined, KObject[]>();
    this.listed.set(kind, perNs);
    let out = perNs.get(namespace);
    if (!out) {
      const keyed: [string, KObject][] = [];
      for (const [key, obj] of this.byKind.get(kind) ?? []) {
        if (namespace !== undefined && (obj.metadata.namespace ?? '') !== namespace) continue;
        keyed.push([key, obj]);
      }
      out = keyed.sort((a, b) => a[0].localeCompare(b[0])).map(([, obj]) => obj);
      perNs.set(namespace, out);
    }
    return out.slice() as T[];
  }

  watch(w: Watcher): () => void {
    this.watchers.add(w);
    return () => this.watchers.delete(w);
  }

  /** kubectl apply: create, or replace what the caller owns (spec, labels, annotations). */
  apply(obj: unknown, file: string): WriteResult {
    const named = this.expandName(obj);
    const r = admit(named, this.ctx(), file);
    if (!('object' in r)) return r;
    const next = r.object;
    const old = this.objects.get(keyOf(next));
    if (!old) return { action: 'created', object: this.put(this.fresh(next), 'ADDED') };
    if (sameContent(old, next)) return { action: 'unchanged', object: old };
    const merged: KObject = {
      ...next,
      metadata: { ...old.metadata, ...next.metadata, uid: old.metadata.uid },
      status: next.status ?? old.status,
    };
    merged.metadata.creationTimestamp = old.metadata.creationTimestamp;
    merged.metadata.deletionTimestamp = old.metadata.deletionTimestamp;
    if (JSON.stringify(old.spec) !== JSON.stringify(next.spec))
      merged.metadata.generation = (old.metadata.generation ?? 1) + 1;
    return { action: 'configured', object: this.put(merged, 'MODIFIED') };
  }

  /** Replaces the status of a stored object (the status subresource: no admission of spec). */
  updateStatus(kind: string, namespace: string | undefined, name: string, status: unknown): void {
    const old = this.get(kind, namespace, name);
    if (!old || JSON.stringify(old.status) === JSON.stringify(status)) return;
    this.put({ ...old, status, metadata: { ...old.metadata } }, 'MODIFIED');
  }

  /**
   * Deletes an object. Pods are marked (deletionTimestamp, deletionGracePeriodSeconds) and stay
   * until remove(); everything else goes now. Objects it owns are deleted too.
   */
  delete(kind: string, namespace: string | undefined, name: string, grace?: number): boolean {
    const old = this.get(kind, namespace, name);
    if (!old) return false;
    if (kind === 'Pod') {
      const spec = old.spec as { terminationGracePeriodSeconds?: number };
      const g = grace ?? spec.terminationGracePeriodSeconds ?? 30;
      const prev = old.metadata.deletionGracePeriodSeconds;
      // A second delete may shorten the grace period, never lengthen it (as the apiserver).
      if (old.metadata.deletionTimestamp && prev !== undefined && prev <= g) return true;
      const md = { ...old.metadata, deletionTimestamp: now(), deletionGracePeriodSeconds: g };
      this.put({ ...old, metadata: md }, 'MODIFIED');
    } else {
      this.remove(kind, namespace, name);
    }
    for (const dep of this.dependents(old))
      this.delete(dep.kind, dep.metadata.namespace, dep.metadata.name);
    return true;
  }

  /** Removes an object for good (a Pod whose kubelet finished; the others via delete). */
  remove(kind: string, namespace: string | undefined, name: string): void {
    const key = storeKey(kind, namespace, name);
    const old = this.objects.get(key);
    if (!old) return;
    this.objects.delete(key);
    this.byKind.get(kind)?.delete(key);
    this.listed.delete(kind);
    if (kind === 'Service') this.allocator.releaseOwner(objectName(old));
    this.rv++;
    this.changed('DELETED', old);
  }

  private dependents(owner: KObject): KObject[] {
    const uid = owner.metadata.uid;
    if (!uid) return [];
    return [...this.objects.values()].filter((o) =>
      (o.metadata.ownerReferences ?? []).some((r) => r.uid === uid),
    );
  }

  private ctx() {
    return {
      // the readers check each ClusterIP against the range of its family
      serviceCidr: [this.o.serviceCidr, this.o.serviceCidrV6].filter((c) => c).join(','),
      clusterCidr: this.o.clusterCidr,
      nodePortRange: this.o.nodePortRange ?? DEFAULT_NODE_PORT_RANGE,
      allocator: this.allocator,
      get: (kind: string, ns: string, name: string) => this.get(kind, ns, name),
    };
  }

  /** metadata.generateName: the apiserver appends five random characters. */
  private expandName(obj: unknown): unknown {
    const o = obj as {
      kind?: string;
      metadata?: { name?: string; generateName?: string; namespace?: string };
    } | null;
    if (!o || typeof o !== 'object' || !o.metadata || o.metadata.name || !o.metadata.generateName)
      return obj;
    const kind = String(o.kind);
    const name = expandGenerateName(
      o.metadata.generateName,
      (n) => this.get(kind, o.metadata?.namespace, n) !== undefined,
    );
    return { ...o, metadata: { ...o.metadata, name } };
  }

  private fresh(o: KObject): KObject {
    const md = { ...o.metadata, uid: randomUUID(), creationTimestamp: now(), generation: 1 };
    delete md.deletionTimestamp;
    return { ...o, metadata: md };
  }

  private put(o: KObject, type: WatchType): KObject {
    this.rv++;
    o.metadata.resourceVersion = String(this.rv);
    this.index(o);
    this.changed(type, o);
    return o;
  }

  private index(o: KObject): void {
    const key = keyOf(o);
    this.objects.set(key, o);
    const kind = this.byKind.get(o.kind) ?? new Map<string, KObject>();
    this.byKind.set(o.kind, kind);
    kind.set(key, o);
    this.listed.delete(o.kind);
  }

  private changed(type: WatchType, o: KObject): void {
    this.scheduleSave();
    for (const w of this.watchers) w(type, o);
  }

  private scheduleSave(): void {
    if (!this.o.dir || this.saveTimer) return;
    this.saveTimer = setTimeout(() => this.save(), 100);
  }

  /** Writes store.json now (atomically: a crash leaves the old or the new file). */
  save(): void {
    clearTimeout(this.saveTimer);
    this.saveTimer = undefined;
    if (!this.o.dir) return;
    mkdirSync(this.o.dir, { recursive: true });
    const saved: Saved = {
      version: 1,
      resourceVersion: this.rv,
      allocator: this.allocator.toJSON(),
      objects: [...this.objects.values()],
    };
    const file = join(this.o.dir, 'store.json');
    writeFileSync(`${file}.tmp`, JSON.stringify(saved));
    renameSync(`${file}.tmp`, file);
  }
}

function now(): string {
  return new Date().toISOString().replace(/\.[0-9]+Z$/, 'Z');
}

/** What apply compares: the object as written, without what the apiserver owns. */
function sameContent(a: KObject, b: KObject): boolean {
  const strip = (o: KObject) => ({
    spec: o.spec,
    labels: o.metadata.labels ?? {},
    annotations: o.metadata.annotations ?? {},
    rest: Object.fromEntries(
      Object.entries(o).filter(([k]) => !['metadata', 'spec', 'status'].includes(k)),
    ),
  });
  return JSON.stringify(strip(a)) === JSON.stringify(strip(b));
}

/** The kinds every node's data plane (and the DNS server) reads from the view directory. */
export const VIEW_KINDS = ['Namespace', 'Service', 'EndpointSlice'] as const;
export const VIEW_FILE = 'cluster.json';

/**
 * Writes the view directory: one `kind: List` of the Namespaces, Services (as defaulted, with
 * their allocated ClusterIPs and NodePorts) and EndpointSlices (generated or hand-written: the
 * readers cannot tell), replaced atomically so a reader never sees half of it. Returns false
 * when the content is what the directory already holds (no write, no reload anywhere).
 */
export function writeView(store: Store, dir: string, last?: { text: string }): boolean {
  const items = VIEW_KINDS.flatMap((k) => store.list(k));
  const text = `${JSON.stringify({ apiVersion: 'v1', kind: 'List', items }, null, 1)}\n`;
  if (last && last.text === text) return false;
  mkdirSync(dir, { recursive: true });
  const file = join(dir, VIEW_FILE);
  writeFileSync(join(dir, '.cluster.tmp'), text);
  renameSync(join(dir, '.cluster.tmp'), file);
  if (last) last.text = text;
  return true;
}

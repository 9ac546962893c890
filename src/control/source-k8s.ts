// The Kubernetes API source: Services and EndpointSlices through @kubernetes/client-node
// informers (list, then watch from the list's resourceVersion; the informer re-lists by itself
// when the server answers 410 Gone). The informer stops on any other error, so this source
// restarts it with exponential backoff; a restart keeps the last resourceVersion and so resumes
// the watch without a re-list when the server still has the history.
//
// Like kube-proxy, both informers skip objects labelled service.kubernetes.io/service-proxy-name
// (another proxy owns them) or service.kubernetes.io/headless. API objects go through the same
// parsers as manifests (src/manifests), so defaults and validation are the same; an object that
// fails them is reported and ignored, its previous version staying in force.

import {
  CoreV1Api,
  DiscoveryV1Api,
  type Informer,
  type KubeConfig,
  type KubernetesObject,
  ListWatch,
  makeInformer,
  Watch,
} from '@kubernetes/client-node';
import { parseEndpointSlice } from '../manifests/endpointslice.ts';
import { ObjectReader } from '../manifests/fields.ts';
import { KUBE_PROXY_LABEL_SELECTOR } from '../manifests/proxied.ts';
import { parseService } from '../manifests/service.ts';
import type { EndpointSlice, Service } from '../model.ts';
import { type Clock, systemClock, type TimerHandle } from './clock.ts';
import type { NodeLike } from './health.ts';
import type { SourceName } from './runner.ts';
import type { UpdateSink } from './source-dir.ts';


export interface K8sSourceOptions {
  kubeConfig: KubeConfig;
  sink: UpdateSink;
  /** one source has listed successfully for the first time (runner.setInitialized) */
  onSynced?: (source: SourceName) => void;
  /** an event left changes pending (runner.run / proxier.queue) */
  onChange?: () => void;
  /** list/watch failures (retried) and objects rejected by the parsers (ignored) */
  onError?: (err: unknown, source: WatchName) => void;
  /** watch this Node and report it (health.syncNode), as kube-proxy does for nodeEligible */
  nodeName?: string;
  /** the Node changed; after its deletion, called with a deletionTimestamp set */
  onNode?: (node: NodeLike) => void;
  labelSelector?: string;
  clock?: Clock;
  /** first retry delay, doubled per consecutive failure up to backoffMaxMs */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
}

type Json = Record<string, unknown>;
export type WatchName = SourceName | 'node';
type ListFn = () => Promise<{ items: KubernetesObject[]; metadata?: { resourceVersion?: string } }>;

/** One informer and the last good model object per namespaced name. */
class ResourceWatch<T extends { namespace: string; name: string }> {
  readonly objects = new Map<string, T>();
  synced = false;
  private failedThisStart = false;
  private failures = 0;
  private retry: TimerHandle | undefined;
  private stopped = false;

  constructor(
    private readonly name: WatchName,
    private readonly o: K8sSourceOptions,
    private readonly clock: Clock,
    private readonly informer: Informer<KubernetesObject>,
    private readonly convert: (obj: Json) => T,
    private readonly update: (prev: T | null, cur: T | null) => boolean,
  ) {
    this.informer.on('add', (obj) => this.onUpsert(obj));
    this.informer.on('update', (obj) => this.onUpsert(obj));
    this.informer.on('delete', (obj) => this.onDelete(obj));
    this.informer.on('error', (err) => this.onFailure(err));
  }

  async start(): Promise<void> {
    this.stopped = false;
    this.failedThisStart = false;
    await this.informer.start();
    if (this.failedThisStart || this.stopped) return;
    this.failures = 0;
    if (!this.synced) {
      this.synced = true;
      if (this.name !== 'node') this.o.onSynced?.(this.name);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retry !== undefined) this.clock.clearTimeout(this.retry);
    this.retry = undefined;
    await this.informer.stop();
  }

  private onFailure(err: unknown): void {
    this.failedThisStart = true;
    this.o.onError?.(err, this.name);
    if (this.stopped || this.retry !== undefined) return;
    const first = this.o.backoffInitialMs ?? 1000;
    const delay = Math.min(this.o.backoffMaxMs ?? 30_000, first * 2 ** this.failures);
    this.failures++;
    this.retry = this.clock.setTimeout(() => {
      this.retry = undefined;
      if (!this.stopped) void this.start();
    }, delay);
  }

  private onUpsert(raw: KubernetesObject): void {
    let cur: T;
    try {
      cur = this.convert(raw as unknown as Json);
    } catch (err) {
      this.o.onError?.(err, this.name);
      return;
    }
    const key = `${cur.namespace}/${cur.name}`;
    const prev = this.objects.get(key) ?? null;
    this.objects.set(key, cur);
    if (this.update(prev, cur)) this.o.onChange?.();
  }

  private onDelete(raw: KubernetesObject): void {
    const key = `${raw.metadata?.namespace ?? ''}/${raw.metadata?.name ?? ''}`;
    const prev = this.objects.get(key);
    if (!prev) return;
    this.objects.delete(key);
    if (this.update(prev, null)) this.o.onChange?.();
  }
}

/** API objects carry no file; errors name the API instead. */
function reader(kind: string): ObjectReader {
  return new ObjectReader('kube-apiserver', 0, kind, '');
}

export function serviceFromApi(o: Json): Service {
  return parseService(reader('Service'), o);
}

export function endpointSliceFromApi(o: Json): EndpointSlice {
  return parseEndpointSlice(reader('EndpointSlice'), o);
}

/** The Node's fields that decide health eligibility, keyed like the other objects. */
interface NodeInfo extends NodeLike {
  namespace: string;
  name: string;
}

function nodeFromApi(o: Json): NodeInfo {
  const meta = (o.metadata ?? {}) as { name?: string; deletionTimestamp?: string | Date | null };
  const spec = (o.spec ?? {}) as { taints?: { key: string }[] | null };
  return {
    namespace: '',
    name: meta.name ?? '',
    deletionTimestamp: meta.deletionTimestamp ?? undefined,
    taints: spec.taints ?? [],
  };
}

export class KubernetesSource {
  readonly services: ResourceWatch<Service>;
  readonly endpointSlices: ResourceWatch<EndpointSlice>;
  readonly node: ResourceWatch<NodeInfo> | undefined;

  constructor(opts: K8sSourceOptions) {
    const clock = opts.clock ?? systemClock;
    const labelSelector = opts.labelSelector ?? KUBE_PROXY_LABEL_SELECTOR;
    const kc = opts.kubeConfig;
    const core = kc.makeApiClient(CoreV1Api);
    const discovery = kc.makeApiClient(DiscoveryV1Api);
    const informer = (path: string, list: ListFn) =>
      makeInformer(kc, path, list as never, labelSelector);
    this.services = new ResourceWatch<Service>(
      'services',
      opts,
      clock,
      informer('/api/v1/services', () => core.listServiceForAllNamespaces({ labelSelector })),
      serviceFromApi,
      (p, c) => opts.sink.services.update(p, c),
    );
    this.endpointSlices = new ResourceWatch<EndpointSlice>(
      'endpointslices',
      opts,
      clock,
      informer('/apis/discovery.k8s.io/v1/endpointslices', () =>
        discovery.listEndpointSliceForAllNamespaces({ labelSelector }),
      ),
      endpointSliceFromApi,
      (p, c) => opts.sink.endpointSlices.update(p, c),
    );
    if (opts.nodeName !== undefined) this.node = nodeWatch(opts, clock, core, opts.nodeName);
  }

  /** Starts the informers; resolves once each has tried its first list (failures retry). */
  async start(): Promise<void> {
    await Promise.all([this.services.start(), this.endpointSlices.start(), this.node?.start()]);
  }

  async stop(): Promise<void> {
    await Promise.all([this.services.stop(), this.endpointSlices.stop(), this.node?.stop()]);
  }
}

/** kube-proxy's NodeEligibleHandler: this one Node, by field selector. */
function nodeWatch(
  opts: K8sSourceOptions,
  clock: Clock,
  core: CoreV1Api,
  nodeName: string,
): ResourceWatch<NodeInfo> {
  const fieldSelector = `metadata.name=${nodeName}`;
  const list = () => core.listNode({ fieldSelector });
  const lw = new ListWatch(
    '/api/v1/nodes',
    new Watch(opts.kubeConfig),
    list as never,
    false,
    undefined,
    fieldSelector,
  );
  return new ResourceWatch<NodeInfo>('node', opts, clock, lw, nodeFromApi, (prev, cur) => {
    // A deleted Node is as ineligible as one being deleted.
    opts.onNode?.(cur ?? { ...prev, deletionTimestamp: prev?.deletionTimestamp ?? new Date(0) });
    return false;
  });
}

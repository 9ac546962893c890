// The lab's control plane: one process per lab (`kubetun lab control-plane`, started by `lab up`,
// recorded in the lab state like every other process, stopped by `lab down`), holding what a
// cluster's control plane and kubelets hold:
//
//   store (src/cluster/store.ts)  admission on every write, persisted in LAB_DIR/store/
//   addon manager                 the topology's Nodes and named Pods and the manifests
//                                 directory, applied at start and again whenever a file changes
//   scheduler                     Pods without spec.nodeName bound to the node with fewest Pods
//   controllers                   Deployment → ReplicaSet → Pods; EndpointSlices per Service
//   kubelets, one per node        Pods as network namespaces (src/cluster/kubelet.ts)
//   view writer                   LAB_DIR/view/: Services + EndpointSlices every node's data
//                                 plane reads (kubetun: --manifests, hot reload; the kernel
//                                 modes: re-rendered here when the view changes)
//   API                           LAB_DIR/api.sock (api.ts), what the lab commands talk to
//
// Everything is level-triggered: any change schedules one reconcile pass that looks at the whole
// store, so a missed event can never leave the lab out of step.
import { existsSync, readFileSync, rmSync, statSync, watch, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import { join } from 'node:path';
import { reconcileDeployments, RESTARTED_AT_ANNOTATION } from '../cluster/deployment-controller.ts';
import { pushTo, reconcileSlices } from '../cluster/endpointslice-controller.ts';
import { placeResolvConf, removeResolvConf, resolvConf } from '../cluster/dns/resolv-conf.ts';
import { readObjects } from '../cluster/files.ts';
import { Kubelet, POD_IP_ANNOTATION, podIPs } from '../cluster/kubelet.ts';
import { Store, writeView } from '../cluster/store.ts';
import {
  type Deployment,
  type EndpointSlice,
  type KObject,
  LABEL_MANAGED_BY,
  LABEL_SERVICE_NAME,
  CONTROLLER_NAME,
  objectName,
  type Node,
  type Pod,
  type Service,
} from '../cluster/types.ts';
import { manifestFiles } from '../manifests/load.ts';
import { apiRoutes } from './control-plane-api.ts';
import { serveApi } from './api.ts';
import { installKernelDataplane, isKernelMode } from './kube-proxy.ts';
import { cleanStaleUdpConntrack, udpEndpointsSignature } from './kube-proxy-conntrack.ts';
import { loadManifests, resolveServicePorts } from '../manifests/index.ts';
import { labTarget } from './plan.ts';
import { LOG_DIR, readState, SANDBOX_FILE, VIEW_DIR } from './state.ts';
import { podAddress6, type Topology } from './topology.ts';

/** The kubelet's --cluster-domain. */
export const CLUSTER_DOMAIN = 'cluster.local';
/** Where the addon manager notes what it applied from a file (its prune list). */
export const SOURCE_ANNOTATION = 'kubetun.io/applied-from';

export interface ControlPlaneOptions {
  viewDir?: string;
  /** undefined: keep the store in memory (a static view, a test) */
  storeDir?: string;
  /** run kubelets (false: the topology's Pods are taken as running, for a static view) */
  kubelets?: boolean;
  say?: (msg: string) => void;
  /** an object the store refused (admission errors of the topology and manifests) */
  refused?: (msg: string) => void;
}

export class LabControlPlane {
  readonly store: Store;
  readonly viewDir: string;
  private readonly kubelets = new Map<string, Kubelet>();
  private readonly sandboxes = new Set<string>();
  private readonly say: (msg: string) => void;
  private readonly lastView = { text: '' };
  private timer: NodeJS.Timeout | undefined;
  private manifestsSig = '';
  private server: Server | undefined;
  private stopped = false;
  /** the UDP services' endpoints at the last kernel-mode sync (kube-proxy's cleanup trigger) */
  private udpEndpoints: string | undefined;
  /** problems of the last pass, for `lab status` (an admission error from a controller) */
  problems: string[] = [];

  constructor(
    readonly t: Topology,
    private readonly o: ControlPlaneOptions = {},
  ) {
    this.viewDir = o.viewDir ?? VIEW_DIR;
    this.say = o.say ?? (() => {});
    this.store = new Store({
      dir: o.storeDir,
      serviceCidr: t.serviceCidr,
      serviceCidrV6: t.ipv6?.serviceCidr,
      clusterCidr: t.clusterCidr,
    });
    if (o.kubelets !== false) {
      for (const n of t.nodes)
        this.kubelets.set(n.name, new Kubelet(n, labTarget(n), this.kubeletHost()));
    }
    this.store.watch(() => this.schedule());
  }

  /** A static view: the topology and the manifests applied, reconciled until settled. */
  startOffline(): void {
    this.applyBootstrap();
    this.applyManifests(true);
    this.reconcile();
    this.reconcile();
    this.reconcile();
  }

  /** Applies the topology and the manifests, reconciles once, serves the API if asked to. */
  async start(api?: string): Promise<void> {
    this.applyBootstrap();
    this.applyManifests(true);
    this.reconcile();
    if (api) {
      this.server = await serveApi(api, apiRoutes(this));
      this.watchManifests();
    }
  }

  /** Nodes, the default and kube-system Namespaces, the topology's named Pods. */
  private applyBootstrap(): void {
    for (const obj of topologyObjects(this.t)) this.report(this.store.apply(obj, this.t.file));
    // Nodes and Pods of nodes the topology no longer has go (the node controller's eviction)
    const nodes = new Set(this.t.nodes.map((n) => n.name));
    for (const n of this.store.list<Node>('Node'))
      if (!nodes.has(n.metadata.name)) this.store.remove('Node', undefined, n.metadata.name);
    for (const p of this.store.list<Pod>('Pod'))
      if (p.spec.nodeName && !nodes.has(p.spec.nodeName))
        this.store.remove('Pod', p.metadata.namespace, p.metadata.name);
  }

  /** The addon manager: every object of the manifests directory applied; removed ones pruned. */
  applyManifests(force = false): Set<string> | undefined {
    const sig = dirSignature(this.t.manifests);
    if (!force && sig === this.manifestsSig) return;
    this.manifestsSig = sig;
    let objects: { file: string; object: unknown }[];
    try {
      objects = readObjects(this.t.manifests);
    } catch (err) {
      this.say(`manifests: ${(err as Error).message} (the objects applied before stay)`);
      this.o.refused?.((err as Error).message);
      return;
    }
    // Prune first, by what the files hold: an object renamed in a file frees its ClusterIP and
    // NodePorts for the new name, and one whose update admission refuses keeps its last good
    // state instead of being pruned.
    const held = new Set(objects.map(({ object }) => fileKey(object as KObject)));
    this.prune(
      (o) =>
        o.metadata.annotations?.[SOURCE_ANNOTATION]?.startsWith(`${this.t.manifests}/`) === true,
      held,
    );
    for (const { file, object } of objects) {
      const o = object as KObject;
      if (o?.metadata)
        o.metadata.annotations = { ...o.metadata.annotations, [SOURCE_ANNOTATION]: file };
      this.report(this.store.apply(o, file));
    }
    return held;
  }

  /** Deletes the objects `mine` picks that `held` does not name; returns what went. */
  private prune(mine: (o: KObject) => boolean, held: Set<string>, kinds = PRUNED_KINDS): string[] {
    const gone: string[] = [];
    for (const kind of kinds)
      for (const o of this.store.list(kind))
        if (mine(o) && !held.has(fileKey(o))) {
          this.store.delete(kind, o.metadata.namespace, o.metadata.name);
          gone.push(objectName(o));
        }
    return gone;
  }

  /**
   * The addon manager's pass, now, then one reconcile pass, so the view is written when this
   * returns. Without force: what the file watch does a moment after a file changed. force: the
   * topology's objects and every manifest applied again (an object deleted by hand comes back,
   * one edited by hand is put back); prune (with force): Services, Deployments and hand-made
   * EndpointSlices that neither the files nor the topology hold are deleted too (what `lab
   * apply` added) — what `exercise reset` uses.
   */
  resync(force: boolean, prune: boolean): { removed: string[] } {
    let removed: string[] = [];
    if (force && prune) {
      // before applying: what `lab apply` added may hold an address a file's object asks for
      const held = new Set(
        safeRead(this.t.manifests).map(({ object }) => fileKey(object as KObject)),
      );
      const handMade = (o: KObject) =>
        o.metadata.labels?.[LABEL_MANAGED_BY] !== CONTROLLER_NAME &&
        o.metadata.annotations?.[SOURCE_ANNOTATION] !== this.t.file;
      removed = this.prune(handMade, held, ['Service', 'Deployment', 'EndpointSlice']);
    }
    if (force) this.applyBootstrap();
    this.applyManifests(force);
    this.reconcile();
    return { removed };
  }

  private report(r: ReturnType<Store['apply']>): void {
    if ('errors' in r)
      for (const e of r.errors) {
        this.say(e.message);
        this.o.refused?.(e.message);
      }
    else if ('ignored' in r) this.say(r.ignored);
  }

  private watchManifests(): void {
    let debounce: NodeJS.Timeout | undefined;
    const kick = () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => this.applyManifests(), 100);
    };
    try {
      watch(this.t.manifests, kick).on('error', () => {});
    } catch {}
    // fs.watch misses changes on some filesystems: a slow poll backs it up
    setInterval(kick, 2000).unref();
  }

  private schedule(): void {
    if (this.timer || this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.reconcile();
    }, 10);
  }

  /** One pass: schedule, controllers, kubelets, view. */
  reconcile(): void {
    const problems: string[] = [];
    this.bindPods();
    problems.push(...reconcileDeployments(this.store));
    problems.push(...this.reconcileEndpointSlices());
    for (const [name, k] of this.kubelets)
      k.sync(this.store.list<Pod>('Pod').filter((p) => p.spec.nodeName === name));
    if (this.o.kubelets === false) this.staticPodsRunning();
    if (writeView(this.store, this.viewDir, this.lastView)) this.viewChanged();
    for (const p of problems) if (!this.problems.includes(p)) this.say(p);
    this.problems = problems;
  }

  /**
   * The scheduler: spread Pods without a node over the nodes — fewest Pods of the same owner
   * (ReplicaSet) first, as kube-scheduler's default topology spreading prefers, then fewest Pods,
   * then by name — so a Deployment's replicas land on different nodes whatever else is placed in
   * the same pass.
   */
  private bindPods(): void {
    const pods = this.store.list<Pod>('Pod').filter((p) => !p.metadata.deletionTimestamp);
    const load = new Map(this.t.nodes.map((n) => [n.name, 0]));
    const owned = new Map<string, number>(); // "<owner uid>/<node>" → Pods
    const ownerOf = (p: Pod) => p.metadata.ownerReferences?.[0]?.uid ?? '';
    const place = (p: Pod, node: string) => {
      load.set(node, (load.get(node) ?? 0) + 1);
      const k = `${ownerOf(p)}/${node}`;
      if (ownerOf(p)) owned.set(k, (owned.get(k) ?? 0) + 1);
    };
    for (const p of pods) if (p.spec.nodeName) place(p, p.spec.nodeName);
    for (const p of pods.filter((x) => !x.spec.nodeName)) {
      const same = (node: string) => owned.get(`${ownerOf(p)}/${node}`) ?? 0;
      const [node] = [...load].sort(
        (a, b) => same(a[0]) - same(b[0]) || a[1] - b[1] || a[0].localeCompare(b[0]),
      )[0]!;
      place(p, node);
      this.report(this.store.apply({ ...p, spec: { ...p.spec, nodeName: node } }, 'scheduler'));
    }
  }

  private reconcileEndpointSlices(): string[] {
    const problems: string[] = [];
    const nodes = this.store.list<Node>('Node');
    // grouped once per pass, not listed per Service: 10k Services took minutes
    const managed = new Map<string, EndpointSlice[]>();
    for (const s of this.store.list<EndpointSlice>('EndpointSlice'))
      if (s.metadata.labels?.[LABEL_MANAGED_BY] === CONTROLLER_NAME)
        pushTo(managed, `${s.metadata.namespace}/${s.metadata.labels?.[LABEL_SERVICE_NAME]}`, s);
    const podsByNs = new Map<string | undefined, Pod[]>();
    for (const p of this.store.list<Pod>('Pod')) pushTo(podsByNs, p.metadata.namespace, p);
    for (const svc of this.store.list<Service>('Service')) {
      const ns = svc.metadata.namespace;
      const existing = managed.get(`${ns}/${svc.metadata.name}`) ?? [];
      const hasSelector = Object.keys(svc.spec.selector ?? {}).length > 0;
      if (!hasSelector && existing.length === 0) continue;
      const pods = podsByNs.get(ns) ?? [];
      const r = reconcileSlices(svc, pods, nodes, existing);
      for (const s of [...r.create, ...r.update]) {
        const w = this.store.apply(s, 'endpointslice-controller');
        if ('errors' in w) problems.push(...w.errors.map((e) => e.message));
      }
      for (const s of r.delete)
        this.store.remove('EndpointSlice', s.metadata.namespace, s.metadata.name);
    }
    return problems;
  }

  /** Without kubelets (a static view): the topology's Pods are running and ready at their IPs. */
  private staticPodsRunning(): void {
    for (const p of this.store.list<Pod>('Pod')) {
      const ip = p.metadata.annotations?.[POD_IP_ANNOTATION];
      if (!ip || p.status?.podIP === ip) continue;
      const node = this.t.nodes.find((n) => n.name === p.spec.nodeName);
      this.store.updateStatus('Pod', p.metadata.namespace, p.metadata.name, {
        phase: 'Running',
        podIP: ip,
        podIPs: podIPs({ ip, ip6: node ? podAddress6(node, ip) : undefined }),
        hostIP: node?.ip,
        conditions: [
          { type: 'Ready', status: 'True' },
          { type: 'ContainersReady', status: 'True' },
        ],
      });
    }
  }

  /** The kernel modes have no watch of their own: kube-proxy's sync, run here. */
  private viewChanged(): void {
    const st = readState();
    const mode = st?.mode;
    if (!this.server || !mode || !isKernelMode(mode) || st?.switching) return;
    try {
      installKernelDataplane(this.t, mode, () => {}, this.viewDir);
    } catch (err) {
      this.say(`kernel ${mode} rules: ${(err as Error).message}`);
      return;
    }
    // then, as kube-proxy after a sync that changed a UDP service's endpoints: stale UDP flows
    const state = loadManifests(this.viewDir);
    const ports = resolveServicePorts(state);
    // a dual-stack topology: kube-proxy's IPv6 proxier cleans its own (IPv6) flows
    const ports6 = this.t.ipv6 ? resolveServicePorts(state, { family: 'IPv6' }) : [];
    const sig = udpEndpointsSignature(ports, ports6);
    if (sig === this.udpEndpoints) return;
    this.udpEndpoints = sig;
    const n =
      cleanStaleUdpConntrack(this.t, ports) +
      (this.t.ipv6 ? cleanStaleUdpConntrack(this.t, ports6, 'IPv6') : 0);
    if (n > 0) this.say(`kernel ${mode}: ${n} stale UDP conntrack entries deleted`);
  }

  private kubeletHost() {
    return {
      status: (pod: Pod, status: unknown) =>
        this.store.updateStatus('Pod', pod.metadata.namespace, pod.metadata.name, status),
      gone: (pod: Pod) => {
        const cur = this.store.get('Pod', pod.metadata.namespace, pod.metadata.name);
        if (cur && cur.metadata.uid === pod.metadata.uid)
          this.store.remove('Pod', pod.metadata.namespace, pod.metadata.name);
      },
      sandbox: (ns: string, present: boolean) => {
        if (present) this.sandboxes.add(ns);
        else this.sandboxes.delete(ns);
        if (this.o.storeDir)
          writeFileSync(SANDBOX_FILE, `${JSON.stringify([...this.sandboxes])}\n`);
      },
      logFile: (pod: Pod) => podLogFile(pod),
      resolvConf: (pod: Pod, ns: string, remove?: boolean) => {
        if (remove) return removeResolvConf(ns);
        placeResolvConf(ns, resolvConf(pod, this.clusterDnsIPs(), CLUSTER_DOMAIN));
      },
      viewDir: this.viewDir,
      say: this.say,
    };
  }

  /** The kube-dns Service's ClusterIPs (the kubelet's --cluster-dns), none before it exists. */
  private clusterDnsIPs(): string[] {
    const svc = this.store.get('Service', 'kube-system', 'kube-dns') as Service | undefined;
    return (svc?.spec.clusterIPs ?? []).filter((ip) => ip !== 'None');
  }

  /** Ready for the data planes: every Pod that can start has, and the view is written. */
  synced(): boolean {
    const pods = this.store.list<Pod>('Pod').filter((p) => !p.metadata.deletionTimestamp);
    return (
      pods.every((p) => p.status?.phase === 'Running' || p.status?.phase === 'Failed') &&
      this.lastView.text !== ''
    );
  }

  scale(namespace: string, name: string, replicas: number): void {
    const d = this.store.get('Deployment', namespace, name) as Deployment | undefined;
    if (!d) throw new Error(`deployments.apps "${name}" not found in namespace ${namespace}`);
    this.applyOrThrow({ ...d, spec: { ...d.spec, replicas } });
  }

  /** kubectl rollout restart: a template annotation with the time, so the template changes. */
  restart(namespace: string, name: string): void {
    const d = this.store.get('Deployment', namespace, name) as Deployment | undefined;
    if (!d) throw new Error(`deployments.apps "${name}" not found in namespace ${namespace}`);
    const md = d.spec.template.metadata ?? {};
    const annotations = { ...md.annotations, [RESTARTED_AT_ANNOTATION]: new Date().toISOString() };
    const template = { ...d.spec.template, metadata: { ...md, annotations } };
    this.applyOrThrow({ ...d, spec: { ...d.spec, template } });
  }

  private applyOrThrow(o: KObject): void {
    const r = this.store.apply(o, 'kubetun lab');
    if ('errors' in r) throw new Error(r.errors.map((e) => e.message).join('\n'));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.server?.close();
    await Promise.all([...this.kubelets.values()].map((k) => k.close()));
    this.store.save();
  }
}

export function podLogFile(pod: Pod): string {
  return join(LOG_DIR, `pod-${pod.metadata.namespace ?? 'default'}_${pod.metadata.name}.log`);
}

/** The sandboxes a control plane recorded (for `lab down` after a crash). */
export function recordedSandboxes(): string[] {
  try {
    return JSON.parse(readFileSync(SANDBOX_FILE, 'utf8')) as string[];
  } catch {
    return [];
  }
}

/** What the topology says about the cluster, as API objects. */
export function topologyObjects(t: Topology): KObject[] {
  const objs: KObject[] = [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'default' } },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'kube-system' } },
  ];
  for (const n of t.nodes) {
    objs.push({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: n.name, labels: { 'kubernetes.io/hostname': n.name, ...n.labels } },
      spec: {
        podCIDR: n.podCidr,
        podCIDRs: n.podCidrV6 ? [n.podCidr, n.podCidrV6] : [n.podCidr],
      },
      status: {
        addresses: [
          { type: 'InternalIP', address: n.ip },
          ...(n.ip6 ? [{ type: 'InternalIP', address: n.ip6 }] : []),
          { type: 'Hostname', address: n.name },
        ],
        conditions: [{ type: 'Ready', status: 'True' }],
      },
    });
    for (const p of n.pods) objs.push(topologyPod(t, n.name, p));
  }
  return objs;
}

function topologyPod(t: Topology, node: string, p: Topology['nodes'][number]['pods'][number]): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: p.name,
      namespace: 'default',
      labels: { ...p.labels },
      annotations: { [POD_IP_ANNOTATION]: p.ip, [SOURCE_ANNOTATION]: t.file },
    },
    spec: {
      nodeName: node,
      containers: [
        {
          name: 'echo',
          image: p.image ?? 'kubetun/echo',
          ports: [
            { name: 'http', containerPort: t.httpPort, protocol: 'TCP' },
            { name: 'udp', containerPort: t.udpPort, protocol: 'UDP' },
          ],
        },
      ],
    },
  };
}

/** The kinds the addon manager prunes when their file no longer holds them. */
const PRUNED_KINDS = ['Service', 'EndpointSlice', 'Deployment', 'Pod', 'Namespace'];

/** kind/namespace/name, as an object of a file names itself (namespaced kinds default). */
function fileKey(o: KObject): string {
  const scoped = o?.kind === 'Namespace' || o?.kind === 'Node';
  return `${o?.kind}/${scoped ? undefined : (o?.metadata?.namespace ?? 'default')}/${o?.metadata?.name}`;
}

function safeRead(dir: string): { file: string; object: unknown }[] {
  try {
    return readObjects(dir);
  } catch {
    return [];
  }
}

/** Names, sizes and mtimes of a directory's manifest files: changes when any of them does. */
function dirSignature(dir: string): string {
  try {
    return manifestFiles(dir)
      .map((f) => {
        const s = statSync(f);
        return `${f}:${s.size}:${s.mtimeMs}`;
      })
      .join('|');
  } catch {
    return '';
  }
}

/** Without a running control plane: the view a topology gives (the VM lab, offline tests). */
export async function renderStaticView(
  t: Topology,
  viewDir: string,
  refused?: (msg: string) => void,
): Promise<string> {
  return renderStaticViewSync(t, viewDir, refused);
}

/** The same, synchronously (the store and controllers never wait; only the API would). */
export function renderStaticViewSync(
  t: Topology,
  viewDir: string,
  refused?: (msg: string) => void,
): string {
  rmSync(join(viewDir, 'cluster.json'), { force: true });
  const cp = new LabControlPlane(t, { viewDir, kubelets: false, refused });
  cp.startOffline();
  if (!existsSync(viewDir)) throw new Error(`no view written to ${viewDir}`);
  return viewDir;
}

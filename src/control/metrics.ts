// kube-proxy's metrics under kube-proxy's names (pkg/proxy/metrics/metrics.go), so existing
// dashboards and alerts work unchanged, plus kubetun's own datapath counters. Labels follow
// Kubernetes 1.33+: the sync histograms, timestamps, no-local-endpoints and the conntrack
// reconciler carry ip_family (always "IPv4" here); the change counters carry none.
//
// Served on 127.0.0.1:10249/metrics by default, like kube-proxy's metricsBindAddress.

import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { portPolicy, selectPortEndpoints } from '../endpoints/select.ts';
import type { ResolvedServicePort } from '../model.ts';

/** prometheus.ExponentialBuckets(0.001, 2, 15): 1 ms .. 16.384 s */
export const SYNC_BUCKETS = Array.from({ length: 15 }, (_, i) => 0.001 * 2 ** i);

/** kube-proxy's network programming buckets: 0.25 s, 0.5 s, 1..59 s, 60..115 s, 2..5 min */
export const NETWORK_PROGRAMMING_BUCKETS = [
  0.25,
  0.5,
  ...Array.from({ length: 59 }, (_, i) => 1 + i),
  ...Array.from({ length: 12 }, (_, i) => 60 + 5 * i),
  ...Array.from({ length: 7 }, (_, i) => 120 + 30 * i),
];

/** What the data plane exports; every field optional. */
export interface DatapathStats {
  /** packets per outcome reason (drop or not) → kubetun_datapath_packets_total{reason} */
  packets?: Record<string, number>;
  /** live conntrack entries → kubetun_conntrack_entries */
  conntrackEntries?: number;
  /** map name → used/capacity in [0, 1] → kubetun_map_fill_ratio{map} */
  mapFill?: Record<string, number>;
  /**
   * the TUN's own drop counters as the kernel keeps them (sysfs, sampled at scrape):
   * direction to_agent (tx_dropped: its queue toward the agent was full, or no agent read it)
   * and from_agent (rx_dropped) → kubetun_tun_kernel_dropped_packets_total{direction}
   */
  tunKernelDrops?: Record<'to_agent' | 'from_agent', number>;
  /** events the datapath wrote into its event ring → kubetun_monitor_events_total */
  monitorEvents?: number;
  /** events monitor/tap streams lost (ring overwrites, slow readers) → kubetun_monitor_lost_events_total */
  monitorLost?: number;
  /** monitor/tap streams open now → kubetun_monitor_streams */
  monitorStreams?: number;
}

export type DatapathStatsFn = () => DatapathStats;

/** Cumulative counts kept by the change tracker (kube-proxy increments on every event). */
export interface ChangeCounts {
  serviceChangesTotal: number;
  endpointChangesTotal: number;
  readonly pendingServiceChanges: number;
  readonly pendingEndpointChanges: number;
}

const FAMILY = { ip_family: 'IPv4' } as const;

/** Sets a counter to an absolute value read at scrape time (counters only go up in prom-client). */
function setCounter<T extends string>(
  c: Counter<T>,
  value: number,
  labels?: Partial<Record<T, string>>,
): void {
  c.reset();
  if (value > 0) {
    if (labels) c.inc(labels, value);
    else c.inc(value);
  }
}

type Registers = Registry[];

function syncMetrics(registers: Registers) {
  const hist = (name: string, help: string, buckets: number[]) =>
    new Histogram({ name, help, buckets, labelNames: ['ip_family'] as const, registers });
  const gauge = (name: string, help: string) =>
    new Gauge({ name, help, labelNames: ['ip_family'] as const, registers });
  return {
    syncDuration: hist(
      'kubeproxy_sync_proxy_rules_duration_seconds',
      'SyncProxyRules latency in seconds',
      SYNC_BUCKETS,
    ),
    syncFullDuration: hist(
      'kubeproxy_sync_full_proxy_rules_duration_seconds',
      'SyncProxyRules latency in seconds for full resyncs',
      SYNC_BUCKETS,
    ),
    syncPartialDuration: hist(
      'kubeproxy_sync_partial_proxy_rules_duration_seconds',
      'SyncProxyRules latency in seconds for partial resyncs',
      SYNC_BUCKETS,
    ),
    networkProgramming: hist(
      'kubeproxy_network_programming_duration_seconds',
      'In Cluster Network Programming Latency in seconds',
      NETWORK_PROGRAMMING_BUCKETS,
    ),
    lastTimestamp: gauge(
      'kubeproxy_sync_proxy_rules_last_timestamp_seconds',
      'The last time proxy rules were successfully synced',
    ),
    lastQueuedTimestamp: gauge(
      'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds',
      'The last time a sync of proxy rules was queued',
    ),
  };
}

/** The change counters read the tracker at scrape time. */
function changeMetrics(registers: Registers, counts: () => ChangeCounts | undefined) {
  const total = (name: string, help: string, pick: (c: ChangeCounts) => number) =>
    new Counter({
      name,
      help,
      registers,
      collect() {
        const c = counts();
        if (c) setCounter(this, pick(c));
      },
    });
  const pending = (name: string, help: string, pick: (c: ChangeCounts) => number) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        const c = counts();
        if (c) this.set(pick(c));
      },
    });
  return {
    endpointChangesTotal: total(
      'kubeproxy_sync_proxy_rules_endpoint_changes_total',
      'Cumulative proxy rules Endpoint changes',
      (c) => c.endpointChangesTotal,
    ),
    endpointChangesPending: pending(
      'kubeproxy_sync_proxy_rules_endpoint_changes_pending',
      'Pending proxy rules Endpoint changes',
      (c) => c.pendingEndpointChanges,
    ),
    serviceChangesTotal: total(
      'kubeproxy_sync_proxy_rules_service_changes_total',
      'Cumulative proxy rules Service changes',
      (c) => c.serviceChangesTotal,
    ),
    serviceChangesPending: pending(
      'kubeproxy_sync_proxy_rules_service_changes_pending',
      'Pending proxy rules Service changes',
      (c) => c.pendingServiceChanges,
    ),
  };
}

function stateMetrics(registers: Registers) {
  const counter = <L extends string>(name: string, help: string, labelNames: readonly L[]) =>
    new Counter<L>({ name, help, labelNames, registers });
  return {
    noLocalEndpoints: new Gauge({
      name: 'kubeproxy_sync_proxy_rules_no_local_endpoints_total',
      help: 'Number of services with a Local traffic policy and no endpoints',
      labelNames: ['ip_family', 'traffic_policy'] as const,
      registers,
    }),
    conntrackDeleted: counter(
      'kubeproxy_conntrack_reconciler_deleted_entries_total',
      'Cumulative conntrack flows deleted by conntrack reconciler',
      ['ip_family'] as const,
    ),
    healthzTotal: counter('kubeproxy_proxy_healthz_total', 'Cumulative proxy healthz HTTP status', [
      'code',
    ] as const),
    livezTotal: counter('kubeproxy_proxy_livez_total', 'Cumulative proxy livez HTTP status', [
      'code',
    ] as const),
  };
}

/** kubetun's own: the datapath hook's figures, read at scrape time. */
function datapathMetrics(registers: Registers, read: () => DatapathStats | undefined) {
  return {
    datapathPackets: new Counter({
      name: 'kubetun_datapath_packets_total',
      help: 'Packets handled by the kubetun datapath, by outcome reason',
      labelNames: ['reason'] as const,
      registers,
      collect() {
        const p = read()?.packets;
        if (!p) return;
        this.reset();
        for (const [reason, v] of Object.entries(p)) if (v > 0) this.inc({ reason }, v);
      },
    }),
    conntrackEntries: new Gauge({
      name: 'kubetun_conntrack_entries',
      help: 'Live entries in the kubetun conntrack table',
      registers,
      collect() {
        const n = read()?.conntrackEntries;
        if (n !== undefined) this.set(n);
      },
    }),
    tunKernelDrops: new Counter({
      name: 'kubetun_tun_kernel_dropped_packets_total',
      help: 'Packets the kernel dropped at the TUN device before the agent read them (to_agent) or after it wrote them (from_agent), per device lifetime',
      labelNames: ['direction'] as const,
      registers,
      collect() {
        const d = read()?.tunKernelDrops;
        if (!d) return;
        this.reset();
        for (const [direction, v] of Object.entries(d)) if (v >= 0) this.inc({ direction }, v);
      },
    }),
    mapFill: new Gauge({
      name: 'kubetun_map_fill_ratio',
      help: 'Used entries over capacity, per datapath map',
      labelNames: ['map'] as const,
      registers,
      collect() {
        const m = read()?.mapFill;
        if (!m) return;
        this.reset();
        for (const [map, v] of Object.entries(m)) this.set({ map }, v);
      },
    }),
    ...monitorMetrics(registers, read),
  };
}

/** The event ring behind `kubetun monitor` / `tap` (src/node/monitor.ts). */
function monitorMetrics(registers: Registers, read: () => DatapathStats | undefined) {
  const counter = (name: string, help: string, pick: (s: DatapathStats) => number | undefined) =>
    new Counter({
      name,
      help,
      registers,
      collect() {
        const s = read();
        const v = s ? pick(s) : undefined;
        if (v !== undefined) setCounter(this, v);
      },
    });
  return {
    monitorEvents: counter(
      'kubetun_monitor_events_total',
      'Packet events the datapath wrote into its event ring (only while a monitor or tap listens)',
      (s) => s.monitorEvents,
    ),
    monitorLost: counter(
      'kubetun_monitor_lost_events_total',
      'Events monitor and tap streams lost: overwritten in the ring or dropped for a slow reader',
      (s) => s.monitorLost,
    ),
    monitorStreams: new Gauge({
      name: 'kubetun_monitor_streams',
      help: 'Monitor and tap streams open now',
      registers,
      collect() {
        const n = read()?.monitorStreams;
        if (n !== undefined) this.set(n);
      },
    }),
  };
}

type Built = ReturnType<typeof syncMetrics> &
  ReturnType<typeof changeMetrics> &
  ReturnType<typeof stateMetrics> &
  ReturnType<typeof datapathMetrics>;

export class ProxyMetrics {
  readonly registry: Registry;
  // Assigned in one Object.assign from the builders above.
  declare readonly syncDuration: Built['syncDuration'];
  declare readonly syncFullDuration: Built['syncFullDuration'];
  declare readonly syncPartialDuration: Built['syncPartialDuration'];
  declare readonly networkProgramming: Built['networkProgramming'];
  declare readonly lastTimestamp: Built['lastTimestamp'];
  declare readonly lastQueuedTimestamp: Built['lastQueuedTimestamp'];
  declare readonly endpointChangesTotal: Built['endpointChangesTotal'];
  declare readonly endpointChangesPending: Built['endpointChangesPending'];
  declare readonly serviceChangesTotal: Built['serviceChangesTotal'];
  declare readonly serviceChangesPending: Built['serviceChangesPending'];
  declare readonly noLocalEndpoints: Built['noLocalEndpoints'];
  declare readonly conntrackDeleted: Built['conntrackDeleted'];
  declare readonly healthzTotal: Built['healthzTotal'];
  declare readonly livezTotal: Built['livezTotal'];
  declare readonly datapathPackets: Built['datapathPackets'];
  declare readonly conntrackEntries: Built['conntrackEntries'];
  declare readonly mapFill: Built['mapFill'];
  declare readonly tunKernelDrops: Built['tunKernelDrops'];
  declare readonly monitorEvents: Built['monitorEvents'];
  declare readonly monitorLost: Built['monitorLost'];
  declare readonly monitorStreams: Built['monitorStreams'];
  private changes: ChangeCounts | undefined;
  private datapath: DatapathStatsFn | undefined;

  constructor(registry: Registry = new Registry()) {
    this.registry = registry;
    const r = [registry];
    Object.assign(
      this,
      syncMetrics(r),
      changeMetrics(r, () => this.changes),
      stateMetrics(r),
      datapathMetrics(r, () => this.readDatapath()),
    );
    for (const policy of ['internal', 'external'])
      this.noLocalEndpoints.set({ ...FAMILY, traffic_policy: policy }, 0);
    this.conntrackDeleted.inc(FAMILY, 0);
  }

  /** The datapath hook is cheap (it reads counters), so each datapath metric calls it. */
  private readDatapath(): DatapathStats | undefined {
    return this.datapath?.();
  }

  /** Exports the tracker's change counts (read at scrape time). */
  trackChanges(counts: ChangeCounts): void {
    this.changes = counts;
  }

  /** Exports the data plane's counters through `fn` (called at scrape time). */
  setDatapathStats(fn: DatapathStatsFn | undefined): void {
    this.datapath = fn;
  }

  /** Records one sync: duration, full or partial, and (if it succeeded) its end time. */
  observeSync(seconds: number, full: boolean, endMs?: number): void {
    this.syncDuration.observe(FAMILY, seconds);
    (full ? this.syncFullDuration : this.syncPartialDuration).observe(FAMILY, seconds);
    if (endMs !== undefined) this.lastTimestamp.set(FAMILY, endMs / 1000);
  }

  /** A sync was queued (kube-proxy's Sync()). */
  markQueued(nowMs: number): void {
    this.lastQueuedTimestamp.set(FAMILY, nowMs / 1000);
  }

  /** Change-to-programmed latency for each change the sync applied (or a step of them). */
  observeNetworkProgramming(nowMs: number, changeTimesMs: number[]): void {
    for (const t of changeTimesMs)
      this.networkProgramming.observe(FAMILY, Math.max(0, (nowMs - t) / 1000));
  }

  setNoLocalEndpoints(counts: { internal: number; external: number }): void {
    this.noLocalEndpoints.set({ ...FAMILY, traffic_policy: 'internal' }, counts.internal);
    this.noLocalEndpoints.set({ ...FAMILY, traffic_policy: 'external' }, counts.external);
  }

  addConntrackDeleted(n: number): void {
    if (n > 0) this.conntrackDeleted.inc(FAMILY, n);
  }

  metrics(): Promise<string> {
    return this.registry.metrics();
  }
}

/** noLocalEndpointsOf's bits: the port counts under traffic_policy internal, external. */
export const NO_LOCAL_INTERNAL = 1;
export const NO_LOCAL_EXTERNAL = 2;

/**
 * One service port's share of kube-proxy's no_local_endpoints gauge: it has endpoints somewhere
 * but none on this node for a Local policy (internal: internalTrafficPolicy; external:
 * externalTrafficPolicy of an externally reachable service), i.e. traffic this node drops.
 * NO_LOCAL_INTERNAL | NO_LOCAL_EXTERNAL bits, 0 for most ports.
 */
export function noLocalEndpointsOf(p: ResolvedServicePort, nodeName: string): number {
  // the policy first: it is cheap, and most ports have no Local policy at all (selecting the
  // endpoints of every port after every sync held the packet loop ~30 ms at 5k, issue 18)
  const policy = portPolicy(p, nodeName);
  if (!policy.internalLocal && !policy.externalLocal) return 0;
  const c = selectPortEndpoints(p, { nodeName });
  if (!c.hasAny || c.local.length > 0) return 0;
  return (
    (policy.internalLocal ? NO_LOCAL_INTERNAL : 0) | (policy.externalLocal ? NO_LOCAL_EXTERNAL : 0)
  );
}

/** The no_local_endpoints counts of these ports (noLocalEndpointsOf, summed). */
export function countNoLocalEndpoints(
  ports: ResolvedServicePort[],
  nodeName: string,
): { internal: number; external: number } {
  let internal = 0;
  let external = 0;
  for (const p of ports) {
    const b = noLocalEndpointsOf(p, nodeName);
    if (b & NO_LOCAL_INTERNAL) internal++;
    if (b & NO_LOCAL_EXTERNAL) external++;
  }
  return { internal, external };
}

/**
 * The gauge's counts kept per service port, so that a sync recounts only the ports it changed
 * or deleted (the Proxier): counting every port after every sync held the packet loop for
 * 50-110 ms after a 5,000-Service change at load 5-8 (test/node/stall.test.ts), and an endpoint
 * change at 10k Services paid for all 10k.
 */
export class NoLocalCount {
  private readonly bits = new Map<string, number>();
  private internal = 0;
  private external = 0;

  /** The port's bits from now on (0: it counts nowhere, or it is gone). */
  set(spn: string, b: number): void {
    const old = this.bits.get(spn) ?? 0;
    if (old === b) return;
    this.internal += bit(b, NO_LOCAL_INTERNAL) - bit(old, NO_LOCAL_INTERNAL);
    this.external += bit(b, NO_LOCAL_EXTERNAL) - bit(old, NO_LOCAL_EXTERNAL);
    if (b === 0) this.bits.delete(spn);
    else this.bits.set(spn, b);
  }

  /** Ports counted now but not in `present` are gone (after a full recount). */
  retain(present: ReadonlySet<string>): void {
    for (const spn of [...this.bits.keys()]) if (!present.has(spn)) this.set(spn, 0);
  }

  counts(): { internal: number; external: number } {
    return { internal: this.internal, external: this.external };
  }
}

const bit = (b: number, mask: number) => ((b & mask) !== 0 ? 1 : 0);

export interface ServerHandle {
  readonly server: http.Server;
  readonly host: string;
  readonly port: number;
  close(): Promise<void>;
}

/** Listens and resolves once bound; port 0 picks a free port (tests). */
export function listen(server: http.Server, host: string, port: number): Promise<ServerHandle> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const addr = server.address() as AddressInfo;
      resolve({
        server,
        host,
        port: addr.port,
        close: () =>
          new Promise<void>((res) => {
            server.closeAllConnections?.();
            server.close(() => res());
          }),
      });
    });
  });
}

export const DEFAULT_METRICS_HOST = '127.0.0.1';
export const DEFAULT_METRICS_PORT = 10249;

export interface MetricsServerOptions {
  host?: string;
  port?: number;
  /** GET /proxyMode answers this, as kube-proxy answers its mode (default "kubetun") */
  proxyMode?: string;
  /** GET /configz: kube-proxy's {"kubeproxy.config.k8s.io": {...}} of the running agent */
  configz?: () => unknown;
}

/**
 * kube-proxy's metrics port: GET /metrics in the Prometheus text format, /proxyMode (text),
 * /configz (JSON), /healthz ("ok", the generic handler kube-proxy installs there too); anything
 * else is 404. Kubernetes e2e "should check kube-proxy urls" reads /proxyMode here.
 */
export function startMetricsServer(
  m: ProxyMetrics,
  opts: MetricsServerOptions = {},
): Promise<ServerHandle> {
  const text = { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' };
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/proxyMode') {
      res.writeHead(200, text).end(opts.proxyMode ?? 'kubetun');
      return;
    }
    if (req.method === 'GET' && path === '/healthz') {
      res.writeHead(200, text).end('ok');
      return;
    }
    if (req.method === 'GET' && path === '/configz' && opts.configz) {
      const body = JSON.stringify(opts.configz());
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(body);
      return;
    }
    if (req.method !== 'GET' || path !== '/metrics') {
      res.writeHead(404, { 'Content-Type': 'text/plain' }).end('404 page not found\n');
      return;
    }
    m.metrics().then(
      (text) => res.writeHead(200, { 'Content-Type': m.registry.contentType }).end(text),
      (err: unknown) =>
        res.writeHead(500, { 'Content-Type': 'text/plain' }).end(`${String(err)}\n`),
    );
  });
  return listen(server, opts.host ?? DEFAULT_METRICS_HOST, opts.port ?? DEFAULT_METRICS_PORT);
}

// One call that runs kubetun's control plane the way kube-proxy runs its own: a source
// (manifests directory or Kubernetes API) feeding the Proxier, the metrics server on
// 127.0.0.1:10249 and the health server on 0.0.0.0:10256. The data plane is whatever
// `program` writes (datapathSync() for kubetun's maps).

import type { KubeConfig } from '@kubernetes/client-node';
import type { Clock } from './clock.ts';
import { ProxyHealth, startHealthServer } from './health.ts';
import {
  DEFAULT_METRICS_HOST,
  DEFAULT_METRICS_PORT,
  type DatapathStatsFn,
  ProxyMetrics,
  type ServerHandle,
  startMetricsServer,
} from './metrics.ts';
import { PREFILL_BATCH, Proxier, type ProxierOptions } from './proxier.ts';
import { DEFAULT_MAX_INTERVAL_MS } from './runner.ts';
import type { ParseOptions } from '../manifests/parse.ts';
import { ManifestDirSource } from './source-dir.ts';
// The Kubernetes client is loaded only for the API source: it costs a third of a second at every
// start (src/runtime.ts), and a manifests-directory agent never uses it.
import type { KubernetesSource } from './source-k8s.ts';

/** The subset of pino's Logger used here. */
export interface ControlLog {
  info(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  warn?(obj: object, msg?: string): void;
}

export interface Bind {
  host: string;
  port: number;
}

export interface ControlPlaneOptions {
  source:
    | {
        dir: string;
        pollIntervalMs?: number;
        debounceMs?: number;
        parse?: ParseOptions;
        /** parse in the manifest worker, off this thread (the agent: its packet loop is here) */
        worker?: boolean;
        /**
         * the first load all or nothing, and awaited: a refused object fails the start with
         * its ManifestError (file, object, field) — the agent's start-up check
         */
        strictStart?: boolean;
      }
    | { kubeConfig: KubeConfig };
  program: ProxierOptions['program'];
  /**
   * program the first load while it streams in, PREFILL_BATCH objects at least at a time
   * (proxier.ts): only for a data plane nothing reads yet
   */
  prefill?: boolean;
  cleanupConntrack?: ProxierOptions['cleanupConntrack'];
  datapathStats?: DatapathStatsFn;
  nodeName?: string;
  /** kube-proxy --iptables-sync-period (30 s); health fails after twice this */
  syncPeriodMs?: number;
  /** kube-proxy --iptables-min-sync-period (1 s) */
  minSyncPeriodMs?: number;
  /** null: no metrics server */
  metricsBind?: Bind | null;
  /** the metrics port's /configz body (kube-proxy's KubeProxyConfiguration of this agent) */
  configz?: () => unknown;
  /** null: no health server */
  healthzBind?: Bind | null;
  clock?: Clock;
  log?: ControlLog;
}

export interface ControlPlane {
  proxier: Proxier;
  metrics: ProxyMetrics;
  health: ProxyHealth;
  source: ManifestDirSource | KubernetesSource;
  metricsServer?: ServerHandle;
  healthServer?: ServerHandle;
  /** resolves after the first successful sync (the data plane holds the source's state) */
  firstSync: Promise<void>;
  /** asks for a sync and resolves with its outcome once one has run that started after the call */
  syncNow(): Promise<boolean>;
  stop(): Promise<void>;
}

const noLog: ControlLog = { info: () => {}, error: () => {} };

function errorFields(err: unknown): object {
  const e = err as { message?: string; file?: string; object?: string; field?: string };
  return { err: e?.message ?? String(err), file: e?.file, object: e?.object, field: e?.field };
}

export async function startControlPlane(o: ControlPlaneOptions): Promise<ControlPlane> {
  const log = o.log ?? noLog;
  const syncPeriodMs = o.syncPeriodMs ?? DEFAULT_MAX_INTERVAL_MS;
  const metrics = new ProxyMetrics();
  metrics.setDatapathStats(o.datapathStats);
  const health = new ProxyHealth({ clock: o.clock, healthTimeoutMs: 2 * syncPeriodMs });
  let synced: () => void = () => {};
  const waiters: ((ok: boolean) => void)[] = [];
  const firstSync = new Promise<void>((res) => {
    synced = res;
  });
  const proxier = new Proxier({
    program: o.program,
    prefill: o.prefill ? PREFILL_BATCH : 0,
    cleanupConntrack: o.cleanupConntrack,
    nodeName: o.nodeName,
    clock: o.clock,
    metrics,
    health,
    runner: { maxIntervalMs: syncPeriodMs, minIntervalMs: o.minSyncPeriodMs ?? 1000 },
    onError: (err) => log.error(errorFields(err), 'sync failed; retrying with a full sync'),
    onSync: (s) => {
      if (s.ok) synced();
      // A sync already running when syncNow() was called leaves the runner pending: wait for
      // the one after it, which saw the caller's changes.
      if (!proxier.runner.isPending) for (const w of waiters.splice(0)) w(s.ok);
      if (s.ok)
        log.info(
          { full: s.full, servicePorts: s.changes.changedServicePorts.length, seconds: s.seconds },
          'synced',
        );
    },
  });
  const source = await makeSource(o, proxier, health, log);
  const servers: ServerHandle[] = [];
  const cp: ControlPlane = {
    proxier,
    metrics,
    health,
    source,
    firstSync,
    syncNow: () =>
      new Promise<boolean>((res) => {
        waiters.push(res);
        proxier.runner.run();
      }),
    stop: async () => {
      for (const w of waiters.splice(0)) w(false);
      proxier.stop();
      await source.stop();
      await Promise.all(servers.map((s) => s.close()));
    },
  };
  try {
    // A port already taken (another proxy in the same network namespace) costs the server, not
    // the data plane: kube-proxy logs it and carries on too.
    if (o.metricsBind !== null) {
      const b = o.metricsBind ?? { host: DEFAULT_METRICS_HOST, port: DEFAULT_METRICS_PORT };
      const mo = { ...b, configz: o.configz };
      cp.metricsServer = await serve('metrics', b, log, () => startMetricsServer(metrics, mo));
      if (cp.metricsServer) servers.push(cp.metricsServer);
    }
    if (o.healthzBind !== null) {
      const b = o.healthzBind ?? {};
      cp.healthServer = await serve('healthz', b, log, () =>
        startHealthServer(health, { ...b, metrics }),
      );
      if (cp.healthServer) servers.push(cp.healthServer);
    }
    if (source instanceof ManifestDirSource) {
      const first = source.start();
      if ('dir' in o.source && o.source.strictStart && !(await first)) {
        throw source.lastError ?? new Error(`${o.source.dir}: manifests not loaded`);
      }
    } else await source.start();
  } catch (err) {
    await cp.stop();
    throw err;
  }
  return cp;
}

async function serve(
  what: string,
  bind: Partial<Bind>,
  log: ControlLog,
  start: () => Promise<ServerHandle>,
): Promise<ServerHandle | undefined> {
  try {
    return await start();
  } catch (err) {
    log.error({ err: (err as Error).message, ...bind }, `${what} server not started`);
    return undefined;
  }
}

async function makeSource(
  o: ControlPlaneOptions,
  proxier: Proxier,
  health: ProxyHealth,
  log: ControlLog,
): Promise<ManifestDirSource | KubernetesSource> {
  if ('dir' in o.source) {
    return new ManifestDirSource({
      dir: o.source.dir,
      sink: proxier.tracker,
      clock: o.clock,
      pollIntervalMs: o.source.pollIntervalMs,
      debounceMs: o.source.debounceMs,
      parse: o.source.parse,
      worker: o.source.worker,
      strictStart: o.source.strictStart,
      onChange: () => proxier.queue(),
      onSlice: () => proxier.delivered(),
      onSynced: () => {
        proxier.onServicesSynced();
        proxier.onEndpointSlicesSynced();
      },
      onError: (err) =>
        log.error(errorFields(err), 'manifest refused; that object keeps its previous version'),
      onIgnored: (line) => log.info({ ignored: line }, 'manifest kinds ignored'),
      onReload: (r) => log.info(r, 'manifests loaded'),
    });
  }
  const { KubernetesSource } = await import('./source-k8s.ts');
  return new KubernetesSource({
    kubeConfig: o.source.kubeConfig,
    sink: proxier.tracker,
    clock: o.clock,
    onChange: () => proxier.queue(),
    onSynced: (s) => proxier.runner.setInitialized(s),
    nodeName: o.nodeName,
    onNode: (n) => health.syncNode(n),
    onError: (err, s) => log.error({ ...errorFields(err), source: s }, 'kubernetes source error'),
  });
}

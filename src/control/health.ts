// kube-proxy's health server (pkg/proxy/healthcheck/proxy_health.go) on :10256.
//
// Healthy means: no update has been waiting longer than the health timeout (kube-proxy uses
// 2 × syncPeriod), i.e. the sync loop is not stuck. Like kube-proxy, the proxy counts as healthy
// while starting up (before its first successful sync) and whenever nothing is queued. /healthz
// also fails when the node is being deleted or is tainted ToBeDeletedByClusterAutoscaler, so a
// load balancer drains the node; /livez ignores the node.
//
// Bodies match kube-proxy's: {"lastUpdated": ..., "currentTime": ..., "nodeEligible": ...}
// (healthz) with times in Go's time.String() layout, plus a "healthy" field kube-proxy does not
// emit (it only has the status code) for readers that prefer a boolean.

import http from 'node:http';
import { type Clock, systemClock } from './clock.ts';
import { listen, type ProxyMetrics, type ServerHandle } from './metrics.ts';

export const TO_BE_DELETED_TAINT = 'ToBeDeletedByClusterAutoscaler';
export const DEFAULT_HEALTHZ_PORT = 10256;

/** The part of a Node that decides eligibility. */
export interface NodeLike {
  deletionTimestamp?: string | Date | null;
  taints?: { key: string }[];
}

/** Go's time.Time.String() for UTC ("2006-01-02 15:04:05.999999999 +0000 UTC"); undefined → zero time. */
export function goTimeString(ms: number | undefined): string {
  if (ms === undefined) return '0001-01-01 00:00:00 +0000 UTC';
  const iso = new Date(ms).toISOString(); // 2006-01-02T15:04:05.123Z
  const frac = iso.slice(20, 23).replace(/0+$/, '');
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)}${frac ? `.${frac}` : ''} +0000 UTC`;
}

export class ProxyHealth {
  private readonly clock: Clock;
  private readonly timeoutMs: number;
  private lastUpdated: number | undefined;
  private oldestQueued: number | undefined;
  private eligible = true;

  /** healthTimeoutMs: kube-proxy passes 2 × syncPeriod (60 s by default). */
  constructor(opts: { clock?: Clock; healthTimeoutMs?: number } = {}) {
    this.clock = opts.clock ?? systemClock;
    this.timeoutMs = opts.healthTimeoutMs ?? 60_000;
  }

  /** A change arrived that needs a sync; only the oldest unsynced one counts. */
  queuedUpdate(): void {
    if (this.oldestQueued === undefined) this.oldestQueued = this.clock.now();
  }

  /** A sync succeeded: everything queued so far is programmed. */
  updated(): void {
    this.oldestQueued = undefined;
    this.lastUpdated = this.clock.now();
  }

  setNodeEligible(eligible: boolean): void {
    this.eligible = eligible;
  }

  /** kube-proxy's SyncNode: ineligible when deleted or tainted for deletion by the autoscaler. */
  syncNode(node: NodeLike): void {
    const deleting = node.deletionTimestamp !== undefined && node.deletionTimestamp !== null;
    this.eligible = !deleting && !(node.taints ?? []).some((t) => t.key === TO_BE_DELETED_TAINT);
  }

  get nodeEligible(): boolean {
    return this.eligible;
  }

  isHealthy(): boolean {
    if (this.lastUpdated === undefined || this.oldestQueued === undefined) return true;
    return this.clock.now() - this.oldestQueued < this.timeoutMs;
  }

  /** Status and body for /healthz (withNode) or /livez. */
  report(withNode: boolean): { status: number; body: string } {
    const now = this.clock.now();
    const healthy = this.isHealthy() && (!withNode || this.eligible);
    // kube-proxy reports lastUpdated = now while healthy, for compatibility with old releases
    // where it was the time of the last sync loop.
    const last = goTimeString(healthy ? now : this.lastUpdated);
    const fields: string[] = [
      `"lastUpdated": ${JSON.stringify(last)}`,
      `"currentTime": ${JSON.stringify(goTimeString(now))}`,
    ];
    if (withNode) fields.push(`"nodeEligible": ${this.eligible}`);
    fields.push(`"healthy": ${healthy}`);
    return { status: healthy ? 200 : 503, body: `{${fields.join(',')}}` };
  }
}

/** Serves /healthz and /livez; counts answers in kubeproxy_proxy_{healthz,livez}_total. */
export function startHealthServer(
  health: ProxyHealth,
  opts: { host?: string; port?: number; metrics?: ProxyMetrics } = {},
): Promise<ServerHandle> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/healthz' && path !== '/livez') {
      res.writeHead(404, { 'Content-Type': 'text/plain' }).end('404 page not found\n');
      return;
    }
    const r = health.report(path === '/healthz');
    const counter = path === '/healthz' ? opts.metrics?.healthzTotal : opts.metrics?.livezTotal;
    counter?.inc({ code: String(r.status) });
    res
      .writeHead(r.status, {
        'Content-Type': 'application/json',
        'X-Content-Type-Options': 'nosniff',
      })
      .end(r.body);
  });
  // kube-proxy's healthzBindAddress default is 0.0.0.0:10256 (node health checks come from the
  // load balancer, not from localhost).
  return listen(server, opts.host ?? '0.0.0.0', opts.port ?? DEFAULT_HEALTHZ_PORT);
}

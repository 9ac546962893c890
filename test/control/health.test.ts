import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/control/clock.ts';
import { goTimeString, ProxyHealth, startHealthServer } from '../../src/control/health.ts';
import { ProxyMetrics, type ServerHandle } from '../../src/control/metrics.ts';

let handle: ServerHandle | undefined;
afterEach(async () => {
  await handle?.close();
  handle = undefined;
});

async function get(
  path: string,
): Promise<{ status: number; body: Record<string, unknown>; type: string | null }> {
  const res = await fetch(`http://127.0.0.1:${handle!.port}${path}`);
  return {
    status: res.status,
    type: res.headers.get('content-type'),
    body: (await res.json()) as Record<string, unknown>,
  };
}

describe('health server', () => {
  it('is healthy while starting and after a timely sync; 503 once a queued update waits 2 × syncPeriod', async () => {
    const clock = new FakeClock(Date.UTC(2026, 0, 2, 3, 4, 5, 600));
    const h = new ProxyHealth({ clock, healthTimeoutMs: 60_000 });
    const metrics = new ProxyMetrics();
    handle = await startHealthServer(h, { host: '127.0.0.1', port: 0, metrics });

    h.queuedUpdate();
    let r = await get('/healthz');
    expect(r.status).toBe(200); // never synced yet: starting up
    expect(r.type).toBe('application/json');
    expect(r.body).toEqual({
      lastUpdated: '2026-01-02 03:04:05.6 +0000 UTC',
      currentTime: '2026-01-02 03:04:05.6 +0000 UTC',
      nodeEligible: true,
      healthy: true,
    });

    h.updated();
    const syncedAt = clock.now();
    h.queuedUpdate();
    clock.advance(59_999);
    expect((await get('/livez')).status).toBe(200);
    clock.advance(1);
    r = await get('/healthz');
    expect(r.status).toBe(503);
    expect(r.body.lastUpdated).toBe(goTimeString(syncedAt));
    expect(r.body.healthy).toBe(false);
    r = await get('/livez');
    expect(r.status).toBe(503);
    expect(r.body).not.toHaveProperty('nodeEligible');

    h.updated();
    expect((await get('/healthz')).status).toBe(200);
    const text = await metrics.metrics();
    expect(text).toContain('kubeproxy_proxy_healthz_total{code="503"} 1');
    expect(text).toContain('kubeproxy_proxy_livez_total{code="503"} 1');
  });

  it('healthz fails and livez passes when the node is marked for deletion', async () => {
    const h = new ProxyHealth({ clock: new FakeClock() });
    handle = await startHealthServer(h, { host: '127.0.0.1', port: 0 });
    h.syncNode({ taints: [{ key: 'ToBeDeletedByClusterAutoscaler' }] });
    const r = await get('/healthz');
    expect(r.status).toBe(503);
    expect(r.body.nodeEligible).toBe(false);
    expect((await get('/livez')).status).toBe(200);
    h.syncNode({ taints: [] });
    expect((await get('/healthz')).status).toBe(200);
    h.syncNode({ deletionTimestamp: '2026-01-01T00:00:00Z' });
    expect((await get('/healthz')).status).toBe(503);
  });

  it('formats times as Go does', () => {
    expect(goTimeString(undefined)).toBe('0001-01-01 00:00:00 +0000 UTC');
    expect(goTimeString(Date.UTC(2026, 10, 29, 16, 0, 0, 0))).toBe('2026-11-29 16:00:00 +0000 UTC');
    expect(goTimeString(Date.UTC(2026, 10, 29, 16, 0, 0, 120))).toBe(
      '2026-11-29 16:00:00.12 +0000 UTC',
    );
  });
});

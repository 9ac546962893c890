// Helpers of the living-lab tests (cluster.test.ts, cluster-dns.test.ts): the CLI, the control
// plane's API, polling.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { matchesSelector, parseSelector } from '../../src/cluster/selector.ts';
import type { EndpointSlice, KObject, Pod } from '../../src/cluster/types.ts';
import { apiCall } from '../../src/lab/api.ts';

const ROOT = join(import.meta.dirname, '../..');

export function kubetun(args: string[]): { out: string; err: string; status: number } {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin/kubetun.mjs'), ...args], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { out: r.stdout, err: r.stderr, status: r.status ?? -1 };
}

/** Objects straight from the control plane's API (no CLI start-up per poll: this machine may be loaded). */
export async function list<T extends KObject>(
  kind: string,
  selector?: string,
  namespace = 'default',
): Promise<T[]> {
  const q = new URLSearchParams({ kind, namespace });
  const got = (await apiCall<{ items: T[] }>('GET', `/objects?${q}`)).items;
  const sel = selector ? parseSelector(selector) : undefined;
  return got.filter((o) => !sel || matchesSelector(o.metadata.labels, sel));
}

export async function until<T>(
  ms: number,
  f: () => T | Promise<T>,
  ok: (v: T) => boolean,
): Promise<T> {
  const end = Date.now() + ms;
  let v = await f();
  while (!ok(v) && Date.now() < end) {
    await sleep(200);
    v = await f();
  }
  return v;
}

/** The ready addresses of a Service's EndpointSlices. */
export async function readyAddresses(svc: string): Promise<string[]> {
  return (await list<EndpointSlice>('EndpointSlice', `kubernetes.io/service-name=${svc}`))
    .flatMap((s) => s.endpoints ?? [])
    .filter((e) => e.conditions?.ready !== false)
    .flatMap((e) => e.addresses)
    .sort();
}

export const isReady = (p: Pod) =>
  !p.metadata.deletionTimestamp &&
  (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');

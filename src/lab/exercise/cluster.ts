// The exercise lab's objects as its control plane has them. The guards and the state checks
// read the store through the lab's API — what `lab get` shows — never the files alone: a
// Service deleted with `lab delete` or added with `lab apply` is as real as an edited file.
// resync() makes the control plane take the files in now (the addon manager's reconcile), so a
// step that just wrote a file, and a check that follows an edit, never race its file watch.
import type { EndpointSlice, KObject, Pod, Service } from '../../cluster/types.ts';
import { LABEL_SERVICE_NAME } from '../../cluster/types.ts';
import { apiCall } from '../api.ts';

export async function listObjects<T extends KObject>(kind: string, namespace?: string) {
  const q = new URLSearchParams({ kind });
  if (namespace !== undefined) q.set('namespace', namespace);
  return (await apiCall<{ items: T[] }>('GET', `/objects?${q}`)).items;
}

/**
 * The control plane takes the files in now (what its watch does a moment after a change). force:
 * every file and the topology applied again; prune: objects only `lab apply` made are deleted.
 */
export async function resyncCluster(force = false, prune = false): Promise<string[]> {
  return (await apiCall<{ removed: string[] }>('POST', '/resync', { force, prune })).removed;
}

/** "web" (default namespace), "kube-system/kube-dns", "Deployment default/shop" → parts. */
export function parseRef(
  ref: string,
  dfltKind: string,
): { kind: string; ns: string; name: string } {
  const m = /^(?:([A-Z][A-Za-z]+) )?(?:([a-z0-9-]+)\/)?([a-z0-9.-]+)$/.exec(ref.trim());
  if (!m) return { kind: dfltKind, ns: 'default', name: ref };
  return { kind: m[1] ?? dfltKind, ns: m[2] ?? 'default', name: m[3]! };
}

export async function getObject<T extends KObject>(ref: string, dfltKind: string) {
  const r = parseRef(ref, dfltKind);
  const items = await listObjects<T>(r.kind, r.ns);
  return { ...r, object: items.find((o) => o.metadata.name === r.name) };
}

/**
 * Ready endpoint addresses of a Service, from every slice labelled with its name; with `port`,
 * only slices that carry that port (a targetPort no container names lands in a portless slice).
 */
export async function readyEndpoints(svc: Service, port?: number): Promise<string[]> {
  const slices = await listObjects<EndpointSlice>('EndpointSlice', svc.metadata.namespace);
  return slices
    .filter((s) => s.metadata.labels?.[LABEL_SERVICE_NAME] === svc.metadata.name)
    .filter((s) => port === undefined || (s.ports ?? []).some((p) => p.port === port))
    .flatMap((s) => s.endpoints ?? [])
    .filter((e) => e.conditions?.ready !== false)
    .flatMap((e) => e.addresses);
}

export const isPodReady = (p: Pod) =>
  !p.metadata.deletionTimestamp &&
  (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');

/** A dotted path into an object ("spec.template.spec.containers.0.lifecycle"). */
export function fieldAt(o: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((v, k) => (v as Record<string, unknown>)?.[k], o);
}

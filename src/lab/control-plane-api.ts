// The control plane's API handlers (transport: api.ts). Requests name kinds as kubectl does
// (pods, svc, deploy...) resolved by the client; here they are API kinds.
import type { KObject } from '../cluster/types.ts';
import type { ApiHandler } from './api.ts';
import type { Store } from '../cluster/store.ts';
import { LabError } from './error.ts';

export interface ApplyRequest {
  objects: { file: string; object: unknown }[];
}

export interface ApplyReply {
  /** "service/web created", as kubectl apply prints */
  results: string[];
  errors: string[];
  ignored: string[];
}

/**
 * What the handlers use of the lab control plane (control-plane.ts implements it); declared
 * here so the two modules do not import each other (test/architecture/layers.test.ts).
 */
export interface LabControlPlane {
  readonly store: Store;
  readonly problems: readonly string[];
  synced(): boolean;
  scale(namespace: string, name: string, replicas: number): void;
  restart(namespace: string, name: string): void;
  resync(force: boolean, prune: boolean): { removed: string[] };
}

export function apiRoutes(cp: LabControlPlane): ApiHandler {
  return (method, path, query, body) => {
    const b = (body ?? {}) as Record<string, unknown>;
    const route = `${method} ${path}`;
    if (route === 'GET /healthz') return { ok: true, synced: cp.synced(), problems: cp.problems };
    if (route === 'GET /objects') {
      const kind = query.get('kind') ?? '';
      const ns = query.get('namespace') ?? undefined;
      return { items: cp.store.list(kind, ns) };
    }
    if (route === 'POST /apply') return apply(cp, b as unknown as ApplyRequest);
    if (route === 'POST /delete') {
      const { kind, namespace, name, grace } = b as {
        kind: string;
        namespace?: string;
        name: string;
        grace?: number;
      };
      return { deleted: cp.store.delete(kind, namespace, name, grace) };
    }
    if (route === 'POST /scale') {
      cp.scale(String(b.namespace), String(b.name), Number(b.replicas));
      return { ok: true };
    }
    if (route === 'POST /resync') return cp.resync(b.force === true, b.prune === true);
    if (route === 'POST /restart') {
      cp.restart(String(b.namespace), String(b.name));
      return { ok: true };
    }
    throw new LabError(`no such API: ${route}`);
  };
}

function apply(cp: LabControlPlane, req: ApplyRequest): ApplyReply {
  const out: ApplyReply = { results: [], errors: [], ignored: [] };
  const seenIgnored = new Set<string>();
  for (const { file, object } of req.objects ?? []) {
    const r = cp.store.apply(object, file);
    if ('errors' in r) out.errors.push(...r.errors.map((e) => e.message));
    else if ('ignored' in r) {
      if (!seenIgnored.has(r.ignored)) out.ignored.push(r.ignored);
      seenIgnored.add(r.ignored);
    } else out.results.push(`${resourceName(r.object)} ${r.action}`);
  }
  return out;
}

/** "deployment.apps/web", "service/web": how kubectl names what it applied. */
export function resourceName(o: KObject): string {
  const group = o.apiVersion.includes('/') ? `.${o.apiVersion.split('/')[0]}` : '';
  return `${o.kind.toLowerCase()}${group}/${o.metadata.name}`;
}

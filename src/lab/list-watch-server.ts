// A small, honest list/watch API server for Services, EndpointSlices and Nodes, enough for
// @kubernetes/client-node informers: the lab's API server in `lab up --source api`
// (apiserver-main.ts serves the lab's view through it) and the tests' test server.
//
//   GET /api/v1/services                          → ServiceList {metadata.resourceVersion, items}
//   GET /apis/discovery.k8s.io/v1/endpointslices  → EndpointSliceList
//   ...?watch=true&resourceVersion=N              → 200, one JSON event per line (chunked):
//        every event after N from the history, then live ADDED / MODIFIED / DELETED, and
//        BOOKMARK (only to watches that sent allowWatchBookmarks=true, like the real one);
//        N older than the compacted history → one ERROR event {Status, code 410, reason
//        Expired} and the stream ends, as kube-apiserver does (or an HTTP 410 response when
//        `goneAsHttpStatus` is set, the other form clients must handle)
//   GET /api/v1/nodes                             → NodeList (cluster-scoped: namespace "")
//   labelSelector: "key", "!key", "key=value", "key!=value", comma-separated;
//   fieldSelector: metadata.name=..., metadata.namespace=... (what informers use)
//
// One resourceVersion counter for all kinds (as etcd's revision). failNext(n) makes the next n
// requests answer 500, closeWatches() ends every open stream (a server-side timeout). With a
// bearer token set, a request without `Authorization: Bearer <token>` is answered 401, as an
// apiserver answers an unauthenticated client. A server started at a resourceVersion (a restart
// over kept storage) has no history before it: an older watch gets 410 Gone and relists.

import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';

export type Obj = {
  metadata: {
    name: string;
    namespace: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
  };
} & Record<string, unknown>;

export type Kind = 'Service' | 'EndpointSlice' | 'Node';

const PATHS: Record<string, Kind> = {
  '/api/v1/services': 'Service',
  '/apis/discovery.k8s.io/v1/endpointslices': 'EndpointSlice',
  '/api/v1/nodes': 'Node',
};
const API_VERSION: Record<Kind, string> = {
  Service: 'v1',
  EndpointSlice: 'discovery.k8s.io/v1',
  Node: 'v1',
};

interface Selector {
  label: string;
  field: string;
}

interface Event {
  rv: number;
  kind: Kind;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  obj: Obj;
}

interface Watcher {
  kind: Kind;
  selector: Selector;
  bookmarks: boolean;
  res: http.ServerResponse;
}

export class ListWatchServer {
  rv = 1;
  /** counts per request kind, for tests */
  lists = 0;
  watches = 0;
  goneAsHttpStatus = false;
  private compactedRv = 0;
  private readonly objects: Record<Kind, Map<string, Obj>> = {
    Service: new Map(),
    EndpointSlice: new Map(),
    Node: new Map(),
  };
  private history: Event[] = [];
  private readonly watchers = new Set<Watcher>();
  private failures = 0;
  private server: http.Server | undefined;
  private scheme = 'http';
  port = 0;
  /** the Authorization header of the last request (in-cluster config sends the SA token) */
  lastAuthorization: string | undefined;
  /** every request as (method, path, watch): what a client called, for RBAC checks */
  readonly requests: { method: string; path: string; watch: boolean }[] = [];

  /** requests without this bearer token are refused (401); undefined = no authentication */
  token: string | undefined;
  /** the request log (`requests`) keeps at most this many entries */
  maxRequests = 10_000;

  /**
   * Listens on `at` (default 127.0.0.1, any free port); with `tls` (PEM key and certificate) it
   * speaks HTTPS like the real one.
   */
  async start(
    tls?: { key: string; cert: string },
    at: { host: string; port: number } = { host: '127.0.0.1', port: 0 },
  ): Promise<void> {
    const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
      this.lastAuthorization = req.headers.authorization;
      const u = new URL(req.url ?? '/', 'http://x');
      const watch = u.searchParams.get('watch') === 'true';
      if (this.requests.length >= this.maxRequests) this.requests.shift();
      this.requests.push({ method: req.method ?? 'GET', path: u.pathname, watch });
      if (this.token !== undefined && req.headers.authorization !== `Bearer ${this.token}`) {
        status(res, 401, 'Unauthorized', 'Unauthorized');
        return;
      }
      this.handle(req, res);
    };
    this.scheme = tls ? 'https' : 'http';
    this.server = tls ? https.createServer(tls, handler) : http.createServer(handler);
    this.host = at.host;
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(at.port, at.host, resolve);
    });
    this.port = (this.server.address() as AddressInfo).port;
  }

  /** Starts the counter at rv with no history before it (storage kept across a restart). */
  startAt(rv: number): void {
    this.rv = rv;
    this.compactedRv = rv;
  }

  /** The stored objects of a kind (key "namespace/name"), for a writer that diffs against them. */
  stored(kind: Kind): ReadonlyMap<string, Obj> {
    return this.objects[kind];
  }

  private host = '127.0.0.1';

  get url(): string {
    return `${this.scheme}://${this.host}:${this.port}`;
  }

  async stop(): Promise<void> {
    this.closeWatches();
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
  }

  /** Creates or replaces an object (ADDED or MODIFIED). */
  upsert(kind: Kind, obj: Obj): void {
    const key = `${obj.metadata.namespace}/${obj.metadata.name}`;
    const exists = this.objects[kind].has(key);
    const stored = this.stamp(kind, obj);
    this.objects[kind].set(key, stored);
    this.emit({ rv: this.rv, kind, type: exists ? 'MODIFIED' : 'ADDED', obj: stored });
  }

  remove(kind: Kind, namespace: string, name: string): void {
    const key = `${namespace}/${name}`;
    const old = this.objects[kind].get(key);
    if (!old) return;
    this.objects[kind].delete(key);
    this.emit({
      rv: ++this.rv,
      kind,
      type: 'DELETED',
      obj: { ...old, metadata: { ...old.metadata, resourceVersion: String(this.rv) } },
    });
  }

  /** Forgets the event history: watches from older versions now get 410 Gone. */
  compact(): void {
    this.compactedRv = this.rv;
    this.history = [];
  }

  /** Sends a BOOKMARK with the current resourceVersion to watches that asked for them. */
  bookmark(): void {
    for (const w of this.watchers) {
      if (!w.bookmarks) continue;
      const obj = {
        kind: w.kind,
        apiVersion: API_VERSION[w.kind],
        metadata: { resourceVersion: String(this.rv) },
      };
      w.res.write(`${JSON.stringify({ type: 'BOOKMARK', object: obj })}\n`);
    }
  }

  closeWatches(): void {
    for (const w of this.watchers) w.res.end();
    this.watchers.clear();
  }

  failNext(n: number): void {
    this.failures = n;
  }

  private stamp(kind: Kind, obj: Obj): Obj {
    this.rv++;
    return {
      ...obj,
      kind,
      apiVersion: API_VERSION[kind],
      metadata: { ...obj.metadata, resourceVersion: String(this.rv) },
    };
  }

  private emit(e: Event): void {
    this.history.push(e);
    for (const w of this.watchers) {
      if (w.kind === e.kind && matches(w.selector, e.obj))
        w.res.write(`${JSON.stringify({ type: e.type, object: e.obj })}\n`);
    }
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    const kind = PATHS[url.pathname];
    if (this.failures > 0) {
      this.failures--;
      status(res, 500, 'InternalError', 'injected failure');
      return;
    }
    if (!kind || req.method !== 'GET') {
      status(res, 404, 'NotFound', `no route ${url.pathname}`);
      return;
    }
    const selector = {
      label: url.searchParams.get('labelSelector') ?? '',
      field: url.searchParams.get('fieldSelector') ?? '',
    };
    if (url.searchParams.get('watch') === 'true') this.watch(kind, selector, url, res);
    else this.list(kind, selector, res);
  }

  private list(kind: Kind, selector: Selector, res: http.ServerResponse): void {
    this.lists++;
    const items = [...this.objects[kind].values()]
      .filter((o) => matches(selector, o))
      .map(({ kind: _k, apiVersion: _a, ...rest }) => rest);
    const body = {
      kind: `${kind}List`,
      apiVersion: API_VERSION[kind],
      metadata: { resourceVersion: String(this.rv) },
      items,
    };
    res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
  }

  private watch(kind: Kind, selector: Selector, url: URL, res: http.ServerResponse): void {
    this.watches++;
    const from = Number(url.searchParams.get('resourceVersion') || this.rv);
    if (from < this.compactedRv) {
      const message = `too old resource version: ${from} (${this.compactedRv})`;
      if (this.goneAsHttpStatus) {
        status(res, 410, 'Expired', message);
        return;
      }
      const object = {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Failure',
        message,
        reason: 'Expired',
        code: 410,
      };
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(`${JSON.stringify({ type: 'ERROR', object })}\n`);
      return;
    }
    res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
    res.flushHeaders();
    for (const e of this.history) {
      if (e.rv > from && e.kind === kind && matches(selector, e.obj))
        res.write(`${JSON.stringify({ type: e.type, object: e.obj })}\n`);
    }
    const w: Watcher = {
      kind,
      selector,
      bookmarks: url.searchParams.get('allowWatchBookmarks') === 'true',
      res,
    };
    this.watchers.add(w);
    res.on('close', () => this.watchers.delete(w));
  }
}

function status(res: http.ServerResponse, code: number, reason: string, message: string): void {
  const body = {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason,
    code,
  };
  res.writeHead(code, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
}

export function matches(sel: Selector, obj: Obj): boolean {
  const fields = {
    'metadata.name': obj.metadata.name,
    'metadata.namespace': obj.metadata.namespace,
  };
  return termsMatch(sel.label, obj.metadata.labels ?? {}) && termsMatch(sel.field, fields);
}

/** Equality-based and existence selectors over a string map (labels, or selectable fields). */
function termsMatch(selector: string, labels: Record<string, string>): boolean {
  return selector
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .every((term) => {
      if (term.startsWith('!')) return !(term.slice(1) in labels);
      const ne = term.indexOf('!=');
      if (ne > 0) return labels[term.slice(0, ne)] !== term.slice(ne + 2);
      const eq = term.indexOf('=');
      if (eq > 0) return labels[term.slice(0, eq)] === term.slice(eq + 1).replace(/^=/, '');
      return term in labels;
    });
}

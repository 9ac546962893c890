// The lab's Kubernetes API server (`lab up --source api`): the view the control plane writes
// (LAB_DIR/view/cluster.json: Services and EndpointSlices) and the topology's Node objects,
// served over HTTPS list/watch by list-watch-server.ts, so every node's agent runs as the
// DaemonSet runs it (daemonset.ts) instead of reading the directory.
//
//   control plane ── writes ──▶ view/cluster.json ── polled ──▶ kubetun lab apiserver
//                                                                (node1's namespace, node1 IP:6443,
//                                                                 TLS + bearer token)
//   every node: kubetun run, in-cluster config ─────── list/watch ──┘
//
// Storage kept across a restart, as etcd's: the resourceVersion is saved (API_DIR/rv) and a
// restarted server starts above it with no history, so a watch from before the restart gets
// 410 Gone and relists. Signals stand in for the server-side events clients must survive:
// SIGUSR1 ends every watch (a watch timeout); SIGUSR2 moves the revision on (as any write does),
// compacts the history up to it and ends every watch, so every client's next watch is from a
// compacted revision: 410 Gone, then a relist. The log counts lists and watches as they happen.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { topologyObjects } from './control-plane.ts';
import { type Kind, ListWatchServer, type Obj } from './list-watch-server.ts';
import { LAB_DIR, VIEW_DIR } from './state.ts';
import { loadTopology, type Topology } from './topology.ts';

/** The server's key, certificate, saved resourceVersion and the agents' config file. */
export const API_DIR = join(LAB_DIR, 'apiserver');
/** What a Pod finds in /var/run/secrets/kubernetes.io/serviceaccount: token, ca.crt, namespace. */
export const SA_DIR = join(LAB_DIR, 'serviceaccount');
export const SA_MOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';
export const API_PORT = 6443;

/** Where the lab's API server listens: node1's address (the VM lab's control-plane node). */
export function apiServerAt(t: Topology): { host: string; port: number; ns: string } {
  const n = t.nodes[0]!;
  return { host: n.ip, port: API_PORT, ns: n.ns };
}

/**
 * A self-signed serving certificate for the server's address (it is its own CA, as the
 * ServiceAccount's ca.crt), and a fresh token. Idempotent for one address.
 */
export function prepareCredentials(host: string): void {
  mkdirSync(API_DIR, { recursive: true, mode: 0o700 });
  mkdirSync(SA_DIR, { recursive: true, mode: 0o700 });
  const key = join(API_DIR, 'key.pem');
  const cert = join(SA_DIR, 'ca.crt');
  const subj = ['-subj', `/CN=${host}`, '-addext', `subjectAltName=IP:${host}`];
  const args = ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '7', ...subj];
  execFileSync('openssl', [...args, '-keyout', key, '-out', cert], { stdio: 'ignore' });
  writeFileSync(join(SA_DIR, 'token'), randomBytes(24).toString('hex'), { mode: 0o600 });
  writeFileSync(join(SA_DIR, 'namespace'), 'kube-system');
}

const SERVED: readonly Kind[] = ['Service', 'EndpointSlice', 'Node'];

/** The objects the server should hold: the view's Services and slices, the topology's Nodes. */
export function desiredObjects(t: Topology, viewItems: readonly unknown[]): Map<Kind, Obj[]> {
  const out = new Map<Kind, Obj[]>(SERVED.map((k) => [k, []]));
  const nodes = topologyObjects(t).filter((o) => o.kind === 'Node');
  for (const o of [...nodes, ...viewItems] as Obj[]) {
    const k = o?.kind as Kind;
    if (!out.has(k)) continue;
    const { resourceVersion: _rv, ...meta } = o.metadata;
    out.get(k)!.push({ ...o, metadata: { ...meta, namespace: meta.namespace ?? '' } } as Obj);
  }
  return out;
}

/** Brings the server to `want`: changed objects upserted, vanished ones removed. Count of changes. */
export function syncServer(server: ListWatchServer, want: Map<Kind, Obj[]>): number {
  let changes = 0;
  // what the server adds (kind, apiVersion, resourceVersion) does not count as a change
  const text = (o: Obj) => {
    const { resourceVersion: _r, ...metadata } = o.metadata;
    const { kind: _k, apiVersion: _a, ...rest } = o as Obj & { kind?: string; apiVersion?: string };
    return JSON.stringify({ ...rest, metadata });
  };
  for (const [kind, objs] of want) {
    const stored = server.stored(kind);
    const keys = new Set<string>();
    for (const o of objs) {
      const key = `${o.metadata.namespace}/${o.metadata.name}`;
      keys.add(key);
      const cur = stored.get(key);
      if (cur && text(cur) === text(o)) continue;
      server.upsert(kind, o);
      changes++;
    }
    for (const [key, o] of [...stored]) {
      if (keys.has(key)) continue;
      server.remove(kind, o.metadata.namespace, o.metadata.name);
      changes++;
    }
  }
  return changes;
}

function readView(file: string): unknown[] {
  try {
    return (JSON.parse(readFileSync(file, 'utf8')) as { items?: unknown[] }).items ?? [];
  } catch {
    return []; // not written yet; the next poll reads it
  }
}

/** `kubetun lab apiserver`: serve until SIGTERM (lab down). */
export async function runApiServer(topologyFile: string, pollMs = 250): Promise<void> {
  const t = loadTopology(topologyFile);
  const at = apiServerAt(t);
  const say = (msg: string) => console.log(`${new Date().toISOString()} ${msg}`);
  const rvFile = join(API_DIR, 'rv');
  const server = new ListWatchServer();
  server.token = readFileSync(join(SA_DIR, 'token'), 'utf8').trim();
  if (existsSync(rvFile)) server.startAt(Number(readFileSync(rvFile, 'utf8')) + 1);
  const viewFile = join(VIEW_DIR, 'cluster.json');
  let seen = '';
  const sync = () => {
    const st = existsSync(viewFile) ? statSync(viewFile) : undefined;
    const sig = st ? `${st.mtimeMs}:${st.size}:${st.ino}` : '';
    if (sig === seen && seen !== '') return;
    seen = sig;
    const n = syncServer(server, desiredObjects(t, readView(viewFile)));
    writeFileSync(rvFile, String(server.rv));
    if (n > 0) say(`view synced: ${n} changes, resourceVersion ${server.rv}`);
  };
  sync();
  const tls = {
    key: readFileSync(join(API_DIR, 'key.pem'), 'utf8'),
    cert: readFileSync(join(SA_DIR, 'ca.crt'), 'utf8'),
  };
  await server.start(tls, { host: at.host, port: at.port });
  const timer = setInterval(sync, pollMs);
  process.on('SIGUSR1', () => {
    server.closeWatches();
    say('every watch ended (SIGUSR1)');
  });
  process.on('SIGUSR2', () => {
    server.rv++;
    writeFileSync(rvFile, String(server.rv));
    server.compact();
    server.closeWatches();
    say(`history compacted at ${server.rv}, every watch ended (SIGUSR2)`);
  });
  let counted = '';
  const count = setInterval(() => {
    const c = `lists ${server.lists}, watches ${server.watches}`;
    if (c === counted) return;
    counted = c;
    say(c);
  }, 500);
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.on(sig, () => {
      clearInterval(timer);
      clearInterval(count);
      void server.stop().then(() => process.exit(0));
    });
  }
  say(`serving ${server.url} resourceVersion ${server.rv}`);
}

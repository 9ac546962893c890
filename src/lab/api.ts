// The lab control plane's API: HTTP with JSON bodies on a unix socket (LAB_DIR/api.sock, root
// only), what `kubetun lab apply / get / delete / scale / rollout / describe` talk to — the
// lab's apiserver endpoint. The handlers live in control-plane.ts; this file is the transport.
//
//   GET  /objects?kind=Pod[&namespace=NS]                -> {items: [...]}
//   POST /apply   {objects: [{file, object}]}            -> {results, errors, ignored}
//   POST /delete  {kind, namespace, name, grace?}        -> {deleted: boolean}
//   POST /scale   {namespace, name, replicas}            -> {ok: true} | {error}
//   POST /restart {namespace, name}                      -> {ok: true} | {error}
//   POST /resync  {force?, prune?}                       -> {removed}: the addon manager's pass
//                                                           now (force: every file and the
//                                                           topology again), view written
//   GET  /healthz                                        -> {ok: true, synced: boolean}
import { chmodSync, existsSync, mkdirSync, rmSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { dirname, join } from 'node:path';
import { NoLabError, UserError } from '../errors.ts';
import { LabError } from './error.ts';
import { LAB_DIR } from './state.ts';

export const API_SOCKET = join(LAB_DIR, 'api.sock');

export type ApiHandler = (
  method: string,
  path: string,
  query: URLSearchParams,
  body: unknown,
) => unknown;

export async function serveApi(socket: string, handle: ApiHandler): Promise<Server> {
  mkdirSync(dirname(socket), { recursive: true });
  if (existsSync(socket)) rmSync(socket);
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let status = 200;
      let out: unknown;
      try {
        const url = new URL(req.url ?? '/', 'http://lab');
        const body =
          chunks.length > 0 ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined;
        out = handle(req.method ?? 'GET', url.pathname, url.searchParams, body);
      } catch (err) {
        // a refused request (unknown object, bad replicas) is the caller's to fix
        status = 400;
        out = { error: (err as Error).message };
      }
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(out));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socket, () => resolve());
  });
  chmodSync(socket, 0o600);
  return server;
}

/** One request to the lab's API; a lab that is not up is one line saying so. */
export function apiCall<T = Record<string, unknown>>(
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
  socket = API_SOCKET,
  timeoutMs = 30_000,
): Promise<T> {
  return new Promise((resolve, reject) => {
    // agent: false — one connection per call. Node 20's global agent keeps connections alive
    // and may write into one the server's keep-alive timeout (5 s) has just closed: EPIPE.
    const opts = { socketPath: socket, method, path, timeout: timeoutMs, agent: false };
    const req = request(opts, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const out = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as T & {
          error?: string;
        };
        if (typeof out.error === 'string') reject(new UserError('LAB_API', out.error));
        else resolve(out);
      });
    });
    req.on('timeout', () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.on('error', (err) => {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ECONNREFUSED')
        reject(new NoLabError('the lab control plane is not running'));
      else reject(new LabError(`${socket}: ${err.message}`));
    });
    if (body !== undefined) req.end(JSON.stringify(body));
    else req.end();
  });
}

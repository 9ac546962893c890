// The agent's control socket: a unix stream socket speaking newline-delimited JSON, one request
// line in, one response line out, as many per connection as the client likes.
//
//   {"cmd":"status"}   -> {node, pid, uptimeSec, packets, services, ...}
//   {"cmd":"counters"} -> {counters: {REASON_NAME: n, ...}, ...}
//   {"cmd":"ct"}       -> {entries: [{proto, state, expiresInSec, orig, reply, backendId, ...}]}
//   {"cmd":"ct-count"} / {"cmd":"ct-flush"} / {"cmd":"svc"}: the inspect views (`kubetun ct`,
//                         `kubetun svc`); shapes and filters in src/node/inspect.ts
//   {"cmd":"monitor", filter, capture} -> a stream: the connection becomes one-way, one JSON
//                         event per line until the client goes (src/node/monitor.ts)
//   {"cmd":"trace", ...} -> a dry run of the program (src/node/trace.ts)
//
// A handler answers a stream by returning a CtlStream: the reply chain hands it the socket and
// reads no more requests from that connection.
// The socket exists and answers `status` only once the agent is fully up (steering installed):
// that is the readiness signal the lab waits for.
import { chmodSync, existsSync, unlinkSync } from 'node:fs';
import net from 'node:net';
import { dirname } from 'node:path';
import { ensurePrivateDir } from './private-dir.ts';

export type CtlHandler = (req: Record<string, unknown>) => unknown;

/** An answer that takes the connection over (monitor, tap): `start` owns the socket from then. */
export class CtlStream {
  constructor(readonly start: (sock: net.Socket) => void) {}
}

/** Largest request line accepted; a client sending more is cut off (it is not a bulk API). */
const MAX_LINE = 64 * 1024;

/** True when something answers on `socketPath` (a live agent), false when nothing listens. */
export function ctlAlive(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(socketPath);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

export class CtlServer {
  private readonly server: net.Server;
  readonly path: string;

  private constructor(path: string, server: net.Server) {
    this.path = path;
    this.server = server;
  }

  /**
   * Listens on `path`, replacing a stale socket file; refuses if a live agent answers there.
   * Root-only whatever the umask: the directory 0700 (private-dir.ts), the socket 0600.
   */
  static async listen(path: string, handle: CtlHandler): Promise<CtlServer> {
    ensurePrivateDir(dirname(path));
    if (existsSync(path)) {
      if (await ctlAlive(path)) throw new Error(`${path}: another agent is answering there`);
      unlinkSync(path);
    }
    const server = net.createServer((sock) => serve(sock, handle));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => {
        server.off('error', reject);
        chmodSync(path, 0o600); // the 0700 directory keeps others out until then
        resolve();
      });
    });
    return new CtlServer(path, server);
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    try {
      unlinkSync(this.path);
    } catch {
      // already gone (net.Server unlinks its path on close on some platforms)
    }
  }
}

function serve(sock: net.Socket, handle: CtlHandler): void {
  let pending = '';
  // Answers may be promises (reload waits for its sync); the chain keeps replies in order.
  // Each link settles (reply never rejects), so one failed answer cannot stall the rest.
  let chain: Promise<void> = Promise.resolve();
  sock.setEncoding('utf8');
  // EPIPE / ECONNRESET from a client that left mid-answer: nothing to tell it.
  sock.on('error', () => sock.destroy());
  let streaming = false;
  sock.on('data', (chunk: string) => {
    if (sock.writableEnded || streaming) return; // cut off below, or a stream: ignore input
    pending += chunk;
    if (pending.length > MAX_LINE && !pending.includes('\n')) {
      pending = '';
      sock.end(`${JSON.stringify({ error: `request line longer than ${MAX_LINE} bytes` })}\n`);
      return;
    }
    let nl = pending.indexOf('\n');
    while (nl >= 0) {
      const line = pending.slice(0, nl).trim();
      pending = pending.slice(nl + 1);
      if (line)
        chain = chain.then(() =>
          streaming
            ? undefined
            : reply(sock, line, handle, () => {
                streaming = true;
              }),
        );
      nl = pending.indexOf('\n');
    }
  });
}

/** Answer one request line on sock; never rejects (an unhandled rejection ends the agent). */
async function reply(
  sock: net.Socket,
  line: string,
  handle: CtlHandler,
  onStream: () => void,
): Promise<void> {
  let text: string;
  try {
    const a = await answer(line, handle);
    if (a instanceof CtlStream) {
      onStream();
      if (!sock.destroyed) a.start(sock);
      return;
    }
    text = JSON.stringify(a);
  } catch (err) {
    // a failed promise answer, or one JSON cannot encode (a BigInt, a cycle)
    text = JSON.stringify({ error: (err as Error).message });
  }
  if (!sock.destroyed && !sock.writableEnded) sock.write(`${text}\n`);
}

function answer(line: string, handle: CtlHandler): unknown {
  let req: unknown;
  try {
    req = JSON.parse(line);
  } catch (err) {
    return { error: `request is not JSON: ${(err as Error).message}` };
  }
  if (typeof req !== 'object' || req === null || Array.isArray(req)) {
    return { error: 'request must be a JSON object like {"cmd":"status"}' };
  }
  try {
    return handle(req as Record<string, unknown>);
  } catch (err) {
    return { error: (err as Error).message };
  }
}

/** Sends one request and resolves with the first response line, parsed. */
export function ctlRequest(socketPath: string, req: unknown): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(socketPath);
    let buf = '';
    let done = false;
    sock.setEncoding('utf8');
    sock.once('connect', () => sock.write(`${JSON.stringify(req)}\n`));
    sock.on('data', (chunk: string) => {
      buf += chunk;
      const nl = buf.indexOf('\n');
      if (nl < 0 || done) return;
      done = true;
      sock.end();
      try {
        resolve(JSON.parse(buf.slice(0, nl)));
      } catch (err) {
        reject(new Error(`${socketPath}: bad response: ${(err as Error).message}`));
      }
    });
    sock.once('error', (err) => {
      if (!done) reject(err);
      done = true;
    });
    sock.once('close', () => {
      if (!done) reject(new Error(`${socketPath}: closed without a response`));
      done = true;
    });
  });
}

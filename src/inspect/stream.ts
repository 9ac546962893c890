// The streaming side of the control socket (`kubetun monitor`, `kubetun tap`): one request
// line, then one JSON line per event until the agent ends the stream, the user presses Ctrl-C
// (SIGINT/SIGTERM: the socket is closed, the agent unsubscribes) or our own output goes away.
// An `{"error": ...}` first line is the agent refusing the request.
import net from 'node:net';
import { KubetunError } from '../errors.ts';
import { socketError } from './client.ts';

export interface StreamEnd {
  /** why it ended: the user (signal), the agent (closed the socket), or our output closed */
  by: 'signal' | 'agent' | 'output';
  lines: number;
}

/**
 * Streams `req` from the agent at `socket`; `onLine` gets each parsed line and may return
 * false to stop. Resolves when the stream ends; rejects when no agent answers or it refuses.
 */
export function ctlStream(
  socket: string,
  req: Record<string, unknown>,
  onLine: (msg: Record<string, unknown>) => boolean | undefined,
): Promise<StreamEnd> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(socket);
    let pending = '';
    let lines = 0;
    let settled = false;
    const finish = (by: StreamEnd['by'], err?: Error) => {
      if (settled) return;
      settled = true;
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      sock.destroy();
      if (err) reject(err);
      else resolve({ by, lines });
    };
    const onSignal = () => finish('signal');
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    sock.setEncoding('utf8');
    sock.once('connect', () => sock.write(`${JSON.stringify(req)}\n`));
    sock.on('data', (chunk: string) => {
      pending += chunk;
      let nl = pending.indexOf('\n');
      while (nl >= 0 && !settled) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        nl = pending.indexOf('\n');
        if (!line.trim()) continue;
        let msg: Record<string, unknown>;
        try {
          msg = JSON.parse(line) as Record<string, unknown>;
        } catch (err) {
          finish(
            'agent',
            new KubetunError('INSPECT_SOCKET', `${socket}: bad line: ${(err as Error).message}`),
          );
          return;
        }
        if (lines === 0 && typeof msg.error === 'string') {
          finish('agent', new KubetunError('INSPECT_AGENT', `${socket}: ${msg.error}`));
          return;
        }
        lines++;
        if (onLine(msg) === false) finish('output');
      }
    });
    // before the first line: no agent there, not allowed (client.ts's one-line errors); after
    // it, the agent went away mid-stream: the stream simply ends
    sock.once('error', (err) =>
      finish('agent', lines === 0 ? socketError(err, socket) : undefined),
    );
    sock.once('close', () => finish('agent'));
  });
}

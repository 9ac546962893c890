// Talking to a node's kubetun over its control socket. The client is the data plane's own
// (src/node/ctl.ts); this wrapper adds a deadline so a wedged agent cannot hang lab commands.
import { setTimeout as sleep } from 'node:timers/promises';
import { ctlRequest } from '../node/ctl.ts';

export async function labCtl<T = Record<string, unknown>>(
  socket: string,
  req: Record<string, unknown>,
  timeoutMs = 3000,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${socket}: no answer to ${JSON.stringify(req)} in ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  try {
    const res = (await Promise.race([ctlRequest(socket, req), deadline])) as T & { error?: string };
    if (typeof res?.error === 'string')
      throw new Error(`${socket}: ${JSON.stringify(req)}: ${res.error}`);
    return res;
  } finally {
    clearTimeout(timer);
  }
}

/** Polls {"cmd":"status"} until it answers; alive() lets the caller stop early if the agent died. */
export async function waitForCtl(
  socket: string,
  timeoutMs: number,
  alive: () => boolean,
  /** wait on until the status says so too (e.g. the first sync is done) */
  until: (status: Record<string, unknown>) => boolean = () => true,
): Promise<unknown> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const st = (await labCtl(socket, { cmd: 'status' }, 1000)) as Record<string, unknown>;
      if (until(st)) return st;
      last = new Error(`status so far: ${JSON.stringify(st).slice(0, 200)}`);
    } catch (err) {
      last = err;
    }
    if (!alive()) throw new Error('the process exited');
    await sleep(100);
  }
  throw new Error(
    `no status from ${socket} in ${timeoutMs} ms (${(last as Error)?.message ?? 'no error'})`,
  );
}

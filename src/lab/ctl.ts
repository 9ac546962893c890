// Talking to a node's kubetun over its control socket. The client itself is the data plane's
// (src/node/ctl.ts); this wrapper adds a deadline so a wedged agent cannot hang lab commands.
import { setTimeout as sleep } from 'node:timers/promises';

type CtlRequest = (socketPath: string, req: Record<string, unknown>) => Promise<unknown>;

let client: CtlRequest | undefined;

async function ctlClient(): Promise<CtlRequest> {
  if (!client) {
    // Loaded on first use: lab commands that never talk to kubetun (mode none) must not need it.
    const path = '../node/ctl.ts';
    const mod = (await import(path)) as { ctlRequest: CtlRequest };
    client = mod.ctlRequest;
  }
  return client;
}

export async function labCtl<T = Record<string, unknown>>(
  socket: string,
  req: Record<string, unknown>,
  timeoutMs = 3000,
): Promise<T> {
  const request = await ctlClient();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${socket}: no answer to ${JSON.stringify(req)} in ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  try {
    return (await Promise.race([request(socket, req), deadline])) as T;
  } finally {
    clearTimeout(timer);
  }
}

/** Polls {"cmd":"status"} until it answers; alive() lets the caller stop early if the agent died. */
export async function waitForCtl(
  socket: string,
  timeoutMs: number,
  alive: () => boolean,
): Promise<unknown> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      return await labCtl(socket, { cmd: 'status' }, 1000);
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

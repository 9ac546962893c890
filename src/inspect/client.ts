// The inspect commands' side of the control socket: one request, a deadline (a wedged agent
// must not hang the CLI), and `{"error": ...}` answers turned into errors.
import { ctlRequest } from '../node/ctl.ts';
import { KubetunError } from '../manifests/errors.ts';

export async function inspectRequest<T>(
  socket: string,
  req: Record<string, unknown>,
  timeoutMs = 10_000,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new KubetunError('INSPECT_TIMEOUT', `${socket}: no answer in ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  let res: unknown;
  try {
    res = await Promise.race([ctlRequest(socket, req), deadline]);
  } catch (err) {
    if (err instanceof KubetunError) throw err;
    const e = err as NodeJS.ErrnoException;
    const hint = e.code === 'ENOENT' || e.code === 'ECONNREFUSED' ? ' (is the agent running?)' : '';
    throw new KubetunError('INSPECT_SOCKET', `${socket}: ${e.message}${hint}`);
  } finally {
    clearTimeout(timer);
  }
  const err = (res as { error?: unknown } | null)?.error;
  if (typeof err === 'string') throw new KubetunError('INSPECT_AGENT', `${socket}: ${err}`);
  return res as T;
}

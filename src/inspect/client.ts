// The inspect commands' side of the control socket: one request, a deadline (a wedged agent
// must not hang the CLI), and `{"error": ...}` answers turned into errors.
import { ctlRequest } from '../node/ctl.ts';
import { KubetunError, UserError } from '../errors.ts';

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
    throw socketError(err, socket);
  } finally {
    clearTimeout(timer);
  }
  const err = (res as { error?: unknown } | null)?.error;
  if (typeof err === 'string') throw new KubetunError('INSPECT_AGENT', `${socket}: ${err}`);
  return res as T;
}

/** Why a connect failed, as the user can act on it: no agent there, or not allowed. */
export function socketError(err: unknown, socket: string): KubetunError {
  if (err instanceof KubetunError) return err;
  const e = err as NodeJS.ErrnoException;
  if (e.code === 'ENOENT' || e.code === 'ECONNREFUSED') {
    return new UserError('INSPECT_NO_AGENT', `${socket}: no agent listens there`, {
      hint: 'is the lab up (kubetun lab up) or `kubetun run` running? Choose with --node NAME',
      cause: err,
    });
  }
  if (e.code === 'EACCES' || e.code === 'EPERM') {
    return new UserError('NOT_ROOT', `${socket}: permission denied`, {
      hint: "the control socket is root's: run the command as root (sudo)",
      cause: err,
    });
  }
  return new KubetunError('INSPECT_SOCKET', `${socket}: ${e.message}`, { cause: err });
}

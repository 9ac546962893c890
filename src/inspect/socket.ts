// Which agent an inspect command talks to: --socket PATH, --node NAME (the socket `kubetun run`
// and the lab create, <dir>/NAME.sock), or the only socket in <dir> when exactly one exists.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fromErrno, UsageError, UserError } from '../errors.ts';
import { CTL_DIR } from '../lab/prefix.ts';

/**
 * The lab's control-socket directory follows KUBETUN_LAB_PREFIX (src/lab/prefix.ts): with the
 * default prefix it is /run/kubetun, where `kubetun run` puts its socket outside a lab too.
 */
export const CTL_DIR_DEFAULT = CTL_DIR;

export interface SocketChoice {
  socket?: string;
  node?: string;
}

export function resolveSocket(o: SocketChoice, dir = CTL_DIR_DEFAULT): string {
  if (o.socket && o.node) {
    throw new UsageError('--socket and --node: give one of them, not both');
  }
  if (o.socket) return o.socket;
  if (o.node) {
    if (!/^[A-Za-z0-9._-]+$/.test(o.node) || o.node.startsWith('.')) {
      throw new UsageError(`--node: ${JSON.stringify(o.node)} is not a node name`);
    }
    return join(dir, `${o.node}.sock`);
  }
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => n.endsWith('.sock'));
  } catch (err) {
    const e = fromErrno(err, 'control sockets', dir);
    if (e instanceof UserError) throw e;
    names = [];
  }
  if (names.length === 1) return join(dir, names[0]);
  const found =
    names.length === 0
      ? `no control socket in ${dir} (is \`kubetun run\` running?)`
      : `${names.length} control sockets in ${dir}: ${names.sort().join(', ')}`;
  throw new UsageError(`${found}; choose one with --node NAME or --socket PATH`);
}

// Sysctls through /proc/sys, keyed in slash form (net/ipv4/conf/eth0.100/rp_filter) so that
// interface names with dots need no escaping. Undo steps are argv lists (see steering.ts) so the
// watchdog shell can replay them after the agent is gone.
//
// kubetun writes net.* keys only, and where the host's /proc/sys/net is can be moved
// (--proc-sys-net): an unprivileged container gets /proc/sys read-only from its runtime, and no
// capability lifts that, so the DaemonSet mounts the host's /proc/sys/net read-write by hostPath
// at /host/proc/sys/net, as Cilium's agent does (docs/cluster.md). A net sysctl file shows the
// netns of the process that opens it, so under hostNetwork that mount is the node's.
import { readFileSync, writeFileSync } from 'node:fs';
import { UserError } from '../errors.ts';

/** Where net.* sysctls are, outside a container. */
export const PROC_SYS_NET = '/proc/sys/net';

export class Sysctls {
  /** the directory that stands for /proc/sys/net (--proc-sys-net) */
  readonly netRoot: string;

  constructor(netRoot = PROC_SYS_NET) {
    this.netRoot = netRoot.replace(/\/+$/, '');
  }

  path(key: string): string {
    return `${this.netRoot}/${netKey(key)}`;
  }

  read(key: string): string {
    return readFileSync(this.path(key), 'utf8').trim();
  }

  /** Writes the key; a read-only /proc/sys (a container without the mount) is the user's to fix. */
  write(key: string, value: string): void {
    const path = this.path(key);
    try {
      writeFileSync(path, `${value}\n`); // an empty value too (see writeArgv)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'EROFS' && code !== 'EACCES' && code !== 'EPERM') throw err;
      const name = key.replaceAll('/', '.');
      throw new UserError(
        'SYSCTL',
        `cannot write ${name}: ${path}: ${code}; in a container mount the host's /proc/sys/net read-write and pass --proc-sys-net (deploy/daemonset.yaml)`,
      );
    }
  }

  /**
   * argv that writes `value` to the sysctl, for undo lists (no procps needed): through this
   * root, or /proc/sys where the root is not there — a state file written in the container,
   * replayed by `kubetun cleanup` on the node itself.
   */
  writeArgv(key: string, value: string): string[] {
    const paths = [this.path(key)];
    if (this.netRoot !== PROC_SYS_NET) paths.push(`${PROC_SYS_NET}/${netKey(key)}`);
    // the newline: a write of no bytes leaves a sysctl as it is, so an empty value (the usual
    // ip_local_reserved_ports) would never be restored
    const script = `v=$1; shift; for f; do [ -e "$f" ] && { printf '%s\\n' "$v" > "$f"; exit; }; done`;
    return ['sh', '-c', script, 'sh', value, ...paths];
  }
}

/** The key below net/ (kubetun has no sysctl outside it: the one mount covers all of them). */
function netKey(key: string): string {
  if (!key.startsWith('net/')) throw new Error(`sysctl ${key}: kubetun writes net.* keys only`);
  return key.slice('net/'.length);
}

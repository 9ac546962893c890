// `kubetun cleanup`: leave a node as kubetun found it — kube-proxy --cleanup's counterpart.
//
//   1. refuse while an agent answers on a control socket of the directory (stop it first: a
//      running agent undoes its own steering on SIGTERM)
//   2. replay every state file's undo list (failure.ts recoverState: tc redirects, the service
//      route, sysctls back to their values from before the first run; an untrusted file is
//      refused, not run)
//   3. sweep tc filters with kubetun's prefs that no state file knew of (steering.ts), and the
//      reply steering's nftables table, ip rules and routing table (steer-replies.ts)
//   4. delete the TUN device if it outlived its agent (it is persistent: pin.ts), stale socket
//      files, pinned maps and leases (failure.ts) that no state file removed
//   5. with kubeProxy: kube-proxy's rules too (kube-proxy-leftovers.ts)
import { existsSync, readdirSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../errors.ts';
import { ctlAlive } from './ctl.ts';
import { type Recovered, recoverState } from './failure.ts';
import { removeKubeProxyRules } from './kube-proxy-leftovers.ts';
import { sweepReplySteer } from './steer-replies.ts';
import { sweepStaleFilters } from './steering.ts';
import { shTry } from '../sh.ts';

export interface CleanupOptions {
  /** where the agents' control sockets and state files are (kubetun run --ctl-socket's dir) */
  ctlDir: string;
  /** the TUN device name (kubetun run --tun) */
  tun: string;
  /** also remove kube-proxy's iptables chains and nftables tables */
  kubeProxy: boolean;
}

export interface CleanupReport {
  stateFiles: (Recovered & { file: string })[];
  swept: string[];
  tunRemoved: boolean;
  sockets: string[];
  /** pinned-map files and leases removed (the state files' undo removes its own run's) */
  pinned: string[];
  kubeProxy: string[];
}

export async function cleanupNode(o: CleanupOptions): Promise<CleanupReport> {
  const names = existsSync(o.ctlDir) ? readdirSync(o.ctlDir) : [];
  const sockets = names.filter((n) => n.endsWith('.sock')).map((n) => join(o.ctlDir, n));
  for (const s of sockets) {
    if (await ctlAlive(s))
      throw new UserError('AGENT_RUNNING', `an agent answers on ${s}`, {
        hint: 'stop it first (SIGTERM: it removes its own steering), then run kubetun cleanup',
      });
  }
  const stateFiles: CleanupReport['stateFiles'] = [];
  for (const n of names.filter((x) => x.endsWith('.state.json'))) {
    const file = join(o.ctlDir, n);
    const r = await recoverState(file, 0);
    if (r) stateFiles.push({ file, ...r });
  }
  const swept = [...sweepStaleFilters(), ...sweepReplySteer()];
  const tunRemoved = shTry(['ip', 'link', 'show', 'dev', o.tun]).ok
    ? shTry(['ip', 'link', 'del', 'dev', o.tun]).ok
    : false;
  for (const s of sockets) unlinkSync(s);
  const left = existsSync(o.ctlDir) ? readdirSync(o.ctlDir) : [];
  const pinned = left.filter((n) => n.endsWith('.maps') || /\.lease\.\d+$/.test(n));
  for (const n of pinned) unlinkSync(join(o.ctlDir, n));
  const kubeProxy = o.kubeProxy ? removeKubeProxyRules() : [];
  return {
    stateFiles,
    swept,
    tunRemoved,
    sockets,
    pinned: pinned.map((n) => join(o.ctlDir, n)),
    kubeProxy,
  };
}

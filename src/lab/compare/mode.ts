// `kubetun lab mode <mode>`: switch a running lab's data plane without rebuilding its namespaces,
// so a comparison runs both planes over the very same veths, addresses and pod servers.
//
//   kubetun → kernel: SIGTERM each node's kubetun by PID (it undoes its own steering: tc
//                     redirects, the service route, sysctls), then install the kernel ruleset;
//   kernel → kubetun: flush the node's nftables ruleset (iptables-nft lives there too), the
//                     service route and conntrack, then start kubetun on every node.
import { setTimeout as sleep } from 'node:timers/promises';
import { type Progress, startKubetun, withLabLock } from '../lab.ts';
import { flushKernelDataplane, installKernelDataplane, isKernelMode } from '../kube-proxy.ts';
import { isAlive } from '../procs.ts';
import { forgetAgentFiles, stopAgent } from '../provision.ts';
import { findKubeProxyRules } from '../../node/kube-proxy-leftovers.ts';
import { LabError } from '../error.ts';
import { inNs } from '../../sh.ts';
import { type LabMode, type LabState, readState, writeState } from '../state.ts';
import { loadTopology, type Topology } from '../topology.ts';

/** reinstall: program the data plane afresh even when the lab already runs this mode (the
 * manifests may have changed since). */
export function labSwitchMode(
  mode: LabMode,
  progress?: Progress,
  opts: { reinstall?: boolean } = {},
): Promise<LabState> {
  return withLabLock(() => switchUnlocked(mode, progress ?? (() => {}), opts.reinstall ?? false));
}

async function switchUnlocked(mode: LabMode, say: Progress, reinstall: boolean): Promise<LabState> {
  const state = readState();
  if (state?.phase !== 'up')
    throw new LabError('the lab is not up (run: kubetun lab up --mode <mode>)');
  const t = loadTopology(state.topologyFile);
  if (!reinstall && state.mode === mode && state.processes.every((p) => isAlive(p))) {
    say(`the lab already runs mode ${mode}`);
    return state;
  }
  say(`switching the lab from ${state.mode} to ${mode}`);
  state.switching = true; // the control plane's kernel sync stands aside from here on
  writeState(state);
  await stopAgents(state, say);
  flushKernelDataplane(t);
  await settleFlush(t);
  state.mode = mode;
  writeState(state);
  if (mode === 'kubetun') await startKubetun(t, state, say);
  if (isKernelMode(mode)) installKernelDataplane(t, mode, say);
  state.switching = undefined;
  writeState(state);
  say(`the lab runs mode ${mode}`);
  return state;
}

/**
 * A kernel-mode sync the control plane began before `switching` was written can still finish
 * after the flush, leaving kube-proxy's rules behind (a kubetun agent then refuses to start
 * beside them; CI saw it on node2). Flush again until every node stays clean for 2 s — clean
 * as the agent checks it (findKubeProxyRules: IPv6's table too, which CI once saw left alone).
 */
async function settleFlush(t: Topology): Promise<void> {
  const dirty = () =>
    t.nodes.some((n) => findKubeProxyRules((argv) => inNs(n.ns, argv)).length > 0);
  for (let clean = 0, waited = 0; clean < 5 && waited < 20_000; waited += 400) {
    await sleep(400);
    if (dirty()) {
      flushKernelDataplane(t);
      clean = 0;
    } else clean++;
  }
}

/** Ends every recorded kubetun agent by PID and forgets it (socket and undo file included). */
async function stopAgents(state: LabState, say: Progress): Promise<void> {
  const agents = state.processes.filter((p) => p.role === 'kubetun');
  if (agents.length === 0) return;
  say(`stopping ${agents.length} kubetun agents`);
  await Promise.all(agents.map((a) => stopAgent(a)));
  for (const a of agents) {
    if (isAlive(a)) throw new LabError(`kubetun on ${a.name} (pid ${a.pid}) did not stop`);
    if (a.ctlSocket) forgetAgentFiles(a.ctlSocket);
  }
  state.processes = state.processes.filter((p) => p.role !== 'kubetun');
  writeState(state);
}

// One node's data plane in a running lab: restart kubetun with the node's flags (its kube-proxy
// configuration, kept in the lab state so a later restart keeps them), or crash it as a node's
// kube-proxy crashes (SIGKILL; the fail-open watchdog then removes the steering once the
// restart grace window has passed). `lab up` rebuilds with no flags; `lab agent` is the small
// repair a learner makes instead.
import { setTimeout as sleep } from 'node:timers/promises';
import { labCtl } from './ctl.ts';
import { agentExtra, remember, withLabLock } from './lab.ts';
import { labTarget } from './plan.ts';
import { isAlive, procStartTime } from './procs.ts';
import { holdSupervisor, readSupervisor } from './supervisor.ts';
import { ctlSocketFor, findNode, startAgent, stopAgent, waitAgent } from './provision.ts';
import { NoLabError, UserError } from '../errors.ts';
import { DEFAULT_RESTART_GRACE_MS } from '../node/failure.ts';
import { type LabProcess, type LabState, readState, writeState } from './state.ts';
import { loadTopology } from './topology.ts';

function kubetunLab(): LabState {
  const s = readState();
  if (s?.phase !== 'up') throw new NoLabError();
  if (s.mode !== 'kubetun')
    throw new UserError(
      'LAB_MODE',
      `the lab's data plane is ${s.mode}; lab agent restarts kubetun (kubetun lab mode kubetun)`,
    );
  return s;
}

export function agentOf(s: LabState, node: string): LabProcess | undefined {
  return s.processes.find((p) => p.role === 'kubetun' && p.name === node);
}

/**
 * Stops the node's kubetun (if it runs) and starts it again with `flags` (undefined: the flags
 * it had). Returns the flags now in force.
 */
export function restartAgent(
  node: string,
  flags: string[] | undefined,
  say: (m: string) => void,
): Promise<string[]> {
  return withLabLock(async () => {
    const s = kubetunLab();
    const t = loadTopology(s.topologyFile);
    const n = findNode(t, node);
    const old = agentOf(s, node);
    if (old && isAlive(old)) await stopAgent(old);
    s.processes = s.processes.filter((p) => p !== old);
    const keep = flags ?? s.agentFlags?.[node] ?? [];
    s.agentFlags = { ...s.agentFlags, [node]: keep };
    writeState(s);
    const a = remember(
      s,
      startAgent(t, n, labTarget(n), ctlSocketFor(n), agentExtra(s, node), undefined, s.source),
    );
    const cli = a.argv.findIndex((x) => x.endsWith('kubetun.mjs')); // after node and its options
    say(`kubetun on ${node}: ${a.argv.slice(cli + 1).join(' ')}`);
    await waitAgent(a);
    say(`kubetun on ${node} answers on ${a.ctlSocket}`);
    return keep;
  });
}

/**
 * Kills the node's kubetun with SIGKILL, as the OOM killer would, and waits until its watchdog
 * has failed the node open (the watchdog exits once it has replayed the undo list, after the
 * restart grace window: DEFAULT_RESTART_GRACE_MS, node/failure.ts).
 */
export function crashAgent(node: string): Promise<void> {
  return withLabLock(async () => {
    const s = kubetunLab();
    const a = agentOf(s, node);
    if (!a || !isAlive(a)) return;
    const st = await labCtl<{ watchdogPid?: number; pid?: number }>(a.ctlSocket!, {
      cmd: 'status',
    }).catch(() => ({ watchdogPid: 0, pid: 0 }));
    // the supervisor (supervisor.ts) would restart it: a crash here is one that stays down
    holdSupervisor(a);
    const sup = readSupervisor(a.ctlSocket!);
    const agentPid = st.pid || (sup?.pid === a.pid ? sup.agentPid : 0) || a.pid;
    await sleep(100); // the hold signal is handled before the agent's exit
    process.kill(agentPid, 'SIGKILL');
    const dog = st.watchdogPid ?? 0;
    const polls = (DEFAULT_RESTART_GRACE_MS + 5000) / 50;
    for (let i = 0; i < polls && (isAlive(a) || (dog > 0 && procStartTime(dog))); i++)
      await sleep(50);
  });
}

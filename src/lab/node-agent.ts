// One lab node's kubetun alone, however provisioning runs it there — the systemd unit
// (--systemd, a VM) or the background process of the node record (a stand-in for a VM) —
// through `kubetun lab provision-node --agent ACTION`, run on the node itself:
//
//   status    whether it runs, its extra flags, when the node was provisioned, the view it reads
//   start     started (with the flags it had) and answering on its control socket
//   stop      a clean stop: SIGTERM, the agent undoes its own steering and exits 0 (a systemd
//             stop alone would hand over, keeping the steering for the restart grace window)
//   crash     SIGKILL, as the OOM killer does, and it stays down: under systemd a drop-in with
//             Restart=no is in force before the kill; returns once the fail-open watchdog has
//             removed the steering (the restart grace window, node/failure.ts)
//   restart   stopped cleanly if it runs, started with the given flags (none given: the ones it
//             had) and without the crash hold
//
// `lab compare --vms` switches a node between kubetun and the kernel's rules with start/stop;
// `lab exercise --vms` and `lab agent` break and repair it with crash/restart — from the host,
// over ssh, knowing nothing of how the node runs it (lab/vms.ts).
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { VIEW_FILE } from '../cluster/store.ts';
import { statePathFor } from '../node/failure.ts';
import { sh, shTry } from '../sh.ts';
import { LabError } from './error.ts';
import { isAlive, procStartTime, stopProcess } from './procs.ts';
import {
  AGENT_DROPIN,
  AGENT_UNIT,
  ctlSocketFor,
  forgetAgentFiles,
  kubetunArgv,
  type NodeRecord,
  nodeRecordFile,
  provisionedAt,
  readAgentFlags,
  readRecord,
  type Say,
  SYSTEMD_DIR,
  startAgent,
  stopAgent,
  unitActive,
  waitAgent,
  waitGone,
  waitUnitAgent,
  watchdogOf,
  writeAgentFlags,
  writeRecord,
} from './provision.ts';
import { type LabProcess, VIEW_DIR } from './state.ts';
import type { LabNode, Topology } from './topology.ts';

export type AgentAction = 'start' | 'stop' | 'status' | 'crash' | 'restart';
export const AGENT_ACTIONS: readonly AgentAction[] = [
  'start',
  'stop',
  'status',
  'crash',
  'restart',
];

/** What `--agent` reports (`--json`), after the action. */
export interface AgentReport {
  node: string;
  agent: 'running' | 'stopped';
  /** its `kubetun run` flags beyond the provisioning's */
  flags: string[];
  /** when the node was last provisioned: a rebuild changes it ('' if unknown) */
  provisioned: string;
  /** the view its kubetun reads: Services and EndpointSlices */
  view: string;
}

/**
 * Runs the action on this node's kubetun; flags (restart only): its extra `kubetun run` flags
 * from now on, undefined to keep the ones it has.
 */
export async function nodeAgent(
  t: Topology,
  n: LabNode,
  uplink: string,
  action: AgentAction,
  say: Say,
  flags?: string[],
): Promise<AgentReport> {
  const rec = readRecord(n.name);
  const c: Call = { t, n, uplink, say, flags };
  let running: boolean;
  if (rec) running = await recordAgent(c, rec, action);
  else if (existsSync(join(SYSTEMD_DIR, AGENT_UNIT))) running = await unitAgent(c, action);
  else
    throw new LabError(
      `node ${n.name} was not provisioned on this machine (no ${nodeRecordFile(n.name)}, no ${AGENT_UNIT}): run kubetun lab provision-node first`,
    );
  return {
    node: n.name,
    agent: running ? 'running' : 'stopped',
    flags: readAgentFlags(n.name),
    provisioned: provisionedAt(n.name),
    view: join(VIEW_DIR, VIEW_FILE),
  };
}

/** One nodeAgent call: the node, its uplink, where progress goes, the flags asked for. */
interface Call {
  t: Topology;
  n: LabNode;
  uplink: string;
  say: Say;
  flags?: string[];
}

async function unitAgent(
  { t, n, uplink, say, flags }: Call,
  action: AgentAction,
): Promise<boolean> {
  if (action === 'status') return unitActive();
  if (action === 'stop') {
    await stopUnit(n, say);
    return false;
  }
  const had = readAgentFlags(n.name);
  if (action === 'crash') {
    if (!unitActive()) return false;
    setDropIn(agentDropIn(t, n, uplink, { flags: had, held: true }));
    await killUnit(n);
    say(`kubetun on ${n.name} killed (SIGKILL); ${AGENT_UNIT} stays down (${AGENT_DROPIN})`);
    return false;
  }
  const want = action === 'restart' ? (flags ?? had) : had;
  writeAgentFlags(n.name, want);
  setDropIn(agentDropIn(t, n, uplink, { flags: want, held: false }));
  if (action === 'restart' && unitActive()) await stopUnit(n, say);
  shTry(['systemctl', 'reset-failed', AGENT_UNIT], 120_000); // after a crash: failed
  if (!unitActive()) sh(['systemctl', 'start', AGENT_UNIT], { timeoutMs: 300_000 });
  await waitUnitAgent(n, say);
  return true;
}

/** SIGTERM exits 0: Restart=on-failure leaves it down, and the unit goes inactive by itself. */
async function stopUnit(n: LabNode, say: Say): Promise<void> {
  const dog = watchdogOf(statePathFor(ctlSocketFor(n)));
  const pid = mainPid();
  const main = pid > 0 ? procStartTime(pid) : undefined;
  if (main !== undefined) await stopProcess({ pid, startTime: main }, 120_000);
  shTry(['systemctl', 'stop', AGENT_UNIT], 120_000);
  await waitGone(dog);
  say(`kubetun on ${n.name} stopped (${AGENT_UNIT})`);
}

async function killUnit(n: LabNode): Promise<void> {
  const dog = watchdogOf(statePathFor(ctlSocketFor(n)));
  const pid = mainPid();
  if (pid > 0 && procStartTime(pid) !== undefined) process.kill(pid, 'SIGKILL');
  // under emulation systemd takes a while to notice; Restart=no keeps it failed
  for (const until = Date.now() + 120_000; unitActive() && Date.now() < until; ) await sleep(200);
  await waitGone(dog);
}

function mainPid(): number {
  return Number(shTry(['systemctl', 'show', '-p', 'MainPID', '--value', AGENT_UNIT]).out) || 0;
}

/**
 * The unit's drop-in for what `--agent` changed (undefined: nothing, as provisioned). held: a
 * crash nobody restarts (Restart=no); flags: ExecStart again, the provisioning's plus these.
 */
export function agentDropIn(
  t: Topology,
  n: LabNode,
  uplink: string,
  o: { flags: string[]; held: boolean },
  node = process.execPath,
): string | undefined {
  if (!o.held && o.flags.length === 0) return undefined;
  const lines = ['# Written by `kubetun lab provision-node --agent`; provisioning removes it.'];
  lines.push('[Service]');
  if (o.held) lines.push('# --agent crash: down until --agent start or restart', 'Restart=no');
  if (o.flags.length > 0) {
    const argv = kubetunArgv(t, n, uplink, ctlSocketFor(n), node).concat(o.flags);
    lines.push('ExecStart=', `ExecStart=${argv.map(systemdQuote).join(' ')}`);
  }
  return `${lines.join('\n')}\n`;
}

/** One ExecStart word as systemd reads it back: quoted, `$` and `%` not expanded. */
export function systemdQuote(s: string): string {
  const lit = s.replace(/%/g, '%%').replace(/\$/g, '$$$$');
  return /^[A-Za-z0-9_./:=@+,-]+$/.test(lit) ? lit : `"${lit.replace(/(["\\])/g, '\\$1')}"`;
}

/** Writes (or removes) the drop-in and reloads systemd, if it changes. */
function setDropIn(text: string | undefined): void {
  const now = existsSync(AGENT_DROPIN) ? readFileSync(AGENT_DROPIN, 'utf8') : undefined;
  if (now === text) return;
  if (text === undefined) rmSync(AGENT_DROPIN, { force: true });
  else {
    mkdirSync(dirname(AGENT_DROPIN), { recursive: true });
    writeFileSync(AGENT_DROPIN, text);
  }
  sh(['systemctl', 'daemon-reload'], { timeoutMs: 120_000 });
}

async function recordAgent(c: Call, rec: NodeRecord, action: AgentAction): Promise<boolean> {
  const { t, n, uplink, say, flags } = c;
  const alive = rec.processes.filter((p) => p.role === 'kubetun' && isAlive(p));
  if (action === 'status' || (action === 'start' && alive.length > 0)) return alive.length > 0;
  if (action === 'stop') {
    for (const a of alive) await stopAgent(a);
    for (const a of rec.processes)
      if (a.role === 'kubetun' && a.ctlSocket) forgetAgentFiles(a.ctlSocket);
    rec.processes = rec.processes.filter((p) => p.role !== 'kubetun');
    writeRecord(rec);
    say(`kubetun on ${n.name} stopped`);
    return false;
  }
  if (action === 'crash') {
    // nothing restarts a background agent: it stays down
    for (const a of alive) await killAgent(a);
    say(`kubetun on ${n.name} killed (SIGKILL)`);
    return false;
  }
  const want = action === 'restart' ? (flags ?? readAgentFlags(n.name)) : readAgentFlags(n.name);
  writeAgentFlags(n.name, want);
  for (const a of alive) await stopAgent(a);
  const a = startAgent(t, n, { uplink }, ctlSocketFor(n), want);
  rec.processes = rec.processes.filter((p) => p.role !== 'kubetun').concat(a);
  writeRecord(rec);
  await waitAgent(a);
  say(`kubetun on ${n.name} answers on ${a.ctlSocket}`);
  return true;
}

/** SIGKILL, then until its watchdog has failed the node open. */
async function killAgent(a: LabProcess): Promise<void> {
  const dog = a.ctlSocket ? watchdogOf(statePathFor(a.ctlSocket)) : 0;
  process.kill(a.pid, 'SIGKILL');
  for (let i = 0; i < 200 && isAlive(a); i++) await sleep(50);
  await waitGone(dog);
}

// Turning one machine into a lab node — a Vagrant VM, or a node namespace of the namespace lab —
// with one piece of code: the node-local plan (plan.ts planNode: pods as namespaces + veth
// joined to this node, gateways + proxy_arp, pod CIDR routes to the other nodes over the
// uplink, sysctls), the pod servers and kubetun. `lab up` runs these for each node namespace;
// `kubetun lab provision-node` runs them in its own network namespace (a VM), either with
// background processes (what lab up does; what the CI stand-in for a VM checks) or as systemd
// units reading the shared manifests (--systemd, what the Vagrantfile asks for).
//
//   Vagrantfile ─▶ lab/provision/node.sh <node> ─▶ kubetun lab provision-node --systemd
//   lab up      ─▶ provisionNetwork / startPodServers / startAgent with NodeTarget.ns set
import { spawn } from 'node:child_process';
import {
  closeSync,
  fstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { AGENT_NODE_OPTIONS, REPO_ROOT } from '../runtime.ts';
import { DEFAULT_RESTART_GRACE_MS, statePathFor } from '../node/failure.ts';
import { runArgv } from '../node/options.ts';
import { renderStaticView } from './control-plane.ts';
import { daemonSetAgentArgv } from './daemonset.ts';
import { waitForCtl } from './ctl.ts';
import { type NodeTarget, type Phase, planNode, planNodeUndo } from './plan.ts';
import { isAlive, procStartTime, startInNs, stopProcess, tail, waitForLog } from './procs.ts';
import { LabError } from './error.ts';
import { listNetns, sh, shTry } from '../sh.ts';
import { CTL_DIR, LAB_DIR, type LabProcess, LOG_DIR, VIEW_DIR } from './state.ts';
import {
  holdSupervisor,
  readSupervisor,
  removeSupervisorFile,
  supervisedArgv,
  supervisorFileFor,
} from './supervisor.ts';
import { LAB_PREFIX, type LabNode, type Topology } from './topology.ts';

const REPO = REPO_ROOT;
/** The TUN device kubetun creates on each node. */
export const NODE_TUN = 'kt0';

export type Say = (msg: string) => void;

/** The pod's HTTP + UDP echo server (lab/servers/echo.mjs), run inside the pod's namespace. */
export function serverArgv(t: Topology, p: LabNode['pods'][number], node = process.execPath) {
  const ip6 = p.ip6 ? ['--ip6', p.ip6] : [];
  return [node, join(REPO, 'lab/servers/echo.mjs'), '--name', p.name, '--ip', p.ip, ...ip6].concat([
    '--http',
    String(t.httpPort),
    '--udp',
    String(t.udpPort),
  ]);
}

/** `kubetun run` for one node, reading the view the control plane writes (state.ts VIEW_DIR). */
export function kubetunArgv(
  t: Topology,
  n: LabNode,
  uplink: string,
  ctlSocket: string,
  node = process.execPath,
  manifests = VIEW_DIR,
): string[] {
  const flags = runArgv({
    manifests,
    nodeName: n.name,
    nodeIp: n.ip,
    podCidr: n.podCidr,
    clusterCidr: t.clusterCidr,
    serviceCidr: t.serviceCidr,
    // a dual-stack topology: the IPv6 ClusterIPs are served too (node/steering.ts), IPv6
    // NodePorts on the node's IPv6 address (masqueraded to it), and IPv6 ClusterIP traffic from
    // outside the IPv6 cluster CIDR masqueraded, as a dual-stack kube-proxy does
    serviceCidrV6: t.ipv6?.serviceCidr,
    podCidrV6: n.podCidrV6,
    nodeIpV6: n.ip6,
    clusterCidrV6: t.ipv6?.clusterCidr,
    uplink,
    tun: NODE_TUN,
    ctlSocket,
  });
  return [node, ...AGENT_NODE_OPTIONS, join(REPO, 'bin/kubetun.mjs'), 'run', ...flags];
}

export function ctlSocketFor(n: LabNode): string {
  return join(CTL_DIR, `${n.name}.sock`);
}

export function runPhases(phases: Phase[], say: Say): void {
  for (const phase of phases) {
    say(`${phase.title} (${phase.cmds.length} commands)`);
    for (const cmd of phase.cmds) sh(cmd);
  }
}

/** Pods, routes and sysctls of one node (plan.ts planNode). */
export function provisionNetwork(t: Topology, n: LabNode, at: NodeTarget, say: Say): void {
  runPhases(planNode(t, n, at), say);
}

export function freshLog(name: string): string {
  mkdirSync(LOG_DIR, { recursive: true });
  const file = join(LOG_DIR, name);
  writeFileSync(file, '');
  return file;
}

/** Starts one echo server per pod of the node; `started` hears of each before it is awaited. */
export async function startPodServers(
  t: Topology,
  n: LabNode,
  started: (p: LabProcess) => void,
): Promise<LabProcess[]> {
  const procs = n.pods.map((p) => {
    const s = startInNs('server', p.name, p.ns, serverArgv(t, p), freshLog(`server-${p.name}.log`));
    started(s);
    return s;
  });
  await Promise.all(procs.map((s) => waitForLog(s, /^ready /m, 10_000)));
  return procs;
}

/**
 * Starts `kubetun run` on the node: in its namespace, or in this process's own. `extra` are
 * further `kubetun run` flags (the node's kube-proxy configuration, `lab agent`).
 */
export function startAgent(
  t: Topology,
  n: LabNode,
  at: NodeTarget,
  ctlSocket: string,
  extra: string[] = [],
  manifests = VIEW_DIR,
  source: 'dir' | 'api' = 'dir',
): LabProcess {
  mkdirSync(dirname(ctlSocket), { recursive: true });
  rmSync(ctlSocket, { force: true });
  // --source api: started as deploy/daemonset.yaml starts it, fed by the lab's API server
  const argv =
    source === 'api'
      ? daemonSetAgentArgv(t, n, ctlSocket, extra)
      : kubetunArgv(t, n, at.uplink, ctlSocket, process.execPath, manifests).concat(extra);
  const log = freshLog(`kubetun-${n.name}.log`);
  // in a namespace lab a supervisor restarts it when it crashes (supervisor.ts); in a VM systemd
  // does (systemdUnits). The recorded process is the supervisor, argv the agent's.
  removeSupervisorFile(ctlSocket);
  const p =
    at.ns === undefined
      ? startOnHost('kubetun', n.name, argv, log)
      : startInNs(
          'kubetun',
          n.name,
          at.ns,
          supervisedArgv(supervisorFileFor(ctlSocket), argv),
          log,
        );
  p.argv = argv;
  p.ctlSocket = ctlSocket;
  return p;
}

/**
 * Ends a node's kubetun and waits until nothing of it is left to act later: SIGTERM (a clean
 * stop unwinds its steering, which on a loaded machine takes seconds: tc per hooked veth), and
 * then its fail-open watchdog's exit. Had the agent to be killed, the watchdog replays the undo
 * list once the restart grace window is over; a new agent started before that would lose its
 * TUN and steering to it, so this waits it out (node/failure.ts).
 */
export async function stopAgent(a: LabProcess): Promise<void> {
  const dog = a.ctlSocket ? watchdogOf(statePathFor(a.ctlSocket)) : 0;
  const sup = a.ctlSocket ? readSupervisor(a.ctlSocket) : undefined;
  await stopProcess(a, 20_000);
  // a supervisor killed (or killed before its agent ended) leaves the agent: it goes the same way
  const agent = sup?.pid === a.pid && sup.agentPid > 0 ? sup.agentPid : 0;
  const agentStart = agent > 0 ? procStartTime(agent) : undefined;
  if (agentStart !== undefined) await stopProcess({ pid: agent, startTime: agentStart }, 20_000);
  if (a.ctlSocket) removeSupervisorFile(a.ctlSocket);
  await waitGone(dog);
}

/** A stopped agent's control socket and saved state: the next start begins afresh. */
export function forgetAgentFiles(ctlSocket: string): void {
  rmSync(ctlSocket, { force: true });
  rmSync(statePathFor(ctlSocket), { force: true });
}

/** Waits out a fail-open watchdog (0: none) for at most the restart grace window and then some. */
export async function waitGone(dog: number): Promise<void> {
  const deadline = Date.now() + DEFAULT_RESTART_GRACE_MS + 10_000;
  while (dog > 0 && procStartTime(dog) !== undefined && Date.now() < deadline) await sleep(50);
}

export function watchdogOf(statePath: string): number {
  try {
    return (
      (JSON.parse(readFileSync(statePath, 'utf8')) as { watchdogPid?: number }).watchdogPid ?? 0
    );
  } catch {
    return 0;
  }
}

export async function waitAgent(a: LabProcess): Promise<void> {
  try {
    // 60 s: on a loaded 2-core machine tsx alone can take 20 s to start an agent; a dead agent
    // ends the wait at once (isAlive), so only a slow start waits this long.
    // a supervised agent that exited before it answered ends the wait too (its first restart)
    const first = () => (readSupervisor(a.ctlSocket!)?.restarts ?? 0) === 0;
    await waitForCtl(a.ctlSocket!, 60_000, () => isAlive(a) && first());
  } catch (err) {
    holdSupervisor(a); // no restarts behind a failed start

    throw new LabError(
      `kubetun on ${a.name}: ${(err as Error).message}; its log ${a.log}:\n${tail(a.log)}`,
    );
  }
}

/** Like procs.ts startInNs, for this process's own network namespace (a VM, the control plane). */
export function startOnHost(role: LabProcess['role'], name: string, argv: string[], log: string) {
  const fd = openSync(log, 'a');
  try {
    const logFrom = fstatSync(fd).size;
    const child = spawn(argv[0]!, argv.slice(1), { detached: true, stdio: ['ignore', fd, fd] });
    child.unref();
    if (child.pid === undefined) throw new LabError(`could not start ${argv.join(' ')}`);
    const startTime = procStartTime(child.pid) ?? '';
    const ns = '(this node)';
    return { role, name, ns, pid: child.pid, startTime, log, logFrom, argv } as LabProcess;
  } finally {
    closeSync(fd);
  }
}

/**
 * The interface that holds ip in this network namespace (Vagrant's private network: eth1); via:
 * where `ip` runs (another machine's, for a lab compared from here).
 */
export function findUplink(
  ip: string,
  via: (argv: string[]) => string[] = (a) => a,
): string | undefined {
  const links = JSON.parse(sh(via(['ip', '-j', '-4', 'addr', 'show']))) as {
    ifname: string;
    addr_info?: { local?: string }[];
  }[];
  return links.find((l) => (l.addr_info ?? []).some((a) => a.local === ip))?.ifname;
}

/** The topology's first `count` nodes (the Vagrantfile's KUBETUN_NODES). */
export function firstNodes(t: Topology, count: number): Topology {
  if (!Number.isInteger(count) || count < 1 || count > t.nodes.length)
    throw new LabError(`${t.file}: nodes: ${count} asked for, the topology has ${t.nodes.length}`);
  return { ...t, nodes: t.nodes.slice(0, count) };
}

export function findNode(t: Topology, name: string): LabNode {
  const n = t.nodes.find((x) => x.name === name);
  if (!n)
    throw new LabError(
      `${t.file}: node ${name}: no such node (known: ${t.nodes.map((x) => x.name).join(', ')})`,
    );
  return n;
}

/** What provision-node started without systemd, so --down (and a re-run) can stop it. */
export interface NodeRecord {
  version: 1;
  node: string;
  topologyFile: string;
  processes: LabProcess[];
}

export function nodeRecordFile(node: string): string {
  return join(LAB_DIR, `node-${node}.json`);
}

export function readRecord(node: string): NodeRecord | undefined {
  try {
    return JSON.parse(readFileSync(nodeRecordFile(node), 'utf8')) as NodeRecord;
  } catch {
    return undefined;
  }
}

export function writeRecord(r: NodeRecord): void {
  mkdirSync(LAB_DIR, { recursive: true });
  writeFileSync(nodeRecordFile(r.node), `${JSON.stringify(r, null, 2)}\n`);
}

export interface ProvisionOptions {
  at: NodeTarget;
  /** start kubetun (default), or only the network and the pod servers */
  dataPlane: 'kubetun' | 'none';
  /** the network part only (systemd's kubetun-node.service runs this at boot) */
  networkOnly?: boolean;
  say: Say;
}

/**
 * Makes this machine (or at.ns) the topology's node n, from scratch: whatever an earlier run
 * left is removed first, so provisioning again (vagrant provision) converges.
 */
export async function provisionNode(
  t: Topology,
  n: LabNode,
  o: ProvisionOptions,
): Promise<NodeRecord> {
  await unprovisionNode(t, n, o.at, o.say);
  provisionNetwork(t, n, o.at, o.say);
  markProvisioned(n.name);
  // No control plane runs beside a VM node (yet): the view its kubetun reads is what the
  // topology's Pods and the manifests give, computed here by the same store and controllers.
  await renderStaticView(t, VIEW_DIR);
  o.say(`view of the cluster in ${VIEW_DIR}`);
  const rec: NodeRecord = { version: 1, node: n.name, topologyFile: t.file, processes: [] };
  if (o.networkOnly) return rec;
  clearAgentOverrides(n.name);
  const remember = (p: LabProcess) => {
    rec.processes.push(p);
    writeRecord(rec);
  };
  o.say(`pod servers on ${n.name} (HTTP ${t.httpPort}, UDP ${t.udpPort})`);
  await startPodServers(t, n, remember);
  if (o.dataPlane === 'kubetun') {
    const a = startAgent(t, n, o.at, ctlSocketFor(n));
    remember(a);
    o.say(`kubetun on ${n.name}: ${a.argv.slice(1).join(' ')}`);
    await waitAgent(a);
    o.say(`kubetun on ${n.name} answers on ${a.ctlSocket}`);
  }
  return rec;
}

/**
 * Takes away what provisionNode made: its recorded processes (by PID and start time), anything
 * still running in the node's pod namespaces, the pod namespaces (veths, gateways and /32
 * routes go with them) and the routes to the other nodes. Safe when nothing is there.
 */
export async function unprovisionNode(
  t: Topology,
  n: LabNode,
  at: NodeTarget,
  say: Say,
): Promise<number> {
  const rec = readRecord(n.name);
  const procs = (rec?.processes ?? []).filter((p) => isAlive(p)).reverse();
  // kubetun first, so it removes its steering while the pod veths still exist.
  for (const p of procs) await (p.role === 'kubetun' ? stopAgent(p) : stopProcess(p));
  let stopped = procs.length;
  const present = new Set(listNetns());
  for (const p of n.pods.filter((x) => present.has(x.ns))) stopped += await stopNsPids(p.ns);
  const undo = planNodeUndo(t, n, at).filter(
    (c) => !(c[1] === 'netns' && c[2] === 'del' && !present.has(c[3]!)),
  );
  for (const cmd of undo) shTry(cmd);
  if (rec?.processes.some((p) => p.ctlSocket))
    forgetAgentFiles(rec.processes.find((p) => p.ctlSocket)!.ctlSocket!);
  rmSync(nodeRecordFile(n.name), { force: true });
  if (rec || stopped > 0)
    say(`${n.name}: removed the previous provisioning (${stopped} processes)`);
  return stopped;
}

async function stopNsPids(ns: string): Promise<number> {
  const pids = shTry(['ip', 'netns', 'pids', ns])
    .out.split('\n')
    .map((l) => Number(l.trim()))
    .filter((x) => Number.isInteger(x) && x > 0 && x !== process.pid);
  const procs = pids.flatMap((pid) => {
    const startTime = procStartTime(pid);
    return startTime === undefined ? [] : [{ pid, startTime }];
  });
  await Promise.all(procs.map((p) => stopProcess(p, 1000)));
  return procs.length;
}

// systemd (a VM): the network part as a oneshot unit, so a reboot (which empties /run/netns)
// rebuilds it; one unit per pod server; kubetun itself, reloaded by SIGHUP (`systemctl reload`
// after editing the shared manifests).

export interface UnitContext {
  /** the topology file and node count provision-node was given */
  topologyFile: string;
  nodes: number;
  /** node binary for ExecStart (default: this one) */
  node?: string;
}

export interface Unit {
  name: string;
  text: string;
}

const NET_UNIT = 'kubetun-node.service';
export const AGENT_UNIT = 'kubetun.service';
export const SYSTEMD_DIR = '/etc/systemd/system';

export function systemdUnits(t: Topology, n: LabNode, uplink: string, c: UnitContext): Unit[] {
  const node = c.node ?? process.execPath;
  const cli = [node, join(REPO, 'bin/kubetun.mjs'), 'lab', 'provision-node'];
  cli.push('--topology', c.topologyFile, '--node', n.name, '--nodes', String(c.nodes));
  cli.push('--uplink', uplink);
  const env = `Environment=KUBETUN_LAB_PREFIX=${LAB_PREFIX}`;
  const units: Unit[] = [
    unit(
      NET_UNIT,
      `kubetun lab node ${n.name}: pods, routes, sysctls`,
      [],
      [
        'Type=oneshot',
        'RemainAfterExit=yes',
        env,
        `ExecStart=${[...cli, '--network-only'].join(' ')}`,
        `ExecStop=${[...cli, '--down'].join(' ')}`,
      ],
    ),
  ];
  for (const p of n.pods) {
    const argv = ['/usr/bin/env', 'ip', 'netns', 'exec', p.ns, ...serverArgv(t, p, node)];
    units.push(
      unit(
        `kubetun-pod-${p.name}.service`,
        `lab pod ${p.name} (${p.ip}) echo server`,
        [NET_UNIT],
        [`ExecStart=${argv.join(' ')}`, 'Restart=always'],
      ),
    );
  }
  units.push(
    unit(
      AGENT_UNIT,
      `kubetun data plane on ${n.name}`,
      [NET_UNIT],
      [
        `ExecStart=${kubetunArgv(t, n, uplink, ctlSocketFor(n), node).join(' ')}`,
        'ExecReload=/bin/kill -HUP $MAINPID',
        // A crashed agent comes back well inside the restart grace window (node/failure.ts,
        // 5 s): it takes over the pinned maps and the TUN and every flow continues.
        'Restart=on-failure',
        'RestartSec=500ms',
        // stop and restart hand over (SIGUSR2): steering stays for the grace window, so
        // `systemctl restart` (an upgrade) keeps the flows; a stop with nobody coming back fails
        // the node open when the window ends, as a crash does.
        'KillSignal=SIGUSR2',
        // Only the agent gets the signal: its fail-open watchdog (its own session) must outlive
        // it for the grace window and then undo the steering if no agent took over.
        'KillMode=process',
      ],
    ),
  );
  return units;
}

function unit(name: string, what: string, needs: string[], service: string[]): Unit {
  const deps = needs.flatMap((u) => [`Requires=${u}`, `After=${u}`, `PartOf=${u}`]);
  const text = [
    '# Written by `kubetun lab provision-node --systemd`; provisioning again rewrites it.',
    '[Unit]',
    `Description=${what}`,
    'After=network-online.target',
    'Wants=network-online.target',
    ...deps,
    '',
    '[Service]',
    ...service,
    '',
    '[Install]',
    'WantedBy=multi-user.target',
    '',
  ].join('\n');
  return { name, text };
}

/** Writes and (re)starts the units; returns once kubetun answers on its control socket. */
export async function installSystemd(units: Unit[], n: LabNode, say: Say, dir = SYSTEMD_DIR) {
  const names = units.map((u) => u.name);
  // Generous deadlines: under software emulation (a TCG VM, docs/vagrant.md) systemctl takes
  // tens of seconds and the agent's first start minutes; active() still ends the wait early.
  shTry(['systemctl', 'stop', ...[...names].reverse()], 120_000);
  for (const u of units) writeFileSync(join(dir, u.name), u.text);
  // kubetun as provisioned: no flags or crash hold of `--agent` left (the reload takes it in)
  clearAgentOverrides(n.name);
  say(`systemd units in ${dir}: ${names.join(', ')}`);
  sh(['systemctl', 'daemon-reload'], { timeoutMs: 120_000 });
  sh(['systemctl', 'enable', ...names], { timeoutMs: 120_000 });
  sh(['systemctl', 'start', ...names], { timeoutMs: 300_000 });
  await waitUnitAgent(n, say);
}

export const unitActive = () => shTry(['systemctl', 'is-active', '--quiet', AGENT_UNIT]).ok;

export async function waitUnitAgent(n: LabNode, say: Say): Promise<void> {
  const sock = ctlSocketFor(n);
  try {
    // until its first sync: an agent whose sync outlived its wait steers traffic into empty
    // maps (under emulation that took minutes, and lab compare --vms saw the SYN-ACKs of a
    // connection retransmitted while node2's maps were still being loaded)
    await waitForCtl(sock, 900_000, unitActive, (st) => st.synced === true);
  } catch (err) {
    const log = shTry(['journalctl', '-u', AGENT_UNIT, '-n', '20', '--no-pager']).out;
    throw new LabError(`${AGENT_UNIT}: ${(err as Error).message}\n${log}`);
  }
  say(`kubetun on ${n.name} answers on ${sock}`);
}

// What `provision-node --agent` changes about this node's kubetun beyond its provisioning, kept
// until the next provisioning: extra `kubetun run` flags (`lab agent restart NODE -- FLAGS`) and,
// under systemd, a drop-in that carries them and, after `--agent crash`, keeps the unit from
// restarting (node-agent.ts). Each provisioning stamps the node, so a rebuild is visible.

/** The drop-in of `--agent` (in /run: a reboot forgets it, as it forgets the node's pods). */
export const AGENT_DROPIN = `/run/systemd/system/${AGENT_UNIT}.d/50-kubetun-lab-agent.conf`;

const agentFlagsFile = (node: string) => join(LAB_DIR, `agent-${node}.json`);
const provisionedFile = (node: string) => join(LAB_DIR, `provisioned-${node}`);

/** The extra `kubetun run` flags this node's kubetun runs with ([] as provisioned). */
export function readAgentFlags(node: string): string[] {
  try {
    const f = (JSON.parse(readFileSync(agentFlagsFile(node), 'utf8')) as { flags?: unknown }).flags;
    return Array.isArray(f) ? f.map(String) : [];
  } catch {
    return [];
  }
}

export function writeAgentFlags(node: string, flags: string[]): void {
  mkdirSync(LAB_DIR, { recursive: true });
  writeFileSync(agentFlagsFile(node), `${JSON.stringify({ flags })}\n`);
}

/** Back to kubetun as provisioned: no extra flags, no drop-in (the caller reloads systemd). */
export function clearAgentOverrides(node: string): void {
  rmSync(agentFlagsFile(node), { force: true });
  rmSync(AGENT_DROPIN, { force: true });
}

function markProvisioned(node: string): void {
  mkdirSync(LAB_DIR, { recursive: true });
  writeFileSync(provisionedFile(node), `${new Date().toISOString()}\n`);
}

/** When this node was last provisioned (at boot too: kubetun-node.service); '' if never. */
export function provisionedAt(node: string): string {
  try {
    return readFileSync(provisionedFile(node), 'utf8').trim();
  } catch {
    return '';
  }
}

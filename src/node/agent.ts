// The per-node agent behind `kubetun run`, in the node's network namespace:
//
//   manifests ─▶ resolve ─▶ dpLoadServices(maps)        (a bad manifest stops us before we
//   leftovers of a crashed run: state file, stale filters   touch the node)
//   TUN open + packet loop (reading before any redirect points at it)
//   watchdog + state file, then steering (steering.ts), each change recorded for undo first
//   control socket (the ready signal), conntrack GC, pod interface rescan
//   SIGTERM/SIGINT ─▶ stop(): socket closed, steering undone last-first, TUN closed
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { createDatapath, type Datapath } from '../datapath/datapath.ts';
import { dpLoadServices } from '../datapath/load.ts';
import { loadManifests, resolveServicePorts } from '../manifests/index.ts';
import type { ResolvedServicePort } from '../model.ts';
import { TunDevice } from '../tun/tun.ts';
import { CtlServer, ctlAlive } from './ctl.ts';
import { discoverPodIfaces } from './discover.ts';
import { recoverState, removeState, statePathFor, Watchdog, writeState } from './failure.ts';
import { agentTable, inspectAnswer, reasonTable } from './inspect.ts';
import { AGENT_PACKETS, createPacketLoop, type PacketLoop } from './loop.ts';
import { type AgentNet, type AgentOptions, validateOptions } from './options.ts';
import { Steering, sweepStaleFilters, UndoLog } from './steering.ts';

/** Conntrack GC: entry positions examined per tick (bounded work per timer callback). */
const CT_GC_BATCH = 65536;
const CT_GC_INTERVAL_MS = 1000;

function loadPorts(opts: AgentOptions): ResolvedServicePort[] {
  return resolveServicePorts(loadManifests(opts.manifests), { nodeName: opts.nodeName });
}

function countServices(ports: readonly ResolvedServicePort[]): number {
  return new Set(ports.map((p) => `${p.service.namespace}/${p.service.name}`)).size;
}

/** Node work done before steering: leftovers of a crashed run, then the TUN and its reader. */
async function prepareNode(opts: AgentOptions, log: Logger): Promise<TunDevice> {
  if (await ctlAlive(opts.ctlSocket)) {
    throw new Error(`an agent already answers on ${opts.ctlSocket}; not starting a second one`);
  }
  const statePath = statePathFor(opts.ctlSocket);
  mkdirSync(dirname(statePath), { recursive: true });
  const recovered = await recoverState(statePath);
  const swept = sweepStaleFilters();
  if (recovered || swept.length > 0)
    log.warn({ recovered, swept }, 'cleaned up after a previous run');
  return TunDevice.open(opts.tun, { batch: opts.batch, up: true });
}

export class NodeAgent {
  readonly started = Date.now();
  readonly undo = new UndoLog();
  readonly steering: Steering;
  readonly loop: PacketLoop;
  readonly watchdog: Watchdog | undefined;
  private readonly statePath: string;
  private readonly t0 = Date.now() - performance.now(); // wall-clock origin, monotonic progress
  private ctl: CtlServer | undefined;
  private timers: NodeJS.Timeout[] = [];
  private stopping: Promise<void> | undefined;

  private constructor(
    readonly opts: AgentOptions,
    readonly net: AgentNet,
    readonly log: Logger,
    readonly dp: Datapath,
    readonly tun: TunDevice,
    private ports: ResolvedServicePort[],
  ) {
    this.statePath = statePathFor(opts.ctlSocket);
    this.loop = createPacketLoop(dp, tun, net.serviceCidr, opts.batch, () => this.nowMs());
    tun.onBatch(this.loop.handle);
    tun.onError((err) => log.error({ err: err.message }, 'TUN read failed; no more packets'));
    this.watchdog = opts.watchdog ? Watchdog.start() : undefined;
    this.undo.onAdd((argv) => {
      this.watchdog?.add(argv);
      const s = { pid: process.pid, watchdogPid: this.watchdog?.pid ?? 0, tun: tun.name };
      writeState(this.statePath, { ...s, undo: this.undo.steps });
    });
    this.undo.add(['rm', '-f', this.statePath]); // first in, so the last thing any undo does
    const { uplink, nodeIp, podCidr, serviceCidr } = opts;
    const cfg = { tun: tun.name, uplink, nodeIp, podCidr, serviceCidr };
    this.steering = new Steering(cfg, this.undo, log);
  }

  static async start(opts: AgentOptions, log: Logger): Promise<NodeAgent> {
    const net = validateOptions(opts);
    const ports = loadPorts(opts);
    const dp = createDatapath();
    dpLoadServices(dp, ports, { nodeName: opts.nodeName });
    const tun = await prepareNode(opts, log);
    let agent: NodeAgent;
    try {
      agent = new NodeAgent(opts, net, log, dp, tun, ports);
    } catch (err) {
      tun.close();
      throw err;
    }
    try {
      agent.steering.install(opts.podIfaces ?? discoverPodIfaces(net.podCidr, agent.exclude()));
      log.info({ commands: agent.steering.applied }, 'steering installed');
      agent.ctl = await CtlServer.listen(opts.ctlSocket, (req) => agent.answer(req));
    } catch (err) {
      await agent.stop(`startup failed: ${(err as Error).message}`);
      throw err;
    }
    agent.startTimers();
    const { node: _node, ...summary } = agent.status(); // pino's base already names the node
    log.info({ ...summary, sysctls: agent.steering.sysctls }, 'kubetun node agent ready');
    return agent;
  }

  nowMs(): number {
    return this.t0 + performance.now();
  }

  status() {
    return {
      node: this.opts.nodeName,
      pid: process.pid,
      uptimeSec: Math.floor((Date.now() - this.started) / 1000),
      packets: this.loop.counters[AGENT_PACKETS],
      services: countServices(this.ports),
      servicePorts: this.ports.length,
      tun: this.tun.name,
      uplink: this.opts.uplink,
      podIfaces: [...this.steering.hooked].sort(),
      watchdogPid: this.watchdog?.pid ?? 0,
    };
  }

  counters() {
    return {
      counters: reasonTable(this.dp),
      agent: agentTable(this.loop.counters),
      tun: this.tun.stats,
    };
  }

  /** Reloads the manifests; on error the last good state stays in force and the error is thrown. */
  reload(): { services: number; servicePorts: number } {
    const ports = loadPorts(this.opts);
    dpLoadServices(this.dp, ports, { nodeName: this.opts.nodeName });
    this.ports = ports;
    return { services: countServices(ports), servicePorts: ports.length };
  }

  answer(req: Record<string, unknown>): unknown {
    switch (req.cmd) {
      case 'status':
        return this.status();
      case 'counters':
        return this.counters();
      case 'ct':
      case 'ct-count':
      case 'ct-flush':
      case 'svc':
        return inspectAnswer(this.dp, req, Math.floor(this.nowMs() / 1000), this.ports);
      case 'reload':
        return this.reload();
      default:
        return {
          error: `unknown cmd ${JSON.stringify(req.cmd)}; try status, counters, ct, ct-count, ct-flush, svc, reload`,
        };
    }
  }

  /** Idempotent: the first call does the work, later calls wait for it. */
  stop(reason: string): Promise<void> {
    this.stopping ??= (async () => {
      for (const t of this.timers) clearInterval(t);
      await this.ctl?.close();
      const undoFailures = this.undo.unwind();
      this.watchdog?.disarm();
      this.tun.close();
      removeState(this.statePath);
      this.log.info({ reason, undoFailures, ...this.counters() }, 'stopped');
    })();
    return this.stopping;
  }

  private exclude(): string[] {
    return [this.opts.uplink, this.tun.name, 'lo'];
  }

  private startTimers(): void {
    let cursor = 0;
    const gc = setInterval(() => {
      cursor = this.dp.ct.scan(cursor, CT_GC_BATCH, Math.floor(this.nowMs() / 1000));
    }, CT_GC_INTERVAL_MS);
    this.timers.push(gc);
    // New pods (and their veths) can appear after startup: hook them as they show up.
    if (!this.opts.podIfaces && this.opts.rescanMs > 0) {
      this.timers.push(setInterval(() => this.rescan(), this.opts.rescanMs));
    }
    for (const t of this.timers) t.unref();
  }

  private rescan(): void {
    try {
      const now = discoverPodIfaces(this.net.podCidr, this.exclude());
      for (const dev of now) {
        if (this.steering.hooked.has(dev)) continue;
        this.steering.hookPod(dev);
        this.log.info({ dev }, 'new pod interface hooked');
      }
      for (const dev of this.steering.hooked)
        if (!now.includes(dev)) this.steering.hooked.delete(dev);
    } catch (err) {
      // e.g. a veth that vanished between listing and hooking: the next rescan sees the truth
      this.log.warn({ err: (err as Error).message }, 'pod interface rescan failed');
    }
  }
}

// The per-node agent behind `kubetun run`, in the node's network namespace:
//
//   manifests check (a bad manifest stops us before we touch the node)
//   control plane (src/control): manifests dir (hot reload) or Kubernetes API ─▶ Proxier ─▶
//     dpUpdateServices / dpLoadServices, UDP conntrack cleanup after syncs, metrics :10249,
//     health :10256; the first sync completes before any packet is steered to us
//   leftovers of a crashed run: state file, stale filters
//   TUN open + packet loop (reading before any redirect points at it)
//   watchdog + state file, then steering (steering.ts), each change recorded for undo first
//   control socket (the ready signal), conntrack GC, pod interface rescan
//   SIGTERM/SIGINT ─▶ stop(): socket closed, steering undone last-first, TUN closed
//
// Taking over after a crash (failure.ts, pin.ts): when a dead run's lease, pinned maps and TUN
// are there, the agent claims the lease, attaches to the maps and the persistent TUN and starts
// the packet loop FIRST — established flows continue on the dead run's conntrack — then starts
// the control plane (whose first sync rewrites the same ids, load.ts) and adopts the steering
// the dead run installed instead of installing it again (a re-install deletes and re-adds each
// filter: a reply in that gap would reach its client untranslated). SIGUSR2 stops for such a
// restart: everything stays for the grace window.
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
// types only: the control plane (prom-client, the manifests reader) is loaded by startControl,
// after a restarted agent's packet loop already forwards (~400 ms of imports under tsx)
import type { ControlPlane, ControlPlaneOptions } from '../control/control-plane.ts';
import { UserError } from '../errors.ts';
import type { DatapathConfig } from '../datapath/state/config.ts';
import { createDatapath, type Datapath } from '../datapath/state/datapath.ts';
import { Housekeeping } from '../housekeeping/housekeeping.ts';
import { type DpLoadOptions, DpLoader } from '../loader/load.ts';
import { dpTuneV8 } from '../datapath/tune.ts';
import type { ResolvedServicePort } from '../model.ts';
import { TunDevice, tunKernelStats } from '../tun/tun.ts';
import { shJson } from '../sh.ts';
import { CtlServer, ctlAlive } from './ctl.ts';
import {
  discoverPodIfaces,
  discoverPodsOnBridge,
  type IpAddrs,
  localAddrsFrom,
} from './discover.ts';
import {
  claimLease,
  createLease,
  leasePathFor,
  readHandover,
  recoverState,
  removeState,
  type SavedState,
  statePathFor,
  Watchdog,
  writeState,
} from './failure.ts';
import { schedulersFromMaps, type SweepReport, sweepStale } from './adopt.ts';
import { attachPinned, createPinned, pinPathFor } from './pin.ts';
import { agentTable, inspectAnswer, reasonTable, servicePortNames } from './inspect.ts';
import { MonitorHub } from './monitor.ts';
import { traceAnswer } from './trace.ts';
import { AGENT_PACKETS, createPacketLoop, type PacketLoop } from './loop.ts';
import { type AgentConfig, type AgentNet, clusterCidrText } from './options.ts';
import { HealthNodePorts, healthServices } from './health-nodeport.ts';
import { configzBody, type KpcView } from './kube-proxy-config.ts';
import { findKubeProxyRules, removeKubeProxyRules } from './kube-proxy-leftovers.ts';
import { ensurePrivateDir } from './private-dir.ts';
import {
  externalAddrs,
  POD_BLOCK,
  quietTun,
  Steering,
  sweepStaleFilters,
  UndoLog,
} from './steering.ts';
import { EndpointSteer } from './steer-endpoints.ts';

/** External IPs to steer and health-check node ports follow the synced services this often. */
const EXTERNAL_SYNC_MS = 1000;
/** how long start() waits for the first sync before steering traffic anyway */
const FIRST_SYNC_TIMEOUT_MS = 30_000;

async function startControl(
  opts: AgentConfig,
  net: AgentNet,
  dp: Datapath,
  loader: DpLoader,
  log: Logger,
  monitor: MonitorHub,
  steer: EndpointSteer,
  first: {
    /** new maps nothing reads yet: program the first load while it streams in (proxier.ts) */
    prefill?: boolean;
    /** a takeover's sweep, inside the first full sync that succeeds */
    afterFull?: (ports: ResolvedServicePort[]) => Promise<void>;
  },
) {
  let afterFirstFull = first.afterFull;
  const [{ startControlPlane }, { datapathSync }] = await Promise.all([
    import('../control/control-plane.ts'),
    import('../control/datapath-sync.ts'),
  ]);
  const sync = datapathSync(dp, loadOptions(opts, net), loader);
  let source: ControlPlaneOptions['source'];
  if (opts.kubeconfig || opts.inCluster) {
    const { loadKubeConfig } = await import('./cluster-config.ts');
    source = { kubeConfig: loadKubeConfig(opts.kubeconfig) };
  } else {
    // A bad manifest at startup stops us before we touch the node (the first load is all or
    // nothing, and startControlPlane throws its refusal); later ones are refused one object at
    // a time (each keeps its last good version). The networks let the readers play the API
    // server's part: ClusterIPs from the service CIDR, no external IP over a Pod's. The reading
    // runs in the manifest worker: when taking over, the packet loop already runs on this thread.
    const cidrs = [opts.serviceCidr, ...(opts.serviceCidrV6 ? [opts.serviceCidrV6] : [])];
    const parse = { serviceCidr: cidrs.join(','), clusterCidr: clusterCidrText(opts) };
    source = { dir: opts.manifests, pollIntervalMs: 1000, parse, worker: true, strictStart: true };
  }
  const cp = await startControlPlane({
    source,
    prefill: first.prefill,
    // the endpoint steering follows first: a new endpoint's replies are steered before the
    // maps send it anything (steer-endpoints.ts)
    // (its recount in steps, and tc not waited on: the packet loop's thread)
    // (afterFirstFull, a takeover's sweep, inside the first full sync that succeeds: the runner
    // starts no other sync, so no write lands in the maps while the sweep compares them)
    program: async (req) => {
      await steer.sync(req);
      const ok = await sync.program(req);
      const after = afterFirstFull;
      if (after && req.full && ok !== false) {
        afterFirstFull = undefined;
        await after(req.tracker.resolveAll());
      }
      return ok;
    },
    cleanupConntrack: sync.cleanupConntrack,
    // the TUN's kernel-side drops beside the datapath's own (tun.ts kernelStats), and the
    // event ring's figures (monitor.ts)
    datapathStats: () => ({
      ...sync.stats(),
      tunKernelDrops: tunDrops(opts.tun),
      monitorEvents: monitor.emitted,
      monitorLost: monitor.lost,
      monitorStreams: monitor.open,
    }),
    nodeName: opts.nodeName,
    syncPeriodMs: opts.syncPeriod,
    minSyncPeriodMs: opts.minSyncPeriod,
    metricsBind: opts.metricsBindAddress,
    healthzBind: opts.healthzBindAddress,
    configz: () => configzBody(configView(opts, net, dp)),
    log,
  });
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((res) => {
    timer = setTimeout(() => res(false), FIRST_SYNC_TIMEOUT_MS);
  });
  const ok = await Promise.race([cp.firstSync.then(() => true), timeout]);
  clearTimeout(timer);
  if (!ok) log.warn({ ms: FIRST_SYNC_TIMEOUT_MS }, 'no successful sync yet; starting anyway');
  return { cp };
}

/** How the loader programs this node's services (one place: the sync and the takeover sweep). */
function loadOptions(opts: AgentConfig, net: AgentNet): DpLoadOptions {
  return { nodeName: opts.nodeName, nodeZone: opts.nodeZone, defaultScheduler: net.scheduler };
}

/** The TUN's kernel-side drops, by metric direction (sysfs; the device may not exist yet). */
function tunDrops(tun: string): Record<'to_agent' | 'from_agent', number> {
  const k = tunKernelStats(tun);
  return { to_agent: k.txDropped, from_agent: k.rxDropped };
}

/** The running settings in the shape /configz serves (kube-proxy-config.ts). */
function configView(opts: AgentConfig, net: AgentNet, dp: Datapath): KpcView {
  const bind = (b: { host: string; port: number } | null) => (b ? `${b.host}:${b.port}` : '');
  const c = dp.cfg;
  return {
    nodeName: opts.nodeName,
    clusterCidr: clusterCidrText(opts),
    healthzBindAddress: bind(opts.healthzBindAddress),
    metricsBindAddress: bind(opts.metricsBindAddress),
    syncPeriodMs: opts.syncPeriod,
    minSyncPeriodMs: opts.minSyncPeriod,
    scheduler: opts.scheduler,
    kubeconfig: opts.kubeconfig,
    detectLocalMode: net.local.mode,
    bridgeInterface: opts.podBridgeInterface ?? '',
    interfaceNamePrefix: opts.podInterfaceNamePrefix ?? '',
    ctMax: c.ctCapacity,
    ctTcpEstablishedSec: c.ctTcpEstablished,
    ctTcpCloseWaitSec: c.ctTcpCloseWait,
    ctUdpSec: c.ctUdp,
    ctUdpStreamSec: c.ctUdpStream,
  };
}

function countServices(ports: readonly ResolvedServicePort[]): number {
  return new Set(ports.map((p) => `${p.service.namespace}/${p.service.name}`)).size;
}

/**
 * Two proxies on one node fight over every Service packet: with kube-proxy's rules present the
 * agent refuses to start, unless told to remove them (kube-proxy-leftovers.ts).
 */
function refuseBesideKubeProxy(opts: AgentConfig, log: Logger): void {
  const found = findKubeProxyRules();
  if (found.length === 0) return;
  if (!opts.cleanupKubeProxy) {
    throw new UserError(
      'KUBE_PROXY_PRESENT',
      `kube-proxy's rules are on this node (${found.join('; ')})`,
      {
        hint: 'stop kube-proxy, then run `kubetun cleanup --kube-proxy` (or start with --cleanup-kube-proxy)',
      },
    );
  }
  log.warn(
    { removed: removeKubeProxyRules() },
    "removed kube-proxy's rules (--cleanup-kube-proxy)",
  );
}

/** Leftovers of a crashed run that is not taken over (before anything new is pinned). */
async function cleanupPrevious(opts: AgentConfig, log: Logger): Promise<void> {
  refuseBesideKubeProxy(opts, log);
  const statePath = statePathFor(opts.ctlSocket);
  const recovered = await recoverState(statePath);
  if (recovered?.refused) {
    const why = recovered.refused;
    log.warn({ statePath, why }, 'state file not trusted: its undo commands were not run');
  }
  const swept = sweepStaleFilters();
  if ((recovered && !recovered.refused) || swept.length > 0)
    log.warn({ recovered, swept }, 'cleaned up after a previous run');
}

/**
 * The TUN, persistent when restarts keep it (a dead run's device is re-attached by name), opened
 * (created) and brought up. `adopted`: the dead run's persistent TUN, up and
 * configured already (its IPv6 settings stay as that run's steering left them).
 */
function openTun(opts: AgentConfig, name: string, log: Logger, adopted = false): TunDevice {
  let tun: TunDevice;
  try {
    tun = TunDevice.open(name, {
      batch: opts.batch,
      txQueueLen: opts.tunQueue,
      offload: opts.offload,
      persist: graceMs(opts) > 0,
    });
  } catch (err) {
    throw tunDeviceError(err);
  }
  try {
    // up only once it has nothing of its own to send (steering.ts quietTun)
    if (!adopted) quietTun(tun.name, opts.procSysNet);
    tun.setUp(true);
  } catch (err) {
    if (!adopted) tun.setPersist(false); // a device made here goes with it
    tun.close();
    throw err;
  }
  const tx = tun.txPath;
  if (tx.uring) log.info('TUN writes: one io_uring_enter per batch');
  else log.warn({ why: tx.why }, 'TUN writes: one write() per packet');
  // A refused offload is not an error: the kernel segments and checksums for us instead.
  for (const r of tun.offload.refused) {
    log.warn(
      { offload: r.name, errno: r.errno },
      'TUN offload refused by the kernel; falling back',
    );
  }
  return tun;
}

/**
 * No /dev/net/tun, or one the container may not open, is the deployment's to fix: one line
 * (docs/cluster.md, Capabilities and mounts). Anything else stays what it was.
 */
function tunDeviceError(err: unknown): unknown {
  const e = err as NodeJS.ErrnoException;
  if (!e?.message?.startsWith('open /dev/net/tun')) return err;
  if (e.code === 'ENOENT')
    return new UserError(
      'TUN_DEVICE',
      'cannot open /dev/net/tun: ENOENT; in a container mount it by hostPath, type CharDevice (deploy/daemonset.yaml)',
    );
  if (e.code === 'EPERM' || e.code === 'EACCES')
    return new UserError(
      'TUN_DEVICE',
      `cannot open /dev/net/tun: ${e.code}; the container runtime's device rules refuse c 10:200 (runc 1.2.0-1.2.3 do): see "privileged fallback" in docs/cluster.md`,
    );
  return err;
}

/** The pod interfaces an undo list unbinds from the pods' block (Steering.hookPod). */
function hookedPods(undo: readonly string[][]): string[] {
  const block = String(POD_BLOCK);
  return undo
    .filter((a) => a[1] === 'qdisc' && a[2] === 'del' && a[5] === 'ingress_block' && a[6] === block)
    .map((a) => a[4]);
}

function graceMs(opts: AgentConfig): number {
  return opts.watchdog ? opts.restartGrace : 0;
}

/**
 * A dead run to take over: its state and its pinned maps, attached, if its lease, maps and TUN
 * fit this start. Maps of another layout (an upgrade across a layout change, another --ct-max)
 * are refused — one log line — and never read: the start goes on fresh (cleanupPrevious takes
 * the lease and undoes the dead run's steering; its flows are lost, nothing is corrupted).
 */
function findHandover(
  opts: AgentConfig,
  cfg: Partial<DatapathConfig>,
  log: Logger,
): { state: SavedState; dp: Datapath } | undefined {
  if (graceMs(opts) === 0) return undefined;
  const s = readHandover(statePathFor(opts.ctlSocket));
  if (!s || s.tun !== opts.tun || s.pin !== pinPathFor(opts.ctlSocket)) return undefined;
  if (!existsSync(`/sys/class/net/${s.tun}`)) return undefined;
  try {
    return { state: s, dp: attachPinned(s.pin, cfg).dp };
  } catch (err) {
    log.warn(
      { err: (err as Error).message },
      'not taking over: starting fresh, established flows are lost',
    );
    return undefined;
  }
}

export class NodeAgent {
  readonly started = Date.now();
  readonly undo = new UndoLog();
  readonly steering: Steering;
  readonly health: HealthNodePorts;
  /** with --node-ip-v6: the IPv6 services' health-check node ports on it (health-nodeport.ts) */
  readonly health6?: HealthNodePorts;
  readonly loop: PacketLoop;
  readonly watchdog: Watchdog | undefined;
  private readonly statePath: string;
  private readonly t0 = Date.now() - performance.now(); // wall-clock origin, monotonic progress
  private ctl: CtlServer | undefined;
  private timers: NodeJS.Timeout[] = [];
  private stopping: Promise<void> | undefined;
  /** set once the control plane runs (after the packet loop when taking over) */
  cp!: ControlPlane;
  /** the first sync of the services into the maps is done (status: synced) */
  synced = false;
  /** monitor / tap streams of the datapath's event ring (monitor.ts) */
  readonly monitor: MonitorHub;
  /** ms from start() to the packet loop reading the TUN */
  readyToForwardMs = 0;
  /** ms from start() to the first batch of packets read (0: none yet) */
  firstBatchMs = 0;
  /** performance.now() when start() began (set by start) */
  startedAt = performance.now();
  /** what the takeover's sweep deleted (adopt.ts), if it ran */
  sweep: SweepReport | undefined;
  /** the dead run this one took over, if any */
  tookOver: SavedState | undefined;

  private constructor(
    readonly opts: AgentConfig,
    readonly net: AgentNet,
    readonly log: Logger,
    readonly dp: Datapath,
    readonly tun: TunDevice,
    handover: SavedState | undefined,
    monitor?: MonitorHub,
    endpoints = new EndpointSteer(),
  ) {
    this.statePath = statePathFor(opts.ctlSocket);
    this.monitor = monitor ?? new MonitorHub(dp, opts.nodeName);
    this.monitor.nameOf = (revNat, proto) => this.serviceName(revNat, proto);
    this.loop = createPacketLoop(dp, tun, net.serviceCidr, opts.batch, () => this.nowMs(), {
      vnet: tun.vnetHdr,
      serviceCidr6: net.serviceCidr6,
    });
    // the first batch read is timed (restart: the packets queued while no agent read come first)
    const handle = this.loop.handle;
    let first = true;
    tun.onBatch((buf, offs, lens, n) => {
      if (first) {
        first = false;
        this.firstBatchMs = performance.now() - this.startedAt;
      }
      handle(buf, offs, lens, n);
    });
    tun.onError((err) => log.error({ err: err.message }, 'TUN read failed; no more packets'));
    const grace = graceMs(opts);
    const lease = grace > 0 ? leasePathFor(this.statePath) : '';
    if (lease) createLease(lease);
    this.watchdog = opts.watchdog ? Watchdog.start(lease, grace) : undefined;
    const pin = grace > 0 ? pinPathFor(opts.ctlSocket) : undefined;
    // Each step goes to the watchdog at once and into the state file: once for the steps this
    // constructor adds (a takeover adopts the dead run's ~20 steps: a write each cost ~5-70 ms
    // of a restart's ready-to-forward at load ~10), then once per step.
    let batching = true;
    const save = () => {
      const s = { pid: process.pid, watchdogPid: this.watchdog?.pid ?? 0, tun: tun.name };
      writeState(this.statePath, { ...s, undo: this.undo.steps, lease, pin });
    };
    this.undo.onAdd((argv) => {
      this.watchdog?.add(argv);
      if (!batching) save();
    });
    this.undo.add(['rm', '-f', this.statePath]); // first in, so the last thing any undo does
    if (grace > 0) {
      // after the steering is gone: the device, the maps and the lease (not after a takeover)
      this.undo.add(['ip', 'link', 'delete', tun.name]);
      this.undo.add(['rm', '-f', pin!, lease]);
    }
    // the dead run's steering is ours now (its own state-file and lease steps are not)
    const ownSteps = new Set([this.statePath, pin, leasePathFor(this.statePath, handover?.pid)]);
    for (const argv of handover?.undo ?? []) {
      if (argv[0] === 'rm' && ownSteps.has(argv[2])) continue;
      if (argv[0] === 'ip' && argv[1] === 'link' && argv[2] === 'delete') continue;
      this.undo.add(argv);
    }
    batching = false;
    save();
    const { uplink, nodeIp, podCidr, serviceCidr, serviceCidrV6, podCidrV6, procSysNet } = opts;
    const snatPorts = { min: dp.cfg.snatPortMin, max: dp.cfg.snatPortMax };
    const cidrs = { serviceCidr, serviceCidrV6, podCidrV6 };
    const cfg = { tun: tun.name, uplink, nodeIp, podCidr, ...cidrs, snatPorts, procSysNet };
    // IPv6 NodePorts and masquerade: the address the datapath has (nodeIp6, from --node-ip-v6)
    const nat6 = dp.cfg.nodeIp6
      ? {
          nodeIp6: dp.cfg.nodeIp6,
          snatPorts6: { min: dp.cfg.snat6PortMin, max: dp.cfg.snat6PortMax },
        }
      : {};
    const steerCfg = { ...cfg, ...nat6, ...this.localSteering(), nodePorts: true };
    this.steering = new Steering(steerCfg, this.undo, log, endpoints);
    for (const dev of hookedPods(handover?.undo ?? [])) this.steering.hooked.add(dev);
    this.health = new HealthNodePorts(opts.nodeIp, log);
    if (opts.nodeIpV6) this.health6 = new HealthNodePorts(opts.nodeIpV6, log);
    this.tookOver = handover;
  }

  static async start(opts: AgentConfig, log: Logger): Promise<NodeAgent> {
    const t0 = performance.now();
    dpTuneV8(); // before the first packet: raises V8's inlining budget for dpProcess
    const net = opts.net;
    const cfg = opts.datapath; // NAT addresses, --ct-*, --vip-echo (options.ts)
    if (await ctlAlive(opts.ctlSocket)) {
      throw new Error(`an agent already answers on ${opts.ctlSocket}; not starting a second one`);
    }
    ensurePrivateDir(dirname(statePathFor(opts.ctlSocket))); // root-only whatever the umask
    const checked = performance.now();
    const handover = findHandover(opts, cfg, log);
    if (handover && claimLease(handover.state.lease!)) {
      const marks = { checks: checked - t0, attach: performance.now() - checked };
      return NodeAgent.takeOver(opts, handover, log, t0, marks);
    }
    await cleanupPrevious(opts, log);
    const pinned = graceMs(opts) > 0 ? createPinned(pinPathFor(opts.ctlSocket), cfg) : undefined;
    const dp = pinned?.dp ?? createDatapath(cfg);
    const loader = new DpLoader(dp); // the one writer of dp's service maps
    const monitor = new MonitorHub(dp, opts.nodeName); // monitor / tap streams (monitor.ts)
    const steer = new EndpointSteer(); // counts endpoints from the first sync on
    // the maps are this run's own and nothing is steered to them before the first sync (or
    // the start-up timeout: then a source still listing has its objects so far in the maps,
    // and the rest follows as it comes; nothing is ever deleted before the first sync)
    const { cp } = await startControl(opts, net, dp, loader, log, monitor, steer, {
      prefill: true,
    });
    let tun: TunDevice;
    let agent: NodeAgent;
    try {
      tun = openTun(opts, opts.tun, log);
    } catch (err) {
      await cp.stop();
      throw err;
    }
    try {
      agent = new NodeAgent(opts, net, log, dp, tun, undefined, monitor, steer);
      agent.cp = cp;
      void cp.firstSync.then(() => {
        agent.synced = true;
      });
      agent.startedAt = t0;
      agent.readyToForwardMs = performance.now() - t0;
    } catch (err) {
      tun.close();
      await cp.stop();
      throw err;
    }
    try {
      await agent.steering.install(
        opts.podIfaces ?? discoverPodIfaces(net.local, net.podCidr, agent.exclude()),
      );
      await agent.syncExternal();
      log.info({ commands: agent.steering.applied }, 'steering installed');
      agent.ctl = await CtlServer.listen(opts.ctlSocket, (req) => agent.answer(req));
    } catch (err) {
      await agent.stop(`startup failed: ${(err as Error).message}`);
      throw err;
    }
    agent.startTimers(loader);
    const { node: _node, ...summary } = agent.status(); // pino's base already names the node
    log.info({ ...summary, sysctls: agent.steering.sysctls }, 'kubetun node agent ready');
    return agent;
  }

  /**
   * A dead run's lease is ours: maps and TUN first, packets flowing, then the control plane;
   * the steering it installed is adopted as it is (see the header).
   */
  private static async takeOver(
    opts: AgentConfig,
    { state: handover, dp }: { state: SavedState; dp: Datapath },
    log: Logger,
    t0: number,
    marks: { checks: number; attach: number },
  ): Promise<NodeAgent> {
    let at = performance.now();
    const lap = () => Math.round((performance.now() - at + Number.EPSILON) * 10) / 10;
    const tun = openTun(opts, handover.tun, log, true);
    const tunMs = lap();
    at = performance.now();
    // rr/lc/maglev services pick from their first packet on, not from the first sync (adopt.ts)
    const schedulers = schedulersFromMaps(dp, Math.floor(Date.now() / 1000));
    const schedMs = lap();
    at = performance.now();
    const agent = new NodeAgent(opts, opts.net, log, dp, tun, handover);
    agent.startedAt = t0;
    agent.readyToForwardMs = performance.now() - t0;
    const round = (x: number) => Math.round(x * 10) / 10;
    log.info(
      {
        readyToForwardMs: round(agent.readyToForwardMs),
        // where the time went: socket and directory checks, state file + pinned-map attach,
        // TUN attach, scheduler tables, the agent (watchdog, state file, undo log, loop)
        phasesMs: {
          checks: round(marks.checks),
          attach: round(marks.attach),
          tun: tunMs,
          schedulers: schedMs,
          agent: lap(),
        },
        sinceProcessStartMs: Math.round(performance.now()),
        prevPid: handover.pid,
        flows: dp.ct.size,
        schedulers,
      },
      'took over the previous run: forwarding on its maps and TUN',
    );
    try {
      const loader = new DpLoader(dp);
      const steer = agent.steering.endpoints;
      // what went away while no agent ran, swept in steps inside the first good full sync
      // (without one nothing is known gone)
      const sweep = async (ports: ResolvedServicePort[]) => {
        try {
          agent.sweep = await sweepStale(dp, ports, loadOptions(opts, opts.net));
          log.info(
            { swept: agent.sweep },
            'entries of Services and endpoints gone while no agent ran',
          );
        } catch (err) {
          // the ports were just written: a refusal here is a bug, not a reason to fail the sync
          log.warn({ err: (err as Error).message }, 'takeover sweep failed; stale entries stay');
        }
      };
      const { cp } = await startControl(opts, opts.net, dp, loader, log, agent.monitor, steer, {
        afterFull: sweep,
      });
      agent.cp = cp;
      void cp.firstSync.then(() => {
        agent.synced = true;
      });
      // the dead run's endpoint tables steer until ours, built beside them, replace them; its
      // reply ruleset until ours replaces it in one transaction (a no-op unless it changed)
      await steer.rebuild();
      agent.steering.adopt();
      await agent.syncExternal();
      agent.ctl = await CtlServer.listen(opts.ctlSocket, (req) => agent.answer(req));
      agent.startTimers(loader);
    } catch (err) {
      await agent.stop(`startup failed: ${(err as Error).message}`);
      throw err;
    }
    const { node: _node, ...summary } = agent.status();
    log.info({ ...summary, sysctls: agent.steering.sysctls }, 'kubetun node agent ready');
    return agent;
  }

  nowMs(): number {
    return this.t0 + performance.now();
  }

  status() {
    const ports = this.ports();
    return {
      node: this.opts.nodeName,
      pid: process.pid,
      uptimeSec: Math.floor((Date.now() - this.started) / 1000),
      packets: this.loop.counters[AGENT_PACKETS],
      services: countServices(ports),
      servicePorts: ports.length,
      metrics: this.cp.metricsServer
        ? `${this.cp.metricsServer.host}:${this.cp.metricsServer.port}`
        : '',
      healthz: this.cp.healthServer
        ? `${this.cp.healthServer.host}:${this.cp.healthServer.port}`
        : '',
      tun: this.tun.name,
      uplink: this.opts.uplink,
      podIfaces: [...this.steering.hooked].sort(),
      watchdogPid: this.watchdog?.pid ?? 0,
      vipEcho: this.dp.cfg.vipEcho,
      monitorStreams: this.monitor.open,
      readyToForwardMs: Math.round(this.readyToForwardMs * 10) / 10,
      synced: this.synced,
      firstBatchMs: Math.round(this.firstBatchMs * 10) / 10,
      tookOverPid: this.tookOver?.pid ?? 0,
      swept: this.sweep,
    };
  }

  counters() {
    return {
      counters: reasonTable(this.dp),
      agent: agentTable(this.loop.counters),
      tun: this.tun.stats,
      // dropped by the kernel before we read them (tx) / after we wrote them (rx), sampled now
      tunKernel: this.tun.kernelStats(),
      offload: this.tun.offloadCounters(),
      ctInvalid: this.dp.ctInvalid,
    };
  }

  /** The applied service ports (the control plane's tracker). */
  ports(): ResolvedServicePort[] {
    return this.cp.proxier.tracker.resolveAll();
  }

  /**
   * Re-reads the manifests now (they are also watched) and asks for a full sync; each refused
   * object is reported (file, object, field) and keeps its last good version.
   */
  async reload(): Promise<{ services: number; servicePorts: number; error?: string }> {
    const src = this.cp.source;
    let error: string | undefined;
    // Refused objects keep their previous version; everything else is applied and synced now.
    if ('reload' in src && !(await src.reload())) error = src.lastError?.message;
    this.cp.proxier.runner.requestFullSync();
    if (!(await this.cp.syncNow())) {
      error = [error, 'sync failed; the previous services stay'].filter(Boolean).join('\n');
    }
    const ports = this.ports();
    return { services: countServices(ports), servicePorts: ports.length, error };
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
        return inspectAnswer(this.dp, req, Math.floor(this.nowMs() / 1000), this.ports());
      case 'reload':
        return this.reload();
      case 'monitor':
        return this.monitor.request(req);
      case 'trace':
        return traceAnswer(this.dp, req, this.nowMs(), this.ports(), {
          node: this.opts.nodeName,
          zone: this.opts.nodeZone,
        });
      default:
        return {
          error: `unknown cmd ${JSON.stringify(req.cmd)}; try status, counters, ct, ct-count, ct-flush, svc, reload, monitor, trace`,
        };
    }
  }

  private names: { at: number; map: Map<string, string> } = { at: -1, map: new Map() };

  /** "ns/name:port" of a revNat id (monitor events); the name table is rebuilt once a second. */
  private serviceName(revNat: number, proto: number): string | undefined {
    const now = Date.now();
    if (now - this.names.at > 1000) this.names = { at: now, map: servicePortNames(this.ports()) };
    const i = this.dp.revnat.lookup(revNat);
    if (i < 0) return undefined;
    const vip = this.dp.revnat.vip(i) >>> 0;
    const port = this.dp.revnat.port(i);
    return this.names.map.get(`${vip}:${port}:${proto}`);
  }

  /**
   * Idempotent: the first call does the work, later calls wait for it. `forRestart`: leave the
   * steering, maps, TUN and lease for the next agent (the watchdog fails the node open if none
   * comes within the grace window); without a grace window it is a clean stop.
   */
  stop(reason: string, forRestart = false): Promise<void> {
    this.stopping ??= (async () => {
      for (const t of this.timers) clearInterval(t);
      this.monitor.stopAll();
      await this.ctl?.close();
      await this.health.close();
      await this.health6?.close();
      await this.cp?.stop();
      if (forRestart && graceMs(this.opts) > 0) {
        this.tun.close(); // persistent: the device stays, its packets drop until a reader comes
        this.log.info({ reason, ...this.counters() }, 'stopped for a restart; steering kept');
        return;
      }
      const undoFailures = this.undo.unwind();
      this.watchdog?.disarm();
      this.tun.close();
      removeState(this.statePath);
      this.log.info({ reason, undoFailures, ...this.counters() }, 'stopped');
    })();
    return this.stopping;
  }

  /** the sync (runner.syncs) the external addresses last followed */
  private externalFor = -1;

  /**
   * externalIPs / LoadBalancer IPs steered, health-check node ports served (nodeport.ts), once
   * per sync: the timer asks every second, and reading every service port each time
   * held the packet loop for tens of ms at 10k Services on a loaded machine (issue 18).
   */
  async syncExternal(): Promise<void> {
    const synced = this.cp.proxier.runner.syncs;
    if (synced === this.externalFor) return;
    try {
      const ports = this.ports();
      this.steering.setExternalAddrs(externalAddrs(ports));
      await this.health.sync(healthServices(ports, this.opts.nodeName, 'IPv4'));
      await this.health6?.sync(healthServices(ports, this.opts.nodeName, 'IPv6'));
      this.externalFor = synced;
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'external addresses not synced');
    }
  }

  private exclude(): string[] {
    return [this.opts.uplink, this.tun.name, 'lo'];
  }

  /**
   * The node's own addresses (with --node-ip and --node-ip-v6 among them) and whether its pods
   * are bridged: what steering's endpoint tables take (steering.ts, steer-replies.ts).
   */
  private localSteering(): { locals4: string[]; locals6: string[]; bridged: boolean } {
    const found = localAddrsFrom(shJson<IpAddrs>(['ip', '-j', 'addr', 'show']), [
      this.tun.name,
      'lo',
    ]);
    const v6 = this.opts.nodeIpV6 ? [this.opts.nodeIpV6] : [];
    return {
      locals4: [...new Set([this.opts.nodeIp, ...found.v4])],
      locals6: this.opts.serviceCidrV6 ? [...new Set([...v6, ...found.v6])] : [],
      bridged: discoverPodsOnBridge(this.net.local, this.net.podCidr, this.exclude()),
    };
  }

  private startTimers(loader: DpLoader): void {
    // conntrack, affinity and SNAT GC, connection recount: one entry point (housekeeping.ts);
    // the --ct-gc-* flags' settings in opts.gc (options.ts)
    const hk = new Housekeeping(this.dp, loader, this.opts.gc, this.nowMs(), this.log);
    this.every(hk.tickMs, 'housekeeping', () => hk.tick(this.nowMs()));
    // External IPs to steer and health-check node ports follow the synced services.
    this.every(EXTERNAL_SYNC_MS, 'external sync', () => void this.syncExternal());
    // New pods (and their veths) can appear after startup: hook them as they show up.
    if (!this.opts.podIfaces && this.opts.podRescanMs > 0) {
      this.every(this.opts.podRescanMs, 'pod interface rescan', () => this.rescan());
    }
    for (const t of this.timers) t.unref();
  }

  /**
   * A periodic maintenance task. A throw in a timer callback would end the process and, with
   * it, every steered flow (fail-open removes the VIPs): a failed tick is logged instead, and
   * the next tick tries again.
   */
  private every(ms: number, what: string, fn: () => void): void {
    const t = setInterval(() => {
      try {
        fn();
      } catch (err) {
        this.log.error({ err: (err as Error).message, task: what }, 'periodic task failed');
      }
    }, ms);
    this.timers.push(t);
  }

  private rescan(): void {
    try {
      const now = discoverPodIfaces(this.net.local, this.net.podCidr, this.exclude());
      for (const dev of now) {
        if (this.steering.hooked.has(dev)) continue;
        if (this.steering.hookPod(dev)) this.log.info({ dev }, 'new pod interface hooked');
      }
      for (const dev of this.steering.hooked)
        if (!now.includes(dev)) this.steering.hooked.delete(dev);
    } catch (err) {
      // e.g. a veth that vanished between listing and hooking: the next rescan sees the truth
      this.log.warn({ err: (err as Error).message }, 'pod interface rescan failed');
    }
  }
}

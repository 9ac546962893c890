// The lab's kubelet, one per node: runs the Pods bound to its node and reports their status.
//
//   Pod bound here ─▶ sandbox: network namespace + veth + IP from the node's pod CIDR
//                     (plan.ts planPod, the provisioning code the VM lab uses), resolv.conf
//                  ─▶ the server for its image (images.ts) on the declared ports
//                  ─▶ Running; Ready = no readiness probe, or the probe's result (probes.ts)
//   deletionTimestamp set ─▶ Terminating: preStop (sleep / exec) first, then SIGTERM, SIGKILL
//                     when the grace period runs out, sandbox removed, IP released, then the
//                     Pod object is removed (host.gone) — the kubelet's graceful path.
//
// The kubelet never writes the store itself: it tells its host (the lab control plane) the
// Pod's new status, as a kubelet PATCHes pods/status. Sandboxes are created synchronously (a
// dozen `ip` commands) and everything slow — waiting for the server, probes, termination — is
// asynchronous, so one kubelet never stalls another.
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { type NodeTarget, planPod, planPodUndo } from '../lab/plan.ts';
import { isAlive, startInNs, stopProcess, waitForLog } from '../lab/procs.ts';
import { sh, shTry } from '../sh.ts';
import type { LabProcess } from '../lab/state.ts';
import { LAB_PREFIX, type LabNode, type LabPod, podAddress6 } from '../lab/topology.ts';
import { serverFor } from './images.ts';
import { PodIpam } from './ipam.ts';
import { execInPod, ProbeWorker } from './probes.ts';
import type { Pod, PodCondition, PodStatus } from './types.ts';

/** Annotation a Pod may carry to ask for its address (the lab's named pods keep theirs). */
export const POD_IP_ANNOTATION = 'kubetun.io/pod-ip';

export interface KubeletHost {
  /** the Pod's status changed */
  status(pod: Pod, status: PodStatus): void;
  /** the Pod finished terminating: remove the object */
  gone(pod: Pod): void;
  /** a sandbox namespace is about to exist (true) or is gone (false): for `lab down` */
  sandbox(ns: string, present: boolean): void;
  /** the Pod's log file */
  logFile(pod: Pod): string;
  /** writes (or removes, with undefined) the Pod's resolv.conf */
  resolvConf?(pod: Pod, ns: string, remove?: boolean): void;
  viewDir: string;
  say(msg: string): void;
}

interface PodRun {
  pod: Pod;
  sandbox: LabPod;
  proc?: LabProcess;
  probe?: ProbeWorker;
  running: boolean;
  ready: boolean;
  restarts: number;
  startedAt: string;
  terminating: boolean;
}

export function podKey(pod: Pod): string {
  return `${pod.metadata.namespace ?? 'default'}/${pod.metadata.name}`;
}

/** Network namespace and node-side veth of a Pod: the topology's names for short default-namespace
 * names (pod-a: kt-pod-a, veth-pod-a), else a hash (interface names hold 15 bytes). */
export function sandboxNames(pod: Pod): { ns: string; hostIf: string } {
  const ns = pod.metadata.namespace ?? 'default';
  const name = pod.metadata.name;
  if (ns === 'default' && name.length <= 10)
    return { ns: LAB_PREFIX + name, hostIf: `veth-${name}` };
  const h = createHash('sha256').update(`${ns}/${name}`).digest('hex').slice(0, 8);
  return { ns: `${LAB_PREFIX}${ns === 'default' ? '' : `${ns}.`}${name}`, hostIf: `veth${h}` };
}

export class Kubelet {
  private readonly runs = new Map<string, PodRun>();
  private readonly ipam: PodIpam;
  private closed = false;

  constructor(
    readonly node: LabNode,
    readonly at: NodeTarget,
    private readonly host: KubeletHost,
  ) {
    this.ipam = new PodIpam(node.podCidr);
  }

  /** Brings the node's Pods in line with `pods` (every Pod bound to this node). */
  sync(pods: Pod[]): void {
    if (this.closed) return;
    const want = new Map(pods.map((p) => [podKey(p), p]));
    for (const [key, run] of this.runs) {
      const pod = want.get(key);
      if (!pod || pod.metadata.uid !== run.pod.metadata.uid) {
        // deleted without grace (force) or replaced: no hooks, as kubectl delete --force
        if (!run.terminating) void this.terminate(run, 0);
        continue;
      }
      run.pod = pod;
      if (pod.metadata.deletionTimestamp && !run.terminating) void this.terminate(run);
    }
    // Pods that ask for their address first, so no dynamic address can take it from them
    const order = [...want].sort(
      (a, b) =>
        Number(!a[1].metadata.annotations?.[POD_IP_ANNOTATION]) -
        Number(!b[1].metadata.annotations?.[POD_IP_ANNOTATION]),
    );
    for (const [key, pod] of order) {
      if (this.runs.has(key) || pod.metadata.deletionTimestamp) {
        if (!this.runs.has(key) && pod.metadata.deletionTimestamp) this.host.gone(pod);
        continue;
      }
      this.start(pod);
    }
  }

  /** The Pods this kubelet runs (for status). */
  running(): number {
    return this.runs.size;
  }

  private start(pod: Pod): void {
    const ip = this.pickIp(pod);
    const names = sandboxNames(pod);
    if (!ip) {
      this.fail(pod, `no free address in ${this.node.podCidr}`);
      return;
    }
    const sandbox: LabPod = {
      name: pod.metadata.name,
      ip,
      // a dual-stack node: the IPv6 address at the IPv4 one's offset (topology.ts podAddress6)
      ip6: podAddress6(this.node, ip),
      node: this.node.name,
      podIf: 'eth0',
      ...names,
    };
    const run: PodRun = {
      pod,
      sandbox,
      running: false,
      ready: false,
      restarts: 0,
      startedAt: new Date().toISOString(),
      terminating: false,
    };
    this.runs.set(podKey(pod), run);
    try {
      this.host.sandbox(sandbox.ns, true);
      this.removeSandbox(sandbox);
      for (const cmd of planPod(this.node, sandbox, this.at)) sh(cmd);
      this.host.resolvConf?.(pod, sandbox.ns);
    } catch (err) {
      this.runs.delete(podKey(pod));
      this.removeSandbox(sandbox);
      this.ipam.release(ip);
      this.fail(pod, (err as Error).message);
      return;
    }
    this.report(run);
    void this.runServer(run);
  }

  /** The requested address (annotation or an earlier life of this Pod), else the next free one. */
  private pickIp(pod: Pod): string | undefined {
    const asked = pod.metadata.annotations?.[POD_IP_ANNOTATION] ?? pod.status?.podIP;
    if (asked && this.ipam.reserve(asked)) return asked;
    if (pod.metadata.annotations?.[POD_IP_ANNOTATION]) return undefined;
    return this.ipam.next();
  }

  private fail(pod: Pod, why: string): void {
    this.host.say(`kubelet ${this.node.name}: pod ${podKey(pod)}: ${why}`);
    this.host.status(pod, {
      phase: 'Failed',
      hostIP: this.node.ip,
      conditions: conditions(false, false),
      containerStatuses: [],
      ...({ message: why } as object),
    });
  }

  private async runServer(run: PodRun): Promise<void> {
    const plan = serverFor(run.pod, {
      podIP: run.sandbox.ip,
      podIP6: run.sandbox.ip6,
      viewDir: this.host.viewDir,
    });
    const log = this.host.logFile(run.pod);
    const proc = startInNs('server', run.pod.metadata.name, run.sandbox.ns, plan.argv, log);
    run.proc = proc;
    try {
      if (plan.readyLine) await waitForLog(proc, plan.readyLine, 15_000);
    } catch (err) {
      if (run.terminating) return;
      this.host.say(`kubelet ${this.node.name}: pod ${podKey(run.pod)}: ${(err as Error).message}`);
    }
    if (run.terminating || this.closed) return;
    run.running = isAlive(proc);
    const probe = run.pod.spec.containers[0]?.readinessProbe;
    if (probe && !run.probe) {
      run.probe = new ProbeWorker(probe, this.probeTarget(run), (ready) => {
        run.ready = ready;
        this.report(run);
      });
      run.probe.start();
    }
    run.ready = probe ? run.ready : run.running;
    this.report(run);
    void this.watchExit(run, proc);
  }

  /** restartPolicy Always: a server that exits on its own is started again (after 1 s). */
  private async watchExit(run: PodRun, proc: LabProcess): Promise<void> {
    while (isAlive(proc)) await sleep(500);
    if (run.terminating || this.closed || run.proc !== proc) return;
    run.running = false;
    run.ready = false;
    run.restarts++;
    this.report(run);
    await sleep(1000);
    if (!run.terminating && !this.closed) void this.runServer(run);
  }

  private probeTarget(run: PodRun) {
    return { pod: run.pod, podIP: run.sandbox.ip, podNs: run.sandbox.ns, at: this.at };
  }

  private report(run: PodRun): void {
    if (this.closed) return;
    const c = run.pod.spec.containers[0]!;
    const state = run.running
      ? { running: { startedAt: run.startedAt } }
      : { waiting: { reason: run.restarts > 0 ? 'CrashLoopBackOff' : 'ContainerCreating' } };
    this.host.status(run.pod, {
      phase: run.running || run.restarts > 0 ? 'Running' : 'Pending',
      hostIP: this.node.ip,
      podIP: run.sandbox.ip,
      podIPs: podIPs(run.sandbox),
      startTime: run.startedAt,
      conditions: conditions(true, run.ready && run.running),
      containerStatuses: [
        {
          name: c.name,
          image: c.image ?? '',
          ready: run.ready && run.running,
          started: run.running,
          restartCount: run.restarts,
          state,
        },
      ],
    });
  }

  /**
   * The graceful path: the grace period covers the preStop hook and the wait after SIGTERM;
   * what is left of it after the hook is the server's time to exit before SIGKILL.
   */
  private async terminate(run: PodRun, graceOverride?: number): Promise<void> {
    run.terminating = true;
    const pod = run.pod;
    const grace =
      graceOverride ??
      pod.metadata.deletionGracePeriodSeconds ??
      pod.spec.terminationGracePeriodSeconds ??
      30;
    const deadline = Date.now() + grace * 1000;
    const hook = pod.spec.containers[0]?.lifecycle?.preStop;
    if (hook && grace > 0 && run.running) {
      this.host.say(`kubelet ${this.node.name}: pod ${podKey(pod)}: preStop`);
      if (hook.sleep) await sleep(Math.min(hook.sleep.seconds * 1000, deadline - Date.now()));
      else if (hook.exec)
        await execInPod(run.sandbox.ns, hook.exec.command, Math.max(deadline - Date.now(), 1));
    }
    run.probe?.stop();
    if (run.proc) await stopProcess(run.proc, Math.max(deadline - Date.now(), 0));
    this.removeSandbox(run.sandbox);
    this.host.resolvConf?.(pod, run.sandbox.ns, true);
    this.host.sandbox(run.sandbox.ns, false);
    this.ipam.release(run.sandbox.ip);
    if (this.runs.get(podKey(pod)) === run) this.runs.delete(podKey(pod));
    if (!this.closed) this.host.gone(pod);
  }

  private removeSandbox(s: LabPod): void {
    for (const cmd of planPodUndo(s, this.at)) shTry(cmd);
  }

  /** The control plane is stopping (lab down): every Pod ends now, without hooks. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(
      [...this.runs.values()].map(async (run) => {
        run.terminating = true;
        run.probe?.stop();
        if (run.proc) await stopProcess(run.proc, 1000);
        this.removeSandbox(run.sandbox);
        this.host.resolvConf?.(run.pod, run.sandbox.ns, true);
        this.host.sandbox(run.sandbox.ns, false);
      }),
    );
    this.runs.clear();
  }
}

/** status.podIPs: the IPv4 address, then the IPv6 one on a dual-stack node. */
export function podIPs(p: Pick<LabPod, 'ip' | 'ip6'>): { ip: string }[] {
  return p.ip6 ? [{ ip: p.ip }, { ip: p.ip6 }] : [{ ip: p.ip }];
}

function conditions(scheduled: boolean, ready: boolean): PodCondition[] {
  const s = (b: boolean) => (b ? 'True' : 'False') as PodCondition['status'];
  return [
    { type: 'PodScheduled', status: s(scheduled) },
    { type: 'Initialized', status: 'True' },
    { type: 'ContainersReady', status: s(ready) },
    { type: 'Ready', status: s(ready) },
  ];
}

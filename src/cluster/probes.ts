// Readiness probes as the kubelet runs them: httpGet and tcpSocket from the node (the kubelet
// lives in the node's network namespace, not the Pod's), exec inside the Pod; each try bounded by
// timeoutSeconds. A worker turns tries into a result with the kubelet's thresholds: the result
// changes only after successThreshold successes (failureThreshold failures) in a row, and starts
// as failure — a Pod with a readiness probe is not Ready until the probe says so.
//
//   httpGet    curl http://<podIP>:<port><path>   success: 200 <= status < 400
//   tcpSocket  connect(<podIP>, <port>)           success: the connection opens
//   exec       the command, in the Pod's netns    success: exit status 0
import { execFile } from 'node:child_process';
import { onNode, type NodeTarget } from '../lab/plan.ts';
import type { Pod, Probe } from './types.ts';

export interface ProbeTarget {
  pod: Pod;
  podIP: string;
  /** the Pod's network namespace (exec probes and hooks run there) */
  podNs: string;
  /** where the kubelet runs: the node */
  at: NodeTarget;
}

/** One try of the probe; never rejects. */
export async function probeOnce(probe: Probe, t: ProbeTarget): Promise<boolean> {
  const timeout = (probe.timeoutSeconds ?? 1) * 1000;
  if (probe.httpGet) {
    const port = resolvePort(t.pod, probe.httpGet.port);
    if (port === undefined) return false;
    const url = `http://${t.podIP}:${port}${probe.httpGet.path ?? '/'}`;
    const argv = [
      'curl',
      '-s',
      '-o',
      '/dev/null',
      '-w',
      '%{http_code}',
      '-m',
      String(timeout / 1000),
      url,
    ];
    const r = await run(onNode(t.at, argv), timeout + 1000);
    const code = Number(r.out.trim());
    return code >= 200 && code < 400;
  }
  if (probe.tcpSocket) {
    const port = resolvePort(t.pod, probe.tcpSocket.port);
    if (port === undefined) return false;
    const script = `exec 3<>/dev/tcp/${t.podIP}/${port}`;
    return (await run(onNode(t.at, ['bash', '-c', script]), timeout)).ok;
  }
  if (probe.exec) return (await execInPod(t.podNs, probe.exec.command, timeout)).ok;
  return false;
}

/** Runs argv inside the Pod's network namespace (exec probes, preStop exec hooks). */
export function execInPod(podNs: string, argv: string[], timeoutMs: number) {
  return run(['ip', 'netns', 'exec', podNs, ...argv], timeoutMs);
}

/** A container port by number or by the name a container gives it. */
export function resolvePort(pod: Pod, port: number | string): number | undefined {
  if (typeof port === 'number') return port;
  if (/^[0-9]+$/.test(port)) return Number(port);
  for (const c of pod.spec.containers)
    for (const p of c.ports ?? []) if (p.name === port) return p.containerPort;
  return undefined;
}

function run(argv: string[], timeoutMs: number): Promise<{ ok: boolean; out: string }> {
  return new Promise((resolve) => {
    execFile(argv[0]!, argv.slice(1), { timeout: timeoutMs, encoding: 'utf8' }, (err, out) =>
      resolve({ ok: !err, out: out ?? '' }),
    );
  });
}

/**
 * Runs one probe every periodSeconds (after initialDelaySeconds) and reports each change of its
 * result. Tries never overlap: a slow try delays the next one, as the kubelet's worker does.
 */
export class ProbeWorker {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private result = false;
  private last: boolean | undefined;
  private run = 0;

  constructor(
    private readonly probe: Probe,
    private readonly target: ProbeTarget,
    private readonly onChange: (ready: boolean) => void,
  ) {}

  start(): void {
    this.schedule((this.probe.initialDelaySeconds ?? 0) * 1000);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  get ready(): boolean {
    return this.result;
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick(), ms);
  }

  private async tick(): Promise<void> {
    const ok = await probeOnce(this.probe, this.target);
    if (this.stopped) return;
    this.run = ok === this.last ? this.run + 1 : 1;
    this.last = ok;
    const threshold = ok ? (this.probe.successThreshold ?? 1) : (this.probe.failureThreshold ?? 3);
    if (this.run >= threshold && ok !== this.result) {
      this.result = ok;
      this.onChange(ok);
    }
    this.schedule((this.probe.periodSeconds ?? 10) * 1000);
  }
}

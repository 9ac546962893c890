// The measurements of bench-e2e, each run inside a lab namespace: new-connection latency
// (connlat.py), one-stream iperf3 throughput, and a bounded UDP flood into a sink (udpflood.c).
// Nothing here knows about the lab's prefix: callers pass namespace names.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { cpus, release } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);
export const HERE = fileURLToPath(new URL('.', import.meta.url));

/** Runs argv inside namespace ns and returns stdout; the error names the command and stderr. */
export async function nsRun(ns: string, argv: string[], timeoutMs = 120_000): Promise<string> {
  try {
    const r = await execFileP('ip', ['netns', 'exec', ns, ...argv], {
      timeout: timeoutMs,
      maxBuffer: 64 << 20,
    });
    return r.stdout;
  } catch (err) {
    const e = err as { stderr?: string; stdout?: string; message: string };
    const why = (e.stderr ?? '').trim() || (e.stdout ?? '').trim() || e.message;
    throw new Error(`in ${ns}: ${argv.join(' ')}: ${why.slice(0, 2000)}`);
  }
}

/** A background process in a namespace, with its output collected; stopped by PID. */
export class NsProcess {
  out = '';
  readonly child: ChildProcess;
  private readonly exited: Promise<number>;

  constructor(ns: string, argv: string[]) {
    this.child = spawn('ip', ['netns', 'exec', ns, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child.stdout?.on('data', (b: Buffer) => {
      this.out += b.toString();
    });
    this.child.stderr?.on('data', (b: Buffer) => {
      this.out += b.toString();
    });
    this.exited = new Promise((resolve) => this.child.once('exit', (code) => resolve(code ?? -1)));
  }

  async waitFor(re: RegExp, timeoutMs: number): Promise<void> {
    const end = Date.now() + timeoutMs;
    while (!re.test(this.out)) {
      if (this.child.exitCode !== null) throw new Error(`exited early: ${this.out.trim()}`);
      if (Date.now() > end) throw new Error(`not ready in ${timeoutMs} ms: ${this.out.trim()}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  wait(): Promise<number> {
    return this.exited;
  }

  /** SIGTERM (ip netns exec execs the command, so the PID is the command's own). */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGTERM');
    const t = setTimeout(() => this.child.kill('SIGKILL'), 2000);
    await this.exited;
    clearTimeout(t);
  }
}

export interface Latency {
  count: number;
  errors: number;
  /** failed connections by kind: timeout, ECONNRESET, ECONNREFUSED, short-response... */
  errorKinds: Record<string, number>;
  wallSec: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** COUNT connections to each target, alternating target by target; one Latency per target. */
export async function connLatency(
  ns: string,
  targets: readonly string[],
  count: number,
  warmup = 20,
): Promise<Latency[]> {
  const argv = ['python3', join(HERE, 'connlat.py'), `${count}`, `${warmup}`, ...targets];
  const out = await nsRun(ns, argv, 600_000);
  return JSON.parse(out.trim().split('\n').pop() ?? '[]') as Latency[];
}

export interface Throughput {
  gbps: number;
  retransmits: number;
  /** bytes the receiver got */
  bytes: number;
}

/** One TCP stream, client → server, for `seconds`; the receiver's figure. */
export async function iperf(ns: string, ip: string, port: number, seconds: number) {
  const argv = ['iperf3', '-c', ip, '-p', String(port), '-t', String(seconds), '-J'];
  const out = await nsRun(ns, argv, (seconds + 20) * 1000);
  const j = JSON.parse(out) as {
    error?: string;
    end?: {
      sum_received?: { bits_per_second: number; bytes: number };
      sum_sent?: { retransmits?: number };
    };
  };
  if (j.error || !j.end?.sum_received) throw new Error(`iperf3 to ${ip}:${port}: ${j.error}`);
  return {
    gbps: j.end.sum_received.bits_per_second / 1e9,
    retransmits: j.end.sum_sent?.retransmits ?? 0,
    bytes: j.end.sum_received.bytes,
  } satisfies Throughput;
}

/** Compiles udpflood.c once into dir; undefined (and the caller skips the flood) without cc. */
export async function buildFlood(dir: string): Promise<string | undefined> {
  const bin = join(dir, 'udpflood');
  try {
    await execFileP('cc', ['-O2', '-o', bin, join(HERE, 'udpflood.c')]);
    return bin;
  } catch {
    return undefined;
  }
}

export interface Flood {
  sent: number;
  sendSec: number;
  received: number;
  recvSec: number;
}

/** COUNT datagrams from ns to ip:port, received by a sink on sinkPort in sinkNs. */
export async function udpFlood(
  bin: string,
  from: { ns: string; ip: string; port: number },
  sink: { ns: string; port: number },
  count: number,
  during?: () => Promise<void>,
  pps = 0,
): Promise<Flood> {
  const s = new NsProcess(sink.ns, [bin, 'sink', String(sink.port), '1000']);
  try {
    await s.waitFor(/ready/, 5000);
    const argv = [bin, 'send', from.ip, String(from.port), String(count), '64', String(pps)];
    const out = await nsRun(from.ns, argv);
    const sent = JSON.parse(out.trim()) as { sent: number; sec: number };
    await during?.();
    await Promise.race([s.wait(), new Promise((r) => setTimeout(r, 5000))]);
    const line = s.out.split('\n').find((l) => l.startsWith('{"received"'));
    const got = line ? (JSON.parse(line) as { received: number; sec: number }) : undefined;
    return {
      sent: sent.sent,
      sendSec: sent.sec,
      received: got?.received ?? 0,
      recvSec: got?.sec ?? 0,
    };
  } finally {
    await s.stop();
  }
}

/** Busy CPU time of the whole machine (all cores: user, nice, system, irq, softirq), seconds. */
export function machineCpuSec(): number {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).map(Number);
  // cpu user nice system idle iowait irq softirq steal ...
  const [, user, nice, system, , , irq, softirq] = f as [string, ...number[]] as number[];
  return (user! + nice! + system! + irq! + softirq!) / 100; // USER_HZ
}

/**
 * CPU time (user + system) of processes by pid and all their descendants, seconds: a lab agent
 * is recorded by its supervisor's pid (src/lab/supervisor.ts), the agent is its child. A
 * process that vanished counts 0.
 */
export function processCpuSec(pids: number[]): number {
  const stats = new Map<number, { ppid: number; ticks: number }>();
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const st = readFileSync(`/proc/${e}/stat`, 'utf8');
      const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
      // fields 4 (ppid), 14 and 15 (utime, stime) of proc(5); f[0] is field 3
      stats.set(Number(e), { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) });
    } catch {}
  }
  const wanted = new Set(pids);
  let grew = true;
  while (grew) {
    grew = false;
    for (const [pid, s] of stats)
      if (!wanted.has(pid) && wanted.has(s.ppid)) {
        wanted.add(pid);
        grew = true;
      }
  }
  let ticks = 0;
  for (const pid of wanted) ticks += stats.get(pid)?.ticks ?? 0;
  return ticks / 100;
}

function firstLine(argv: string[]): Promise<string> {
  return execFileP(argv[0]!, argv.slice(1))
    .then((r) => (r.stdout || r.stderr).trim().split('\n')[0] ?? '')
    .catch(() => 'not installed');
}

/** What the figures were measured on. */
export async function machine(): Promise<Record<string, string>> {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  const model = /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1] ?? cpus()[0]?.model ?? '?';
  const mem = /^MemTotal:\s*(\d+)/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1];
  return {
    cpu: model.trim(),
    cores: String(cpus().length),
    memory: mem ? `${(Number(mem) / 1024 / 1024).toFixed(1)} GiB` : '?',
    kernel: release(),
    node: process.version,
    python: await firstLine(['python3', '--version']),
    iperf3: await firstLine(['iperf3', '--version']),
    iptables: await firstLine(['iptables', '--version']),
  };
}

// `kubetun lab compare`: every scenario in the kernel mode first (kube-proxy's rules, the
// reference), then in kubetun mode, on the same running lab (switched in place, never
// rebuilt); captures normalised and diffed per capture point. The lab is left in the mode it had.
// The lab is the namespace lab of this machine, or one whose nodes are VMs (labs.ts): every
// command below goes through sh.ts inNs, which the lab's route sends where its namespaces are.
import type { Progress } from '../lab.ts';
import type { KernelMode } from '../kube-proxy.ts';
import { readLabServices } from '../manifests.ts';
import { LabError } from '../error.ts';
import { UsageError } from '../../errors.ts';
import { inNs, shTry, withNsRoute } from '../../sh.ts';
import type { LabMode } from '../state.ts';
import { allPods, type Topology } from '../topology.ts';
import { type CapturePoint, capturePoints, startCaptures, stopCaptures } from './capture.ts';
import { type ClockOffset, nowUs } from './clock.ts';
import { diffRuns, type PointDiff } from './diff.ts';
import { type CompareLab, namespaceLab } from './labs.ts';
import { flowKey, NORMALISATIONS, type NPkt, normaliseRun } from './normalise.ts';
import type { Pkt } from './packets.ts';
import { type Attempt, clientAddress, MAX_TRIES, portBlock, type Scenario } from './scenarios.ts';
import { loadManifests, resolveServicePorts } from '../../manifests/index.ts';
import { type LabDrawing, labDrawing } from '../show/model.ts';
import type { CaptureMark } from '../show/svg.ts';

/** The deliberate difference every rejecting scenario shows (docs/compare.md). */
export const ICMP_ERROR_SOURCE =
  "ICMP errors: the kernel's REJECT answers from the node's address on the client's interface with TTL 64; kubetun answers from the VIP (as the reply to a VIP would) and its error is routed once by the node after the TUN, so TTL 63";

export type PlaneMode = 'kubetun' | KernelMode;

export interface ScenarioRun {
  mode: PlaneMode;
  /** how often it ran again because its capture showed a retransmission (retransmission()) */
  reruns?: number;
  attempts: Attempt[];
  /** the attempts whose packets are compared */
  kept: number[];
  backend?: string;
  points: { name: string; packets: NPkt[] }[];
  /** where it captured, for the report's drawing */
  captures?: CaptureMark[];
  /**
   * capture points that took packets of which none was the kept attempts' (pickPackets), with
   * how many: a report that shows "(no packet)" there says why (leftOut())
   */
  leftOut?: { point: string; captured: number }[];
}

export interface ScenarioResult {
  name: string;
  title: string;
  verdict: 'same' | 'different' | 'expected-difference';
  expected?: string;
  note?: string;
  runs: [ScenarioRun, ScenarioRun];
  points: PointDiff[];
  captures?: CaptureMark[];
}

export interface CompareReport {
  kernel: KernelMode;
  /** the lab compared on */
  lab?: string;
  /** the capturing machines' clocks minus this one's (a VM lab), measured before each plane */
  clocks?: Record<string, ClockOffset>;
  normalisations: readonly string[];
  results: ScenarioResult[];
  differences: number;
  /** the lab compared on (the report draws it with the capture points, and names addresses) */
  drawing?: LabDrawing;
}

export interface CompareOptions {
  kernel?: KernelMode;
  topology?: string;
  progress?: Progress;
  /** run kubetun first (its backends become the targets); default: the kernel first */
  kubetunFirst?: boolean;
  /** the lab to compare on; default: the namespace lab (brought up if it is not) */
  lab?: CompareLab;
}

export async function labCompare(
  scenarios: Scenario[],
  opts: CompareOptions = {},
): Promise<CompareReport> {
  const say = opts.progress ?? (() => {});
  const kernel = opts.kernel ?? 'nftables';
  const lab = opts.lab ?? (await namespaceLab({ topology: opts.topology, kernel, progress: say }));
  const refused = scenarios.flatMap((s) => {
    const why = lab.cannotRun(s);
    return why ? [`${s.name}: ${why}`] : [];
  });
  if (refused.length > 0)
    throw new UsageError(`not on ${lab.name}:\n  ${refused.join('\n  ')}`, {
      hint: 'kubetun lab compare --list (with the same lab options) says which scenarios run there',
    });
  const compare = () => compareOn(lab, scenarios, kernel, opts.kubetunFirst ?? false, say);
  return lab.route ? withNsRoute(lab.route, compare) : compare();
}

async function compareOn(
  lab: CompareLab,
  scenarios: Scenario[],
  kernel: KernelMode,
  kubetunFirst: boolean,
  say: Progress,
): Promise<CompareReport> {
  const original: LabMode = lab.mode();
  const t = lab.topology;
  const runs = new Map<PlaneMode, Map<string, ScenarioRun>>();
  const order: PlaneMode[] = kubetunFirst ? ['kubetun', kernel] : [kernel, 'kubetun'];
  try {
    for (const [i, mode] of order.entries()) {
      await lab.switchMode(mode, say, true);
      const done = new Map<string, ScenarioRun>();
      for (const s of scenarios) {
        say(`${s.name} with ${mode}`);
        // The first plane's backend is the target the second plane's same-backend runs seek.
        const target = i === 0 ? undefined : runs.get(order[0]!)!.get(s.name)!.backend;
        let run = await runScenario(lab, s, mode, target);
        for (let k = 1; k <= RETRANSMISSION_RERUNS; k++) {
          const dup = retransmission(run);
          if (!dup) break;
          say(`${s.name} with ${mode}: ${dup} twice: timing, not translation; running it again`);
          run = { ...(await runScenario(lab, s, mode, target)), reruns: k };
        }
        done.set(s.name, run);
      }
      runs.set(mode, done);
    }
  } finally {
    if (lab.mode() !== original) await lab.switchMode(original, say, false);
  }
  const kernelRuns = runs.get(kernel)!;
  const kubetunRuns = runs.get('kubetun')!;
  const results = scenarios.map((s) =>
    judge(s, kernel, kernelRuns.get(s.name)!, kubetunRuns.get(s.name)!),
  );
  const drawing = labDrawing(t, resolveServicePorts(loadManifests(lab.viewDir)), {
    mode: `${kernel} and kubetun, one after the other`,
  });
  const clocks = lab.clocks();
  return {
    kernel,
    lab: lab.name,
    ...(Object.keys(clocks).length > 0 ? { clocks } : {}),
    normalisations: NORMALISATIONS,
    results,
    differences: results.filter((r) => r.verdict === 'different').length,
    drawing,
  };
}

/**
 * How often a scenario runs again when a TCP packet shows up twice at one capture point: a
 * retransmission or a duplicate ACK is the timing of a slow moment (a GC pause, a starved VM:
 * under software emulation a backend's SYN-ACK was retransmitted while the client's ACK sat in
 * a data plane's queue), not a translation. A difference that lasts shows in the last run too.
 */
export const RETRANSMISSION_RERUNS = 2;

/** The first TCP packet seen twice at one capture point of a run, or undefined. */
export function retransmission(run: Pick<ScenarioRun, 'points'>): string | undefined {
  for (const point of run.points) {
    const seen = new Set<string>();
    for (const p of point.packets) {
      if (!/ tcp /.test(p.text)) continue;
      if (seen.has(p.text)) return `${point.name}: ${p.text.trim()}`;
      seen.add(p.text);
    }
  }
  return undefined;
}

export function judge(
  s: Scenario,
  kernel: KernelMode,
  a: ScenarioRun,
  b: ScenarioRun,
): ScenarioResult {
  const points = diffRuns(a.points, b.points);
  const same = points.every((p) => p.same);
  const onlyDeliberate = points.every((p) => p.same || p.deliberate);
  const scenarioReason = s.expectedDifference?.[kernel];
  const expected = same
    ? undefined
    : (scenarioReason ?? (onlyDeliberate ? ICMP_ERROR_SOURCE : undefined));
  return {
    name: s.name,
    title: s.title,
    verdict: same ? 'same' : expected ? 'expected-difference' : 'different',
    expected,
    note: s.note,
    runs: [a, b],
    points,
    captures: a.captures,
  };
}

async function runScenario(
  lab: CompareLab,
  s: Scenario,
  mode: PlaneMode,
  target: string | undefined,
): Promise<ScenarioRun> {
  const t = lab.topology;
  const client = [...allPods(t), ...t.clients].find((p) => p.name === s.client);
  if (!client)
    throw new LabError(`scenario ${s.name}: the topology has no pod or client ${s.client}`);
  const points = capturePoints(t, client, s.backends?.(t) ?? serviceBackends(lab, s));
  const filter = s.captureFilter?.(t, client) ?? `host ${clientAddress(s, client)}`;
  quietStart(t);
  await s.setup?.(t);
  let caps: Awaited<ReturnType<typeof startCaptures>>;
  try {
    const readyMs = 10_000 * lab.slowness;
    const tag = `${mode}-${s.name}`;
    caps = await startCaptures(points, filter, tag, lab.captureDir, readyMs, s.family);
  } catch (err) {
    await s.teardown?.(t);
    throw err;
  }
  const attempts: Attempt[] = [];
  const kept: number[] = [];
  const [first] = portBlock(s);
  const ctx = (i: number) => ({ port: first + i * 21, id: first + i, slowness: lab.slowness });
  let captured: Awaited<ReturnType<typeof stopCaptures>>;
  try {
    if (s.choice === 'same-backend') {
      const want = s.wantBackend ?? target;
      for (let i = 0; i < MAX_TRIES; i++) {
        const a = await timed(() => s.run(t, client, ctx(i)));
        attempts.push(a);
        if (!want || a.backend === want || !a.backend) {
          kept.push(i);
          break;
        }
      }
      // Never landed on it: compare the last try anyway; the report names both backends.
      if (kept.length === 0) kept.push(attempts.length - 1);
    } else {
      for (let i = 0; i < s.count; i++) {
        attempts.push(await timed(() => s.run(t, client, ctx(i))));
        kept.push(i);
      }
    }
  } finally {
    try {
      captured = await stopCaptures(caps, (ns) => lab.clockOffsetUs(ns));
    } finally {
      await s.teardown?.(t);
    }
  }
  const backend = kept.length ? attempts[kept[0]!]!.backend : undefined;
  const picked = pickPackets(s, captured, attempts, kept);
  const mapped = s.choice === 'first-choice' ? firstChoice(t, picked, backend) : picked;
  return {
    mode,
    attempts,
    kept,
    backend,
    points: normaliseRun(mapped),
    captures: points.map((p) => ({ at: p.at, label: p.name })),
    leftOut: leftOut(captured, picked),
  };
}

/** The points whose capture held packets but none the kept attempts' (picked: in order). */
export function leftOut(
  captured: readonly { point: CapturePoint; packets: readonly Pkt[] }[],
  picked: readonly { packets: readonly Pkt[] }[],
): { point: string; captured: number }[] {
  return captured.flatMap((c, i) =>
    c.packets.length > 0 && picked[i]?.packets.length === 0
      ? [{ point: c.point.name, captured: c.packets.length }]
      : [],
  );
}

/**
 * Every scenario starts from the same neighbour state, whatever ran before: an earlier scenario
 * that sent a packet towards a next hop nobody answers (iptables mode routes an unknown port's
 * SYN on) leaves a FAILED entry, and the node then reports host unreachable at once instead of
 * after its ARP tries — a different capture for the next scenario. The uplinks' learnt
 * neighbours are flushed; the next packet re-learns a live one in a millisecond.
 */
function quietStart(t: Topology): void {
  for (const n of t.nodes) shTry(inNs(n.ns, ['ip', 'neigh', 'flush', 'dev', n.uplink]), 30_000);
}

/** The endpoint IPs of the scenario's service (every port, its family), from the manifests the data planes load. */
function serviceBackends(lab: CompareLab, s: Scenario): string[] {
  const name = s.service;
  if (!name) return [];
  const svc = readLabServices(lab.viewDir, s.family).find((x) => x.name === name);
  if (!svc) throw new LabError(`the lab view in ${lab.viewDir} has no service ${name}`);
  return [...new Set(svc.ports.flatMap((p) => p.endpoints.map((e) => e.ip)))];
}

async function timed(run: () => Attempt | Promise<Attempt>): Promise<Attempt> {
  const startUs = nowUs();
  const a = await run();
  return { ...a, startUs, endUs: nowUs() };
}

/**
 * How far before an attempt's SYN at the client its window opens: more than the clocks' error
 * between machines (the VM lab's offsets hold within half a round trip, ~1 ms), less than the
 * time between the previous try's SYN and this one's (a whole curl run, tens of ms at least).
 */
const SYN_SLACK_US = 5_000;

/**
 * Keeps the kept attempts' packets: by client port, or — when the data plane masquerades or the
 * attempt never learned its port — by time window. A TCP flow counts as the attempt's when its
 * SYN falls in the window, so a previous try's closing packets never leak into the next one's.
 */
export function pickPackets(
  s: Scenario,
  captured: { point: CapturePoint; packets: Pkt[] }[],
  attempts: Attempt[],
  kept: number[],
): { name: string; packets: Pkt[]; pod?: string }[] {
  const ports = new Set(kept.map((i) => attempts[i]!.clientPort).filter((p) => p !== undefined));
  // The client's capture point (the first) holds each attempt's own SYN, by its client port:
  // where it does, the window is on the capture's clock from SYN_SLACK_US before that SYN (a
  // VM's packets are moved onto this clock within half a round trip: the node's copy of the
  // SYN may land a little before the client's) as long as the attempt took (+200 ms) — this
  // machine's wall clock is not needed; else from the spawn (the previous try's SYN is always
  // before it) to 200 ms after the exit, on this machine's clock.
  const atClient = captured[0]?.packets ?? [];
  const synOf = (a: Attempt) =>
    a.clientPort === undefined
      ? undefined
      : atClient.find((p) => p.flags === 'S' && p.sport === a.clientPort);
  const windows = kept
    .map((i) => attempts[i]!)
    .filter((a) => (s.masquerades || a.clientPort === undefined) && a.startUs !== undefined)
    .map((a) => {
      const syn = synOf(a);
      const from = syn ? syn.tUs - SYN_SLACK_US : a.startUs!;
      return [from, from + (a.endUs! - a.startUs!) + 200_000] as const;
    });
  const inWindow = (p: Pkt) => windows.some(([from, to]) => p.tUs >= from && p.tUs <= to);
  const byPort = (p: Pkt) =>
    ports.has(p.sport!) ||
    ports.has(p.dport!) ||
    (p.inner !== undefined && (ports.has(p.inner.sport!) || ports.has(p.inner.dport!)));
  const owns = ownedBy(s);
  return captured.map((c) => {
    const flows = new Set(c.packets.filter((p) => p.flags === 'S' && inWindow(p)).map(flowKey));
    const mine = (p: Pkt) =>
      s.choice === 'none'
        ? owns(p)
        : (!s.masquerades && byPort(p)) ||
          (p.proto === 'tcp' ? flows.has(flowKey(p)) : inWindow(p) && owns(p, true));
    return { name: c.point.name, pod: c.point.pod, packets: c.packets.filter(mine) };
  });
}

/**
 * Whether a packet carries one of the scenario's client ports or echo identifiers (an ICMP
 * error: in the packet it quotes), so it is this scenario's and no other's (scenarios.ts,
 * "Isolation"). snatted: the port may have been rewritten (masquerade) — then a packet without
 * a port of the block counts unless it is an ICMP message of another scenario.
 */
function ownedBy(s: Scenario): (p: Pkt, snatted?: boolean) => boolean {
  const [lo, hi] = portBlock(s);
  const inBlock = (n: number | undefined) => n !== undefined && n >= lo && n <= hi;
  const icmp = (p: Pkt) => p.proto === 'icmp' || p.proto === 'icmp6';
  const carries = (p: Pkt): boolean =>
    icmp(p)
      ? p.inner
        ? carries(p.inner)
        : inBlock(p.icmpId)
      : inBlock(p.sport) || inBlock(p.dport);
  return (p, snatted = false) => carries(p) || (snatted && !icmp(p));
}

/** first-choice: the first connection's backend becomes "backend1"; the other backends merge. */
function firstChoice(
  t: Topology,
  points: { name: string; packets: Pkt[]; pod?: string }[],
  backend: string | undefined,
): { name: string; packets: Pkt[] }[] {
  const pod = allPods(t).find((p) => p.name === backend);
  const rename = (ip: string) => (pod && (ip === pod.ip || ip === pod.ip6) ? 'backend1' : ip);
  const ren = (p: Pkt): Pkt => ({
    ...p,
    src: rename(p.src),
    dst: rename(p.dst),
    inner: p.inner ? ren(p.inner) : undefined,
  });
  const out: { name: string; packets: Pkt[] }[] = [];
  const others: Pkt[] = [];
  for (const cp of points) {
    const pkts = cp.packets.map(ren);
    if (cp.pod && cp.pod === backend) out.push({ name: 'backend1 veth', packets: pkts });
    else if (cp.pod && !cp.name.endsWith('(client)')) others.push(...pkts);
    else out.push({ name: cp.name, packets: pkts });
  }
  others.sort((a, b) => a.tUs - b.tUs);
  out.splice(2, 0, { name: 'other backends’ veths', packets: others });
  return out;
}

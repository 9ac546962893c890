// `kubetun replay`: a capture in, the capture the datapath would have produced out. Offline,
// no root: the quickest way to see what kubetun does to a given packet, and to diff it against
// what the kernel's kube-proxy rules did to the same traffic.
import { readFileSync, writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { PASS_NOT_SERVICE, REASON_NAMES } from '../datapath/state/reasons.ts';
import { VERDICT_NAMES } from '../datapath/state/verdict.ts';
import { fromErrno, UserError } from '../errors.ts';
import { loadManifests, resolveServicePorts } from '../manifests/index.ts';
import {
  formatReplayEntry,
  type ReplayEntry,
  type ReplayResult,
  replayPcap,
} from '../pcap/replay.ts';

export interface ReplayFilesOptions {
  manifests: string;
  input: string;
  output: string;
  trace?: boolean;
  /** trace as JSON lines (one object per packet) instead of text */
  json?: boolean;
  nodeName?: string;
  seed?: number;
  /** where trace lines go (stdout by default) */
  print?: (line: string) => void;
}

export function replayFiles(o: ReplayFilesOptions): ReplayResult {
  const ports = resolveServicePorts(loadManifests(o.manifests), { nodeName: o.nodeName });
  let input: Uint8Array;
  try {
    input = readFileSync(o.input);
  } catch (e) {
    throw userIo(e, '--in: cannot read', o.input);
  }
  const print = o.print ?? ((l: string) => process.stdout.write(`${l}\n`));
  const pods = endpointPods(ports);
  const endpointIps = new Set([...pods.keys()].map((k) => k.split(':')[0]));
  let podSide = 0;
  const result = replayPcap(ports, input, {
    nodeName: o.nodeName,
    name: o.input,
    datapath: o.seed === undefined ? undefined : { seed: o.seed },
    onPacket: (e) => {
      // A reply from an endpoint that is not a service flow: the capture saw it pod-side.
      const src = /^\S+ (\d+\.\d+\.\d+\.\d+)/.exec(e.input)?.[1];
      if (e.reason === PASS_NOT_SERVICE && src && endpointIps.has(src)) podSide++;
      if (o.trace) print(o.json ? replayEntryJson(e) : formatReplayEntry(e, pods));
    },
  });
  if (podSide > 0) result.podSideReplies = podSide;
  try {
    writeFileSync(o.output, result.pcap);
  } catch (e) {
    throw userIo(e, '--out: cannot write', o.output);
  }
  return result;
}

/** "ip:port" of every endpoint -> the Pod it names (targetRef), for the trace's backend column. */
function endpointPods(ports: ReturnType<typeof resolveServicePorts>): Map<string, string> {
  const out = new Map<string, string>();
  for (const r of ports)
    for (const e of r.endpoints) if (e.targetName) out.set(`${e.ip}:${e.port}`, e.targetName);
  return out;
}

/** Where a capture for replay must be taken, said when the input looks taken elsewhere. */
export const CAPTURE_HINT =
  "capture where the node's data plane sees the client's packets: on the client pod's node-side veth (in the lab: kubetun lab exec node1 -- tcpdump -i veth-pod-a -w in.pcap), both directions; replies captured on the backend pod's side are not service flows (PASS_NOT_SERVICE)";

/** A path given on the command line that cannot be read or written: the user's to fix. */
function userIo(e: unknown, what: string, path: string): UserError {
  const k = fromErrno(e, what, path);
  return k instanceof UserError ? k : new UserError('REPLAY_IO', k.message, { cause: e });
}

/** A trace entry for programs: the numbers and their names. */
export function replayEntryJson(e: ReplayEntry): string {
  return JSON.stringify({
    ...e,
    verdictName: VERDICT_NAMES[e.verdict],
    reasonName: REASON_NAMES[e.reason],
  });
}

/** "8 packets in, 7 out (TX 6, REPLY 1, DROP 1); DROP_ECHO_TO_VIP 1, TX_DNAT 2, …" */
export function replaySummary(r: ReplayResult): string {
  const verdicts = r.verdicts
    .flatMap((n, v) => (n > 0 ? [`${VERDICT_NAMES[v]} ${n}`] : []))
    .join(', ');
  const reasons = [...r.dp.counters]
    .flatMap((n, i) => (n > 0 ? [`${REASON_NAMES[i]} ${n}`] : []))
    .join(', ');
  const skipped = r.skipped > 0 ? `, ${r.skipped} non-IPv4 records skipped` : '';
  const hint = r.podSideReplies
    ? `\nreplay: ${r.podSideReplies} packets from service endpoints passed as PASS_NOT_SERVICE: ${CAPTURE_HINT}`
    : '';
  return `${r.packetsIn} packets in, ${r.packetsOut} out (${verdicts || 'none'})${skipped}${reasons ? `; ${reasons}` : ''}${hint}`;
}

export function register(program: Command): void {
  program
    .command('replay')
    .description(
      `run a pcap through the datapath offline and write what it would send; ${CAPTURE_HINT}`,
    )
    .requiredOption('--manifests <path>', 'Service/EndpointSlice YAML file or directory')
    .requiredOption(
      '--in <file>',
      'input capture (classic pcap: raw IP, IPv4, Ethernet, Linux cooked)',
    )
    .requiredOption('--out <file>', 'output capture (pcap, raw IP)')
    .option(
      '--trace',
      'print one line per packet: tcpdump-style time, verdict, reason, conntrack state, backend (pod@ip:port)',
    )
    .option('--json', 'with --trace: one JSON object per packet')
    .option(
      '--node-name <name>',
      "this node's name (local endpoints, internalTrafficPolicy: Local)",
    )
    .option('--seed <n>', 'backend selection PRNG seed', (v) => Number.parseInt(v, 10))
    .action(
      (opts: {
        manifests: string;
        in: string;
        out: string;
        trace?: boolean;
        json?: boolean;
        nodeName?: string;
        seed?: number;
      }) => {
        const r = replayFiles({ ...opts, input: opts.in, output: opts.out });
        process.stderr.write(`replay: ${replaySummary(r)}\n`);
      },
    );
}

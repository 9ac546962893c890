// `kubetun replay`: a capture in, the capture the datapath would have produced out. Offline,
// no root: the quickest way to see what kubetun does to a given packet, and to diff it against
// what the kernel's kube-proxy rules did to the same traffic.
import { readFileSync, writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { REASON_NAMES } from '../datapath/state/reasons.ts';
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
  const result = replayPcap(ports, input, {
    nodeName: o.nodeName,
    name: o.input,
    datapath: o.seed === undefined ? undefined : { seed: o.seed },
    onPacket: o.trace
      ? (e) => print(o.json ? replayEntryJson(e) : formatReplayEntry(e))
      : undefined,
  });
  try {
    writeFileSync(o.output, result.pcap);
  } catch (e) {
    throw userIo(e, '--out: cannot write', o.output);
  }
  return result;
}

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
  return `${r.packetsIn} packets in, ${r.packetsOut} out (${verdicts || 'none'})${skipped}${reasons ? `; ${reasons}` : ''}`;
}

export function register(program: Command): void {
  program
    .command('replay')
    .description('run a pcap through the datapath offline and write what it would send')
    .requiredOption('--manifests <path>', 'Service/EndpointSlice YAML file or directory')
    .requiredOption(
      '--in <file>',
      'input capture (classic pcap: raw IP, IPv4, Ethernet, Linux cooked)',
    )
    .requiredOption('--out <file>', 'output capture (pcap, raw IP)')
    .option('--trace', 'print one line per packet: verdict, reason, conntrack state, backend')
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

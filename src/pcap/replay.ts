// Offline replay: run every IPv4 packet of a capture through the real datapath program, with
// the capture's timestamps as the clock, and write what the datapath would have put back on the
// wire. The same program runs live on the TUN; this is how its behaviour is inspected, tested
// and diffed against the kernel's without root.
import { type Datapath, createDatapath } from '../datapath/state/datapath.ts';
import type { DatapathConfig } from '../datapath/state/config.ts';
import { DpLoader } from '../loader/load.ts';
import { dpProcess } from '../datapath/program.ts';
import { REASON_NAMES } from '../datapath/state/reasons.ts';
import { V_DROP, V_PASS, V_REPLY, V_TX, VERDICT_NAMES } from '../datapath/state/verdict.ts';
import type { ResolvedServicePort } from '../model.ts';
import { PcapReader } from './reader.ts';
import { summarizeIpv4 } from './summary.ts';
import { PcapWriter } from './writer.ts';

export interface ReplayOptions {
  /** this node's name (local endpoints, internalTrafficPolicy: Local) */
  nodeName?: string;
  datapath?: Partial<DatapathConfig>;
  /** input name for error messages */
  name?: string;
  /** called once per IPv4 packet with what happened to it (builds the objects only when set) */
  onPacket?: (e: ReplayEntry) => void;
}

export type CtState = 'new' | 'established' | 'reply' | '-';

export interface ReplayEntry {
  /** 1-based record number in the input file, as tcpdump and Wireshark count */
  n: number;
  tsSec: number;
  tsNsec: number;
  /** the packet as it came in */
  input: string;
  verdict: number;
  reason: number;
  ct: CtState;
  /** "ip:port" of the backend the flow is bound to, '' when none */
  backend: string;
  /** the packet written out ('' when dropped) */
  output: string;
}

export interface ReplayResult {
  /** the output capture (LINKTYPE_RAW, µs) */
  pcap: Uint8Array;
  packetsIn: number;
  packetsOut: number;
  /** input records that carried no IPv4 packet */
  skipped: number;
  /** packets per verdict (index: V_PASS..V_DROP) */
  verdicts: number[];
  dp: Datapath;
  /** packets from service endpoints that passed as no service flow (a pod-side capture) */
  podSideReplies?: number;
}

/** Largest IPv4 datagram; the copy a packet is processed in (the input stays untouched). */
const SCRATCH_LEN = 65535;

export function replayPcap(
  ports: ResolvedServicePort[],
  input: Uint8Array,
  opts: ReplayOptions = {},
): ReplayResult {
  const dp = createDatapath(opts.datapath);
  new DpLoader(dp).load(ports, { nodeName: opts.nodeName });
  const reader = new PcapReader(input, opts.name);
  const writer = new PcapWriter(Math.max(reader.header.snaplen, 65535));
  const scratch = new Uint8Array(SCRATCH_LEN);
  const verdicts = [0, 0, 0, 0];
  let packetsIn = 0;
  while (reader.next()) {
    packetsIn++;
    const len = Math.min(reader.ipLen, SCRATCH_LEN);
    scratch.set(input.subarray(reader.ipOff, reader.ipOff + len));
    const before = opts.onPacket ? summarizeIpv4(scratch, 0, len) : '';
    const src = opts.onPacket ? flowSource(scratch, len) : null;
    // The datapath's clock is integral milliseconds; sub-millisecond order is kept by the file.
    const verdict = dpProcess(dp, scratch, 0, len, Math.floor(reader.timeMs()));
    verdicts[verdict]++;
    if (verdict === V_PASS || verdict === V_TX) {
      writer.write(scratch, 0, len, reader.tsSec, reader.tsNsec);
    } else if (verdict === V_REPLY) {
      writer.write(dp.out, 0, dp.outLen, reader.tsSec, reader.tsNsec);
    }
    if (opts.onPacket) {
      opts.onPacket(
        traceEntry(dp, reader, before, verdict, src, verdict === V_REPLY ? dp.out : scratch, len),
      );
    }
  }
  return {
    pcap: writer.bytes(),
    packetsIn,
    packetsOut: writer.count,
    skipped: reader.skipped,
    verdicts,
    dp,
  };
}

export interface FlowSource {
  saddr: number;
  /** source port, or the echo id for ICMP echo (conntrack keys echo flows by id) */
  sport: number;
}

/** Source address and port of a packet as it came in: tells replies from originals. */
export function flowSource(b: Uint8Array, len: number): FlowSource | null {
  if (len < 20) return null;
  const saddr = ((b[12] << 24) | (b[13] << 16) | (b[14] << 8) | b[15]) >>> 0;
  const l4 = (b[0] & 0x0f) * 4;
  const portAt = b[9] === 1 ? l4 + 4 : l4;
  const sport = portAt + 2 <= len ? (b[portAt] << 8) | b[portAt + 1] : 0;
  return { saddr, sport };
}

/** The last packet's conntrack state, from the datapath's trace fields and its source. */
export function ctStateOf(dp: Datapath, src: FlowSource | null): CtState {
  const i = dp.lastCtIdx;
  if (i < 0 || src === null) return '-';
  if (dp.lastCtNew) return 'new';
  // the conntrack's int32 address and flowSource's u32 compared as u32
  const same = src.saddr === dp.ct.saddr(i) >>> 0 && src.sport === dp.ct.sport(i);
  return same ? 'established' : 'reply';
}

function traceEntry(
  dp: Datapath,
  r: PcapReader,
  input: string,
  verdict: number,
  src: FlowSource | null,
  outBuf: Uint8Array,
  inLen: number,
): ReplayEntry {
  const outLen = verdict === V_REPLY ? dp.outLen : inLen;
  return {
    n: r.record + 1,
    tsSec: r.tsSec,
    tsNsec: r.tsNsec,
    input,
    verdict,
    reason: dp.lastReason,
    ct: ctStateOf(dp, src),
    backend: backendOf(dp),
    output: verdict === V_DROP ? '' : summarizeIpv4(outBuf, 0, outLen),
  };
}

function backendOf(dp: Datapath): string {
  if (dp.lastBackendId !== 0) {
    const b = dp.be.lookup(dp.lastBackendId);
    if (b >= 0) return `${ipString(dp.be.addr(b))}:${dp.be.port(b)}`;
  }
  const i = dp.lastCtIdx;
  return i >= 0 ? `${ipString(dp.ct.baddr(i))}:${dp.ct.bport(i)}` : '';
}

function ipString(a: number): string {
  return `${a >>> 24}.${(a >>> 16) & 255}.${(a >>> 8) & 255}.${a & 255}`;
}

/**
 * tcpdump's default time stamp, HH:MM:SS.uuuuuu — of the UTC day, so a trace reads the same on
 * every machine (tcpdump itself uses local time; -tttt adds the date).
 */
export function tcpdumpTime(sec: number, nsec: number): string {
  const d = new Date(sec * 1000);
  const two = (n: number) => String(n).padStart(2, '0');
  const us = String(Math.floor(nsec / 1000)).padStart(6, '0');
  return `${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())}.${us}`;
}

/**
 * "3 22:13:20.000200 TCP 10.244.0.5.40000 > 10.96.0.10.80 [P.] len 5 TX TX_DNAT ct=established
 *  backend=pod-b@10.244.1.5:8080 => TCP 10.244.0.5.40000 > 10.244.1.5.8080 [P.] len 5"
 */
export function formatReplayEntry(e: ReplayEntry, pods?: ReadonlyMap<string, string>): string {
  const time = tcpdumpTime(e.tsSec, e.tsNsec);
  const verdict = VERDICT_NAMES[e.verdict] ?? String(e.verdict);
  const reason = REASON_NAMES[e.reason] ?? `reason ${e.reason}`;
  const pod = e.backend ? pods?.get(e.backend) : undefined;
  const backend = e.backend ? `${pod ? `${pod}@` : ''}${e.backend}` : '-';
  let line = `${e.n} ${time} ${e.input} ${verdict} ${reason} ct=${e.ct} backend=${backend}`;
  if (e.output !== '' && e.output !== e.input) line += ` => ${e.output}`;
  return line;
}

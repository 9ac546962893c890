// Scenario-test harness for the ClusterIP program: packet builders with a deliberately slow,
// independent checksum (RFC 1071 straight from the definition, not src/wire), a runner that
// places every packet at an odd offset inside a larger buffer (the typed-array byteOffset bug
// class), and ResolvedServicePort builders for dpLoadServices.

import type { Datapath } from '../../src/datapath/state/datapath.ts';
import { dpProcess } from '../../src/datapath/program.ts';
import { REASON_NAMES } from '../../src/datapath/state/reasons.ts';
import { DpLoader } from '../../src/loader/load.ts';
import type { ResolvedEndpoint, ResolvedServicePort, Service } from '../../src/model.ts';
import { makeDefaultService, makeReadyEndpoint } from '../fixtures/model.ts';

export const TCP = 6;
export const UDP = 17;
export const ICMP = 1;
export const SCTP = 132;

export const FIN = 1;
export const SYN = 2;
export const RST = 4;
export const PSH = 8;
export const ACK = 16;

/** "10.96.0.10" -> u32, independent of src/wire. */
export function ip(s: string): number {
  const p = s.split('.').map(Number);
  return ((p[0] << 24) | (p[1] << 16) | (p[2] << 8) | p[3]) >>> 0;
}

export function ipStr(n: number): string {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

/** RFC 1071 one's-complement sum of 16-bit words, the slow obvious way. */
export function refSum(bytes: ArrayLike<number>, start: number, end: number, init = 0): number {
  let sum = init;
  for (let i = start; i < end; i += 2) {
    sum += (bytes[i] << 8) | (i + 1 < end ? bytes[i + 1] : 0);
  }
  while (sum > 0xffff) sum = (sum & 0xffff) + Math.floor(sum / 0x10000);
  return sum;
}

export function put16(b: Uint8Array, at: number, v: number): void {
  b[at] = (v >>> 8) & 255;
  b[at + 1] = v & 255;
}
export function put32(b: Uint8Array, at: number, v: number): void {
  put16(b, at, v >>> 16);
  put16(b, at + 2, v & 0xffff);
}
export function get16(b: Uint8Array, at: number): number {
  return (b[at] << 8) | b[at + 1];
}
export function get32(b: Uint8Array, at: number): number {
  return ((get16(b, at) << 16) | get16(b, at + 2)) >>> 0;
}

export interface IpOpts {
  src: string;
  dst: string;
  ttl?: number;
  id?: number;
  tos?: number;
  /** raw option bytes, a multiple of 4 */
  options?: number[];
  mf?: boolean;
  fragOffset?: number;
}

/** IPv4 header + payload with a correct header checksum. */
export function buildIpv4(o: IpOpts, proto: number, payload: Uint8Array): Uint8Array {
  const opt = o.options ?? [];
  const hlen = 20 + opt.length;
  const b = new Uint8Array(hlen + payload.length);
  b[0] = 0x40 | (hlen >>> 2);
  b[1] = o.tos ?? 0;
  put16(b, 2, b.length);
  put16(b, 4, o.id ?? 0x1234);
  put16(b, 6, (o.mf ? 0x2000 : 0) | (o.fragOffset ?? 0));
  b[8] = o.ttl ?? 64;
  b[9] = proto;
  put32(b, 12, ip(o.src));
  put32(b, 16, ip(o.dst));
  b.set(opt, 20);
  put16(b, 10, ~refSum(b, 0, hlen) & 0xffff);
  b.set(payload, hlen);
  return b;
}

export interface TcpOpts extends IpOpts {
  sport: number;
  dport: number;
  flags: number;
  seq?: number;
  ack?: number;
  data?: string;
}

export function buildTcp(o: TcpOpts): Uint8Array {
  const data = new TextEncoder().encode(o.data ?? '');
  const seg = new Uint8Array(20 + data.length);
  put16(seg, 0, o.sport);
  put16(seg, 2, o.dport);
  put32(seg, 4, o.seq ?? 1000);
  put32(seg, 8, o.ack ?? 0);
  seg[12] = 5 << 4;
  seg[13] = o.flags;
  put16(seg, 14, 64240);
  seg.set(data, 20);
  const pkt = buildIpv4(o, TCP, seg);
  fillL4Csum(pkt);
  return pkt;
}

export interface UdpOpts extends IpOpts {
  sport: number;
  dport: number;
  data?: string;
  /** leave the UDP checksum 0 ("none") */
  noCsum?: boolean;
}

export function buildUdp(o: UdpOpts): Uint8Array {
  const data = new TextEncoder().encode(o.data ?? '');
  const dg = new Uint8Array(8 + data.length);
  put16(dg, 0, o.sport);
  put16(dg, 2, o.dport);
  put16(dg, 4, dg.length);
  dg.set(data, 8);
  const pkt = buildIpv4(o, UDP, dg);
  if (!o.noCsum) fillL4Csum(pkt);
  return pkt;
}

export function buildIcmpEcho(o: IpOpts & { ident: number; seq: number }): Uint8Array {
  const m = new Uint8Array(8 + 16);
  m[0] = 8;
  put16(m, 4, o.ident);
  put16(m, 6, o.seq);
  for (let i = 8; i < m.length; i++) m[i] = i;
  put16(m, 2, ~refSum(m, 0, m.length) & 0xffff);
  return buildIpv4(o, ICMP, m);
}

/** CRC32c bit at a time from its definition (reflected 0x82F63B78), independent of src/wire. */
export function refCrc32c(b: ArrayLike<number>, start: number, end: number): number {
  let c = 0xffffffff;
  for (let i = start; i < end; i++) {
    c ^= b[i];
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  }
  return ~c >>> 0;
}

/** [chunk type, chunk flags, value bytes] */
export type SctpChunk = [number, number, number[]];

export interface SctpOpts extends IpOpts {
  sport: number;
  dport: number;
  vtag: number;
  chunks: SctpChunk[];
  /** store this (wrong) CRC instead of computing it */
  badCrc?: boolean;
}

/** An SCTP packet (RFC 9260 section 3) with its CRC32c, stored least significant byte first. */
export function buildSctp(o: SctpOpts): Uint8Array {
  return buildIpv4(o, SCTP, sctpPacket(o));
}

/** The SCTP common header and chunks of `o` with their CRC32c (either IP family carries it). */
export function sctpPacket(o: {
  sport: number;
  dport: number;
  vtag: number;
  chunks: SctpChunk[];
  badCrc?: boolean;
}): Uint8Array {
  const len = o.chunks.reduce((n, [, , v]) => n + ((4 + v.length + 3) & ~3), 12);
  const s = new Uint8Array(len);
  put16(s, 0, o.sport);
  put16(s, 2, o.dport);
  put32(s, 4, o.vtag);
  let at = 12;
  for (const [type, flags, v] of o.chunks) {
    s[at] = type;
    s[at + 1] = flags;
    put16(s, at + 2, 4 + v.length);
    s.set(v, at + 4);
    at += (4 + v.length + 3) & ~3;
  }
  putCrc(s, 0);
  if (o.badCrc) s[8] ^= 0x5a;
  return s;
}

function putCrc(s: Uint8Array, at: number): void {
  s.fill(0, at + 8, at + 12);
  const c = refCrc32c(s, at, s.length);
  s.set([c & 0xff, (c >>> 8) & 0xff, (c >>> 16) & 0xff, c >>> 24], at + 8);
}

/** Whether the SCTP packet's stored CRC32c is what a full recompute gives. */
export function sctpCrcVerifies(p: Uint8Array): boolean {
  const h = hdrLen(p);
  const copy = p.slice(h, get16(p, 2));
  const stored = copy.slice(8, 12);
  putCrc(copy, 0);
  return copy.slice(8, 12).every((x, k) => x === stored[k]);
}

/** Recompute the IPv4 header checksum after a test edited the header by hand. */
export function refillIpCsum(p: Uint8Array): Uint8Array {
  put16(p, 10, 0);
  put16(p, 10, ~refSum(p, 0, hdrLen(p)) & 0xffff);
  return p;
}

/** ICMP message type/code/rest + data with its checksum (RFC 792), then wrapped in IPv4. */
export function buildIcmp(
  o: IpOpts,
  type: number,
  code: number,
  rest: number,
  data: Uint8Array,
): Uint8Array {
  const m = new Uint8Array(8 + data.length);
  m[0] = type;
  m[1] = code;
  put32(m, 4, rest);
  m.set(data, 8);
  put16(m, 2, ~refSum(m, 0, m.length) & 0xffff);
  return buildIpv4(o, ICMP, m);
}

function hdrLen(p: Uint8Array): number {
  return (p[0] & 15) * 4;
}

/** The L4 checksum as it should be stored, recomputed from scratch (pseudo-header for TCP/UDP). */
export function refL4Csum(p: Uint8Array): number {
  const h = hdrLen(p);
  const total = get16(p, 2);
  const proto = p[9];
  const copy = p.slice(0, total);
  const csumAt = h + (proto === TCP ? 16 : proto === UDP ? 6 : 2);
  put16(copy, csumAt, 0);
  let init = 0;
  if (proto === TCP || proto === UDP) {
    init = refSum(copy, 12, 20) + proto + (total - h);
  }
  const c = ~refSum(copy, h, total, init) & 0xffff;
  return proto === UDP && c === 0 ? 0xffff : c;
}

function fillL4Csum(p: Uint8Array): void {
  const h = hdrLen(p);
  put16(p, h + (p[9] === TCP ? 16 : p[9] === UDP ? 6 : 2), refL4Csum(p));
}

/** Both checksums as stored equal a full recompute (UDP checksum 0 = none is accepted). */
export function checksumsVerify(p: Uint8Array): boolean {
  const h = hdrLen(p);
  const ipOk = refSum(p, 0, h) === 0xffff;
  const at = h + (p[9] === TCP ? 16 : p[9] === UDP ? 6 : 2);
  const stored = get16(p, at);
  if (p[9] === UDP && stored === 0) return ipOk;
  return ipOk && stored === refL4Csum(p);
}

/** Tuple of a packet, for readable assertions. */
export function tuple(p: Uint8Array): string {
  const h = hdrLen(p);
  return `${ipStr(get32(p, 12))}:${get16(p, h)} > ${ipStr(get32(p, 16))}:${get16(p, h + 2)}`;
}

export interface RunResult {
  verdict: number;
  reason: string;
  /** the packet after the program (rewritten in place for V_TX) */
  pkt: Uint8Array;
  /** the generated packet for V_REPLY */
  out: Uint8Array;
}

const PAD = 7; // odd offset: a view that ignored byteOffset would read the wrong bytes

/** Run the real program on a copy of `pkt` placed at an odd offset in a larger buffer. */
export function run(dp: Datapath, pkt: Uint8Array, nowMs = 1_000_000): RunResult {
  const big = new Uint8Array(PAD + pkt.length + 13).fill(0xee);
  big.set(pkt, PAD);
  const view = big.subarray(2); // and a subarray with its own byteOffset
  const verdict = dpProcess(dp, view, PAD - 2, pkt.length, nowMs);
  return {
    verdict,
    reason: REASON_NAMES[dp.lastReason],
    pkt: big.slice(PAD, PAD + pkt.length),
    out: dp.out.slice(0, dp.outLen),
  };
}

// ---- model builders ---------------------------------------------------------------------------

export function service(name: string, clusterIP: string, over: Partial<Service> = {}): Service {
  return makeDefaultService(name, { clusterIPs: clusterIP ? [clusterIP] : [], ...over });
}

export function endpoint(ipPort: string, over: Partial<ResolvedEndpoint> = {}): ResolvedEndpoint {
  const [addr, port] = ipPort.split(':');
  return makeReadyEndpoint(addr, Number(port), over);
}

/** One ResolvedServicePort: `svc` port `port`/`protocol` (named `portName`) with `eps`. */
export function servicePort(
  svc: Service,
  port: number,
  protocol: 'TCP' | 'UDP' | 'SCTP',
  eps: ResolvedEndpoint[],
  portName = '',
): ResolvedServicePort {
  const sp = { name: portName, protocol, port, targetPort: eps[0]?.port ?? port, nodePort: 0 };
  svc.ports.push(sp);
  const spn = portName
    ? `${svc.namespace}/${svc.name}:${portName}`
    : `${svc.namespace}/${svc.name}`;
  return { service: svc, port: sp, servicePortName: spn, endpoints: eps };
}

// ---- the loader of a test's Datapath ----------------------------------------------------------
// Production code holds its DpLoader next to its Datapath (datapathSync, replay, benchmarks);
// tests that build a Datapath in many places ask for "its" loader here instead, so successive
// loads of one Datapath share ids and reference counts as they do in the agent.
const loaders = new WeakMap<Datapath, DpLoader>();

export function loaderOf(dp: Datapath): DpLoader {
  let l = loaders.get(dp);
  if (!l) {
    l = new DpLoader(dp);
    loaders.set(dp, l);
  }
  return l;
}

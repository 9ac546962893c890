// The IPv6 sibling of harness.ts: packet builders with their own address parser and their own
// checksum over the IPv6 pseudo-header (RFC 8200 8.1, straight from the definition, nothing
// from src/wire), so the datapath's NAT66 and ICMPv6 are checked against an independent
// oracle. Packets run through the real program at an odd offset (harness.ts's run()).

import type { ResolvedEndpoint, ResolvedServicePort, Service } from '../../src/model.ts';
import { makeDefaultService, makeReadyEndpoint } from '../fixtures/model.ts';
import { put16, put32, refSum, type SctpChunk, sctpPacket, TCP, UDP } from './harness.ts';

export const ICMPV6 = 58;
export const SCTP = 132;
export const FRAG = 44;
export const HOPOPTS = 0;
export const DSTOPTS = 60;

/** "fd00:10:96::a" -> 16 bytes, independent of src/wire (no IPv4-mapped tail needed here). */
export function ip6(s: string): Uint8Array {
  const [head, tail] = s.includes('::') ? s.split('::') : [s, undefined];
  const hs = head ? head.split(':') : [];
  const ts = tail !== undefined && tail !== '' ? tail.split(':') : [];
  const groups =
    tail === undefined ? hs : [...hs, ...new Array(8 - hs.length - ts.length).fill('0'), ...ts];
  if (groups.length !== 8) throw new Error(`ip6: ${s}`);
  const b = new Uint8Array(16);
  for (const [i, g] of groups.entries()) put16(b, 2 * i, Number.parseInt(g, 16));
  return b;
}

/** 16 bytes -> lower-case text with the longest zero run as "::" (enough for assertions). */
export function ip6Str(b: ArrayLike<number>, at = 0): string {
  const g: number[] = [];
  for (let i = 0; i < 8; i++) g.push((b[at + 2 * i] << 8) | b[at + 2 * i + 1]);
  let best = -1;
  let len = 1;
  for (let i = 0; i < 8; i++) {
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > len) {
      best = i;
      len = j - i;
    }
  }
  const hex = (a: number[]) => a.map((x) => x.toString(16)).join(':');
  return best < 0 ? hex(g) : `${hex(g.slice(0, best))}::${hex(g.slice(best + len))}`;
}

export interface Ip6Opts {
  src: string;
  dst: string;
  hlim?: number;
  tclass?: number;
  flow?: number;
  /** extension headers before the upper layer, as [type, bytes after the Next Header byte] */
  ext?: [number, number[]][];
  /** a Fragment header last among the extension headers */
  frag?: { offset: number; more: boolean; id: number };
}

/** IPv6 header + extension headers + payload (`proto` the upper layer's Next Header). */
export function buildIpv6(o: Ip6Opts, proto: number, payload: Uint8Array): Uint8Array {
  const ext: [number, number[]][] = [...(o.ext ?? [])];
  if (o.frag) {
    const f = o.frag;
    ext.push([
      FRAG,
      [
        0,
        (f.offset >> 5) & 0xff,
        ((f.offset << 3) & 0xf8) | (f.more ? 1 : 0),
        f.id >>> 24,
        (f.id >>> 16) & 255,
        (f.id >>> 8) & 255,
        f.id & 255,
      ],
    ]);
  }
  const extLen = ext.reduce((n, [, body]) => n + 1 + body.length, 0);
  const b = new Uint8Array(40 + extLen + payload.length);
  put32(b, 0, ((6 << 28) | ((o.tclass ?? 0) << 20) | (o.flow ?? 0)) >>> 0);
  put16(b, 4, extLen + payload.length);
  b[7] = o.hlim ?? 64;
  b.set(ip6(o.src), 8);
  b.set(ip6(o.dst), 24);
  let prev = 6;
  let at = 40;
  for (const [type, body] of ext) {
    b[prev] = type;
    prev = at;
    b.set(body, at + 1);
    at += 1 + body.length;
  }
  b[prev] = proto;
  b.set(payload, at);
  return b;
}

/** [offset, protocol] of the upper layer of a packet this harness built (its own walk). */
function upper(p: Uint8Array): [number, number] {
  let nh = p[6];
  let at = 40;
  while (nh === HOPOPTS || nh === DSTOPTS || nh === FRAG || nh === 43) {
    const len = nh === FRAG ? 8 : (p[at + 1] + 1) * 8;
    nh = p[at];
    at += len;
  }
  return [at, nh];
}

/** Offset of the upper-layer header of a packet this harness built. */
export function l4Of(p: Uint8Array): number {
  return upper(p)[0];
}

function l4Proto(p: Uint8Array): number {
  return upper(p)[1];
}

/** The upper-layer checksum over the pseudo-header, as it should be stored (UDP: 0 -> ffff). */
export function refL6Csum(p: Uint8Array, l4 = l4Of(p), proto = l4Proto(p), end = p.length): number {
  const len = proto === UDP ? (p[l4 + 4] << 8) | p[l4 + 5] : end - l4;
  const at = l4 + (proto === TCP ? 16 : proto === UDP ? 6 : 2);
  const copy = p.slice(0, l4 + len);
  put16(copy, at, 0);
  const pseudo = refSum(copy, 8, 40) + proto + (len >>> 16) + (len & 0xffff);
  const c = ~refSum(copy, l4, l4 + len, pseudo) & 0xffff;
  return proto === UDP && c === 0 ? 0xffff : c;
}

function fillL6Csum(p: Uint8Array): Uint8Array {
  const l4 = l4Of(p);
  const proto = l4Proto(p);
  put16(p, l4 + (proto === TCP ? 16 : proto === UDP ? 6 : 2), refL6Csum(p, l4, proto));
  return p;
}

/** Whether the stored upper-layer checksum equals a full recompute (TCP, UDP, ICMPv6). */
export function l6CsumVerifies(p: Uint8Array): boolean {
  const l4 = l4Of(p);
  const proto = l4Proto(p);
  const at = l4 + (proto === TCP ? 16 : proto === UDP ? 6 : 2);
  return ((p[at] << 8) | p[at + 1]) === refL6Csum(p, l4, proto);
}

export interface Tcp6Opts extends Ip6Opts {
  sport: number;
  dport: number;
  flags: number;
  seq?: number;
  data?: string;
}

export function buildTcp6(o: Tcp6Opts): Uint8Array {
  const data = new TextEncoder().encode(o.data ?? '');
  const seg = new Uint8Array(20 + data.length);
  put16(seg, 0, o.sport);
  put16(seg, 2, o.dport);
  put32(seg, 4, o.seq ?? 1000);
  seg[12] = 5 << 4;
  seg[13] = o.flags;
  put16(seg, 14, 64800);
  seg.set(data, 20);
  return fillL6Csum(buildIpv6(o, TCP, seg));
}

export interface Udp6Opts extends Ip6Opts {
  sport: number;
  dport: number;
  data?: string;
  /** the whole datagram's length when this is a first fragment (its checksum spans all of it) */
  bytes?: Uint8Array;
  zeroCsum?: boolean;
}

export function buildUdp6(o: Udp6Opts): Uint8Array {
  const data = o.bytes ?? new TextEncoder().encode(o.data ?? '');
  const dg = new Uint8Array(8 + data.length);
  put16(dg, 0, o.sport);
  put16(dg, 2, o.dport);
  put16(dg, 4, dg.length);
  dg.set(data, 8);
  const p = buildIpv6(o, UDP, dg);
  return o.zeroCsum ? p : fillL6Csum(p);
}

/** An ICMPv6 message (type, code, the 4 bytes after the checksum, body) with its checksum. */
export function buildIcmp6(
  o: Ip6Opts,
  type: number,
  code: number,
  rest: number,
  body: Uint8Array,
): Uint8Array {
  const m = new Uint8Array(8 + body.length);
  m[0] = type;
  m[1] = code;
  put32(m, 4, rest >>> 0);
  m.set(body, 8);
  return fillL6Csum(buildIpv6(o, ICMPV6, m));
}

/** An SCTP packet over IPv6 with its CRC32c (no pseudo-header: RFC 9260). */
export function buildSctp6(
  o: Ip6Opts & { sport: number; dport: number; vtag: number; chunks: SctpChunk[] },
): Uint8Array {
  return buildIpv6(o, SCTP, sctpPacket(o));
}

/** "[src]:sport > [dst]:dport" of a TCP/UDP packet, for readable assertions. */
export function tuple6(p: Uint8Array): string {
  const l4 = l4Of(p);
  const port = (at: number) => (p[at] << 8) | p[at + 1];
  return `[${ip6Str(p, 8)}]:${port(l4)} > [${ip6Str(p, 24)}]:${port(l4 + 2)}`;
}

/** Source and destination of any IPv6 packet. */
export function addrs6(p: Uint8Array): string {
  return `${ip6Str(p, 8)} > ${ip6Str(p, 24)}`;
}

// ---- model builders ---------------------------------------------------------------------------

/**
 * An IPv6-only Service `name` at `vip` with one port (`port`/`proto`, named "p") whose IPv6
 * endpoints are `backends` ("[addr]:port"), as the change tracker resolves it (endpoints6).
 */
export function servicePort6(
  name: string,
  vip: string,
  port: number,
  proto: 'TCP' | 'UDP' | 'SCTP',
  backends: string[],
  over: Partial<Service> = {},
  eps: Partial<ResolvedEndpoint> = {},
): ResolvedServicePort {
  const svc = makeDefaultService(name, { clusterIPs: [vip], ipFamilies: ['IPv6'], ...over });
  const endpoints6 = backends.map((b) => {
    const m = /^\[(.+)\]:(\d+)$/.exec(b);
    if (!m) throw new Error(`servicePort6: ${b} is not [addr]:port`);
    return makeReadyEndpoint(m[1], Number(m[2]), eps);
  });
  const sp = {
    name: 'p',
    protocol: proto,
    port,
    targetPort: endpoints6[0]?.port ?? port,
    nodePort: 0,
  };
  svc.ports.push(sp);
  return {
    service: svc,
    port: sp,
    servicePortName: `default/${name}:p`,
    endpoints: [],
    endpoints6,
  };
}

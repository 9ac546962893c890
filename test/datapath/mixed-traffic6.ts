// The IPv6 twin of mixed-traffic.ts: the same conversations of 8 packets, as IPv6, written into
// one preallocated buffer so the generator allocates nothing (the no-allocation test measures
// the datapath), against a dual-stack datapath whose Services have an IPv4 and an IPv6 ClusterIP
// (so both loaders' halves and both families' maps are live while the traffic runs).
//
//   0 SYN client -> frontend    1 SYN+ACK back    2 ACK    3 Packet Too Big from the backend
//   about the translated packet (RELATED)    4 FIN   5 FIN+ACK   6 ACK
//   7 in turn: UDP to a maglev service, UDP to an unused VIP port (ICMPv6 reject), TCP to a
//     service without endpoints (reject), a malformed header (a Hop-by-Hop header cut short),
//     an ICMPv6 echo to a VIP, a UDP first fragment and its later fragment (Fragment header),
//     traffic that is no service's, an RST for no flow, a Neighbor Solicitation.
//
// Every address has the high bit of its first word set (fd00::/8, 2001::/16 with 0x8… words
// below): int32 words, never heap numbers, whatever V8 inlines (src/datapath/README.md).

import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { V_TX } from '../../src/datapath/state/verdict.ts';
import type { ResolvedServicePort } from '../../src/model.ts';
import { ipv6ToWords } from '../../src/wire/addr6.ts';
import { l4v6FillCsum } from '../../src/wire/checksum6.ts';
import { icmpv6BuildError } from '../../src/wire/icmpv6.ts';
import { makeReadyEndpoint } from '../fixtures/model.ts';
import { ACK, loaderOf, put16, put32, RST, SYN, service, TCP, UDP } from './harness.ts';
import { ICMPV6 } from './harness6.ts';
import { Conversations, OFF } from './mixed-traffic.ts';

const VIP4 = (n: number) => `10.96.0.${n}`;
const VIP6 = (n: number) => `fd00:10:96::${n.toString(16)}`;
const NODE6 = 'fd00:172:30::11';
const LB6 = '2001:db8:e::10';

/** Addresses of the stream, four words each, at these offsets of one Int32Array. */
const W = (s: string) => ipv6ToWords(s);
const A_WEB = 0;
const A_STICKY = 4;
const A_DNS = 8;
const A_LC = 12;
const A_EMPTY = 16;
const A_NODE = 20;
const A_LB = 24;
const A_NOT_SERVICE = 28;
const A_C_SRC = 32; // the conversation's client
const A_C_DST = 36; // and frontend
const A_T_SRC = 40; // the translated tuple of packet 0
const A_T_DST = 44;
const A_X = 48; // another client (the "other" packets)
const A_WORDS = 52;

/**
 * A datapath with dual-stack Services (IPv4 and IPv6 ClusterIPs, both families' endpoints):
 * NodePort web (random), sticky (ClientIP + rr), dns (maglev, UDP), lc (LoadBalancer, ETP
 * Local, a source range, lc), empty (no endpoints). Small tables, no ICMP rate limit.
 */
export function dualDatapath(seed: number, ctCapacity: number): Datapath {
  const dp = createDatapath({
    seed,
    nodeIp: 0xac1e000b,
    podGateway: 0x0af40101,
    podCidr: '10.244.1.0/24',
    clusterCidr: '10.244.0.0/16',
    nodeIp6: NODE6,
    podGateway6: 'fd00:10:244:1::1',
    podCidr6: 'fd00:10:244:1::/64',
    clusterCidr6: 'fd00:10:244::/56',
    ctCapacity,
    snatCapacity: 1024,
    affinityCapacity: 1024,
    fragCapacity: 64,
    icmpRatePerSec: 0,
  });
  const sched = (name: string) => ({ annotations: { 'kubetun.io/scheduler': name } });
  const ports: ResolvedServicePort[] = [];
  const add = (
    name: string,
    n: number,
    port: number,
    proto: 'TCP' | 'UDP',
    eps: boolean,
    over = {},
    nodePort = 0,
  ) => {
    const svc = service(name, '', {
      clusterIPs: [VIP4(n), VIP6(n)],
      ipFamilies: ['IPv4', 'IPv6'],
      ...over,
    });
    const sp = { name: 'p', protocol: proto, port, targetPort: 8080, nodePort };
    svc.ports.push(sp);
    const tp = proto === 'UDP' ? 5353 : 8080;
    const on = (k: number) => ({ nodeName: k === 0 ? 'node1' : 'node2' });
    const v4 = ['10.244.1.2', '10.244.2.2', '10.244.2.3'].map((a, k) =>
      makeReadyEndpoint(a, tp, on(k)),
    );
    const v6 = ['fd00:10:244:1::2', 'fd00:10:244:2::2', 'fd00:10:244:2::3'].map((a, k) =>
      makeReadyEndpoint(a, tp, on(k)),
    );
    ports.push({
      service: svc,
      port: sp,
      servicePortName: `default/${name}:p`,
      endpoints: eps ? v4 : [],
      endpoints6: eps ? v6 : [],
    });
  };
  add('web', 0x10, 80, 'TCP', true, { type: 'NodePort' }, 30080);
  add('sticky', 0x11, 80, 'TCP', true, { sessionAffinity: 'ClientIP', ...sched('rr') });
  add('dns', 0x12, 53, 'UDP', true, sched('maglev'));
  add(
    'lc',
    0x13,
    80,
    'TCP',
    true,
    {
      type: 'LoadBalancer',
      externalTrafficPolicy: 'Local',
      loadBalancerIPs: ['192.0.2.10', LB6],
      loadBalancerSourceRanges: ['172.30.0.0/17', '2001:db8:7::/64'],
      ...sched('lc'),
    },
    30081,
  );
  add('empty', 0x14, 80, 'TCP', false);
  loaderOf(dp).load(ports, { nodeName: 'node1' });
  return dp;
}

/** The IPv6 stream (Conversations: next(k) writes packet k into buf at OFF). */
export class MixedTraffic6 extends Conversations {
  private readonly scratch = new Uint8Array(256);
  private readonly a = new Int32Array(A_WORDS);
  private csport = 0;
  private cdport = 0;
  private tsport = 0;
  private tdport = 0;

  constructor() {
    super();
    const a = this.a;
    a.set(W(VIP6(0x10)), A_WEB);
    a.set(W(VIP6(0x11)), A_STICKY);
    a.set(W(VIP6(0x12)), A_DNS);
    a.set(W(VIP6(0x13)), A_LC);
    a.set(W(VIP6(0x14)), A_EMPTY);
    a.set(W(NODE6), A_NODE);
    a.set(W(LB6), A_LB);
    a.set(W('fd00:10:244:2::9'), A_NOT_SERVICE);
  }

  /** dpProcess's verdict for the packet just written: packet 0's translation is remembered. */
  after(verdict: number): void {
    if (this.phase !== 0) return;
    const a = this.a;
    const b = this.buf;
    if (verdict !== V_TX) {
      a.fill(0, A_T_SRC, A_T_DST + 4);
      this.tsport = this.tdport = 0;
      return;
    }
    for (let k = 0; k < 4; k++) {
      a[A_T_SRC + k] = read32s(b, OFF + 8 + 4 * k);
      a[A_T_DST + k] = read32s(b, OFF + 24 + 4 * k);
    }
    this.tsport = (b[OFF + 40] << 8) | b[OFF + 41];
    this.tdport = (b[OFF + 42] << 8) | b[OFF + 43];
  }

  protected startConversation(conv: number): void {
    const a = this.a;
    const host = 2 + (conv % 200);
    const kind = conv % 5;
    this.csport = 1024 + ((conv * 7) % 60000);
    this.cdport = 80;
    if (kind < 3) {
      setAddr(a, A_C_SRC, 0xfd000010, 0x02440001, 0, host); // fd00:10:244:1::host
      copy(a, A_C_DST, kind === 0 ? A_WEB : kind === 1 ? A_STICKY : A_LC);
    } else {
      // external clients: half inside the LB's source range (2001:db8:7::/64), half outside
      setAddr(a, A_C_SRC, 0x20010db8, 0x00070000 | (conv % 2), 0x80000000, host);
      copy(a, A_C_DST, kind === 3 ? A_NODE : A_LB);
      if (kind === 3) this.cdport = 30080;
    }
  }

  protected orig(flags: number): number {
    return writeTcp6(this.buf, OFF, this.a, A_C_SRC, A_C_DST, this.csport, this.cdport, flags);
  }

  protected reply(flags: number): number {
    return writeTcp6(this.buf, OFF, this.a, A_T_DST, A_T_SRC, this.tdport, this.tsport, flags);
  }

  /** The backend's Packet Too Big about the client's (translated) packet. */
  protected related(): number {
    const q = this.scratch;
    const n = writeTcp6(q, 0, this.a, A_T_SRC, A_T_DST, this.tsport, this.tdport, ACK);
    const b = this.buf;
    return icmpv6BuildError(b, OFF, b.length - OFF, q, 0, n, 2, 0, 1400, this.a, A_T_DST, 64);
  }

  protected other(conv: number): number {
    const b = this.buf;
    const a = this.a;
    setAddr(a, A_X, 0xfd000010, 0x02440001, 0, 2 + (conv % 200));
    const sport = 1024 + (conv % 50000);
    switch (Math.floor(conv / 8) % 10) {
      case 0:
        return writeUdp6(b, OFF, a, A_X, A_DNS, sport, 53, 0, -1);
      case 1:
        return writeUdp6(b, OFF, a, A_X, A_WEB, sport, 9999, 0, -1);
      case 2:
        return writeTcp6(b, OFF, a, A_X, A_EMPTY, sport, 80, SYN);
      case 3: {
        const n = writeTcp6(b, OFF, a, A_X, A_WEB, sport, 80, SYN);
        b[OFF + 6] = 0; // a Hop-by-Hop header where TCP is: cut short by the payload
        b[OFF + 41] = 200;
        return n;
      }
      case 4:
        return writeIcmp6(b, OFF, a, A_X, A_WEB, 128, conv & 0xffff);
      case 5:
        return writeUdp6(b, OFF, a, A_X, A_DNS, sport, 53, conv | 0x80000000, 0);
      case 6:
        // the later fragment of case 5's datagram (8 conversations on: same id, same source)
        setAddr(a, A_X, 0xfd000010, 0x02440001, 0, 2 + ((conv - 8) % 200));
        return writeUdp6(b, OFF, a, A_X, A_DNS, 0, 0, (conv - 8) | 0x80000000, 3);
      case 7:
        return writeTcp6(b, OFF, a, A_X, A_NOT_SERVICE, sport, 80, SYN);
      case 8:
        return writeIcmp6(b, OFF, a, A_X, A_WEB, 135, 0);
      default:
        return writeTcp6(b, OFF, a, A_X, A_WEB, sport, 80, RST);
    }
  }
}

function read32s(b: Uint8Array, at: number): number {
  return (b[at] << 24) | (b[at + 1] << 16) | (b[at + 2] << 8) | b[at + 3];
}

function setAddr(a: Int32Array, at: number, w0: number, w1: number, w2: number, w3: number): void {
  a[at] = w0;
  a[at + 1] = w1;
  a[at + 2] = w2;
  a[at + 3] = w3;
}

function copy(a: Int32Array, to: number, from: number): void {
  for (let k = 0; k < 4; k++) a[to + k] = a[from + k];
}

/** Fixed IPv6 header at `off`: `plen` bytes of payload after it, Next Header `nh`. */
function writeIp6(
  b: Uint8Array,
  off: number,
  a: Int32Array,
  s: number,
  d: number,
  plen: number,
  nh: number,
): void {
  put32(b, off, 0x60000000);
  put16(b, off + 4, plen);
  b[off + 6] = nh;
  b[off + 7] = 64;
  for (let k = 0; k < 4; k++) {
    // int32 words as they are: put32 writes either form, and a u32 >= 2^31 would be boxed
    // crossing a call V8 did not inline (an allocation the no-allocation test counts)
    put32(b, off + 8 + 4 * k, a[s + k]);
    put32(b, off + 24 + 4 * k, a[d + k]);
  }
}

/** A TCP segment with 12 bytes of data over IPv6; returns the packet length (72). */
export function writeTcp6(
  b: Uint8Array,
  off: number,
  a: Int32Array,
  s: number,
  d: number,
  sport: number,
  dport: number,
  flags: number,
): number {
  writeIp6(b, off, a, s, d, 32, TCP);
  const l4 = off + 40;
  put16(b, l4, sport);
  put16(b, l4 + 2, dport);
  put32(b, l4 + 4, 1000);
  put32(b, l4 + 8, (flags & ACK) !== 0 ? 2000 : 0);
  b[l4 + 12] = 5 << 4;
  b[l4 + 13] = flags;
  put16(b, l4 + 14, 64240);
  put32(b, l4 + 16, 0);
  for (let i = 20; i < 32; i++) b[l4 + i] = i;
  l4v6FillCsum(b, off, l4, l4 + 32, TCP);
  return 72;
}

/**
 * A UDP datagram with 16 bytes of data, or (fragOff >= 0) one fragment of a 48-byte one behind
 * a Fragment header (offset in 8-byte units; 0 = the first, which has the UDP header).
 */
export function writeUdp6(
  b: Uint8Array,
  off: number,
  a: Int32Array,
  s: number,
  d: number,
  sport: number,
  dport: number,
  id: number,
  fragOff: number,
): number {
  const fragged = fragOff >= 0;
  writeIp6(b, off, a, s, d, fragged ? 32 : 24, fragged ? 44 : UDP);
  let l4 = off + 40;
  if (fragged) {
    b[l4] = UDP;
    b[l4 + 1] = 0;
    put16(b, l4 + 2, (fragOff << 3) | (fragOff === 0 ? 1 : 0));
    put32(b, l4 + 4, id | 0);
    l4 += 8;
  }
  for (let i = 0; i < 24; i++) b[l4 + i] = i;
  if (fragOff <= 0) {
    put16(b, l4, sport);
    put16(b, l4 + 2, dport);
    put16(b, l4 + 4, fragged ? 48 : 24);
    put16(b, l4 + 6, 0);
    // a first fragment's checksum covers the whole datagram: any non-zero value stands in
    if (fragged) put16(b, l4 + 6, 0x1234);
    else l4v6FillCsum(b, off, l4, l4 + 24, UDP);
  }
  return fragged ? 72 : 64;
}

/** An ICMPv6 message (echo request: `id`; Neighbor Solicitation: the target) of 24 bytes. */
function writeIcmp6(
  b: Uint8Array,
  off: number,
  a: Int32Array,
  s: number,
  d: number,
  type: number,
  id: number,
): number {
  writeIp6(b, off, a, s, d, 24, ICMPV6);
  const l4 = off + 40;
  b[l4] = type;
  b[l4 + 1] = 0;
  put16(b, l4 + 2, 0);
  put16(b, l4 + 4, id);
  put16(b, l4 + 6, 1);
  for (let i = 8; i < 24; i++) b[l4 + i] = i;
  l4v6FillCsum(b, off, l4, l4 + 24, ICMPV6);
  return 64;
}

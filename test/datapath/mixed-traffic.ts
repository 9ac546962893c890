// A deterministic stream of mixed traffic for the whole program, written packet by packet into
// one preallocated buffer (at an odd offset) so that the generator itself allocates nothing:
// the no-allocation test measures the datapath, not its driver. The fuzz test mutates the
// same stream.
//
// Conversations of 8 packets, frontends in turn (ClusterIP random / rr+affinity / lc, NodePort
// and LoadBalancer from an external client, so SNAT and externalTrafficPolicy: Local run too):
//
//   0 SYN client -> frontend            (new flow; after() records the translated tuple)
//   1 SYN+ACK backend -> client/natAddr (reverse NAT / reverse SNAT)
//   2 ACK client -> frontend            (established)
//   3 ICMP frag-needed backend -> ...   (error quoting the translated packet: RELATED)
//   4 FIN client   5 FIN+ACK backend   6 ACK client
//   7 something else, in turn: UDP to a maglev service, UDP to an unknown VIP port (reject),
//     TCP to a service without endpoints (reject), a malformed header, ICMP echo to a VIP,
//     a UDP first fragment and its later fragment, traffic that is no service's, an RST for no
//     flow.

import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { V_TX } from '../../src/datapath/state/verdict.ts';
import type { ResolvedServicePort } from '../../src/model.ts';
import { l4FillCsum } from '../../src/wire/checksum.ts';
import { icmpBuildFragNeeded } from '../../src/wire/icmp.ts';
import { ipv4FillCsum } from '../../src/wire/ipv4.ts';
import {
  ACK,
  endpoint,
  FIN,
  get16,
  get32,
  ICMP,
  ip,
  put16,
  put32,
  RST,
  SYN,
  service,
  servicePort,
  TCP,
  UDP,
  loaderOf,
} from './harness.ts';

/**
 * The node's and the outside world's addresses. HIGH_ADDRS are the usual ones (172.30/16,
 * 192.0.2/24), >= 2^31: as u32 values V8 (without pointer compression, as node ships) would
 * box them, as the fast path's int32 it does not. LOW_ADDRS keep every address below 2^31,
 * where both forms are small integers.
 */
export interface ExtAddrs {
  node: string;
  extNet: string;
  lb: string;
  /** loadBalancerSourceRanges: the lower half of extNet's /16 */
  range: string;
}
export const HIGH_ADDRS: ExtAddrs = {
  node: '172.30.0.11',
  extNet: '172.30.0.0',
  lb: '192.0.2.10',
  range: '172.30.0.0/17',
};
export const LOW_ADDRS: ExtAddrs = {
  node: '12.30.0.11',
  extNet: '12.30.0.0',
  lb: '12.0.2.10',
  range: '12.30.0.0/17',
};
const VIP_WEB = ip('10.96.0.10');
const VIP_STICKY = ip('10.96.0.11');
const VIP_DNS = ip('10.96.0.12');
const VIP_LC = ip('10.96.0.13');
const VIP_EMPTY = ip('10.96.0.14');
const POD_CLIENTS = ip('10.244.1.0');
const NOT_A_SERVICE = ip('10.244.2.9');

/**
 * Packet k's clock: 20 ms apart, so that conntrack entries expire (SYN_SENT 120 s = 6000
 * packets) and the 2048-entry table runs full now and then, not all the time.
 */
export function clockMs(k: number): number {
  return 1_000_000 + k * 20;
}

/** Where packets start in the buffer: odd, inside a larger buffer (the byteOffset bug class). */
export const OFF = 3;

/** The datapath every mixed-traffic test runs: NodePort, SNAT, affinity, schedulers, LB. */
export function mixedDatapath(seed: number, ctCapacity: number, addrs: ExtAddrs): Datapath {
  const dp = createDatapath({
    seed,
    nodeIp: ip(addrs.node),
    podGateway: ip('10.244.1.1'),
    podCidr: '10.244.1.0/24',
    clusterCidr: '10.244.0.0/16',
    // small tables so that full-table paths (inline GC, SNAT full) run too
    ctCapacity,
    snatCapacity: 1024,
    affinityCapacity: 1024,
    fragCapacity: 64,
    icmpRatePerSec: 0, // every reject builds its reply
  });
  const eps = (port: number) => [
    endpoint(`10.244.1.2:${port}`, { nodeName: 'node1' }),
    endpoint(`10.244.2.2:${port}`, { nodeName: 'node2' }),
    endpoint(`10.244.2.3:${port}`, { nodeName: 'node2' }),
  ];
  const sched = (name: string) => ({ annotations: { 'kubetun.io/scheduler': name } });
  const ports: ResolvedServicePort[] = [];
  const web = servicePort(service('web', '10.96.0.10', { type: 'NodePort' }), 80, 'TCP', eps(8080));
  web.port.nodePort = 30080;
  const sticky = service('sticky', '10.96.0.11', { sessionAffinity: 'ClientIP', ...sched('rr') });
  const lb = service('lc', '10.96.0.13', {
    type: 'LoadBalancer',
    externalTrafficPolicy: 'Local',
    loadBalancerIPs: [addrs.lb],
    loadBalancerSourceRanges: [addrs.range],
    ...sched('lc'),
  });
  const lbPort = servicePort(lb, 80, 'TCP', eps(8080));
  lbPort.port.nodePort = 30081;
  ports.push(
    web,
    servicePort(sticky, 80, 'TCP', eps(8080)),
    servicePort(service('dns', '10.96.0.12', sched('maglev')), 53, 'UDP', eps(5353)),
    lbPort,
    servicePort(service('empty', '10.96.0.14'), 80, 'TCP', []),
  );
  loaderOf(dp).load(ports, { nodeName: 'node1' });
  return dp;
}

/** IPv4 header (IHL 5) at `off`; the checksum is filled by the caller after the L4 part. */
function writeIp(
  b: Uint8Array,
  off: number,
  proto: number,
  src: number,
  dst: number,
  l4Len: number,
  id: number,
  frag: number,
): void {
  b[off] = 0x45;
  b[off + 1] = 0;
  put16(b, off + 2, 20 + l4Len);
  put16(b, off + 4, id);
  put16(b, off + 6, frag);
  b[off + 8] = 64;
  b[off + 9] = proto;
  put16(b, off + 10, 0);
  put32(b, off + 12, src);
  put32(b, off + 16, dst);
}

/** A TCP segment with 12 bytes of data; returns the packet length. */
export function writeTcp(
  b: Uint8Array,
  off: number,
  src: number,
  dst: number,
  sport: number,
  dport: number,
  flags: number,
): number {
  writeIp(b, off, TCP, src, dst, 32, 0x1234, 0x4000);
  const l4 = off + 20;
  put16(b, l4, sport);
  put16(b, l4 + 2, dport);
  put32(b, l4 + 4, 1000);
  put32(b, l4 + 8, (flags & ACK) !== 0 ? 2000 : 0);
  b[l4 + 12] = 5 << 4;
  b[l4 + 13] = flags;
  put16(b, l4 + 14, 64240);
  put32(b, l4 + 16, 0);
  for (let i = 20; i < 32; i++) b[l4 + i] = i;
  ipv4FillCsum(b, off);
  l4FillCsum(b, off);
  return 52;
}

/** A UDP datagram with 16 bytes of data, or one fragment of it (`frag`: flags + offset). */
export function writeUdp(
  b: Uint8Array,
  off: number,
  src: number,
  dst: number,
  sport: number,
  dport: number,
  id: number,
  frag: number,
): number {
  const later = (frag & 0x1fff) !== 0;
  writeIp(b, off, UDP, src, dst, 24, id, frag);
  const l4 = off + 20;
  for (let i = 0; i < 24; i++) b[l4 + i] = i;
  if (!later) {
    put16(b, l4, sport);
    put16(b, l4 + 2, dport);
    put16(b, l4 + 4, (frag & 0x2000) !== 0 ? 48 : 24); // a first fragment: the whole datagram
    put16(b, l4 + 6, 0);
  }
  ipv4FillCsum(b, off);
  if (frag === 0) l4FillCsum(b, off);
  return 44;
}

function writeEcho(b: Uint8Array, off: number, src: number, dst: number, ident: number): number {
  writeIp(b, off, ICMP, src, dst, 16, 0x4321, 0);
  const l4 = off + 20;
  b[l4] = 8;
  b[l4 + 1] = 0;
  put16(b, l4 + 2, 0);
  put16(b, l4 + 4, ident);
  put16(b, l4 + 6, 1);
  for (let i = 8; i < 16; i++) b[l4 + i] = i;
  ipv4FillCsum(b, off);
  l4FillCsum(b, off);
  return 36;
}

/**
 * The conversations of 8 packets both streams play (this file's header): next(k) writes packet
 * k into buf at OFF and returns its length; a stream says how each kind of packet is written.
 */
export abstract class Conversations {
  readonly buf = new Uint8Array(2048);
  protected phase = 0;

  /** Write packet k; returns its length (at OFF). */
  next(k: number): number {
    const conv = Math.floor(k / 8);
    this.phase = k % 8;
    if (this.phase === 0) this.startConversation(conv);
    switch (this.phase) {
      case 0:
        return this.orig(SYN);
      case 1:
        return this.reply(SYN | ACK);
      case 2:
        return this.orig(ACK);
      case 3:
        return this.related();
      case 4:
        return this.orig(FIN | ACK);
      case 5:
        return this.reply(FIN | ACK);
      case 6:
        return this.orig(ACK);
      default:
        return this.other(conv);
    }
  }

  /** Call with dpProcess's verdict: packet 0's translation is what the backend answers. */
  abstract after(verdict: number): void;
  protected abstract startConversation(conv: number): void;
  /** client -> frontend */
  protected abstract orig(flags: number): number;
  /** backend -> client, as translated by packet 0 */
  protected abstract reply(flags: number): number;
  /** an ICMP error from the backend about the client's translated packet */
  protected abstract related(): number;
  protected abstract other(conv: number): number;
}

/**
 * The IPv4 stream. Its addresses are int32, as the datapath's own (src/datapath/README.md,
 * "Allocation"): as u32 values >= 2^31 (HIGH_ADDRS) were boxed wherever they crossed a call V8
 * did not inline, and the generator, not the program, allocated up to ~3 B per packet — enough
 * young GCs on a busy machine to fail the no-allocation test. put32 writes either form.
 */
export class MixedTraffic extends Conversations {
  private readonly scratch = new Uint8Array(128);
  // the current conversation: the client's tuple, and the translated one after packet 0
  private csrc = 0;
  private cdst = 0;
  private csport = 0;
  private cdport = 0;
  private tsrc = 0;
  private tdst = 0;
  private tsport = 0;
  private tdport = 0;
  private readonly node: number;
  private readonly extNet: number;
  private readonly lb: number;

  constructor(addrs: ExtAddrs) {
    super();
    this.node = ip(addrs.node) | 0;
    this.extNet = ip(addrs.extNet) | 0;
    this.lb = ip(addrs.lb) | 0;
  }

  after(verdict: number): void {
    if (this.phase !== 0) return;
    if (verdict !== V_TX) {
      this.tsrc = this.tdst = this.tsport = this.tdport = 0;
      return;
    }
    const b = this.buf;
    this.tsrc = get32(b, OFF + 12) | 0;
    this.tdst = get32(b, OFF + 16) | 0;
    this.tsport = get16(b, OFF + 20);
    this.tdport = get16(b, OFF + 22);
  }

  protected startConversation(conv: number): void {
    const host = 2 + (conv % 200);
    const kind = conv % 5;
    this.csport = 1024 + ((conv * 7) % 60000);
    this.cdport = 80;
    if (kind < 3) {
      this.csrc = (POD_CLIENTS + host) | 0;
      this.cdst = kind === 0 ? VIP_WEB : kind === 1 ? VIP_STICKY : VIP_LC;
    } else {
      // external clients: half inside the LB's source range (172.30.0.0/17), half outside
      this.csrc = (this.extNet + (conv % 2) * 0x8000 + host) | 0;
      this.cdst = kind === 3 ? this.node : this.lb;
      if (kind === 3) this.cdport = 30080;
    }
  }

  protected orig(flags: number): number {
    return writeTcp(this.buf, OFF, this.csrc, this.cdst, this.csport, this.cdport, flags);
  }

  protected reply(flags: number): number {
    return writeTcp(this.buf, OFF, this.tdst, this.tsrc, this.tdport, this.tsport, flags);
  }

  /** The backend's ICMP frag-needed about the client's (translated) packet. */
  protected related(): number {
    const q = this.scratch;
    const n = writeTcp(q, 0, this.tsrc, this.tdst, this.tsport, this.tdport, ACK);
    const b = this.buf;
    return icmpBuildFragNeeded(b, OFF, b.length - OFF, q, 0, n, 1400, this.tdst, 64);
  }

  protected other(conv: number): number {
    const b = this.buf;
    const src = (POD_CLIENTS + 2 + (conv % 200)) | 0;
    const sport = 1024 + (conv % 50000);
    switch (Math.floor(conv / 8) % 9) {
      case 0:
        return writeUdp(b, OFF, src, VIP_DNS, sport, 53, 0, 0);
      case 1:
        return writeUdp(b, OFF, src, VIP_WEB, sport, 9999, 0, 0);
      case 2:
        return writeTcp(b, OFF, src, VIP_EMPTY, sport, 80, SYN);
      case 3: {
        const n = writeTcp(b, OFF, src, VIP_WEB, sport, 80, SYN);
        b[OFF] = (conv & 1) === 0 ? 0x65 : 0x44; // version 6 / IHL 4
        return n;
      }
      case 4:
        return writeEcho(b, OFF, src, VIP_WEB, conv & 0xffff);
      case 5:
        return writeUdp(b, OFF, src, VIP_DNS, sport, 53, conv & 0xffff, 0x2000);
      case 6:
        // the later fragment of case 5's datagram (8 conversations on: same id, same source)
        return writeUdp(b, OFF, (src - 8) | 0, VIP_DNS, 0, 0, (conv - 8) & 0xffff, 3);
      case 7:
        return writeTcp(b, OFF, src, NOT_A_SERVICE, sport, 80, SYN);
      default:
        return writeTcp(b, OFF, src, VIP_WEB, sport, 80, RST);
    }
  }
}

/** Seeded LCG: the same damage on every run (the fuzz tests, `npm run soak`). */
export function lcg(seed: number): (n: number) => number {
  let s = seed >>> 0;
  return (n: number) => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return Math.floor((s / 2 ** 32) * n);
  };
}

/**
 * Damage the packet at buf[OFF..OFF+len) in place: a few bytes overwritten, the IPv4 header
 * checksum repaired half the time (so parse lets the damage through to the later stages), the
 * length sometimes cut or stretched. Returns the length to hand to dpProcess.
 */
export function damage(buf: Uint8Array, len: number, rnd: (n: number) => number): number {
  for (let m = rnd(4); m >= 0; m--) buf[OFF + rnd(len)] = rnd(256);
  if (rnd(2) === 0 && (buf[OFF] & 0xf0) === 0x40 && (buf[OFF] & 15) >= 5) ipv4FillCsum(buf, OFF);
  const cut = rnd(8);
  if (cut === 0) return rnd(len + 1); // truncated
  if (cut === 1) return Math.min(len + rnd(64), buf.length - OFF); // trailing bytes
  return len;
}

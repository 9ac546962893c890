// The packet loop with offloads on, IPv6 packets (processVnet6): the real datapath, a recording
// fake TUN, and the kernel's half of a partial checksum done here the way the kernel does it
// (sum from csum_start to the end into the seed, complement), checked against harness6's
// independent checksum:
//
//   SYN (zero header) ──▶ DNAT          data, NEEDS_CSUM ──▶ DNAT, seed for the new addresses
//   reply, NEEDS_CSUM ──▶ reverse NAT, seed for the VIP
//   UDP_L4 super-packet (USO6), 3 segments ──▶ DNAT once, segments counted, seed right
//   GSO TCPV4 on an IPv6 packet, csum_start not at 40 ──▶ dropped, each under its own counter
import { describe, expect, it } from 'vitest';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import { AGENT_COUNTER_NAMES, createPacketLoop } from '../../src/node/loop.ts';
import type { TunDevice } from '../../src/tun/tun.ts';
import { parseCidr } from '../../src/wire/addr.ts';
import {
  VNET_F_NEEDS_CSUM,
  VNET_GSO_NONE,
  VNET_GSO_TCPV4,
  VNET_GSO_UDP_L4,
  VNET_HDR_LEN,
  type VnetHdrRepr,
  vnetEmit,
  vnetParse,
} from '../../src/wire/virtio.ts';
import { ACK, loaderOf, PSH, SYN, UDP } from '../datapath/harness.ts';
import {
  buildTcp6,
  buildUdp6,
  l6CsumVerifies,
  servicePort6,
  tuple6,
} from '../datapath/harness6.ts';

const CLIENT = 'fd00:244:1::10';
const VIP = 'fd00:10:96::10';
const BE = 'fd00:244:2::11';

function setup() {
  const dp = createDatapath();
  loaderOf(dp).load([
    servicePort6('web', VIP, 80, 'TCP', [`[${BE}]:8080`]),
    servicePort6('dns', VIP, 53, 'UDP', [`[${BE}]:5353`]),
  ]);
  const writes: Uint8Array[] = [];
  const fake = {
    writeBatch(buf: Uint8Array, offs: Uint32Array, lens: Uint32Array, n: number): number {
      for (let i = 0; i < n; i++) writes.push(buf.slice(offs[i], offs[i] + lens[i]));
      return n;
    },
    write(buf: Uint8Array, off: number, len: number): boolean {
      writes.push(buf.slice(off, off + len));
      return true;
    },
  } as unknown as TunDevice;
  const loop = createPacketLoop(dp, fake, parseCidr('10.96.0.0/16'), 16, () => 5_000_000, {
    vnet: true,
  });
  return { dp, loop, writes };
}

function sum16(p: Uint8Array, from: number, to: number, s = 0): number {
  for (let i = from; i < to; i += 2) s += (p[i] << 8) | (i + 1 < to ? p[i + 1] : 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}

/**
 * The IPv6 packet behind a header; with NEEDS_CSUM its L4 checksum field holds the seed: the
 * folded, non-complemented pseudo-header sum, as the kernel leaves it.
 */
function withHdr(ipPkt: Uint8Array, hdr: Partial<VnetHdrRepr> = {}): Uint8Array {
  const p = new Uint8Array(VNET_HDR_LEN + ipPkt.length);
  p.set(ipPkt, VNET_HDR_LEN);
  const h: VnetHdrRepr = {
    flags: 0,
    gsoType: VNET_GSO_NONE,
    hdrLen: 0,
    gsoSize: 0,
    csumStart: 0,
    csumOffset: 0,
    ...hdr,
  };
  vnetEmit(h, p, 0);
  if (h.flags & VNET_F_NEEDS_CSUM) {
    const ip = VNET_HDR_LEN;
    const proto = p[ip + 6];
    const l4len = ipPkt.length - 40;
    const seed = sum16(p, ip + 8, ip + 40, proto + l4len);
    const at = ip + h.csumStart + h.csumOffset;
    p[at] = seed >>> 8;
    p[at + 1] = seed & 0xff;
  }
  return p;
}

/** What the kernel does to a NEEDS_CSUM packet before it leaves: the IPv6 packet, finished. */
function finish(w: Uint8Array): Uint8Array {
  const h = vnetParse(w, 0);
  const p = w.slice(VNET_HDR_LEN);
  const at = h.csumStart + h.csumOffset;
  const c = ~sum16(p, h.csumStart, p.length) & 0xffff;
  const v = c === 0 && p[6] === UDP ? 0xffff : c;
  p[at] = v >>> 8;
  p[at + 1] = v & 0xff;
  return p;
}

function handle(loop: ReturnType<typeof setup>['loop'], pkts: Uint8Array[]): void {
  const size = pkts.reduce((a, p) => a + p.length + 8, 8);
  const buf = new Uint8Array(size);
  const offs = new Uint32Array(16);
  const lens = new Uint32Array(16);
  let at = 5; // odd: nothing may assume alignment
  pkts.forEach((p, i) => {
    buf.set(p, at);
    offs[i] = at;
    lens[i] = p.length;
    at += p.length + 3;
  });
  loop.handle(buf, offs, lens, pkts.length);
}

const counter = (loop: { counters: Float64Array }, name: string) =>
  loop.counters[AGENT_COUNTER_NAMES.indexOf(name)];
const TCP_PARTIAL = { flags: VNET_F_NEEDS_CSUM, hdrLen: 60, csumStart: 40, csumOffset: 16 };

describe('packet loop with offloads, IPv6', () => {
  it('re-derives a partial checksum for the new addresses, both directions', () => {
    const { loop, writes } = setup();
    const flow = { src: CLIENT, dst: VIP, sport: 40000, dport: 80 };
    const data = 'x'.repeat(1999);
    handle(loop, [
      withHdr(buildTcp6({ ...flow, flags: SYN })),
      withHdr(buildTcp6({ ...flow, flags: ACK | PSH, data }), TCP_PARTIAL),
    ]);
    expect(writes.length).toBe(2);
    expect(tuple6(writes[1].slice(VNET_HDR_LEN))).toBe(`[${CLIENT}]:40000 > [${BE}]:8080`);
    expect(vnetParse(writes[1], 0)).toMatchObject({ ...TCP_PARTIAL, gsoType: VNET_GSO_NONE });
    expect(l6CsumVerifies(finish(writes[1]))).toBe(true);
    const back = { src: BE, dst: CLIENT, sport: 8080, dport: 40000, flags: ACK | PSH, data };
    handle(loop, [withHdr(buildTcp6(back), TCP_PARTIAL)]);
    expect(tuple6(writes[2].slice(VNET_HDR_LEN))).toBe(`[${VIP}]:80 > [${CLIENT}]:40000`);
    expect(l6CsumVerifies(finish(writes[2]))).toBe(true);
  });

  it('translates a UDP_L4 super-packet once and counts its segments', () => {
    const { dp, loop, writes } = setup();
    const bytes = new Uint8Array(3000).map((_, k) => (k * 7) & 0xff);
    const dg = buildUdp6({ src: CLIENT, dst: VIP, sport: 40001, dport: 53, bytes });
    const hdr = { ...TCP_PARTIAL, gsoType: VNET_GSO_UDP_L4, gsoSize: 1000, csumOffset: 6 };
    handle(loop, [withHdr(dg, { ...hdr, hdrLen: 48 })]);
    expect(writes.length).toBe(1);
    expect(tuple6(writes[0].slice(VNET_HDR_LEN))).toBe(`[${CLIENT}]:40001 > [${BE}]:5353`);
    expect(l6CsumVerifies(finish(writes[0]))).toBe(true);
    expect(counter(loop, 'AGENT_GSO_SEGMENTS')).toBe(3);
    expect(dp.ct6.pktsOrig(dp.lastCtIdx)).toBe(3);
  });

  it('drops an IPv6 packet with an IPv4 GSO type or a checksum not at its transport header', () => {
    const { loop, writes } = setup();
    const syn = buildTcp6({ src: CLIENT, dst: VIP, sport: 40002, dport: 80, flags: SYN });
    handle(loop, [
      withHdr(syn, { ...TCP_PARTIAL, gsoType: VNET_GSO_TCPV4, gsoSize: 1000 }),
      withHdr(syn, { ...TCP_PARTIAL, csumStart: 20 }),
    ]);
    expect(writes.length).toBe(0);
    expect(counter(loop, 'AGENT_DROP_VNET_BAD_GSO_TYPE')).toBe(1);
    expect(counter(loop, 'AGENT_DROP_VNET_BAD_CSUM')).toBe(1);
  });
});

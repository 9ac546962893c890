// The packet loop with offloads on (every read and write behind a virtio_net_hdr), with the real
// datapath and a recording fake TUN:
//
//   SYN (zero header) ──▶ DNAT, header kept
//   TCP super-packet, 64 000 B at MSS 1448, partial checksum ──▶ DNAT once: header untouched,
//       seed re-derived for the new addresses, conntrack counts 45 packets and the wire's bytes
//   super-packet to a pod (no service) ──▶ written back byte for byte
//   SYN to a VIP without endpoints ──▶ ICMP reject behind a zero header
//   malformed headers ──▶ dropped, each counted under its own name, nothing written
import { describe, expect, it } from 'vitest';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import {
  AGENT_COUNTER_NAMES,
  AGENT_GSO_PACKETS,
  AGENT_GSO_SEGMENTS,
  createPacketLoop,
} from '../../src/node/loop.ts';
import type { TunDevice } from '../../src/tun/tun.ts';
import { parseCidr } from '../../src/wire/addr.ts';
import { csumFold, pseudoHeaderSum } from '../../src/wire/checksum.ts';
import {
  VNET_F_NEEDS_CSUM,
  VNET_GSO_TCPV4,
  VNET_HDR_LEN,
  type VnetHdrRepr,
  vnetEmit,
  vnetParse,
} from '../../src/wire/virtio.ts';
import {
  ACK,
  buildTcp,
  endpoint,
  get16,
  get32,
  ipStr,
  loaderOf,
  PSH,
  put16,
  SYN,
  service,
  servicePort,
} from '../datapath/harness.ts';

const CLIENT = '10.244.1.10';
const MSS = 1448;
const PAYLOAD = 64_000;
const SEGS = Math.ceil(PAYLOAD / MSS); // 45
const HDRS = 20 + 32; // IPv4 + TCP with timestamps

function setup() {
  const dp = createDatapath();
  loaderOf(dp).load([
    servicePort(service('web', '10.96.0.10'), 80, 'TCP', [endpoint('10.244.2.11:8080')]),
    servicePort(service('empty', '10.96.0.20'), 80, 'TCP', []),
  ]);
  const writes: { kind: string; pkts: Uint8Array[] }[] = [];
  const fake = {
    writeBatch(buf: Uint8Array, offs: Uint32Array, lens: Uint32Array, n: number): number {
      const pkts = [];
      for (let i = 0; i < n; i++) pkts.push(buf.slice(offs[i], offs[i] + lens[i]));
      writes.push({ kind: 'batch', pkts });
      return n;
    },
    write(buf: Uint8Array, off: number, len: number): boolean {
      writes.push({ kind: 'one', pkts: [buf.slice(off, off + len)] });
      return true;
    },
  } as unknown as TunDevice;
  const loop = createPacketLoop(dp, fake, parseCidr('10.96.0.0/16'), 16, () => 5_000_000, {
    vnet: true,
  });
  return { dp, loop, writes };
}

/** A plain packet behind the zero header. */
function plain(ipPkt: Uint8Array): Uint8Array {
  const p = new Uint8Array(VNET_HDR_LEN + ipPkt.length);
  p.set(ipPkt, VNET_HDR_LEN);
  return p;
}

const HDR: VnetHdrRepr = {
  flags: VNET_F_NEEDS_CSUM,
  gsoType: VNET_GSO_TCPV4,
  hdrLen: HDRS,
  gsoSize: MSS,
  csumStart: 20,
  csumOffset: 16,
};

/** A TCP super-packet as the kernel hands it over: partial checksum (pseudo-header seed). */
function superPacket(dst: string, dport: number, hdr: Partial<VnetHdrRepr> = {}): Uint8Array {
  const head = buildTcp({ src: CLIENT, dst, sport: 40000, dport, flags: ACK | PSH, seq: 1001 });
  const p = new Uint8Array(VNET_HDR_LEN + HDRS + PAYLOAD);
  const ip = VNET_HDR_LEN;
  p.set(head.subarray(0, 40), ip);
  p[ip + 32] = 8 << 4; // 12 bytes of options (NOP NOP timestamp)
  p.set([1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2], ip + 40);
  for (let k = 0; k < PAYLOAD; k++) p[ip + HDRS + k] = (k * 7) & 0xff;
  put16(p, ip + 2, HDRS + PAYLOAD);
  put16(p, ip + 10, 0);
  let s = 0;
  for (let k = 0; k < 20; k += 2) s += get16(p, ip + k);
  put16(p, ip + 10, ~csumFold(s) & 0xffff);
  put16(p, ip + 36, csumFold(pseudoHeaderSum(p, ip, 6, HDRS + PAYLOAD)));
  vnetEmit({ ...HDR, ...hdr }, p, 0);
  return p;
}

function batch(pkts: Uint8Array[]) {
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
  return { buf, offs, lens, n: pkts.length };
}

function counter(loop: { counters: Float64Array }, name: string): number {
  return loop.counters[AGENT_COUNTER_NAMES.indexOf(name)];
}

describe('packet loop with offloads', () => {
  it('translates a TCP super-packet once, keeps its header and a correct partial checksum', () => {
    const { dp, loop, writes } = setup();
    const syn = plain(
      buildTcp({ src: CLIENT, dst: '10.96.0.10', sport: 40000, dport: 80, flags: SYN }),
    );
    const sp = superPacket('10.96.0.10', 80);
    const b = batch([syn, sp]);
    loop.handle(b.buf, b.offs, b.lens, b.n);
    expect(writes.length).toBe(1);
    const [wSyn, wSp] = writes[0].pkts;
    expect([...wSyn.subarray(0, VNET_HDR_LEN)]).toEqual(new Array(10).fill(0));
    expect(wSp.length).toBe(sp.length);
    expect(vnetParse(wSp, 0)).toEqual(HDR);
    const ip = VNET_HDR_LEN;
    expect(`${ipStr(get32(wSp, ip + 16))}:${get16(wSp, ip + 22)}`).toBe('10.244.2.11:8080');
    // the field holds what the kernel would put there for the new addresses (not a full checksum)
    expect(get16(wSp, ip + 36)).toBe(csumFold(pseudoHeaderSum(wSp, ip, 6, HDRS + PAYLOAD)));
    // payload untouched
    expect(wSp.subarray(ip + HDRS)).toEqual(sp.subarray(ip + HDRS));
    expect(loop.counters[AGENT_GSO_PACKETS]).toBe(1);
    expect(loop.counters[AGENT_GSO_SEGMENTS]).toBe(SEGS);
    // conntrack: the SYN and the 45 segments the wire carries, with their headers
    const i = dp.lastCtIdx;
    expect(dp.ct.pktsOrig(i)).toBe(1 + SEGS);
    expect(dp.ct.bytesOrig(i)).toBe(40 + PAYLOAD + SEGS * HDRS);
  });

  it('writes a super-packet no service touches back byte for byte', () => {
    const { loop, writes } = setup();
    const sp = superPacket('10.244.2.12', 22);
    const b = batch([sp]);
    loop.handle(b.buf, b.offs, b.lens, b.n);
    expect(writes[0].pkts[0]).toEqual(sp);
  });

  it('writes a generated reject behind a zero header', () => {
    const { loop, writes } = setup();
    const syn = plain(
      buildTcp({ src: CLIENT, dst: '10.96.0.20', sport: 40001, dport: 80, flags: SYN }),
    );
    const b = batch([syn]);
    loop.handle(b.buf, b.offs, b.lens, b.n);
    expect(writes.map((w) => w.kind)).toEqual(['one']);
    const r = writes[0].pkts[0];
    expect([...r.subarray(0, VNET_HDR_LEN)]).toEqual(new Array(10).fill(0));
    expect([r[VNET_HDR_LEN + 9], r[VNET_HDR_LEN + 20], r[VNET_HDR_LEN + 21]]).toEqual([1, 3, 3]);
  });

  it('drops each malformed header under its own counter and writes nothing', () => {
    const cases: [string, Uint8Array][] = [
      ['AGENT_DROP_VNET_TRUNCATED', new Uint8Array(7)],
      ['AGENT_DROP_VNET_BAD_GSO_TYPE', superPacket('10.96.0.10', 80, { gsoType: 2 })],
      ['AGENT_DROP_VNET_BAD_GSO_SIZE', superPacket('10.96.0.10', 80, { gsoSize: 0 })],
      ['AGENT_DROP_VNET_BAD_HDR_LEN', superPacket('10.96.0.10', 80, { hdrLen: 65_000 })],
      ['AGENT_DROP_VNET_BAD_CSUM', superPacket('10.96.0.10', 80, { csumStart: 64_100 })],
      ['AGENT_DROP_VNET_BAD_CSUM', superPacket('10.96.0.10', 80, { csumOffset: 6 })],
    ];
    for (const [name, p] of cases) {
      const { dp, loop, writes } = setup();
      const b = batch([p]);
      loop.handle(b.buf, b.offs, b.lens, b.n);
      expect([name, counter(loop, name), writes.length]).toEqual([name, 1, 0]);
      expect(dp.counters.reduce((a, c) => a + c, 0)).toBe(0); // never reached the program
    }
  });
});

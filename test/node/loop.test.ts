// The agent's packet loop (src/node/loop.ts) with the real datapath and a recording fake TUN:
// which packets are written back, in which calls, in which order.
//
//   batch: SYN->web VIP (TX) | to a pod (PASS) | SYN->empty VIP (REPLY) | to an unused address in
//          the service CIDR (PASS, would loop) | ping VIP (DROP) | to a pod (PASS)
//   expect: writeBatch[TX, PASS] · write[ICMP reject] · writeBatch[PASS]
import { describe, expect, it } from 'vitest';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import {
  AGENT_BATCHES,
  AGENT_DROP_SERVICE_CIDR_LOOP,
  AGENT_PACKETS,
  AGENT_TX_REFUSED,
  createPacketLoop,
} from '../../src/node/loop.ts';
import type { TunDevice } from '../../src/tun/tun.ts';
import { parseCidr } from '../../src/wire/addr.ts';
import { type Cidr6Words, parseCidr6Words } from '../../src/wire/addr6.ts';
import { buildTcp6, servicePort6, tuple6 } from '../datapath/harness6.ts';
import {
  buildIcmpEcho,
  buildTcp,
  endpoint,
  get16,
  ipStr,
  get32,
  SYN,
  service,
  servicePort,
  loaderOf,
} from '../datapath/harness.ts';

const CLIENT = '10.244.1.10';

function setup(accept = Number.POSITIVE_INFINITY, serviceCidr6?: Cidr6Words) {
  const dp = createDatapath();
  loaderOf(dp).load([
    servicePort(service('web', '10.96.0.10'), 80, 'TCP', [endpoint('10.244.1.11:8080')]),
    servicePort(service('empty', '10.96.0.20'), 80, 'TCP', []),
    servicePort6('web6', 'fd00:10:96::10', 80, 'TCP', ['[fd00:244:1::11]:8080']),
  ]);
  const calls: { kind: string; pkts: Uint8Array[] }[] = [];
  const fake = {
    writeBatch(buf: Uint8Array, offs: Uint32Array, lens: Uint32Array, n: number): number {
      const pkts = [];
      for (let i = 0; i < n; i++) pkts.push(buf.slice(offs[i], offs[i] + lens[i]));
      calls.push({ kind: 'batch', pkts });
      return Math.min(n, accept);
    },
    write(buf: Uint8Array, off: number, len: number): boolean {
      calls.push({ kind: 'one', pkts: [buf.slice(off, off + len)] });
      return true;
    },
  } as unknown as TunDevice;
  const loop = createPacketLoop(dp, fake, parseCidr('10.96.0.0/16'), 16, () => 5_000_000, {
    serviceCidr6,
  });
  return { dp, loop, calls };
}

/** Lays packets out at odd offsets in one buffer, as a TUN batch. */
function batch(pkts: Uint8Array[]) {
  const buf = new Uint8Array(4096);
  const offs = new Uint32Array(16);
  const lens = new Uint32Array(16);
  let at = 3;
  pkts.forEach((p, i) => {
    buf.set(p, at);
    offs[i] = at;
    lens[i] = p.length;
    at += p.length + 5;
  });
  return { buf, offs, lens, n: pkts.length };
}

const syn = (dst: string, dport: number, sport = 40000) =>
  buildTcp({ src: CLIENT, dst, sport, dport, flags: SYN });
const dst = (p: Uint8Array) => `${ipStr(get32(p, 16))}:${get16(p, 22)}`;

describe('packet loop', () => {
  it('writes TX and PASS in one batch, flushes before a reject, drops what would loop', () => {
    const { loop, calls } = setup();
    const b = batch([
      syn('10.96.0.10', 80),
      syn('10.244.1.12', 22),
      syn('10.96.0.20', 80, 40001),
      syn('10.96.7.7', 80, 40002),
      buildIcmpEcho({ src: CLIENT, dst: '10.96.0.10', ident: 1, seq: 1 }),
      syn('10.244.1.12', 22, 40003),
    ]);
    loop.handle(b.buf, b.offs, b.lens, b.n);
    expect(calls.map((c) => c.kind)).toEqual(['batch', 'one', 'batch']);
    expect(calls[0].pkts.map(dst)).toEqual(['10.244.1.11:8080', '10.244.1.12:22']);
    const reject = calls[1].pkts[0];
    expect([reject[9], reject[20], reject[21]]).toEqual([1, 3, 3]); // ICMP port unreachable
    expect(ipStr(get32(reject, 12))).toBe('10.96.0.20');
    expect(calls[2].pkts.map(dst)).toEqual(['10.244.1.12:22']);
    expect(loop.counters[AGENT_DROP_SERVICE_CIDR_LOOP]).toBe(1);
    expect(loop.counters[AGENT_PACKETS]).toBe(6);
    expect(loop.counters[AGENT_BATCHES]).toBe(1);
  });

  it('drops an IPv6 packet passed to the IPv6 service CIDR (a loop), only that one', () => {
    const { loop, calls } = setup(undefined, parseCidr6Words('fd00:10:96::/112'));
    const syn6 = (dst: string) =>
      buildTcp6({ src: 'fd00:244:1::10', dst, sport: 40000, dport: 22, flags: SYN });
    // an unassigned address of the CIDR; a pod; a pod whose low 32 bits look like 10.96.0.5
    const b = batch([syn6('fd00:10:96::99'), syn6('fd00:244:1::12'), syn6('fd00::a60:5')]);
    loop.handle(b.buf, b.offs, b.lens, b.n);
    expect(loop.counters[AGENT_DROP_SERVICE_CIDR_LOOP]).toBe(1);
    expect(calls.flatMap((c) => c.pkts.map(tuple6))).toEqual([
      '[fd00:244:1::10]:40000 > [fd00:244:1::12]:22',
      '[fd00:244:1::10]:40000 > [fd00::a60:5]:22',
    ]);
  });

  it('counts packets the kernel refused', () => {
    const { loop } = setup(1);
    const b = batch([syn('10.244.1.12', 22), syn('10.244.1.13', 22)]);
    loop.handle(b.buf, b.offs, b.lens, b.n);
    expect(loop.counters[AGENT_TX_REFUSED]).toBe(1);
  });
});

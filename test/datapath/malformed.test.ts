// Malformed and awkward packets: each malformation is dropped with its own reason and counter,
// nothing is rewritten, nothing is tracked; fragments and IP options are handled as documented.
//
//   bytes ──▶ dp4Parse ──▶ DROP_TRUNCATED_IPV4 | DROP_BAD_VERSION | DROP_BAD_IHL | DROP_BAD_TOTLEN
//                          DROP_BAD_IP_CSUM | DROP_TRUNCATED_L4 | DROP_BAD_TCP_DOFF | DROP_BAD_UDP_LEN
//             non-first fragment ──▶ PASS_NON_FIRST_FRAGMENT (no L4 header to look up)

import { beforeEach, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { dpProcess } from '../../src/datapath/program.ts';
import {
  PASS_NON_FIRST_FRAGMENT,
  REASON_COUNT,
  REASON_NAMES,
  reasonIsDrop,
} from '../../src/datapath/state/reasons.ts';
import { V_DROP, V_PASS, V_TX } from '../../src/datapath/state/verdict.ts';
import {
  buildIpv4,
  buildTcp,
  buildUdp,
  checksumsVerify,
  endpoint,
  get16,
  refillIpCsum,
  refSum,
  run,
  SYN,
  service,
  servicePort,
  loaderOf,
} from './harness.ts';

const VIP = '10.96.0.10';
const CLIENT = '10.244.1.10';

const syn = () => buildTcp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, flags: SYN });
const udp = () => buildUdp({ src: CLIENT, dst: VIP, sport: 40000, dport: 53, data: 'abcdefgh' });

/** Set the IP total length (and fix the header checksum). */
function withTotLen(p: Uint8Array, len: number): Uint8Array {
  p[2] = len >>> 8;
  p[3] = len & 255;
  return refillIpCsum(p);
}

const CASES: [string, () => Uint8Array][] = [
  ['DROP_TRUNCATED_IPV4', () => syn().subarray(0, 19)],
  // version 5: neither IPv4 nor IPv6 (a 6 goes to the IPv6 stages, program6.ts)
  ['DROP_BAD_VERSION', () => refillIpCsum(Object.assign(syn(), { 0: 0x55 }))],
  ['DROP_BAD_IHL', () => refillIpCsum(Object.assign(syn(), { 0: 0x44 }))],
  ['DROP_BAD_TOTLEN', () => withTotLen(syn(), 41)],
  ['DROP_BAD_IP_CSUM', () => Object.assign(syn(), { 11: syn()[11] ^ 1 })],
  ['DROP_TRUNCATED_L4', () => withTotLen(syn(), 30).subarray(0, 30)],
  ['DROP_BAD_TCP_DOFF', () => Object.assign(syn(), { 32: 4 << 4 })],
  ['DROP_BAD_UDP_LEN', () => Object.assign(udp(), { 24: 0, 25: 40 })],
];

describe('malformed packets', () => {
  let dp: Datapath;
  beforeEach(() => {
    dp = createDatapath();
    loaderOf(dp).load([
      servicePort(service('web', VIP), 80, 'TCP', [endpoint('10.244.2.5:8080')], 'http'),
      servicePort(service('dns', '10.96.0.53'), 53, 'UDP', [endpoint('10.244.3.7:53')], 'dns'),
    ]);
  });

  it.each(CASES)(
    '%s: dropped with that reason, bytes untouched, nothing tracked',
    (reason, make) => {
      const pkt = make();
      const r = run(dp, pkt);
      expect([r.verdict, r.reason]).toEqual([V_DROP, reason]);
      expect(r.pkt).toEqual(pkt);
      expect(dp.ct.size).toBe(0);
      expect(dp.counters[REASON_NAMES.indexOf(reason)]).toBe(1);
    },
  );

  it('gives every malformation a distinct reason', () => {
    expect(new Set(CASES.map(([r]) => r)).size).toBe(CASES.length);
  });

  it('truncates IHL beyond the buffer as DROP_TRUNCATED_IPV4, not as a bad IHL', () => {
    const p = syn().subarray(0, 22);
    p[0] = 0x46;
    expect(run(dp, p).reason).toBe('DROP_TRUNCATED_IPV4');
  });

  it('passes a non-first fragment of no tracked datagram, not to a VIP, untouched and counts it', () => {
    const tail = buildIpv4({ src: VIP, dst: CLIENT, fragOffset: 185 }, 6, new Uint8Array(100));
    const r = run(dp, tail);
    expect([r.verdict, r.reason]).toEqual([V_PASS, 'PASS_NON_FIRST_FRAGMENT']);
    expect(r.pkt).toEqual(tail);
    expect(dp.counters[PASS_NON_FIRST_FRAGMENT]).toBe(1);
  });

  it('translates a first fragment: its UDP length covers the whole datagram', () => {
    const whole = buildUdp({
      src: CLIENT,
      dst: '10.96.0.53',
      sport: 999,
      dport: 53,
      data: 'y'.repeat(3000),
    });
    const first = buildIpv4(
      { src: CLIENT, dst: '10.96.0.53', mf: true },
      17,
      whole.subarray(20, 20 + 1480),
    );
    const r = run(dp, first);
    expect([r.verdict, r.reason]).toEqual([V_TX, 'TX_DNAT_NEW']);
    expect(refSum(r.pkt, 0, 20)).toBe(0xffff);
    // The L4 checksum covers all fragments: it must equal the whole datagram's after the DNAT.
    const expected = buildUdp({
      src: CLIENT,
      dst: '10.244.3.7',
      sport: 999,
      dport: 53,
      data: 'y'.repeat(3000),
    });
    expect(get16(r.pkt, 26)).toBe(get16(expected, 26));
  });

  it('honours IP options: the L4 header starts after IHL*4 bytes', () => {
    const opts = [0x94, 0x04, 0, 0]; // Router Alert
    const sent = buildTcp({
      src: CLIENT,
      dst: VIP,
      sport: 40000,
      dport: 80,
      flags: SYN,
      options: opts,
    });
    const r = run(dp, sent);
    expect(r.reason).toBe('TX_DNAT_NEW');
    const want = buildTcp({
      src: CLIENT,
      dst: '10.244.2.5',
      sport: 40000,
      dport: 8080,
      flags: SYN,
      options: opts,
    });
    expect(r.pkt).toEqual(want);
    expect(checksumsVerify(r.pkt)).toBe(true);
  });

  it('never throws on garbage and accounts for every packet (seeded fuzz)', () => {
    let s = 12345;
    const rnd = (n: number) => {
      s = (Math.imul(s, 1103515245) + 12345) >>> 0;
      return Math.floor((s / 2 ** 32) * n);
    };
    const buf = new Uint8Array(200);
    const N = 20_000;
    for (let k = 0; k < N; k++) {
      const base = k % 2 === 0 ? syn() : udp();
      buf.set(base);
      for (let m = rnd(4); m >= 0; m--) buf[rnd(base.length)] = rnd(256);
      if (rnd(3) === 0) refillIpCsum(buf.subarray(0, Math.max(20, (buf[0] & 15) * 4)));
      const v = dpProcess(dp, buf, 0, rnd(base.length + 1), 1_000_000 + k);
      expect(v >= 0 && v <= 3).toBe(true);
      expect(dp.lastReason >= 0 && dp.lastReason < REASON_COUNT).toBe(true);
      if (v === V_DROP) expect(reasonIsDrop(dp.lastReason)).toBe(true);
    }
    expect(dp.counters.reduce((a, b) => a + b, 0)).toBe(N);
  });
});

// --vip-echo (vipEcho in the datapath config): the IPVS behaviour, a ping to a ClusterIP
// answered from the ClusterIP, as the node does for an address bound to kube-ipvs0. Off by
// default — then a ping to a VIP is dropped and counted exactly as before (icmp.test.ts).
import { describe, expect, it } from 'vitest';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import { DROP_ECHO_TO_VIP, REPLY_ECHO_FROM_VIP } from '../../src/datapath/state/reasons.ts';
import { V_DROP, V_PASS, V_REPLY } from '../../src/datapath/state/verdict.ts';
import {
  buildIcmp,
  buildIcmpEcho,
  checksumsVerify,
  endpoint,
  get16,
  ip,
  loaderOf,
  get32,
  run,
  service,
  refillIpCsum,
  servicePort,
} from './harness.ts';

const VIP = '10.96.0.10';
const CLIENT = '10.244.1.10';

function dpWith(vipEcho?: boolean) {
  const dp = createDatapath(vipEcho === undefined ? {} : { vipEcho });
  loaderOf(dp).load([servicePort(service('web', VIP), 80, 'TCP', [endpoint('10.244.2.5:8080')])]);
  return dp;
}

describe('--vip-echo', () => {
  it('off by default: the ping is dropped and counted, nothing is generated', () => {
    const dp = dpWith();
    const r = run(dp, buildIcmpEcho({ src: CLIENT, dst: VIP, ident: 7, seq: 1 }));
    expect([r.verdict, r.reason, r.out.length]).toEqual([V_DROP, 'DROP_ECHO_TO_VIP', 0]);
    expect(dp.counters[DROP_ECHO_TO_VIP]).toBe(1);
    expect(dp.counters[REPLY_ECHO_FROM_VIP]).toBe(0);
  });

  it('on: an echo reply from the VIP to the pinger, same id, sequence and data, checksums right', () => {
    const dp = dpWith(true);
    for (const seq of [1, 2, 3]) {
      const req = buildIcmpEcho({ src: CLIENT, dst: VIP, ident: 0x1234, seq, ttl: 61 });
      const r = run(dp, req);
      expect([r.verdict, r.reason]).toEqual([V_REPLY, 'REPLY_ECHO_FROM_VIP']);
      const o = r.out;
      expect(o.length).toBe(req.length);
      expect(get32(o, 12) >>> 0).toBe(ip(VIP) >>> 0);
      expect(get32(o, 16) >>> 0).toBe(ip(CLIENT) >>> 0);
      expect(o[8]).toBe(64); // the node's default TTL, not the request's
      expect(o[9]).toBe(1);
      expect([o[20], o[21]]).toEqual([0, 0]); // echo reply, code 0
      expect([get16(o, 24), get16(o, 26)]).toEqual([0x1234, seq]);
      expect(o.subarray(28)).toEqual(req.subarray(28));
      expect(checksumsVerify(o)).toBe(true);
    }
    expect(dp.counters[REPLY_ECHO_FROM_VIP]).toBe(3);
    expect(dp.counters[DROP_ECHO_TO_VIP]).toBe(0);
    expect(dp.ct.size).toBe(0);
  });

  it('on: a ping as large as the MTU allows is answered whole', () => {
    const dp = dpWith(true);
    const req = buildIcmp(
      { src: CLIENT, dst: VIP },
      8,
      0,
      0x0001_0001,
      new Uint8Array(1472).fill(0xa5),
    );
    const r = run(dp, req);
    expect(r.reason).toBe('REPLY_ECHO_FROM_VIP');
    expect(r.out.length).toBe(req.length);
    expect(checksumsVerify(r.out)).toBe(true);
  });

  it('on: pings to pods still pass, and a truncated echo to a VIP is still dropped', () => {
    const dp = dpWith(true);
    const pod = buildIcmpEcho({ src: CLIENT, dst: '10.244.2.5', ident: 1, seq: 1 });
    expect(run(dp, pod).verdict).toBe(V_PASS);
    const cut = buildIcmpEcho({ src: CLIENT, dst: VIP, ident: 1, seq: 1 }).slice(0, 24);
    cut[2] = 0;
    cut[3] = 24;
    cut[10] = 0;
    cut[11] = 0;
    const r = run(dp, refillIpCsum(cut));
    expect(r.reason).toBe('DROP_TRUNCATED_L4');
  });
});

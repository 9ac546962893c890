// ICMP and a ClusterIP, iptables mode: a ping to a VIP is neither translated nor answered (the
// client times out); ICMP that is not addressed to a VIP passes untouched.
//
//   client 10.244.1.10 ── echo ──▶ 10.96.0.10        DROP_ECHO_TO_VIP (counted, no reply)
//   client 10.244.1.10 ── echo ──▶ 10.244.2.5 (pod)  PASS_NOT_SERVICE
//   router ── ICMP unreachable ──▶ 10.244.1.10        PASS_NOT_SERVICE

import { beforeEach, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { DROP_ECHO_TO_VIP } from '../../src/datapath/state/reasons.ts';
import { V_DROP, V_PASS } from '../../src/datapath/state/verdict.ts';
import {
  buildIcmp,
  buildIcmpEcho,
  buildUdp,
  endpoint,
  refillIpCsum,
  run,
  service,
  servicePort,
  loaderOf,
} from './harness.ts';

const VIP = '10.96.0.10';

describe('ICMP', () => {
  let dp: Datapath;
  beforeEach(() => {
    dp = createDatapath();
    loaderOf(dp).load([servicePort(service('web', VIP), 80, 'TCP', [endpoint('10.244.2.5:8080')])]);
  });

  it('drops a ping to a VIP without answering, and counts it', () => {
    for (let seq = 1; seq <= 3; seq++) {
      const r = run(dp, buildIcmpEcho({ src: '10.244.1.10', dst: VIP, ident: 77, seq }));
      expect([r.verdict, r.reason]).toEqual([V_DROP, 'DROP_ECHO_TO_VIP']);
      expect(r.out.length).toBe(0);
    }
    expect(dp.counters[DROP_ECHO_TO_VIP]).toBe(3);
    expect(dp.ct.size).toBe(0);
  });

  it('passes a ping to anything that is not a VIP, unchanged', () => {
    const echo = buildIcmpEcho({ src: '10.244.1.10', dst: '10.244.2.5', ident: 77, seq: 1 });
    const r = run(dp, echo);
    expect([r.verdict, r.reason]).toEqual([V_PASS, 'PASS_NOT_SERVICE']);
    expect(r.pkt).toEqual(echo);
  });

  it('passes ICMP errors to non-VIPs, and drops other ICMP to a VIP (no error about ICMP)', () => {
    const quoted = buildUdp({ src: '10.244.1.10', dst: '10.244.5.5', sport: 1, dport: 2 });
    const err = buildIcmp({ src: '10.244.0.1', dst: '10.244.1.10' }, 3, 1, 0, quoted);
    expect(run(dp, err).reason).toBe('PASS_NOT_SERVICE');
    const toVip = buildIcmp({ src: '10.244.0.1', dst: VIP }, 3, 1, 0, quoted);
    expect(run(dp, toVip).reason).toBe('DROP_ICMP_TO_VIP');
    const timestamp = buildIcmp({ src: '10.244.1.10', dst: VIP }, 13, 0, 0, new Uint8Array(12));
    expect(run(dp, timestamp).reason).toBe('DROP_ICMP_TO_VIP');
  });

  it('drops a truncated ICMP header to a VIP as malformed', () => {
    const stub = buildIcmp({ src: '10.244.1.10', dst: VIP }, 8, 0, 0, new Uint8Array(0)).subarray(
      0,
      24,
    );
    stub[3] = 24; // total length = 24: only 4 bytes of ICMP
    refillIpCsum(stub);
    expect(run(dp, stub).reason).toBe('DROP_TRUNCATED_L4');
  });
});

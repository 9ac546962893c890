// Conntrack under pressure: a full table fails closed (DROP_CT_FULL) unless expired flows can
// be collected by the bounded inline GC step; a new flow whose reply tuple another live flow
// owns is refused (DROP_CT_CLASH) rather than mis-translated.
//
//   ctCapacity 8:  8 live flows ──▶ 9th SYN: DROP_CT_FULL
//                  8 flows expired ──▶ 9th SYN: inline GC frees them ──▶ TX_DNAT_NEW
//
//   client C:p ──▶ VIP1:80 ─┐
//                           ├──▶ backend B:8080   replies B:8080 ▶ C:p would be ambiguous
//   client C:p ──▶ VIP2:80 ─┘

import { describe, expect, it } from 'vitest';
import { CT_TIMEOUT_TCP_SYN } from '../../src/datapath/state/ct-state.ts';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import { DROP_CT_FULL } from '../../src/datapath/state/reasons.ts';
import { V_DROP } from '../../src/datapath/state/verdict.ts';
import { ACK, buildTcp, endpoint, run, SYN, service, servicePort, loaderOf } from './harness.ts';

const T0 = 1_000_000;

function setup(ctCapacity: number, ctGcBatch = 256) {
  const dp = createDatapath({ ctCapacity, ctGcBatch });
  loaderOf(dp).load([
    servicePort(service('a', '10.96.0.1'), 80, 'TCP', [endpoint('10.244.2.5:8080')]),
    servicePort(service('b', '10.96.0.2'), 80, 'TCP', [endpoint('10.244.2.5:8080')]),
  ]);
  return dp;
}

const syn = (sport: number, vip = '10.96.0.1', flags = SYN) =>
  buildTcp({ src: '10.244.1.10', dst: vip, sport, dport: 80, flags });

describe('conntrack pressure', () => {
  it('drops new flows with DROP_CT_FULL when every entry is live; tracked flows continue', () => {
    const dp = setup(8);
    for (let p = 0; p < 8; p++) expect(run(dp, syn(1000 + p), T0).reason).toBe('TX_DNAT_NEW');
    const r = run(dp, syn(2000), T0);
    expect([r.verdict, r.reason]).toEqual([V_DROP, 'DROP_CT_FULL']);
    expect(dp.counters[DROP_CT_FULL]).toBe(1);
    expect(run(dp, syn(1003, '10.96.0.1', ACK), T0).reason).toBe('TX_DNAT');
  });

  it('collects expired flows inline when the table is full, then admits the new flow', () => {
    const dp = setup(8);
    for (let p = 0; p < 8; p++) run(dp, syn(1000 + p), T0);
    const later = T0 + (CT_TIMEOUT_TCP_SYN + 1) * 1000;
    expect(run(dp, syn(2000), later).reason).toBe('TX_DNAT_NEW');
    expect(dp.ct.size).toBe(1);
  });

  it('does not collect inline when ctGcBatch is 0', () => {
    const dp = setup(8, 0);
    for (let p = 0; p < 8; p++) run(dp, syn(1000 + p), T0);
    expect(run(dp, syn(2000), T0 + 3_600_000).reason).toBe('DROP_CT_FULL');
  });

  it('refuses a flow whose reply tuple another live flow owns (DROP_CT_CLASH)', () => {
    const dp = setup(64);
    expect(run(dp, syn(5555, '10.96.0.1'), T0).reason).toBe('TX_DNAT_NEW');
    expect(run(dp, syn(5555, '10.96.0.2'), T0).reason).toBe('DROP_CT_CLASH');
    // Once the first flow has expired its reply tuple is free again.
    const later = T0 + (CT_TIMEOUT_TCP_SYN + 1) * 1000;
    expect(run(dp, syn(5555, '10.96.0.2'), later).reason).toBe('TX_DNAT_NEW');
  });
});

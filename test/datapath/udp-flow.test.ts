// A UDP request/reply through a ClusterIP (DNS-like), and its conntrack lifetime.
//
//   client 10.244.1.10:53000 ──▶ 10.96.0.53:53  ──DNAT──▶  10.244.3.7:5353 (coredns)
//   client 10.244.1.10:53000 ◀── 10.96.0.53:53  ◀─revNAT─  10.244.3.7:5353
//
//   lifetime: 30 s until a reply is seen, then 120 s (kernel udp_timeout / udp_timeout_stream)

import { beforeEach, describe, expect, it } from 'vitest';
import { CT_TIMEOUT_UDP, CT_TIMEOUT_UDP_STREAM } from '../../src/datapath/state/ct-state.ts';
import { dpCtGc } from '../../src/housekeeping/ct-gc.ts';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { V_PASS, V_TX } from '../../src/datapath/state/verdict.ts';
import {
  buildUdp,
  checksumsVerify,
  endpoint,
  get16,
  run,
  service,
  servicePort,
  type UdpOpts,
  loaderOf,
} from './harness.ts';

const CLIENT = '10.244.1.10';
const VIP = '10.96.0.53';
const DNS = '10.244.3.7';
const T0 = 9_000_000;

function query(over: Partial<UdpOpts> = {}): UdpOpts {
  return { src: CLIENT, dst: VIP, sport: 53000, dport: 53, data: 'query example.org A', ...over };
}
function answer(over: Partial<UdpOpts> = {}): UdpOpts {
  return {
    src: DNS,
    dst: CLIENT,
    sport: 5353,
    dport: 53000,
    data: 'answer 93.184.216.34',
    ...over,
  };
}

describe('UDP through a ClusterIP', () => {
  let dp: Datapath;
  beforeEach(() => {
    dp = createDatapath({ seed: 7 });
    const dns = service('kube-dns', VIP, { namespace: 'kube-system' });
    loaderOf(dp).load([servicePort(dns, 53, 'UDP', [endpoint(`${DNS}:5353`)], 'dns')]);
  });

  it('DNATs the request and reverse-NATs the reply, byte-exact', () => {
    const q = run(dp, buildUdp(query()), T0);
    expect([q.verdict, q.reason]).toEqual([V_TX, 'TX_DNAT_NEW']);
    expect(q.pkt).toEqual(buildUdp(query({ dst: DNS, dport: 5353 })));
    const a = run(dp, buildUdp(answer()), T0 + 3);
    expect([a.verdict, a.reason]).toEqual([V_TX, 'TX_REVNAT']);
    expect(a.pkt).toEqual(buildUdp(answer({ src: VIP, sport: 53 })));
    expect(checksumsVerify(q.pkt) && checksumsVerify(a.pkt)).toBe(true);
  });

  it('keeps a zero UDP checksum zero ("no checksum", RFC 768)', () => {
    const q = run(dp, buildUdp(query({ noCsum: true })), T0);
    expect(q.reason).toBe('TX_DNAT_NEW');
    expect(get16(q.pkt, 26)).toBe(0);
    expect(q.pkt).toEqual(buildUdp(query({ dst: DNS, dport: 5353, noCsum: true })));
  });

  it('leaves other UDP alone: wrong port on a non-VIP, or a reply from an untracked backend', () => {
    const other = buildUdp(query({ dst: '10.244.9.9' }));
    const r = run(dp, other);
    expect([r.verdict, r.reason]).toEqual([V_PASS, 'PASS_NOT_SERVICE']);
    expect(r.pkt).toEqual(other);
    const stray = buildUdp(answer({ dport: 53001 }));
    expect(run(dp, stray).reason).toBe('PASS_NOT_SERVICE');
  });

  it('lives 30 s unanswered, 120 s once answered; an expired flow selects afresh', () => {
    const sec = Math.floor(T0 / 1000);
    run(dp, buildUdp(query()), T0);
    const ct = dp.lastCtIdx;
    expect(dp.ct.expires(ct)).toBe(sec + CT_TIMEOUT_UDP);
    run(dp, buildUdp(answer()), T0);
    expect(dp.ct.expires(ct)).toBe(sec + CT_TIMEOUT_UDP_STREAM);
    // 119 s later the flow is still tracked; 121 s after that it is not.
    expect(run(dp, buildUdp(query()), T0 + 119_000).reason).toBe('TX_DNAT');
    expect(run(dp, buildUdp(query()), T0 + 119_000 + 121_000).reason).toBe('TX_DNAT_NEW');
    // A late reply of an expired flow is not translated (the entry is gone).
    run(dp, buildUdp(query({ sport: 53999 })), T0);
    expect(run(dp, buildUdp(answer({ dport: 53999 })), T0 + 31_000).reason).toBe(
      'PASS_NOT_SERVICE',
    );
  });
});

// Stale UDP cleanup after a sync is the control plane's (src/control/conntrack-reconcile.ts,
// kube-proxy's reconciler, tested in test/control/conntrack-reconcile.test.ts): it holds each
// flow to the service port's serving endpoints, which the service map alone does not list.
describe('conntrack GC', () => {
  it('dpCtGc removes expired flows incrementally', () => {
    const dp = createDatapath();
    loaderOf(dp).load([servicePort(service('d', VIP), 53, 'UDP', [endpoint(`${DNS}:53`)])]);
    for (let p = 1; p <= 10; p++) run(dp, buildUdp(query({ sport: p })), T0);
    expect(dpCtGc(dp, T0 + 29_000, 1000)).toBe(0);
    expect(dpCtGc(dp, T0 + 30_000, 1000)).toBe(10);
    expect(dp.ct.size).toBe(0);
  });
});

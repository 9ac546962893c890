// New flows spread uniformly over a service's endpoints; established flows stay where they are.
//
//                                   ┌──▶ 10.244.1.5:8080  (a)
//   clients ──▶ 10.96.0.10:80 ──────┼──▶ 10.244.2.5:8080  (b)   uniform random slot per new flow
//                                   └──▶ 10.244.3.5:8080  (c)   (iptables statistic --mode random)
//
//   then (b) leaves the service:  flows already on (b) keep going to (b) (conntrack holds it);
//                                 new flows only ever land on (a) or (c).

import { beforeEach, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import type { ResolvedServicePort } from '../../src/model.ts';
import {
  ACK,
  buildTcp,
  endpoint,
  get16,
  get32,
  ip,
  ipStr,
  PSH,
  run,
  SYN,
  service,
  servicePort,
  loaderOf,
} from './harness.ts';

const VIP = '10.96.0.10';
const EPS = ['10.244.1.5:8080', '10.244.2.5:8080', '10.244.3.5:8080'];

function web(eps: string[]): ResolvedServicePort[] {
  return [
    servicePort(
      service('web', VIP),
      80,
      'TCP',
      eps.map((e) => endpoint(e)),
    ),
  ];
}

/** SYN of the n-th distinct client flow. */
function syn(n: number, flags = SYN): Uint8Array {
  const src = ipStr(ip('10.244.0.0') + 256 + (n >>> 12));
  return buildTcp({ src, dst: VIP, sport: 20000 + (n & 0xfff), dport: 80, flags });
}

function backendOf(pkt: Uint8Array): string {
  return `${ipStr(get32(pkt, 16))}:${get16(pkt, 22)}`;
}

describe('backend selection', () => {
  let dp: Datapath;
  beforeEach(() => {
    dp = createDatapath({ seed: 42 });
    loaderOf(dp).load(web(EPS));
  });

  it('spreads new flows uniformly over 3 endpoints (chi-square, p = 0.001)', () => {
    const N = 30_000;
    const hits = new Map<string, number>();
    for (let n = 0; n < N; n++) {
      const r = run(dp, syn(n));
      expect(r.reason).toBe('TX_DNAT_NEW');
      hits.set(backendOf(r.pkt), (hits.get(backendOf(r.pkt)) ?? 0) + 1);
    }
    expect([...hits.keys()].sort()).toEqual(EPS);
    const expected = N / EPS.length;
    const chi2 = [...hits.values()].reduce((s, o) => s + (o - expected) ** 2 / expected, 0);
    expect(chi2).toBeLessThan(13.816); // chi-square critical value, 2 degrees of freedom
  });

  it('is reproducible from the seed, and the seed matters', () => {
    const pick = (seed: number) => {
      const d = createDatapath({ seed });
      loaderOf(d).load(web(EPS));
      return Array.from({ length: 64 }, (_, n) => backendOf(run(d, syn(n)).pkt)).join(',');
    };
    expect(pick(42)).toBe(pick(42));
    expect(pick(42)).not.toBe(pick(43));
  });

  it('keeps an established flow on its endpoint after the endpoint leaves; new flows avoid it', () => {
    // Open flows until one lands on (b).
    let n = 0;
    let first = run(dp, syn(n));
    while (backendOf(first.pkt) !== EPS[1] && n < 200) first = run(dp, syn(++n));
    expect(backendOf(first.pkt)).toBe(EPS[1]); // bounded: a broken selector fails, not hangs
    const onB = n;
    const bId = dp.lastBackendId;
    loaderOf(dp).load(web([EPS[0], EPS[2]]));
    expect(dp.be.lookup(bId)).toBe(-1); // gone from the backend map...
    const data = run(dp, syn(onB, PSH | ACK));
    expect(data.reason).toBe('TX_DNAT'); // ...but the flow still goes there
    expect(backendOf(data.pkt)).toBe(EPS[1]);
    expect(dp.lastBackendId).toBe(bId);
    const reply = buildTcp({
      src: '10.244.2.5',
      dst: ipStr(get32(data.pkt, 12)),
      sport: 8080,
      dport: get16(data.pkt, 20),
      flags: ACK,
    });
    expect(run(dp, reply).reason).toBe('TX_REVNAT');
    for (let k = 1; k <= 600; k++) {
      const r = run(dp, syn(onB + k));
      expect(r.reason).toBe('TX_DNAT_NEW');
      expect(backendOf(r.pkt)).not.toBe(EPS[1]);
    }
  });

  it('keeps established flows of a deleted service; new flows to its VIP pass untouched', () => {
    run(dp, syn(0));
    loaderOf(dp).load([]);
    expect(run(dp, syn(0, ACK)).reason).toBe('TX_DNAT');
    const fresh = syn(1);
    const r = run(dp, fresh);
    expect(r.reason).toBe('PASS_NOT_SERVICE');
    expect(r.pkt).toEqual(fresh);
  });
});

// Schedulers in the datapath: the kubetun.io/scheduler annotation (or the node default) picks
// how new flows are spread, kubetun.io/weights weighs endpoints, and lc-family schedulers see
// connection counts the program keeps from conntrack events.
//
//   clients ──▶ 10.96.0.10:80 ──▶ a 10.244.1.5:8080
//                             ──▶ b 10.244.2.5:8080
//                             ──▶ c 10.244.3.5:8080

import { describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { dpConnRecount } from '../../src/housekeeping/housekeeping.ts';
import type { ResolvedServicePort, Service } from '../../src/model.ts';
import { SCHED_LC, SCHED_RR, SCHED_WRR } from '../../src/sched/kinds.ts';
import {
  ACK,
  buildTcp,
  endpoint,
  get16,
  get32,
  ip,
  ipStr,
  run,
  SYN,
  service,
  servicePort,
  loaderOf,
} from './harness.ts';

const VIP = '10.96.0.10';
const EPS = ['10.244.1.5:8080', '10.244.2.5:8080', '10.244.3.5:8080'];

function web(over: Partial<Service> = {}, eps = EPS): ResolvedServicePort[] {
  return [
    servicePort(
      service('web', VIP, over),
      80,
      'TCP',
      eps.map((e) => endpoint(e)),
    ),
  ];
}

function syn(n: number): Uint8Array {
  return buildTcp({
    src: `10.244.0.${1 + (n % 200)}`,
    dst: VIP,
    sport: 20000 + n,
    dport: 80,
    flags: SYN,
  });
}

/** The backend a new flow n lands on ("a", "b", "c"). */
function pick(dp: Datapath, n: number, nowMs = 1_000_000): string {
  const r = run(dp, syn(n), nowMs);
  expect(r.reason).toBe('TX_DNAT_NEW');
  return 'abc'[[1, 2, 3].indexOf((get32(r.pkt, 16) >>> 8) & 255)];
}

function masterSched(dp: Datapath): number {
  return dp.svc.scheduler(dp.svc.lookup(ip(VIP), 80, 6, 0));
}

describe('schedulers in the datapath', () => {
  it('rr from the annotation: strict rotation over the endpoints, recorded in the master', () => {
    const dp = createDatapath({ seed: 1 });
    loaderOf(dp).load(web({ annotations: { 'kubetun.io/scheduler': 'rr' } }));
    expect(masterSched(dp)).toBe(SCHED_RR);
    const got = Array.from({ length: 7 }, (_, n) => pick(dp, n)).join('');
    expect(got).toBe('abcabca');
  });

  it('the node default applies to services without the annotation; the annotation wins', () => {
    const dp = createDatapath({ seed: 1 });
    const other = servicePort(
      service('other', '10.96.0.11', { annotations: { 'kubetun.io/scheduler': 'lc' } }),
      80,
      'TCP',
      [endpoint('10.244.1.5:8080')],
    );
    loaderOf(dp).load([...web(), other], { defaultScheduler: SCHED_RR });
    expect(masterSched(dp)).toBe(SCHED_RR);
    expect(dp.svc.scheduler(dp.svc.lookup(ip('10.96.0.11'), 80, 6, 0))).toBe(SCHED_LC);
  });

  it('wrr with kubetun.io/weights: 3:1:0 over four rounds, weight 0 gets nothing', () => {
    const dp = createDatapath();
    const ann = {
      'kubetun.io/scheduler': 'wrr',
      'kubetun.io/weights': '10.244.1.5=3, 10.244.2.5=1,10.244.3.5=0',
    };
    loaderOf(dp).load(web({ annotations: ann }));
    expect(masterSched(dp)).toBe(SCHED_WRR);
    const counts = { a: 0, b: 0, c: 0 } as Record<string, number>;
    for (let n = 0; n < 16; n++) counts[pick(dp, n)]++;
    expect(counts).toEqual({ a: 12, b: 4, c: 0 });
  });

  it('random with weight 0 leaves that endpoint out of new flows', () => {
    const dp = createDatapath({ seed: 7 });
    loaderOf(dp).load(web({ annotations: { 'kubetun.io/weights': '10.244.2.5=0' } }));
    const seen = new Set(Array.from({ length: 200 }, (_, n) => pick(dp, n)));
    expect([...seen].sort()).toEqual(['a', 'c']);
  });

  it('rejects a bad scheduler or weight naming the annotation, and keeps the last good state', () => {
    const dp = createDatapath();
    loaderOf(dp).load(web({ annotations: { 'kubetun.io/scheduler': 'rr' } }));
    expect(() =>
      loaderOf(dp).load(web({ annotations: { 'kubetun.io/scheduler': 'fastest' } })),
    ).toThrow(/default\/web port 80: metadata\.annotations\["kubetun\.io\/scheduler"\].*fastest/);
    expect(() => loaderOf(dp).load(web({ annotations: { 'kubetun.io/weights': 'a=x' } }))).toThrow(
      /kubetun\.io\/weights.*"a=x"/,
    );
    expect(masterSched(dp)).toBe(SCHED_RR);
  });

  it('lc steers new flows away from a backend holding an established connection', () => {
    const dp = createDatapath();
    loaderOf(dp).load(web({ annotations: { 'kubetun.io/scheduler': 'lc' } }, EPS.slice(0, 2)));
    // flow 0 lands on a and becomes ESTABLISHED (SYN, SYN-ACK, ACK)
    expect(pick(dp, 0)).toBe('a');
    const rn = dp.svc.revNat(dp.svc.lookup(ip(VIP), 80, 6, 0));
    const synack = buildTcp({
      src: '10.244.1.5',
      dst: ipStr(ip('10.244.0.1')),
      sport: 8080,
      dport: 20000,
      flags: SYN | ACK,
    });
    expect(run(dp, synack).reason).toBe('TX_REVNAT');
    const ack = buildTcp({ src: '10.244.0.1', dst: VIP, sport: 20000, dport: 80, flags: ACK });
    expect(run(dp, ack).reason).toBe('TX_DNAT');
    expect(dp.sched.active(rn, 0)).toBe(1);
    // lc: overhead = active * 256 + inactive: a = 256, b = 0 -> the next ones go to b until
    // b holds 256 unanswered SYNs (inactive) as well
    for (let n = 1; n <= 20; n++) expect(pick(dp, n)).toBe('b');
    expect(dp.sched.inactive(rn, 1)).toBe(20);
    // a recount from conntrack gives the same numbers; after every flow expired, none
    expect(dpConnRecount(dp, 1000)).toBe(21);
    expect([dp.sched.active(rn, 0), dp.sched.inactive(rn, 1)]).toEqual([1, 20]);
    dpConnRecount(dp, 1000 + 10 * 86400);
    expect([dp.sched.active(rn, 0), dp.sched.inactive(rn, 1)]).toEqual([0, 0]);
  });

  it('maglev: the same 5-tuple picks the same backend on two nodes with different histories', () => {
    const a = createDatapath({ seed: 1 });
    const b = createDatapath({ seed: 2 });
    const ann = { annotations: { 'kubetun.io/scheduler': 'maglev' } };
    loaderOf(a).load(web(ann));
    loaderOf(b).load(web(ann, [...EPS].reverse()));
    for (let n = 0; n < 5; n++) pick(b, 1000 + n); // b has seen other flows
    const onA = Array.from({ length: 50 }, (_, n) => pick(a, n)).join('');
    const onB = Array.from({ length: 50 }, (_, n) => pick(b, n)).join('');
    expect(onB).toBe(onA);
    expect(new Set(onA).size).toBe(3);
  });

  it('keeps rr position across a full resync that changes nothing', () => {
    const dp = createDatapath();
    const ann = { annotations: { 'kubetun.io/scheduler': 'rr' } };
    loaderOf(dp).load(web(ann));
    expect(pick(dp, 0)).toBe('a');
    loaderOf(dp).load(web(ann));
    expect(pick(dp, 1)).toBe('b');
    expect(get16(run(dp, syn(2)).pkt, 22)).toBe(8080);
  });
});

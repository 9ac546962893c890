// sessionAffinity: ClientIP — a client's new connections go to the backend it used last, for
// timeoutSeconds after its last new connection; other clients are spread as usual; the
// affinity is forgotten when the backend leaves the service.
//
//   client 10.244.0.7 ──▶ 10.96.0.10:80 ──▶ the same one of a, b, c every time

import { describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { dpAffinityGc } from '../../src/housekeeping/housekeeping.ts';
import { AffinityMap } from '../../src/maps/affinity.ts';
import type { ResolvedServicePort } from '../../src/model.ts';
import {
  buildTcp,
  endpoint,
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

function web(eps = EPS, timeout = 60, affinity = true): ResolvedServicePort[] {
  const svc = service('web', VIP, {
    sessionAffinity: affinity ? 'ClientIP' : 'None',
    affinityTimeoutSeconds: timeout,
  });
  return [
    servicePort(
      svc,
      80,
      'TCP',
      eps.map((e) => endpoint(e)),
    ),
  ];
}

let port = 30000;
function connect(dp: Datapath, client: string, nowSec: number): string {
  const r = run(
    dp,
    buildTcp({ src: client, dst: VIP, sport: port++, dport: 80, flags: SYN }),
    nowSec * 1000,
  );
  expect(r.reason).toBe('TX_DNAT_NEW');
  return ipStr(get32(r.pkt, 16));
}

describe('session affinity (ClientIP)', () => {
  it('sends every new connection of a client to one backend, while clients differ', () => {
    const dp = createDatapath({ seed: 3 });
    loaderOf(dp).load(web());
    const first = connect(dp, '10.244.0.7', 1000);
    for (let k = 1; k < 30; k++) expect(connect(dp, '10.244.0.7', 1000 + k)).toBe(first);
    const others = new Set<string>();
    for (let c = 1; c < 40; c++) others.add(connect(dp, `10.244.9.${c}`, 1100));
    expect(others.size).toBe(3); // without affinity in play, all three get clients
  });

  it('without sessionAffinity one client is spread like everyone else', () => {
    const dp = createDatapath({ seed: 3 });
    loaderOf(dp).load(web(EPS, 60, false));
    const seen = new Set(Array.from({ length: 30 }, (_, k) => connect(dp, '10.244.0.7', 1000 + k)));
    expect(seen.size).toBe(3);
  });

  it('expires after timeoutSeconds without a new connection, refreshed by each one', () => {
    const dp = createDatapath({ seed: 5 });
    loaderOf(dp).load(web(EPS, 10));
    const first = connect(dp, '10.244.0.7', 1000);
    expect(connect(dp, '10.244.0.7', 1009)).toBe(first); // refreshes: last used 1009
    expect(connect(dp, '10.244.0.7', 1018)).toBe(first);
    // idle 10 s: a fresh choice, which then sticks in turn
    const picks = new Set<string>();
    let t = 1018;
    for (let k = 0; k < 20; k++) {
      t += 10;
      const b = connect(dp, '10.244.0.7', t);
      picks.add(b);
      expect(connect(dp, '10.244.0.7', t + 1)).toBe(b);
      t += 1;
    }
    expect(picks.size).toBeGreaterThan(1);
    expect(dpAffinityGc(dp, loaderOf(dp), t + 9)).toBe(0);
    expect(dpAffinityGc(dp, loaderOf(dp), t + 10)).toBe(1);
    expect(dp.aff.size).toBe(0);
  });

  it('drops the affinity when its backend leaves; the client moves and sticks to the new one', () => {
    const dp = createDatapath({ seed: 9 });
    loaderOf(dp).load(web());
    const first = connect(dp, '10.244.0.7', 1000);
    loaderOf(dp).load(web(EPS.filter((e) => !e.startsWith(first))));
    expect(dp.aff.size).toBe(0);
    const next = connect(dp, '10.244.0.7', 1001);
    expect(next).not.toBe(first);
    for (let k = 0; k < 10; k++) expect(connect(dp, '10.244.0.7', 1002 + k)).toBe(next);
  });
});

describe('AffinityMap', () => {
  it('keys on (client, revNat), refuses inserts when full, frees on delete', () => {
    const m = new AffinityMap(4, { seed: 1 });
    expect(m.upsert(ip('10.0.0.1'), 1, 11, 100)).toBe(true);
    expect(m.upsert(ip('10.0.0.1'), 2, 12, 100)).toBe(true);
    expect(m.upsert(ip('200.0.0.1'), 1, 13, 100)).toBe(true);
    expect(m.upsert(ip('10.0.0.1'), 1, 14, 101)).toBe(true); // update, no new entry
    expect(m.size).toBe(3);
    expect(m.backendId(m.lookup(ip('10.0.0.1'), 1))).toBe(14);
    expect(m.backendId(m.lookup(ip('200.0.0.1'), 1))).toBe(13);
    expect(m.lookupFresh(ip('10.0.0.1'), 1, 111, 10)).toBe(-1);
    expect(m.lookupFresh(ip('10.0.0.1'), 1, 110, 10)).toBeGreaterThanOrEqual(0);
    expect(m.upsert(ip('10.0.0.2'), 1, 15, 100)).toBe(true);
    expect(m.upsert(ip('10.0.0.3'), 1, 16, 100)).toBe(false);
    expect(m.delete(ip('10.0.0.2'), 1)).toBe(true);
    expect(m.upsert(ip('10.0.0.3'), 1, 16, 100)).toBe(true);
    expect(m.retain((rn) => rn === 2)).toBe(3);
    expect(m.size).toBe(1);
  });
});

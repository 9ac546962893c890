// Endpoint semantics as kube-proxy has them (pkg/proxy/topology.go), and incremental loads.
//
//   zone-a: node n1 (this node) ── a 10.244.1.5      zone-b: node n2 ── b 10.244.2.5
//                                                                       c 10.244.2.6

import { describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { selectPortEndpoints } from '../../src/endpoints/select.ts';
import type { ResolvedEndpoint, ResolvedServicePort, Service } from '../../src/model.ts';
import {
  ACK,
  buildTcp,
  buildUdp,
  endpoint,
  get32,
  ipStr,
  run,
  SYN,
  service,
  servicePort,
  loaderOf,
} from './harness.ts';

const VIP = '10.96.0.10';

function eps(over: Partial<ResolvedEndpoint>[] = []): ResolvedEndpoint[] {
  const base = [
    endpoint('10.244.1.5:8080', { nodeName: 'n1', zone: 'zone-a' }),
    endpoint('10.244.2.5:8080', { nodeName: 'n2', zone: 'zone-b' }),
    endpoint('10.244.2.6:8080', { nodeName: 'n2', zone: 'zone-b' }),
  ];
  return base.map((e, i) => ({ ...e, ...(over[i] ?? {}) }));
}

function web(list: ResolvedEndpoint[], over: Partial<Service> = {}): ResolvedServicePort[] {
  return [servicePort(service('web', VIP, over), 80, 'TCP', list)];
}

const ips = (r: { list: ResolvedEndpoint[] }) => r.list.map((e) => e.ip);

/** The Cluster-policy endpoints a node in `o.zone` picks (src/endpoints/select.ts). */
function eligibleEndpoints(list: ResolvedEndpoint[], o: { zone?: string; preferClose?: boolean }) {
  const over: Partial<Service> = o.preferClose ? { trafficDistribution: 'PreferClose' } : {};
  return { list: selectPortEndpoints(web(list, over)[0], { nodeZone: o.zone }).cluster };
}

let sport = 40000;
function connect(dp: Datapath): { reason: string; to: string } {
  const r = run(
    dp,
    buildTcp({ src: '10.244.0.9', dst: VIP, sport: sport++, dport: 80, flags: SYN }),
  );
  return { reason: r.reason, to: ipStr(get32(r.pkt, 16)) };
}

describe('topology-aware routing', () => {
  const hinted = eps([
    { hintsForZones: ['zone-a'] },
    { hintsForZones: ['zone-b'] },
    { hintsForZones: ['zone-b'] },
  ]);

  it('uses hints only when every ready endpoint has one and one is for this zone', () => {
    expect(ips(eligibleEndpoints(hinted, { zone: 'zone-a' }))).toEqual(['10.244.1.5']);
    expect(ips(eligibleEndpoints(hinted, { zone: 'zone-b' }))).toEqual([
      '10.244.2.5',
      '10.244.2.6',
    ]);
    expect(ips(eligibleEndpoints(hinted, { zone: 'zone-c' }))).toHaveLength(3); // none for us
    const partial = eps([{ hintsForZones: ['zone-a'] }, { hintsForZones: ['zone-b'] }]);
    expect(ips(eligibleEndpoints(partial, { zone: 'zone-a' }))).toHaveLength(3);
    expect(ips(eligibleEndpoints(hinted, {}))).toHaveLength(3); // no --node-zone: no topology
    // a not-ready endpoint without hints does not disable them
    const withDown = [...hinted, endpoint('10.244.3.5:8080', { ready: false, serving: false })];
    expect(ips(eligibleEndpoints(withDown, { zone: 'zone-a' }))).toEqual(['10.244.1.5']);
  });

  it('PreferClose without hints (no EndpointSlice controller): endpoint zones stand in', () => {
    expect(ips(eligibleEndpoints(eps(), { zone: 'zone-a', preferClose: true }))).toEqual([
      '10.244.1.5',
    ]);
    expect(ips(eligibleEndpoints(eps(), { zone: 'zone-a' }))).toHaveLength(3);
  });

  it('a node in zone-a sends every new flow to the zone-a endpoint', () => {
    const dp = createDatapath({ seed: 4 });
    loaderOf(dp).load(web(hinted), { nodeName: 'n1', nodeZone: 'zone-a' });
    for (let k = 0; k < 20; k++) expect(connect(dp).to).toBe('10.244.1.5');
  });
});

describe('ready / serving / terminating', () => {
  it('falls back to serving+terminating only when nothing is ready; established flows go on', () => {
    const dp = createDatapath({ seed: 4 });
    loaderOf(dp).load(web(eps()));
    const c = connect(dp);
    expect(c.reason).toBe('TX_DNAT_NEW');
    // every endpoint terminating; only b still serving
    const term = eps([
      { ready: false, serving: false, terminating: true },
      { ready: false, serving: true, terminating: true },
      { ready: false, serving: false, terminating: true },
    ]);
    loaderOf(dp).load(web(term));
    for (let k = 0; k < 10; k++) expect(connect(dp).to).toBe('10.244.2.5');
    // the first flow keeps its backend (conntrack), whatever its state now
    const more = buildTcp({
      src: '10.244.0.9',
      dst: VIP,
      sport: sport - 11,
      dport: 80,
      flags: ACK,
    });
    const r = run(dp, more);
    expect(r.reason).toBe('TX_DNAT');
    expect(ipStr(get32(r.pkt, 16))).toBe(c.to);
  });
});

describe('internalTrafficPolicy: Local', () => {
  const local = { internalTrafficPolicy: 'Local' as const };

  it('uses only this node endpoints', () => {
    const dp = createDatapath({ seed: 4 });
    loaderOf(dp).load(web(eps(), local), { nodeName: 'n1' });
    for (let k = 0; k < 10; k++) expect(connect(dp).to).toBe('10.244.1.5');
  });

  it('drops when endpoints exist only on other nodes, rejects when there are none at all', () => {
    const dp = createDatapath({ seed: 4 });
    loaderOf(dp).load(web(eps().slice(1), local), { nodeName: 'n1' });
    expect(connect(dp).reason).toBe('DROP_NO_LOCAL_ENDPOINTS');
    loaderOf(dp).load(web([], local), { nodeName: 'n1' });
    expect(connect(dp).reason).toBe('REPLY_REJECT_NO_ENDPOINTS');
  });
});

describe('incremental loads (dpUpdateServices)', () => {
  function many(n: number, epsOf = (_k: number) => ['10.244.1.5:8080']): ResolvedServicePort[] {
    const out: ResolvedServicePort[] = [];
    for (let k = 0; k < n; k++) {
      const svc = service(`s${k}`, `10.96.${k >> 8}.${k & 255}`);
      out.push(
        servicePort(
          svc,
          80,
          'TCP',
          epsOf(k).map((e) => endpoint(e)),
        ),
      );
    }
    return out;
  }

  it('writes only the changed service port and matches a full load of the same state', () => {
    const dp = createDatapath();
    const before = many(50);
    loaderOf(dp).load(before);
    const after = many(50, (k) =>
      k === 7 ? ['10.244.1.5:8080', '10.244.9.9:8080'] : ['10.244.1.5:8080'],
    );
    const stats = loaderOf(dp).update([after[7]], []);
    expect(stats.written).toBe(1);
    const full = createDatapath();
    loaderOf(full).load(after);
    expect(dump(dp)).toEqual(dump(full));
  });

  it('removes a deleted service port, its wildcard and unshared backends, keeps shared ones', () => {
    const dp = createDatapath();
    const all = many(3, (k) => (k === 2 ? ['10.244.7.7:80'] : ['10.244.1.5:8080']));
    loaderOf(dp).load(all);
    loaderOf(dp).update([], ['default/s0', 'default/s2']);
    const rest = createDatapath();
    loaderOf(rest).load([all[1]]);
    expect(dump(dp)).toEqual(dump(rest));
    expect(dp.be.size).toBe(1);
  });

  it('refuses a partial update claiming another service VIP:port, writing nothing', () => {
    const dp = createDatapath();
    const all = many(2);
    loaderOf(dp).load(all);
    const thief = servicePort(service('thief', '10.96.0.0'), 80, 'TCP', []);
    const size = dp.svc.size;
    expect(() => loaderOf(dp).update([thief], [])).toThrow(
      /10\.96\.0\.0:80\/TCP is also default\/s0/,
    );
    expect(dp.svc.size).toBe(size);
  });

  it('keeps ids stable across a restart: a fresh datapath loading the same state agrees', () => {
    const dp = createDatapath();
    loaderOf(dp).load(many(20));
    loaderOf(dp).update([many(30)[25]], []);
    const again = createDatapath();
    loaderOf(again).load([...many(20), many(30)[25]]);
    expect(dump(dp)).toEqual(dump(again));
  });

  it('a UDP flow keeps its backend across an unrelated partial update', () => {
    const dp = createDatapath({ seed: 2 });
    const dns = servicePort(service('dns', '10.96.0.53'), 53, 'UDP', [endpoint('10.244.3.7:53')]);
    loaderOf(dp).load([...many(3), dns]);
    const q = () => buildUdp({ src: '10.244.0.9', dst: '10.96.0.53', sport: 5353, dport: 53 });
    expect(run(dp, q()).reason).toBe('TX_DNAT_NEW');
    loaderOf(dp).update([many(4)[3]], []);
    expect(run(dp, q()).reason).toBe('TX_DNAT');
  });
});

/** Every map entry as text, ids included (two datapaths with equal dumps behave the same). */
function dump(dp: Datapath): string[] {
  const out: string[] = [];
  for (let i = dp.svc.next(0); i >= 0; i = dp.svc.next(i + 1)) {
    const key = `${ipStr(dp.svc.vipOf(i))}:${dp.svc.portOf(i)}/${dp.svc.protoOf(i)}#${dp.svc.slotOf(i)}`;
    const val =
      dp.svc.slotOf(i) === 0
        ? `n=${dp.svc.count(i)} rn=${dp.svc.revNat(i)} f=${dp.svc.flags(i)} s=${dp.svc.scheduler(i)}`
        : `be=${dp.svc.backendId(i)}`;
    out.push(`svc ${key} ${val}`);
  }
  for (let id = dp.revnat.next(1); id >= 0; id = dp.revnat.next(id + 1)) {
    out.push(`rn ${id} ${ipStr(dp.revnat.vip(id))}:${dp.revnat.port(id)}`);
  }
  return out.sort();
}

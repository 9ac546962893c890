// dpLoadServices: the model (ResolvedServicePort[]) translated into the maps.
//
//   Service default/web 10.96.0.10, port http 80/TCP, endpoints a, b (ready), c (not ready)
//     services: (10.96.0.10, 80, TCP, 0) master {count 2, revNat r}   (10.96.0.10, 0, 0, 0) wildcard
//               (10.96.0.10, 80, TCP, 1) -> id(a)   (…, 2) -> id(b)
//     backends: id(a) -> a, id(b) -> b           revnat: r -> 10.96.0.10:80

import { beforeEach, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { selectPortEndpoints } from '../../src/endpoints/select.ts';
import { BE_ACTIVE, BE_F_LOCAL, BE_TERMINATING } from '../../src/maps/backends.ts';
import { SVC_F_WILDCARD } from '../../src/maps/services.ts';
import type { ResolvedServicePort } from '../../src/model.ts';
import { endpoint, ip, service, servicePort, loaderOf } from './harness.ts';

const VIP = ip('10.96.0.10');

function web(eps = ['10.244.1.5:8080', '10.244.2.5:8080']): ResolvedServicePort {
  const down = endpoint('10.244.3.5:8080', { ready: false, serving: false });
  return servicePort(
    service('web', '10.96.0.10'),
    80,
    'TCP',
    [...eps.map((e) => endpoint(e)), down],
    'http',
  );
}

function slots(dp: Datapath, vip: number, port: number, proto: number): string[] {
  const m = dp.svc.lookup(vip, port, proto, 0);
  if (m < 0) return [];
  const out: string[] = [];
  for (let s = 1; s <= dp.svc.count(m); s++) {
    const b = dp.be.lookup(dp.svc.backendId(dp.svc.lookup(vip, port, proto, s)));
    out.push(
      `${dp.be.addr(b) >>> 24}.${(dp.be.addr(b) >>> 16) & 255}.${(dp.be.addr(b) >>> 8) & 255}.${dp.be.addr(b) & 255}:${dp.be.port(b)}`,
    );
  }
  return out;
}

describe('dpLoadServices', () => {
  let dp: Datapath;
  beforeEach(() => {
    dp = createDatapath();
  });

  it('writes master, slots, wildcard, backends and reverse NAT for ready endpoints only', () => {
    loaderOf(dp).load([web()]);
    const m = dp.svc.lookup(VIP, 80, 6, 0);
    expect(dp.svc.count(m)).toBe(2);
    expect(slots(dp, VIP, 80, 6)).toEqual(['10.244.1.5:8080', '10.244.2.5:8080']);
    const w = dp.svc.lookup(VIP, 0, 0, 0);
    expect(dp.svc.flags(w) & SVC_F_WILDCARD).toBe(SVC_F_WILDCARD);
    const rn = dp.revnat.lookup(dp.svc.revNat(m));
    expect([dp.revnat.vip(rn), dp.revnat.port(rn)]).toEqual([VIP, 80]);
    expect(dp.svc.size).toBe(4); // master + 2 slots + wildcard
    expect(dp.be.size).toBe(2);
  });

  it('gives backends ids below 2^31 (small integers on the per-packet path)', () => {
    const eps = Array.from({ length: 64 }, (_, k) => endpoint(`10.244.${k >> 4}.${k}:8080`));
    loaderOf(dp).load([servicePort(service('many', '10.96.0.10'), 80, 'TCP', eps, 'http')]);
    const ids: number[] = [];
    for (let b = dp.be.next(0); b >= 0; b = dp.be.next(b + 1)) ids.push(dp.be.idOf(b));
    expect(ids.length).toBe(64);
    // a hash-derived id in 1..2^32-1 would land above 2^31 for about half of 64 backends
    expect(ids.filter((id) => id < 1 || id > 0x7fffffff)).toEqual([]);
  });

  it('falls back to serving+terminating endpoints when none is ready (kube-proxy)', () => {
    const eps = [
      endpoint('10.244.1.5:8080', { ready: false, serving: true, terminating: true }),
      endpoint('10.244.2.5:8080', { ready: false, serving: false, terminating: true }),
    ];
    const svcPort = servicePort(service('web', '10.96.0.10'), 80, 'TCP', eps);
    expect(selectPortEndpoints(svcPort, {}).cluster.map((e) => e.ip)).toEqual(['10.244.1.5']);
    loaderOf(dp).load([servicePort(service('web', '10.96.0.10'), 80, 'TCP', eps)]);
    expect(slots(dp, VIP, 80, 6)).toEqual(['10.244.1.5:8080']);
    const b = dp.be.lookup(dp.svc.backendId(dp.svc.lookup(VIP, 80, 6, 1)));
    expect(dp.be.state(b)).toBe(BE_TERMINATING);
    loaderOf(dp).load([web()]);
    expect(dp.be.state(dp.be.lookup(dp.svc.backendId(dp.svc.lookup(VIP, 80, 6, 1))))).toBe(
      BE_ACTIVE,
    );
  });

  it('skips headless and ExternalName services and IPv6 addresses', () => {
    const headless = servicePort(service('h', ''), 80, 'TCP', [endpoint('10.244.1.5:80')]);
    const ext = servicePort(service('e', '', { type: 'ExternalName' }), 80, 'TCP', []);
    const dual = servicePort(
      service('d', '10.96.0.11', { clusterIPs: ['fd00::11', '10.96.0.11'] }),
      80,
      'TCP',
      [endpoint('10.244.1.5:80')],
    );
    loaderOf(dp).load([headless, ext, dual]);
    expect(dp.svc.size).toBe(3); // only d: master, slot, wildcard
    expect(dp.svc.lookup(ip('10.96.0.11'), 80, 6, 0)).toBeGreaterThanOrEqual(0);
  });

  it('gives stable ids: same input in another order, or next to other services, same ids', () => {
    const others = Array.from({ length: 50 }, (_, k) =>
      servicePort(service(`s${k}`, `10.96.1.${k}`), 80, 'TCP', [endpoint(`10.244.9.${k}:80`)]),
    );
    loaderOf(dp).load([web(), ...others]);
    const ids = () => {
      const m = dp.svc.lookup(VIP, 80, 6, 0);
      return [dp.svc.revNat(m), dp.svc.backendId(dp.svc.lookup(VIP, 80, 6, 1))];
    };
    const first = ids();
    const dp2 = createDatapath();
    loaderOf(dp2).load([...others].reverse().concat([web()]));
    const m2 = dp2.svc.lookup(VIP, 80, 6, 0);
    expect([dp2.svc.revNat(m2), dp2.svc.backendId(dp2.svc.lookup(VIP, 80, 6, 1))]).toEqual(first);
    loaderOf(dp).load([web()]); // the others leave: ids of web unchanged
    expect(ids()).toEqual(first);
  });

  it('resolves id collisions: 3000 service ports get 3000 distinct reverse-NAT ids', () => {
    // 3000 hashes into 65535 ids collide ~70 times (birthday bound): probing must separate them.
    const many = Array.from({ length: 3000 }, (_, k) =>
      servicePort(service(`s${k}`, `10.97.${k >>> 8}.${k & 255}`), 80, 'TCP', [
        endpoint(`10.245.${k >>> 8}.${k & 255}:80`),
      ]),
    );
    loaderOf(dp).load(many);
    const revNats = new Set<number>();
    const backends = new Set<number>();
    for (let k = 0; k < 3000; k++) {
      const vip = ip(`10.97.${k >>> 8}.${k & 255}`);
      const m = dp.svc.lookup(vip, 80, 6, 0);
      revNats.add(dp.svc.revNat(m));
      backends.add(dp.svc.backendId(dp.svc.lookup(vip, 80, 6, 1)));
    }
    expect(revNats.size).toBe(3000);
    expect(backends.size).toBe(3000);
    expect(dp.revnat.size).toBe(3000);
  });

  it('removes leftovers: shrunk slots, vanished services, their wildcard, backends, revNAT', () => {
    const dns = servicePort(service('dns', '10.96.0.53'), 53, 'UDP', [endpoint('10.244.3.7:53')]);
    loaderOf(dp).load([web(['10.244.1.5:8080', '10.244.2.5:8080', '10.244.4.5:8080']), dns]);
    expect(dp.svc.size).toBe(5 + 3);
    const stats = loaderOf(dp).load([web(['10.244.2.5:8080'])]);
    expect(stats).toEqual({ frontends: 1, backends: 1, vips: 1, removed: 1, written: 1 });
    expect(slots(dp, VIP, 80, 6)).toEqual(['10.244.2.5:8080']);
    expect(dp.svc.lookup(VIP, 80, 6, 2)).toBe(-1);
    expect(dp.svc.lookup(ip('10.96.0.53'), 0, 0, 0)).toBe(-1);
    expect(dp.svc.size).toBe(3);
    expect(dp.be.size).toBe(1);
    expect(dp.revnat.size).toBe(1);
  });

  it('marks backends on this node local', () => {
    const eps = [
      endpoint('10.244.1.5:80', { nodeName: 'n1' }),
      endpoint('10.244.2.5:80', { nodeName: 'n2' }),
    ];
    loaderOf(dp).load([servicePort(service('w', '10.96.0.10'), 80, 'TCP', eps)], {
      nodeName: 'n1',
    });
    const flags = [1, 2].map((s) =>
      dp.be.flags(dp.be.lookup(dp.svc.backendId(dp.svc.lookup(VIP, 80, 6, s)))),
    );
    expect(flags).toEqual([BE_F_LOCAL, 0]);
  });

  it('rejects a bad address naming service and field, and leaves the maps as they were', () => {
    loaderOf(dp).load([web()]);
    const before = [dp.svc.size, dp.be.size, dp.revnat.size];
    const bad = servicePort(
      service('broken', '10.96.0.300', { origin: { file: 'svc.yaml', doc: 2 } }),
      80,
      'TCP',
      [],
    );
    expect(() => loaderOf(dp).load([bad])).toThrow(
      /svc\.yaml: Service default\/broken port 80: spec\.clusterIPs\[0\]/,
    );
    const badEp = servicePort(service('ep', '10.96.0.12'), 80, 'TCP', [
      endpoint('10.244.1.256:80'),
    ]);
    expect(() => loaderOf(dp).load([badEp])).toThrow(/default\/ep.*endpoint 10\.244\.1\.256/);
    expect([dp.svc.size, dp.be.size, dp.revnat.size]).toEqual(before);
    expect(slots(dp, VIP, 80, 6)).toEqual(['10.244.1.5:8080', '10.244.2.5:8080']);
  });

  it('rejects two services claiming the same VIP:port/protocol', () => {
    const a = servicePort(service('a', '10.96.0.10'), 80, 'TCP', []);
    const b = servicePort(service('b', '10.96.0.10'), 80, 'TCP', []);
    expect(() => loaderOf(dp).load([a, b])).toThrow(/10\.96\.0\.10:80\/TCP/);
  });

  it('gives back the ids a refused update picked', () => {
    // two reverse-NAT ids in all: one the refused update's leak would take for good
    const small = createDatapath({ revNatCapacity: 2 });
    const a = servicePort(service('a', '10.96.0.10'), 80, 'TCP', []);
    const clash = servicePort(service('clash', '10.96.0.10'), 80, 'TCP', []);
    loaderOf(small).update([a], []);
    for (let i = 0; i < 3; i++) {
      expect(() => loaderOf(small).update([clash], [])).toThrow(/10\.96\.0\.10:80\/TCP/);
    }
    const b = servicePort(service('b', '10.96.0.11'), 80, 'TCP', []);
    expect(loaderOf(small).update([b], []).frontends).toBe(2);
  });

  it('forgets the backends a refused update planned (their ids are free again)', () => {
    const a = servicePort(service('a', '10.96.0.10'), 80, 'TCP', [endpoint('10.244.1.5:8080')]);
    const clash = servicePort(service('clash', '10.96.0.10'), 80, 'TCP', [
      endpoint('10.244.9.9:8080'),
    ]);
    loaderOf(dp).update([a], []);
    expect(() => loaderOf(dp).update([clash], [])).toThrow(/10\.96\.0\.10:80\/TCP/);
    const b = servicePort(service('b', '10.96.0.11'), 80, 'TCP', []);
    expect(loaderOf(dp).update([b], []).backends).toBe(1); // a's alone
    expect(dp.be.size).toBe(1);
  });

  it('refuses a load that cannot fit the service map before writing anything', () => {
    const small = createDatapath({ svcCapacity: 4 });
    expect(() =>
      loaderOf(small).load([
        web(['10.244.1.5:80', '10.244.2.5:80', '10.244.4.5:80', '10.244.5.5:80']),
      ]),
    ).toThrow(/service map entries needed/);
    expect(small.svc.size).toBe(0);
  });
});

// Stale UDP cleanup on the real conntrack map:
//
//   client 10.244.9.9 ──UDP──▶ 10.96.0.10:53 ──DNAT──▶ 10.244.1.5:53  (still serving: kept)
//                                            └─DNAT──▶ 10.244.2.7:53  (pod gone: deleted)
//   client ──TCP──▶ 10.96.0.10:53 ─▶ 10.244.2.7:53                     (TCP: kept)
//   client ──UDP──▶ 10.96.0.99:53 ─▶ 10.244.3.3:53                     (service deleted: deleted)
//   client ──UDP──▶ 10.96.0.77:53 ─▶ 10.244.4.4:53                     (unknown to the sync: kept)
import { describe, expect, it } from 'vitest';
import {
  reconcileUdpConntrack,
  reconcileUdpConntrack6,
} from '../../src/control/conntrack-reconcile.ts';
import { ChangeTracker } from '../../src/control/tracker.ts';
import { ConntrackMap } from '../../src/maps/conntrack.ts';
import { ipv4ToU32 as ip } from '../../src/wire/addr.ts';
import { ipv6ToWords } from '../../src/wire/addr6.ts';
import { ep, port, slice, svc } from './fixtures.ts';

const dnsPort = [{ name: 'dns', protocol: 'UDP' as const, port: 53 }];

function flow(
  ct: ConntrackMap,
  proto: number,
  sport: number,
  vip: string,
  backend: string,
): number {
  return ct.create(proto, ip('10.244.9.9'), ip(vip), sport, 53, ip(backend), 53, 1, 1, 1000);
}

describe('reconcileUdpConntrack', () => {
  it('deletes UDP flows to endpoints that stopped serving and to removed service addresses, nothing else', () => {
    const t = new ChangeTracker();
    const old = svc('old', { clusterIPs: ['10.96.0.99'], ports: [port('dns', 'UDP', 53)] });
    t.services.update(null, svc('dns', { ports: [port('dns', 'UDP', 53)] }));
    t.services.update(null, old);
    t.endpointSlices.update(
      null,
      slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7')], dnsPort),
    );
    t.checkout();

    const ct = new ConntrackMap(1024);
    const keep = flow(ct, 17, 1001, '10.96.0.10', '10.244.1.5');
    const gone = flow(ct, 17, 1002, '10.96.0.10', '10.244.2.7');
    const tcp = flow(ct, 6, 1003, '10.96.0.10', '10.244.2.7');
    const deletedSvc = flow(ct, 17, 1004, '10.96.0.99', '10.244.3.3');
    const unknown = flow(ct, 17, 1005, '10.96.0.77', '10.244.4.4');

    t.endpointSlices.update(
      slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7')], dnsPort),
      slice('dns-a', 'dns', [ep('10.244.1.5')], dnsPort),
    );
    t.services.update(old, null);
    const ch = t.checkout();
    expect(ch.udpConntrackCleanup).toBe(true);

    expect(reconcileUdpConntrack(ct, t, ch)).toBe(2);
    expect(ct.isLive(keep)).toBe(true);
    expect(ct.isLive(gone)).toBe(false);
    expect(ct.isLive(tcp)).toBe(true);
    expect(ct.isLive(deletedSvc)).toBe(false);
    expect(ct.isLive(unknown)).toBe(true);
    expect(ct.size).toBe(3);
  });

  it('a NodePort UDP flow whose endpoint stopped serving is deleted too (kube-proxy flushes NodePorts)', () => {
    const t = new ChangeTracker();
    const np = [port('dns', 'UDP', 53, { nodePort: 30053 })];
    t.services.update(null, svc('dns', { type: 'NodePort', ports: np }));
    const eps = [ep('10.244.1.5'), ep('10.244.2.7')];
    t.endpointSlices.update(null, slice('dns-a', 'dns', eps, dnsPort));
    t.checkout();
    const ct = new ConntrackMap(64);
    const node = (sport: number, backend: string) =>
      ct.create(
        17,
        ip('172.30.0.100'),
        ip('172.30.0.11'),
        sport,
        30053,
        ip(backend),
        53,
        1,
        1,
        1000,
      );
    const keep = node(2001, '10.244.1.5');
    const gone = node(2002, '10.244.2.7');
    t.endpointSlices.update(
      slice('dns-a', 'dns', eps, dnsPort),
      slice('dns-a', 'dns', [ep('10.244.1.5')], dnsPort),
    );
    expect(reconcileUdpConntrack(ct, t, t.checkout())).toBe(1);
    expect(ct.isLive(keep)).toBe(true);
    expect(ct.isLive(gone)).toBe(false);
  });

  it('matches addresses >= 2^31, int32 in the map, against the u32 ones of the model', () => {
    const t = new ChangeTracker();
    const old = svc('old', { clusterIPs: ['172.30.0.99'], ports: [port('dns', 'UDP', 53)] });
    t.services.update(
      null,
      svc('dns', { clusterIPs: ['172.30.0.10'], ports: [port('dns', 'UDP', 53)] }),
    );
    t.services.update(null, old);
    const eps = [ep('192.168.1.5'), ep('192.168.2.7')];
    t.endpointSlices.update(null, slice('dns-a', 'dns', eps, dnsPort));
    t.checkout();
    const ct = new ConntrackMap(64);
    const keep = flow(ct, 17, 1001, '172.30.0.10', '192.168.1.5');
    const gone = flow(ct, 17, 1002, '172.30.0.10', '192.168.2.7');
    const deletedSvc = flow(ct, 17, 1003, '172.30.0.99', '192.168.3.3');
    t.endpointSlices.update(
      slice('dns-a', 'dns', eps, dnsPort),
      slice('dns-a', 'dns', [ep('192.168.1.5')], dnsPort),
    );
    t.services.update(old, null);
    expect(reconcileUdpConntrack(ct, t, t.checkout())).toBe(2);
    expect([ct.isLive(keep), ct.isLive(gone), ct.isLive(deletedSvc)]).toEqual([true, false, false]);
  });

  it('keeps flows to a terminating endpoint that is still serving', () => {
    const t = new ChangeTracker();
    t.services.update(null, svc('dns', { ports: [port('dns', 'UDP', 53)] }));
    t.endpointSlices.update(
      null,
      slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7')], dnsPort),
    );
    t.checkout();
    const ct = new ConntrackMap(64);
    const draining = flow(ct, 17, 1001, '10.96.0.10', '10.244.2.7');
    t.endpointSlices.update(
      slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7')], dnsPort),
      slice(
        'dns-a',
        'dns',
        [ep('10.244.1.5'), ep('10.244.2.7', {}, { ready: false, terminating: true })],
        dnsPort,
      ),
    );
    expect(reconcileUdpConntrack(ct, t, t.checkout())).toBe(0);
    expect(ct.isLive(draining)).toBe(true);
  });

  it('leaves the flows of a service port with no serving endpoint left alone, as kube-proxy does', () => {
    const t = new ChangeTracker();
    t.services.update(null, svc('dns', { ports: [port('dns', 'UDP', 53)] }));
    const eps = [ep('10.244.1.5')];
    t.endpointSlices.update(null, slice('dns-a', 'dns', eps, dnsPort));
    t.checkout();
    const ct = new ConntrackMap(64);
    const last = flow(ct, 17, 1001, '10.96.0.10', '10.244.1.5');
    // scaled to zero: kube-proxy's reconciler skips a service without serving endpoints
    t.endpointSlices.update(
      slice('dns-a', 'dns', eps, dnsPort),
      slice('dns-a', 'dns', [], dnsPort),
    );
    expect(reconcileUdpConntrack(ct, t, t.checkout())).toBe(0);
    expect(ct.isLive(last)).toBe(true);
  });

  it('matches the endpoint by IP alone (kube-proxy filters on --reply-src), not by its port', () => {
    const t = new ChangeTracker();
    t.services.update(null, svc('dns', { ports: [port('dns', 'UDP', 53)] }));
    t.endpointSlices.update(null, slice('dns-a', 'dns', [ep('10.244.1.5')], dnsPort));
    t.checkout();
    const ct = new ConntrackMap(64);
    const same = flow(ct, 17, 1001, '10.96.0.10', '10.244.1.5'); // backend port 53
    const moved = [{ name: 'dns', protocol: 'UDP' as const, port: 5353 }];
    t.endpointSlices.update(
      slice('dns-a', 'dns', [ep('10.244.1.5')], dnsPort),
      slice('dns-a', 'dns', [ep('10.244.1.5')], moved),
    );
    expect(reconcileUdpConntrack(ct, t, t.checkout())).toBe(0);
    expect(ct.isLive(same)).toBe(true);
  });
});

describe('reconcileUdpConntrack6 (the IPv6 table, the IPv6 half of the same rule)', () => {
  //   client fd00:10:244:9::9 ──UDP──▶ [fd00:10:96::a]:53 ─▶ fd00:10:244:1::5 (serving: kept)
  //                                                        └▶ fd00:10:244:2::7 (gone: deleted)
  //   the same through the Service's IPv4 ClusterIP, in the IPv4 table: left to the IPv4 pass
  it('deletes IPv6 UDP flows to endpoints that stopped serving, addresses compared canonically', () => {
    const t = new ChangeTracker();
    const dual = svc('dns', {
      clusterIPs: ['10.96.0.10', 'fd00:10:96::a'],
      ipFamilies: ['IPv4', 'IPv6'],
      ports: [port('dns', 'UDP', 53)],
    });
    t.services.update(null, dual);
    const v6 = (ips: string[]) => ({
      ...slice(
        'dns-v6',
        'dns',
        ips.map((a) => ep(a)),
        dnsPort,
      ),
      addressType: 'IPv6' as const,
    });
    // the slice spells an address the long way: compared as canonical text all the same
    t.endpointSlices.update(null, v6(['fd00:10:244:1:0:0:0:5', 'fd00:10:244:2::7']));
    t.checkout();
    const ct = new ConntrackMap(64, { ipv6: true });
    const a = new Int32Array(12);
    a.set(ipv6ToWords('fd00:10:244:9::9'), 0);
    a.set(ipv6ToWords('fd00:10:96::a'), 4);
    const flow6 = (sport: number, backend: string) => {
      a.set(ipv6ToWords(backend), 8);
      return ct.create6(17, a, 0, 4, sport, 53, 8, 53, 1, 1, 1000);
    };
    const keep = flow6(1001, 'fd00:10:244:1::5');
    const gone = flow6(1002, 'fd00:10:244:2::7');
    t.endpointSlices.update(
      v6(['fd00:10:244:1:0:0:0:5', 'fd00:10:244:2::7']),
      v6(['fd00:10:244:1::5']),
    );
    const ch = t.checkout();
    expect(ch.udpConntrackCleanup).toBe(true);
    expect(reconcileUdpConntrack6(ct, t, ch)).toBe(1);
    expect([ct.isLive(keep), ct.isLive(gone)]).toEqual([true, false]);
    // the IPv4 pass over an IPv4 table is not disturbed by IPv6 addresses in the changes
    expect(reconcileUdpConntrack(new ConntrackMap(16), t, ch)).toBe(0);
  });
});

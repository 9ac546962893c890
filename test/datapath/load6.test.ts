// The loader writes the IPv6 half of a service port into the IPv6 maps (issue 19 point 2,
// step 3): a dual-stack Service's clusterIPs[1] with its IPv6 endpoints (`endpoints6`), an
// IPv6-only Service, IPv6 NodePort / externalIPs / LB IPs / source ranges — each family its
// own frontends, backends and reverse-NAT ids, added, changed and removed independently.
// Before, the loader skipped every IPv6 address (`!ip.includes(':')`) and the v6 maps did not
// exist.

import { describe, expect, it } from 'vitest';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import {
  SVC_F_EXTERNAL_IP,
  SVC_F_LOADBALANCER,
  SVC_F_NODEPORT,
  SVC_F_SOURCE_RANGE,
  SVC_F_WILDCARD,
} from '../../src/maps/services.ts';
import type { ResolvedServicePort, Service } from '../../src/model.ts';
import { ipv6ToWords, wordsToIpv6 } from '../../src/wire/addr6.ts';
import { makeReadyEndpoint } from '../fixtures/model.ts';
import { loaderOf, service } from './harness.ts';

const TCP = 6;
const VIP4 = '10.96.0.20';
const VIP6 = 'fd00:10:96::20';

/** A service port with IPv4 endpoints `v4` and IPv6 endpoints `v6` (port 8080). */
function port(svc: Service, v4: string[], v6: string[], nodePort = 0): ResolvedServicePort {
  const sp = { name: 'http', protocol: 'TCP' as const, port: 80, targetPort: 8080, nodePort };
  svc.ports.push(sp);
  return {
    service: svc,
    port: sp,
    servicePortName: `default/${svc.name}:http`,
    endpoints: v4.map((ip) => makeReadyEndpoint(ip, 8080)),
    endpoints6: v6.map((ip) => makeReadyEndpoint(ip, 8080)),
  };
}

const dual = (over: Partial<Service> = {}) =>
  service('web', '', { clusterIPs: [VIP4, VIP6], ipFamilies: ['IPv4', 'IPv6'], ...over });

/** The IPv6 master of vip:port/TCP, or -1. */
function master6(dp: ReturnType<typeof createDatapath>, vip: string, p = 80, proto = TCP) {
  return dp.svc6.lookup6(ipv6ToWords(vip), 0, p, proto, 0);
}

/** Backend addresses of an IPv6 frontend's slots, as text. */
function slots6(dp: ReturnType<typeof createDatapath>, vip: string, p = 80, proto = TCP) {
  const m = master6(dp, vip, p, proto);
  const out: string[] = [];
  for (let s = 1; m >= 0 && s <= dp.svc6.count(m); s++) {
    const e = dp.svc6.lookup6(ipv6ToWords(vip), 0, p, proto, s);
    const b = dp.be6.lookup(dp.svc6.backendId(e));
    const w = [0, 1, 2, 3].map((k) => dp.be6.addrWord(b, k));
    out.push(`[${wordsToIpv6(w)}]:${dp.be6.port(b)}`);
  }
  return out;
}

describe('DpLoader, IPv6 half', () => {
  it('writes a dual-stack port into both families: VIP, backends, reverse NAT, wildcard', () => {
    const dp = createDatapath();
    const stats = loaderOf(dp).load([
      port(dual(), ['10.244.1.5'], ['fd00:10:244:1::5', 'fd00:10:244:2::7']),
    ]);
    expect(stats.written).toBe(1);
    expect(slots6(dp, VIP6)).toEqual(['[fd00:10:244:1::5]:8080', '[fd00:10:244:2::7]:8080']);
    const m6 = master6(dp, VIP6);
    const m4 = dp.svc.lookup(0x0a600014, 80, TCP, 0);
    expect(m4).toBeGreaterThanOrEqual(0);
    expect(dp.svc.count(m4)).toBe(1);
    // one id space, two families: distinct reverse-NAT ids, each in its family's map
    const rn6 = dp.svc6.revNat(m6);
    expect(rn6).not.toBe(dp.svc.revNat(m4));
    expect(dp.revnat6.lookup(rn6)).toBe(rn6);
    expect(dp.revnat.lookup(rn6)).toBe(-1);
    expect(wordsToIpv6([0, 1, 2, 3].map((k) => dp.revnat6.vipWord(rn6, k)))).toBe(VIP6);
    const w = dp.svc6.lookup6(ipv6ToWords(VIP6), 0, 0, 0, 0);
    expect(dp.svc6.flags(w) & SVC_F_WILDCARD).toBe(SVC_F_WILDCARD);
    expect(loaderOf(dp).loaded()).toEqual(['default/web:http']);
  });

  it('programs an IPv6-only Service, and removes each half on its own', () => {
    const dp = createDatapath();
    const l = loaderOf(dp);
    l.load([port(service('v6', '', { clusterIPs: [VIP6] }), [], ['fd00:10:244:1::5'])]);
    expect(slots6(dp, VIP6)).toEqual(['[fd00:10:244:1::5]:8080']);
    expect(dp.svc.size).toBe(0);
    // the same port becomes dual-stack, then loses its IPv6 ClusterIP
    l.load([port(dual(), ['10.244.1.5'], ['fd00:10:244:1::5'])]);
    expect(dp.svc.size).toBe(3); // master, slot, wildcard
    l.load([port(dual({ clusterIPs: [VIP4], ipFamilies: ['IPv4'] }), ['10.244.1.5'], [])]);
    expect([dp.svc6.size, dp.be6.size, dp.revnat6.size]).toEqual([0, 0, 0]);
    expect(dp.svc.size).toBe(3);
    l.load([]);
    expect([dp.svc.size, dp.be.size, dp.revnat.size]).toEqual([0, 0, 0]);
  });

  it('IPv6 NodePort on the node IPv6 address, externalIPs, LB IPs and source ranges', () => {
    const dp = createDatapath({ nodeIp6: 'fd00:172:30::11' });
    const svc = dual({
      type: 'LoadBalancer',
      externalIPs: ['192.0.2.9', '2001:db8::9'],
      loadBalancerIPs: ['2001:db8::10'],
      loadBalancerSourceRanges: ['2001:db8:1::/48', '10.0.0.0/8'],
    });
    loaderOf(dp).load([port(svc, ['10.244.1.5'], ['fd00:10:244:1::5'], 30080)]);
    const np = master6(dp, 'fd00:172:30::11', 30080);
    expect(dp.svc6.flags(np) & SVC_F_NODEPORT).toBe(SVC_F_NODEPORT);
    expect(slots6(dp, 'fd00:172:30::11', 30080)).toEqual(['[fd00:10:244:1::5]:8080']);
    expect(dp.svc6.flags(master6(dp, '2001:db8::9')) & SVC_F_EXTERNAL_IP).toBe(SVC_F_EXTERNAL_IP);
    const lb = master6(dp, '2001:db8::10');
    expect(dp.svc6.flags(lb) & (SVC_F_LOADBALANCER | SVC_F_SOURCE_RANGE)).toBe(
      SVC_F_LOADBALANCER | SVC_F_SOURCE_RANGE,
    );
    // the IPv6 id's source range is the IPv6 CIDR alone; the IPv4 one went to the IPv4 id
    const rn = dp.svc6.revNat(lb);
    expect(dp.nat.rangeCount[rn]).toBe(1);
    const at = dp.nat.rangeStart[rn] * 4;
    expect(wordsToIpv6(dp.nat.rangeNet6.subarray(at, at + 4))).toBe('2001:db8:1::');
    expect([...dp.nat.rangeMask6.subarray(at, at + 4)]).toEqual([-1, -65536, 0, 0]);
    // no IPv6 frontend on an IPv4 address and the other way round
    expect(master6(dp, '::ffff:192.0.2.9')).toBe(-1);
    expect(dp.svc.lookup(0xc0000209, 80, TCP, 0)).toBeGreaterThanOrEqual(0);
  });

  it('names the field of a bad IPv6 external address, writing nothing', () => {
    const dp = createDatapath();
    const svc = dual({ externalIPs: ['2001:db8::9::1'] });
    expect(() => loaderOf(dp).load([port(svc, [], ['fd00:10:244:1::5'])])).toThrow(
      /Service default\/web: spec\.externalIPs\[0\]: invalid IPv6 address/,
    );
    expect(dp.svc6.size + dp.svc.size).toBe(0);
  });
});

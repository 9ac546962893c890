// kube-proxy's TestBadIPs (nftables) and TestSyncProxyRulesRepeated (nftables): after each sync its fake table holds the
// whole ruleset, and the states with no stale chains left over are what a full render of the
// same Services must produce. (The in-between states, where flushed chains of a deleted
// service or a changed endpoint linger until they age out, are artifacts of incremental syncs
// that a stateless renderer does not have.)

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { EndpointSlice, Service } from '../../src/model.ts';
import { renderNftables } from '../../src/rules/nftables.ts';
import {
  badIPsModel,
  ep,
  fakeProxierOptions,
  makeService,
  makeSlice,
  port,
  resolve,
  slicePort,
} from './builders.ts';
import { sortNftTransaction } from './nft-dump.ts';

const base = readFileSync(new URL('./golden/nft-base.nft', import.meta.url), 'utf8');
const opts = {
  ...fakeProxierOptions,
  nodePortAddresses: ['192.168.0.2/32'],
  serviceCIDRs: ['172.30.0.0/16'],
};

const svc = (n: number, p: number) =>
  makeService(`ns${n}`, `svc${n}`, (s) => {
    s.clusterIPs = [`172.30.0.4${n}`];
    s.ports = [port({ name: `p${p}`, port: p })];
  });
const slice = (n: number, p: number, ip: string): EndpointSlice =>
  makeSlice(`ns${n}`, `svc${n}`, [ep(ip)], [slicePort(`p${p}`, p)]);

function check(services: Service[], slices: EndpointSlice[], expected: string): void {
  const out = renderNftables(resolve(services, slices), opts);
  expect(sortNftTransaction(out)).toBe(sortNftTransaction(base + expected));
}

const svc1 = `
add element ip kube-proxy cluster-ips { 172.30.0.41 }
add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }
add chain ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80
add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 ip daddr 172.30.0.41 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80 }
add chain ip kube-proxy endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80
add rule ip kube-proxy endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80 ip saddr 10.0.1.1 jump mark-for-masquerade
add rule ip kube-proxy endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80 meta l4proto tcp dnat to 10.0.1.1:80
`;
const svc2 = `
add element ip kube-proxy cluster-ips { 172.30.0.42 }
add element ip kube-proxy service-ips { 172.30.0.42 . tcp . 8080 : goto service-MHHHYRWA-ns2/svc2/tcp/p8080 }
add chain ip kube-proxy service-MHHHYRWA-ns2/svc2/tcp/p8080
add rule ip kube-proxy service-MHHHYRWA-ns2/svc2/tcp/p8080 ip daddr 172.30.0.42 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
add rule ip kube-proxy service-MHHHYRWA-ns2/svc2/tcp/p8080 numgen random mod 1 vmap { 0 : goto endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080 }
add chain ip kube-proxy endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080
add rule ip kube-proxy endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080 ip saddr 10.0.2.1 jump mark-for-masquerade
add rule ip kube-proxy endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080 meta l4proto tcp dnat to 10.0.2.1:8080
`;
const svc3 = `
add element ip kube-proxy cluster-ips { 172.30.0.43 }
add element ip kube-proxy service-ips { 172.30.0.43 . tcp . 80 : goto service-4AT6LBPK-ns3/svc3/tcp/p80 }
add chain ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80
add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 ip daddr 172.30.0.43 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-2OCDJSZQ-ns3/svc3/tcp/p80__10.0.3.1/80 }
add chain ip kube-proxy endpoint-2OCDJSZQ-ns3/svc3/tcp/p80__10.0.3.1/80
add rule ip kube-proxy endpoint-2OCDJSZQ-ns3/svc3/tcp/p80__10.0.3.1/80 ip saddr 10.0.3.1 jump mark-for-masquerade
add rule ip kube-proxy endpoint-2OCDJSZQ-ns3/svc3/tcp/p80__10.0.3.1/80 meta l4proto tcp dnat to 10.0.3.1:80
`;
const svc4Empty = `
add element ip kube-proxy cluster-ips { 172.30.0.44 }
add element ip kube-proxy no-endpoint-services { 172.30.0.44 . tcp . 80 comment "ns4/svc4:p80" : goto reject-chain }
`;
const svc4 = `
add element ip kube-proxy cluster-ips { 172.30.0.44 }
add element ip kube-proxy service-ips { 172.30.0.44 . tcp . 80 : goto service-LAUZTJTB-ns4/svc4/tcp/p80 }
add chain ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80
add rule ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80 ip daddr 172.30.0.44 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
add rule ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-WAHRBT2B-ns4/svc4/tcp/p80__10.0.4.1/80 }
add chain ip kube-proxy endpoint-WAHRBT2B-ns4/svc4/tcp/p80__10.0.4.1/80
add rule ip kube-proxy endpoint-WAHRBT2B-ns4/svc4/tcp/p80__10.0.4.1/80 ip saddr 10.0.4.1 jump mark-for-masquerade
add rule ip kube-proxy endpoint-WAHRBT2B-ns4/svc4/tcp/p80__10.0.4.1/80 meta l4proto tcp dnat to 10.0.4.1:80
`;

describe('TestSyncProxyRulesRepeated (nftables), settled states', () => {
  const s1 = [slice(1, 80, '10.0.1.1')];
  it('three ClusterIP services', () => {
    check(
      [svc(1, 80), svc(2, 8080), svc(3, 80)],
      [...s1, slice(2, 8080, '10.0.2.1'), slice(3, 80, '10.0.3.1')],
      svc1 + svc2 + svc3,
    );
  });
  it('after deleting svc2 and aging its chains out', () => {
    check([svc(1, 80), svc(3, 80)], [...s1, slice(3, 80, '10.0.3.1')], svc1 + svc3);
  });
  it('svc4 added without endpoints: rejected', () => {
    check(
      [svc(1, 80), svc(3, 80), svc(4, 80)],
      [...s1, slice(3, 80, '10.0.3.1')],
      svc1 + svc3 + svc4Empty,
    );
  });
  it('svc4 endpoints added', () => {
    check(
      [svc(1, 80), svc(3, 80), svc(4, 80)],
      [...s1, slice(3, 80, '10.0.3.1'), slice(4, 80, '10.0.4.1')],
      svc1 + svc3 + svc4,
    );
  });
});

describe('TestBadIPs (nftables)', () => {
  it('canonicalizes sloppy addresses and CIDRs', () => {
    const { services, slices } = badIPsModel();
    check(
      services,
      slices,
      `
add chain ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80
add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 ip daddr 172.30.0.41 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 }
add chain ip kube-proxy external-ULMVA6XW-ns1/svc1/tcp/p80
add rule ip kube-proxy external-ULMVA6XW-ns1/svc1/tcp/p80 jump mark-for-masquerade
add rule ip kube-proxy external-ULMVA6XW-ns1/svc1/tcp/p80 goto service-ULMVA6XW-ns1/svc1/tcp/p80
add chain ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80
add rule ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 ip saddr 10.180.0.1 jump mark-for-masquerade
add rule ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 meta l4proto tcp dnat to 10.180.0.1:80
add chain ip kube-proxy firewall-ULMVA6XW-ns1/svc1/tcp/p80
add rule ip kube-proxy firewall-ULMVA6XW-ns1/svc1/tcp/p80 ip saddr != { 203.0.113.0/25 } drop
add element ip kube-proxy cluster-ips { 172.30.0.41 }
add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }
add element ip kube-proxy service-ips { 192.168.99.22 . tcp . 80 : goto external-ULMVA6XW-ns1/svc1/tcp/p80 }
add element ip kube-proxy service-ips { 1.2.3.4 . tcp . 80 : goto external-ULMVA6XW-ns1/svc1/tcp/p80 }
add element ip kube-proxy service-nodeports { tcp . 3001 : goto external-ULMVA6XW-ns1/svc1/tcp/p80 }
add element ip kube-proxy firewall-ips { 1.2.3.4 . tcp . 80 : goto firewall-ULMVA6XW-ns1/svc1/tcp/p80 }
`,
    );
  });
});

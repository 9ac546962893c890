// kube-proxy's IPv6 output, reproduced:
//   - iptables: the ip6tables-restore input kube-proxy's own tests expect for an IPv6 proxier
//     (pkg/proxy/iptables/proxier_test.go, TestEnableLocalhostNodePortsIPv6 and
//     TestDisableLocalhostNodePortsIPv6: one NodePort Service with ETP Local, a
//     NoOpLocalDetector, two IPv6 endpoints, one of them local). Its dump is from before
//     kube-proxy had nfacct counters, so it is rendered with nfacct off.
//   - nftables: kube-proxy's nftables tests have IPv6 only as packet flows (TestNodePorts, its
//     "ipv6" cases with NewFakeProxier(v1.IPv6Protocol): pod CIDR fd00:10::/64, service CIDR
//     fd00:10:96::/112, --nodeport-addresses 192.168.0.2/32 and 2001:db8::1/128); they run here
//     through the same tracer as the IPv4 flows. The ip6 table's base rules are the IPv4 ones
//     with the family words its proxier substitutes ("ip6", "ipv6_addr") and the IPv6 CIDRs.
//   - dual-stack: each family's output holds only its own addresses, and the IPv4 output of a
//     dual-stack model is byte for byte the output of its IPv4 half alone.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { EndpointSlice, Service } from '../../src/model.ts';
import { renderIptables } from '../../src/rules/iptables.ts';
import { type NftOptions, renderNftables } from '../../src/rules/nftables.ts';
import {
  ep,
  fakeProxierOptions,
  makeService,
  makeSlice,
  port,
  resolve,
  slicePort,
  testNodeName,
} from './builders.ts';
import { type Flow, expectFlows } from './flows.ts';
import { checkJumps, sortDump } from './ipt-dump.ts';
import { sortNftTransaction, traceNft } from './nft-dump.ts';

const golden = (name: string) => readFileSync(new URL(`./golden/${name}`, import.meta.url), 'utf8');

const v6slice = (s: EndpointSlice): EndpointSlice => ({ ...s, addressType: 'IPv6' });

describe('ip6tables: TestEnableLocalhostNodePortsIPv6 / TestDisableLocalhostNodePortsIPv6', () => {
  const services = [
    makeService('ns1', 'svc1', (s) => {
      s.type = 'NodePort';
      s.clusterIPs = ['fd00:ab34::20'];
      s.ports = [port({ name: 'p80', port: 80, nodePort: 30001 })];
      s.externalTrafficPolicy = 'Local';
    }),
  ];
  const slices = [
    v6slice(
      makeSlice(
        'ns1',
        'svc1',
        [ep('ff06::c1'), ep('ff06::c2', { nodeName: testNodeName })],
        [slicePort('p80', 80)],
      ),
    ),
  ];
  for (const localhostNodePorts of [true, false]) {
    it(`renders kube-proxy's expected dump (localhostNodePorts ${localhostNodePorts}: no localhost NodePorts in IPv6 either way)`, () => {
      const out = renderIptables(resolve(services, slices), {
        ipFamily: 'IPv6',
        nodeName: testNodeName,
        localDetector: { mode: 'ClusterCIDR', by: 'none', why: 'NoOpLocalDetector' },
        masqueradeMark: '0x4000',
        randomFully: false,
        nfacct: false,
        localhostNodePorts,
      });
      expect(sortDump(out)).toBe(golden('localhost-nodeports-ipv6.iptables'));
      expect(checkJumps(out)).toBeNull();
    });
  }
});

// ---- nftables: kube-proxy's NewFakeProxier(v1.IPv6Protocol) ---------------------------------

const testNodeIPv6 = '2001:db8::1';
const testNodeIPv6Alt = '2001:db8:1::2';
const allNodeIPs = ['192.168.0.2', '192.168.1.2', '192.168.99.11', testNodeIPv6, testNodeIPv6Alt];

const nft6: NftOptions = {
  ...fakeProxierOptions,
  ipFamily: 'IPv6',
  clusterCIDR: 'fd00:10::/64',
  nodeIPs: allNodeIPs,
  nodePortAddresses: ['192.168.0.2/32', `${testNodeIPv6}/128`],
  serviceCIDRs: ['172.30.0.0/16', 'fd00:10:96::/112'],
};

describe('nftables ip6 table: the base rules', () => {
  it('are the ip table with the IPv6 family, service CIDR and NodePort address', () => {
    const v4 = golden('nft-base.nft')
      .replaceAll('ip kube-proxy', 'ip6 kube-proxy')
      .replaceAll(' ip daddr', ' ip6 daddr')
      .replaceAll('ipv4_addr', 'ipv6_addr')
      .replace('{ 172.30.0.0/16 }', '{ fd00:10:96::/112 }')
      .replace('nodeport-ips { 192.168.0.2 }', `nodeport-ips { ${testNodeIPv6} }`);
    expect(sortNftTransaction(renderNftables([], nft6))).toBe(sortNftTransaction(v4));
  });
});

describe('nftables ip6: TestNodePorts, the ipv6 cases', () => {
  const svcIP = 'fd00:172:30::41';
  const epIP1 = 'fd00:10:180::1';
  const epIP2 = 'fd00:10:180::2:1';
  const model = () =>
    resolve(
      [
        makeService('ns1', 'svc1', (s) => {
          s.type = 'NodePort';
          s.clusterIPs = [svcIP];
          s.ports = [port({ name: 'p80', port: 80, nodePort: 3001 })];
        }),
      ],
      [
        v6slice(
          makeSlice(
            'ns1',
            'svc1',
            [ep(epIP1), ep(epIP2, { nodeName: testNodeName })],
            [slicePort('p80', 80)],
          ),
        ),
      ],
    );
  const output = `[${epIP1}]:80, [${epIP2}]:80`;
  const cases: { name: string; nodePortAddresses?: string[]; allowAltNodeIP: boolean }[] = [
    { name: 'ipv6', allowAltNodeIP: false },
    {
      name: 'ipv6, multiple nodeport-addresses',
      nodePortAddresses: ['192.168.0.0/24', '192.168.1.0/24', '2001:db8::/64', '2001:db8:1::2/128'],
      allowAltNodeIP: true,
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const o = c.nodePortAddresses ? { ...nft6, nodePortAddresses: c.nodePortAddresses } : nft6;
      const tx = renderNftables(model(), o);
      const flows: Flow[] = [
        { name: 'pod to cluster IP', sourceIP: 'fd00:10::2', destIP: svcIP, destPort: 80, output },
        {
          name: 'external to nodePort',
          sourceIP: '2600:5200::1',
          destIP: testNodeIPv6,
          destPort: 3001,
          output,
          masq: true,
        },
        {
          name: 'node to nodePort',
          sourceIP: testNodeIPv6,
          destIP: testNodeIPv6,
          destPort: 3001,
          output,
          masq: true,
        },
        c.allowAltNodeIP
          ? {
              name: 'external to nodePort on secondary IP',
              sourceIP: '2600:5200::1',
              destIP: testNodeIPv6Alt,
              destPort: 3001,
              output,
              masq: true,
            }
          : {
              name: 'secondary nodeIP ignores NodePorts',
              sourceIP: '2600:5200::1',
              destIP: testNodeIPv6Alt,
              destPort: 3001,
              output: '',
            },
      ];
      expectFlows(flows, (p) => traceNft(tx, { ...p, destPort: String(p.destPort) }, allNodeIPs));
    });
  }
});

// ---- dual-stack: one model, two proxiers -------------------------------------------------------

function dualModel(withV6: boolean): { services: Service[]; slices: EndpointSlice[] } {
  const services = [
    makeService('ns1', 'web', (s) => {
      s.type = 'LoadBalancer';
      s.clusterIPs = withV6 ? ['172.30.0.41', 'fd00:10:96::41'] : ['172.30.0.41'];
      s.externalIPs = withV6 ? ['192.168.99.11', '2001:db8:99::11'] : ['192.168.99.11'];
      s.loadBalancerIPs = withV6 ? ['1.2.3.4', '2001:db8:4::4'] : ['1.2.3.4'];
      s.loadBalancerSourceRanges = withV6
        ? ['203.0.113.0/25', '2001:db8:113::/48']
        : ['203.0.113.0/25'];
      s.sessionAffinity = 'ClientIP';
      s.ports = [port({ name: 'p80', port: 80, nodePort: 3001 })];
    }),
  ];
  const slices = [
    makeSlice(
      'ns1',
      'web',
      [ep('10.180.0.1'), ep('10.180.0.2', { nodeName: testNodeName })],
      [slicePort('p80', 80)],
    ),
  ];
  if (withV6) {
    slices.push(
      v6slice(
        makeSlice(
          'ns1',
          'web',
          [ep('fd00:10:180::1'), ep('fd00:10:180::2', { nodeName: testNodeName })],
          [slicePort('p80', 80)],
          2,
        ),
      ),
    );
  }
  return { services, slices };
}

describe('dual-stack: each proxier writes its own family only', () => {
  const o = {
    ...fakeProxierOptions,
    nodeIPs: allNodeIPs,
    serviceCIDRs: ['172.30.0.0/16', 'fd00:10:96::/112'],
  };
  const dual = dualModel(true);
  const v4 = dualModel(false);

  it('IPv4 output of the dual-stack model is the IPv4 half alone, byte for byte', () => {
    const r = (m: typeof dual) => resolve(m.services, m.slices);
    expect(renderIptables(r(dual), o)).toBe(renderIptables(r(v4), o));
    expect(renderNftables(r(dual), o)).toBe(renderNftables(r(v4), o));
  });

  it('IPv6 output holds every IPv6 address of the Service and no IPv4 one', () => {
    const rsp = resolve(dual.services, dual.slices);
    const ipt = renderIptables(rsp, { ...o, ipFamily: 'IPv6', clusterCIDR: 'fd00:10::/64' });
    const nft = renderNftables(rsp, { ...o, ipFamily: 'IPv6', clusterCIDR: 'fd00:10::/64' });
    for (const out of [ipt, nft]) {
      for (const a of ['fd00:10:96::41', '2001:db8:99::11', '2001:db8:4::4', '2001:db8:113::/48']) {
        expect(out).toContain(a);
      }
      expect(out).toContain('[fd00:10:180::2]:80');
      // (an IPv6 endpoint's chain name spells it with dots: fd00.10.180..2, not an IPv4 address)
      expect(out).not.toMatch(/(?<![\w.])(172\.30\.|10\.180\.|192\.168\.|1\.2\.3\.4|203\.0\.113)/);
    }
    expect(ipt).toContain('-A KUBE-SEP-');
    expect(ipt).toContain('-j DNAT --to-destination [fd00:10:180::1]:80');
    expect(ipt).toContain('! -s fd00:10::/64 -j KUBE-MARK-MASQ');
    expect(nft).toContain('add table ip6 kube-proxy');
    expect(nft).toContain('ip6 saddr != { 2001:db8:113::/48 } drop');
    expect(nft).toMatch(
      /add set ip6 kube-proxy affinity-\S+ \{ type ipv6_addr ; flags dynamic,timeout/,
    );
    expect(nft).toContain('update @affinity-');
    expect(nft).toContain('{ ip6 saddr }');
    expect(nft).toContain(
      'ip6 daddr fd00:10:96::41 ip6 saddr != fd00:10::/64 jump mark-for-masquerade',
    );
    expect(checkJumps(ipt)).toBeNull();
  });
});

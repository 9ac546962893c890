// Packet-flow tests of kube-proxy's nftables proxier (pkg/proxy/nftables/proxier_test.go),
// traced through our nftables output with a tracer like its helpers_test.go. Differences from
// iptables mode that these pin down: traffic to a wrong port of a ClusterIP is REJECTed and
// traffic to an unallocated ClusterIP is DROPped (cluster-ips-check), and with the fake
// proxier's --nodeport-addresses 192.168.0.2/32 the secondary node IP takes no NodePorts.

import { describe, it } from 'vitest';
import type { EndpointSlice, Service } from '../../src/model.ts';
import { type NftOptions, renderNftables } from '../../src/rules/nftables.ts';
import {
  ep,
  fakeProxierOptions,
  makeService,
  makeSlice,
  port,
  resolve,
  slicePort,
  testExternalClient,
  testExternalClientBlocked,
  testExternalIP,
  testNodeIP,
  testNodeIPAlt,
  testNodeIPs,
  testNodeName,
} from './builders.ts';
import { expectFlows, type Flow } from './flows.ts';
import { traceNft } from './nft-dump.ts';

const nftFake: NftOptions = {
  ...fakeProxierOptions,
  nodePortAddresses: ['192.168.0.2/32', '2001:db8::1/128'],
  serviceCIDRs: ['172.30.0.0/16'],
};

function render(services: Service[], slices: EndpointSlice[], o: NftOptions = {}): string {
  return renderNftables(resolve(services, slices), { ...nftFake, ...o });
}

function runFlows(tx: string, flows: Flow[]): void {
  expectFlows(flows, (p) => traceNft(tx, { ...p, destPort: String(p.destPort) }, testNodeIPs));
}

describe('nftables TestNoEndpointsReject', () => {
  it('rejects every way into a service without endpoints', () => {
    const svc = makeService('ns1', 'svc1', (s) => {
      s.type = 'LoadBalancer';
      s.clusterIPs = ['172.30.0.41'];
      s.externalIPs = ['192.168.99.11'];
      s.ports = [port({ name: 'p80', port: 80, nodePort: 3001 })];
      s.loadBalancerIPs = ['1.2.3.4'];
    });
    const f = (name: string, sourceIP: string, destIP: string, destPort: number): Flow => ({
      name,
      sourceIP,
      destIP,
      destPort,
      output: 'REJECT',
    });
    runFlows(render([svc], []), [
      f('pod to cluster IP', '10.0.0.2', '172.30.0.41', 80),
      f('external to external IP', testExternalClient, '192.168.99.11', 80),
      f('pod to NodePort', '10.0.0.2', testNodeIP, 3001),
      f('external to NodePort', testExternalClient, testNodeIP, 3001),
      f('pod to LB IP', '10.0.0.2', '1.2.3.4', 80),
      f('external to LB IP', testExternalClient, '1.2.3.4', 80),
    ]);
  });
});

describe('nftables TestClusterIPGeneral', () => {
  it('routes by IP, port and protocol; rejects wrong ports, drops unallocated IPs', () => {
    const services = [
      makeService('ns1', 'svc1', (s) => {
        s.clusterIPs = ['172.30.0.41'];
        s.ports = [port({ name: 'http', port: 80 })];
      }),
      makeService('ns2', 'svc2', (s) => {
        s.clusterIPs = ['172.30.0.42'];
        s.ports = [
          port({ name: 'http', port: 80 }),
          port({ name: 'https', port: 443, targetPort: 8443 }),
          port({ name: 'dns-udp', port: 53, protocol: 'UDP' }),
          port({ name: 'dns-tcp', port: 53, targetPort: 5353 }),
          port({ name: 'dns-sctp', port: 53, protocol: 'SCTP' }),
        ];
      }),
    ];
    const slices = [
      makeSlice(
        'ns1',
        'svc1',
        [ep('10.180.0.1', { nodeName: testNodeName })],
        [slicePort('http', 80)],
      ),
      makeSlice(
        'ns2',
        'svc2',
        [ep('10.180.0.1', { nodeName: testNodeName }), ep('10.180.2.1', { nodeName: 'node2' })],
        [
          slicePort('http', 80),
          slicePort('https', 8443),
          slicePort('dns-udp', 53, 'UDP'),
          slicePort('dns-tcp', 5353),
          slicePort('dns-sctp', 53, 'SCTP'),
        ],
      ),
    ];
    const src = '10.180.0.2';
    runFlows(render(services, slices), [
      {
        name: 'simple clusterIP',
        sourceIP: src,
        destIP: '172.30.0.41',
        destPort: 80,
        output: '10.180.0.1:80',
      },
      {
        name: 'hairpin',
        sourceIP: '10.180.0.1',
        destIP: '172.30.0.41',
        destPort: 80,
        output: '10.180.0.1:80',
        masq: true,
      },
      {
        name: 'multiple endpoints',
        sourceIP: src,
        destIP: '172.30.0.42',
        destPort: 80,
        output: '10.180.0.1:80, 10.180.2.1:80',
      },
      {
        name: 'targetPort',
        sourceIP: src,
        destIP: '172.30.0.42',
        destPort: 443,
        output: '10.180.0.1:8443, 10.180.2.1:8443',
      },
      {
        name: 'TCP 53',
        sourceIP: src,
        destIP: '172.30.0.42',
        destPort: 53,
        output: '10.180.0.1:5353, 10.180.2.1:5353',
      },
      {
        name: 'UDP 53',
        sourceIP: src,
        protocol: 'udp',
        destIP: '172.30.0.42',
        destPort: 53,
        output: '10.180.0.1:53, 10.180.2.1:53',
      },
      {
        name: 'SCTP 53',
        sourceIP: src,
        protocol: 'sctp',
        destIP: '172.30.0.42',
        destPort: 53,
        output: '10.180.0.1:53, 10.180.2.1:53',
      },
      {
        name: 'TCP-only port, UDP traffic',
        sourceIP: src,
        protocol: 'udp',
        destIP: '172.30.0.42',
        destPort: 80,
        output: 'REJECT',
      },
      {
        name: "svc1 does not accept svc2's ports",
        sourceIP: src,
        destIP: '172.30.0.41',
        destPort: 443,
        output: 'REJECT',
      },
      {
        name: 'unallocated cluster IP',
        sourceIP: src,
        destIP: '172.30.0.50',
        destPort: 80,
        output: 'DROP',
      },
    ]);
  });
});

describe('nftables TestLoadBalancer', () => {
  it('applies loadBalancerSourceRanges to LB IPs only', () => {
    const svc = makeService('ns1', 'svc1', (s) => {
      s.type = 'LoadBalancer';
      s.clusterIPs = ['172.30.0.41'];
      s.ports = [port({ name: 'p80', port: 80, nodePort: 3001 })];
      s.loadBalancerIPs = ['1.2.3.4', '5.6.7.8'];
      s.loadBalancerSourceRanges = ['192.168.0.0/24', ' 203.0.113.0/25'];
    });
    const tx = render(
      [svc],
      [makeSlice('ns1', 'svc1', [ep('10.180.0.1')], [slicePort('p80', 80)])],
    );
    const to = '10.180.0.1:80';
    runFlows(tx, [
      {
        name: 'pod to cluster IP',
        sourceIP: '10.0.0.2',
        destIP: '172.30.0.41',
        destPort: 80,
        output: to,
      },
      {
        name: 'external to nodePort',
        sourceIP: testExternalClient,
        destIP: testNodeIP,
        destPort: 3001,
        output: to,
        masq: true,
      },
      {
        name: 'nodePort bypasses source ranges',
        sourceIP: testExternalClientBlocked,
        destIP: testNodeIP,
        destPort: 3001,
        output: to,
        masq: true,
      },
      {
        name: 'accepted external to LB1',
        sourceIP: testExternalClient,
        destIP: '1.2.3.4',
        destPort: 80,
        output: to,
        masq: true,
      },
      {
        name: 'accepted external to LB2',
        sourceIP: testExternalClient,
        destIP: '5.6.7.8',
        destPort: 80,
        output: to,
        masq: true,
      },
      {
        name: 'blocked external to LB1',
        sourceIP: testExternalClientBlocked,
        destIP: '1.2.3.4',
        destPort: 80,
        output: 'DROP',
      },
      {
        name: 'blocked external to LB2',
        sourceIP: testExternalClientBlocked,
        destIP: '5.6.7.8',
        destPort: 80,
        output: 'DROP',
      },
      {
        name: 'pod to LB1 blocked',
        sourceIP: '10.0.0.2',
        destIP: '1.2.3.4',
        destPort: 80,
        output: 'DROP',
      },
      {
        name: 'pod to LB2 blocked',
        sourceIP: '10.0.0.2',
        destIP: '5.6.7.8',
        destPort: 80,
        output: 'DROP',
      },
      {
        name: 'node to LB1 allowed',
        sourceIP: testNodeIP,
        destIP: '1.2.3.4',
        destPort: 80,
        output: to,
        masq: true,
      },
      {
        name: 'node to LB2 allowed',
        sourceIP: testNodeIP,
        destIP: '5.6.7.8',
        destPort: 80,
        output: to,
        masq: true,
      },
      {
        name: 'same node to LB1, SNATted',
        sourceIP: '1.2.3.4',
        destIP: '1.2.3.4',
        destPort: 80,
        output: to,
        masq: true,
      },
      {
        name: 'same node to LB2, SNATted',
        sourceIP: '5.6.7.8',
        destIP: '5.6.7.8',
        destPort: 80,
        output: to,
        masq: true,
      },
    ]);
  });
});

describe('nftables TestNodePorts', () => {
  const cases = [
    { name: 'ipv4 (fake default 192.168.0.2/32)', addrs: undefined, alt: false },
    {
      name: 'ipv4, multiple nodeport-addresses',
      addrs: ['192.168.0.0/24', '192.168.1.0/24', '2001:db8::/64'],
      alt: true,
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const svc = makeService('ns1', 'svc1', (s) => {
        s.type = 'NodePort';
        s.clusterIPs = ['172.30.0.41'];
        s.ports = [port({ name: 'p80', port: 80, nodePort: 3001 })];
      });
      const slice = makeSlice(
        'ns1',
        'svc1',
        [ep('10.180.0.1'), ep('10.180.2.1', { nodeName: testNodeName })],
        [slicePort('p80', 80)],
      );
      const tx = render([svc], [slice], c.addrs ? { nodePortAddresses: c.addrs } : {});
      const both = '10.180.0.1:80, 10.180.2.1:80';
      runFlows(tx, [
        {
          name: 'pod to cluster IP',
          sourceIP: '10.0.0.2',
          destIP: '172.30.0.41',
          destPort: 80,
          output: both,
        },
        {
          name: 'external to nodePort',
          sourceIP: testExternalClient,
          destIP: testNodeIP,
          destPort: 3001,
          output: both,
          masq: true,
        },
        {
          name: 'node to nodePort',
          sourceIP: testNodeIP,
          destIP: testNodeIP,
          destPort: 3001,
          output: both,
          masq: true,
        },
        c.alt
          ? {
              name: 'secondary IP',
              sourceIP: testExternalClient,
              destIP: testNodeIPAlt,
              destPort: 3001,
              output: both,
              masq: true,
            }
          : {
              name: 'secondary IP ignored',
              sourceIP: testExternalClient,
              destIP: testNodeIPAlt,
              destPort: 3001,
              output: '',
            },
      ]);
    });
  }
});

function lb(policy: 'Local' | 'Cluster'): string {
  const svc = makeService('ns1', 'svc1', (s) => {
    s.type = 'LoadBalancer';
    s.externalTrafficPolicy = policy;
    s.clusterIPs = ['172.30.0.41'];
    s.externalIPs = ['192.168.99.11'];
    s.ports = [port({ name: 'p80', port: 80, nodePort: 3001 })];
    s.healthCheckNodePort = policy === 'Local' ? 30000 : 0;
    s.loadBalancerIPs = ['1.2.3.4'];
  });
  const slice = makeSlice(
    'ns1',
    'svc1',
    [ep('10.180.0.1'), ep('10.180.2.1', { nodeName: testNodeName })],
    [slicePort('p80', 80)],
  );
  return render([svc], [slice]);
}

describe('nftables TestExternalTrafficPolicyLocal / Cluster', () => {
  const both = '10.180.0.1:80, 10.180.2.1:80';
  const local = '10.180.2.1:80';
  it('Local keeps the client IP and uses local endpoints for external traffic only', () => {
    runFlows(lb('Local'), [
      {
        name: 'pod to cluster IP',
        sourceIP: '10.0.0.2',
        destIP: '172.30.0.41',
        destPort: 80,
        output: both,
      },
      {
        name: 'pod to external IP',
        sourceIP: '10.0.0.2',
        destIP: testExternalIP,
        destPort: 80,
        output: both,
      },
      {
        name: 'external to external IP',
        sourceIP: testExternalClient,
        destIP: testExternalIP,
        destPort: 80,
        output: local,
      },
      { name: 'pod to LB IP', sourceIP: '10.0.0.2', destIP: '1.2.3.4', destPort: 80, output: both },
      {
        name: 'external to LB IP',
        sourceIP: testExternalClient,
        destIP: '1.2.3.4',
        destPort: 80,
        output: local,
      },
      {
        name: 'pod to NodePort',
        sourceIP: '10.0.0.2',
        destIP: testNodeIP,
        destPort: 3001,
        output: both,
      },
      {
        name: 'external to NodePort',
        sourceIP: testExternalClient,
        destIP: testNodeIP,
        destPort: 3001,
        output: local,
      },
    ]);
  });
  it('Cluster masquerades all external traffic', () => {
    runFlows(lb('Cluster'), [
      {
        name: 'pod to cluster IP',
        sourceIP: '10.0.0.2',
        destIP: '172.30.0.41',
        destPort: 80,
        output: both,
      },
      {
        name: 'pod to external IP',
        sourceIP: '10.0.0.2',
        destIP: testExternalIP,
        destPort: 80,
        output: both,
        masq: true,
      },
      {
        name: 'external to external IP',
        sourceIP: testExternalClient,
        destIP: testExternalIP,
        destPort: 80,
        output: both,
        masq: true,
      },
      {
        name: 'pod to LB IP',
        sourceIP: '10.0.0.2',
        destIP: '1.2.3.4',
        destPort: 80,
        output: both,
        masq: true,
      },
      {
        name: 'external to LB IP',
        sourceIP: testExternalClient,
        destIP: '1.2.3.4',
        destPort: 80,
        output: both,
        masq: true,
      },
      {
        name: 'pod to NodePort',
        sourceIP: '10.0.0.2',
        destIP: testNodeIP,
        destPort: 3001,
        output: both,
        masq: true,
      },
      {
        name: 'external to NodePort',
        sourceIP: testExternalClient,
        destIP: testNodeIP,
        destPort: 3001,
        output: both,
        masq: true,
      },
    ]);
  });
});

// The iptables tests' expectations for internal traffic policy and terminating endpoints,
// applied to nftables mode (both proxiers share kube-proxy's CategorizeEndpoints).
describe('nftables internalTrafficPolicy and terminating endpoints', () => {
  const itpCases = [
    {
      name: 'cluster',
      itp: 'Cluster' as const,
      nodes: [testNodeName, 'node1', 'node2'],
      output: '10.0.1.1:80, 10.0.1.2:80, 10.0.1.3:80',
    },
    {
      name: 'local, one local',
      itp: 'Local' as const,
      nodes: [testNodeName, 'node1', 'node2'],
      output: '10.0.1.1:80',
    },
    {
      name: 'local, two local',
      itp: 'Local' as const,
      nodes: [testNodeName, testNodeName, 'node2'],
      output: '10.0.1.1:80, 10.0.1.2:80',
    },
    {
      name: 'local, none local',
      itp: 'Local' as const,
      nodes: ['node0', 'node1', 'node2'],
      output: 'DROP',
    },
  ];
  for (const c of itpCases) {
    it(`internalTrafficPolicy ${c.name}`, () => {
      const svc = makeService('ns1', 'svc1', (s) => {
        s.clusterIPs = ['172.30.1.1'];
        s.internalTrafficPolicy = c.itp;
        s.ports = [port({ port: 80 })];
      });
      const eps = c.nodes.map((n, i) => ep(`10.0.1.${i + 1}`, { nodeName: n }));
      const flow = {
        name: 'pod to ClusterIP',
        sourceIP: '10.0.0.2',
        destIP: '172.30.1.1',
        destPort: 80,
      };
      runFlows(render([svc], [makeSlice('ns1', 'svc1', eps, [slicePort('', 80)])]), [
        { ...flow, output: c.output },
      ]);
      runFlows(render([svc], []), [{ ...flow, output: 'REJECT' }]);
    });
  }

  it('ETP Local falls back to local serving+terminating endpoints, pods keep all ready ones', () => {
    const svc = makeService('ns1', 'svc1', (s) => {
      s.clusterIPs = ['172.30.1.1'];
      s.type = 'LoadBalancer';
      s.externalTrafficPolicy = 'Local';
      s.ports = [port({ port: 80 })];
      s.healthCheckNodePort = 30000;
      s.loadBalancerIPs = ['1.2.3.4'];
    });
    const ST = { ready: false, serving: true, terminating: true };
    const eps = [
      ep('10.0.1.2', { ...ST, nodeName: testNodeName }),
      ep('10.0.1.3', { ...ST, nodeName: testNodeName }),
      ep('10.0.1.4', { ready: false, serving: false, terminating: true, nodeName: testNodeName }),
      ep('10.0.1.5', { nodeName: 'node-1' }),
    ];
    runFlows(render([svc], [makeSlice('ns1', 'svc1', eps, [slicePort('', 80)])]), [
      {
        name: 'pod to clusterIP',
        sourceIP: '10.0.0.2',
        destIP: '172.30.1.1',
        destPort: 80,
        output: '10.0.1.5:80',
      },
      {
        name: 'external to LB',
        sourceIP: testExternalClient,
        destIP: '1.2.3.4',
        destPort: 80,
        output: '10.0.1.2:80, 10.0.1.3:80',
      },
    ]);
  });
});

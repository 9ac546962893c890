// Packet-flow tests: kube-proxy's per-feature tests (pkg/proxy/iptables/proxier_test.go) do not
// compare dumps; they trace packets through the generated rules with a small iptables
// interpreter (tracePacket) and check where each packet lands and whether it is masqueraded.
// Same services, same packets, same expectations here, against our renderer's output.

import { describe, expect, it } from 'vitest';
import type { EndpointSlice, ResolvedServicePort, Service } from '../../src/model.ts';
import { renderIptables } from '../../src/rules/iptables.ts';
import type { RulesOptions } from '../../src/rules/options.ts';
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
import { chainText, tracePacket } from './ipt-dump.ts';

function runFlows(rules: string, flows: Flow[]): void {
  expectFlows(flows, (p) => tracePacket(rules, p, testNodeIPs));
}

function render(services: Service[], slices: EndpointSlice[], o: RulesOptions = {}): string {
  const model: ResolvedServicePort[] = resolve(services, slices);
  return renderIptables(model, { ...fakeProxierOptions, ...o });
}

describe('TestTracePacket (the tracer itself, on kube-proxy static data subset)', () => {
  const rules = `*filter
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
-A KUBE-NODEPORTS -m comment --comment "ns2/svc2:p80 health check node port" -m tcp -p tcp --dport 30000 -j ACCEPT
-A KUBE-SERVICES -m comment --comment "ns6/svc6:p80 has no endpoints" -m tcp -p tcp -d 172.30.0.46 --dport 80 -j REJECT
-A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j DROP
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-4SW47YFZTEDKD3PK - [0:0]
:KUBE-SEP-UKSFD7AGPMPPLUHC - [0:0]
:KUBE-SEP-C6EBXVWJJZMIWKLZ - [0:0]
-A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.4:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-UKSFD7AGPMPPLUHC
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.5:80" -j KUBE-SEP-C6EBXVWJJZMIWKLZ
-A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.4:80
-A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.5:80
COMMIT
`;
  it('follows jumps, probabilities and filter verdicts', () => {
    runFlows(rules, [
      { name: 'no match', sourceIP: '10.0.0.2', destIP: '10.0.0.3', destPort: 80, output: '' },
      {
        name: 'multiple endpoints',
        sourceIP: '10.0.0.2',
        destIP: '172.30.0.44',
        destPort: 80,
        output: '10.180.0.4:80, 10.180.0.5:80',
      },
      {
        name: 'off-cluster masq',
        sourceIP: testExternalClient,
        destIP: '172.30.0.44',
        destPort: 80,
        output: '10.180.0.4:80, 10.180.0.5:80',
        masq: true,
      },
      {
        name: 'DROP',
        sourceIP: testExternalClient,
        destIP: '192.168.99.22',
        destPort: 80,
        output: 'DROP',
      },
      {
        name: 'ACCEPT',
        sourceIP: testNodeIP,
        destIP: testNodeIP,
        destPort: 30000,
        output: 'ACCEPT',
      },
      {
        name: 'REJECT',
        sourceIP: '10.0.0.2',
        destIP: '172.30.0.46',
        destPort: 80,
        output: 'REJECT',
      },
    ]);
  });
});

describe('TestNoEndpointsReject', () => {
  it('rejects every way into a service without endpoints', () => {
    const svc = makeService('ns1', 'svc1', (s) => {
      s.type = 'LoadBalancer';
      s.clusterIPs = ['172.30.0.41'];
      s.externalIPs = ['192.168.99.11'];
      s.ports = [port({ name: 'p80', port: 80, nodePort: 3001 })];
      s.loadBalancerIPs = ['1.2.3.4'];
    });
    const rules = render([svc], []);
    runFlows(rules, [
      {
        name: 'pod to cluster IP',
        sourceIP: '10.0.0.2',
        destIP: '172.30.0.41',
        destPort: 80,
        output: 'REJECT',
      },
      {
        name: 'external to external IP',
        sourceIP: testExternalClient,
        destIP: '192.168.99.11',
        destPort: 80,
        output: 'REJECT',
      },
      {
        name: 'pod to NodePort',
        sourceIP: '10.0.0.2',
        destIP: testNodeIP,
        destPort: 3001,
        output: 'REJECT',
      },
      {
        name: 'external to NodePort',
        sourceIP: testExternalClient,
        destIP: testNodeIP,
        destPort: 3001,
        output: 'REJECT',
      },
      {
        name: 'pod to LB IP',
        sourceIP: '10.0.0.2',
        destIP: '1.2.3.4',
        destPort: 80,
        output: 'REJECT',
      },
      {
        name: 'external to LB IP',
        sourceIP: testExternalClient,
        destIP: '1.2.3.4',
        destPort: 80,
        output: 'REJECT',
      },
    ]);
  });
});

describe('TestClusterIPGeneral', () => {
  it('routes by IP, port and protocol, and masquerades hairpin traffic', () => {
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
    runFlows(render(services, slices), [
      {
        name: 'simple clusterIP',
        sourceIP: '10.180.0.2',
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
        sourceIP: '10.180.0.2',
        destIP: '172.30.0.42',
        destPort: 80,
        output: '10.180.0.1:80, 10.180.2.1:80',
      },
      {
        name: 'targetPort',
        sourceIP: '10.180.0.2',
        destIP: '172.30.0.42',
        destPort: 443,
        output: '10.180.0.1:8443, 10.180.2.1:8443',
      },
      {
        name: 'TCP 53',
        sourceIP: '10.180.0.2',
        destIP: '172.30.0.42',
        destPort: 53,
        output: '10.180.0.1:5353, 10.180.2.1:5353',
      },
      {
        name: 'UDP 53',
        sourceIP: '10.180.0.2',
        protocol: 'udp',
        destIP: '172.30.0.42',
        destPort: 53,
        output: '10.180.0.1:53, 10.180.2.1:53',
      },
      {
        name: 'SCTP 53',
        sourceIP: '10.180.0.2',
        protocol: 'sctp',
        destIP: '172.30.0.42',
        destPort: 53,
        output: '10.180.0.1:53, 10.180.2.1:53',
      },
      {
        name: 'TCP-only port, UDP traffic',
        sourceIP: '10.180.0.2',
        protocol: 'udp',
        destIP: '172.30.0.42',
        destPort: 80,
        output: '',
      },
      {
        name: "svc1 does not accept svc2's ports",
        sourceIP: '10.180.0.2',
        destIP: '172.30.0.41',
        destPort: 443,
        output: '',
      },
    ]);
  });
});

describe('TestLoadBalancer', () => {
  it('applies loadBalancerSourceRanges to LB IPs only', () => {
    const svc = makeService('ns1', 'svc1', (s) => {
      s.type = 'LoadBalancer';
      s.clusterIPs = ['172.30.0.41'];
      s.ports = [port({ name: 'p80', port: 80, nodePort: 3001 })];
      s.loadBalancerIPs = ['1.2.3.4', '5.6.7.8'];
      s.loadBalancerSourceRanges = ['192.168.0.0/24', ' 203.0.113.0/25'];
    });
    const rules = render(
      [svc],
      [makeSlice('ns1', 'svc1', [ep('10.180.0.1')], [slicePort('p80', 80)])],
    );
    const to = '10.180.0.1:80';
    runFlows(rules, [
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
        name: 'same node to LB1, SNATted to LB1',
        sourceIP: '1.2.3.4',
        destIP: '1.2.3.4',
        destPort: 80,
        output: to,
        masq: true,
      },
      {
        name: 'same node to LB2, SNATted to LB2',
        sourceIP: '5.6.7.8',
        destIP: '5.6.7.8',
        destPort: 80,
        output: to,
        masq: true,
      },
    ]);
  });
});

describe('TestNodePorts', () => {
  const cases = [
    {
      name: 'localhost-nodeports enabled',
      localhost: true,
      addrs: undefined,
      alt: true,
      firewall: true,
    },
    {
      name: 'localhost-nodeports disabled',
      localhost: false,
      addrs: undefined,
      alt: true,
      firewall: false,
    },
    {
      name: 'localhost disabled, localhost in nodeport-addresses',
      localhost: false,
      addrs: ['192.168.0.0/24', '127.0.0.1/32'],
      alt: false,
      firewall: false,
    },
    {
      name: 'multiple nodeport-addresses',
      localhost: false,
      addrs: ['192.168.0.0/24', '192.168.1.0/24', '2001:db8::/64'],
      alt: true,
      firewall: false,
    },
    // No IPv4 CIDR (or 0.0.0.0/0) means every local address, as in kube-proxy's NodePortAddresses.
    {
      name: 'IPv6-only nodeport-addresses',
      localhost: true,
      addrs: ['2001:db8::/64'],
      alt: true,
      firewall: true,
    },
    {
      name: '0.0.0.0/0 nodeport-addresses',
      localhost: true,
      addrs: ['0.0.0.0/0'],
      alt: true,
      firewall: true,
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
      const rules = render([svc], [slice], {
        localhostNodePorts: c.localhost,
        nodePortAddresses: c.addrs,
      });
      const both = '10.180.0.1:80, 10.180.2.1:80';
      runFlows(rules, [
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
        c.localhost
          ? {
              name: 'localhost to nodePort',
              sourceIP: '127.0.0.1',
              destIP: '127.0.0.1',
              destPort: 3001,
              output: both,
              masq: true,
            }
          : {
              name: 'localhost to nodePort ignored',
              sourceIP: '127.0.0.1',
              destIP: '127.0.0.1',
              destPort: 3001,
              output: '',
            },
        c.alt
          ? {
              name: 'nodePort on secondary IP',
              sourceIP: testExternalClient,
              destIP: testNodeIPAlt,
              destPort: 3001,
              output: both,
              masq: true,
            }
          : {
              name: 'secondary IP ignores NodePorts',
              sourceIP: testExternalClient,
              destIP: testNodeIPAlt,
              destPort: 3001,
              output: '',
            },
      ]);
      const fw = c.firewall
        ? '-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP\n'
        : '';
      expect(chainText(rules, 'filter', 'KUBE-FIREWALL')).toBe(fw);
    });
  }
});

describe('TestHealthCheckNodePort', () => {
  it('accepts the health check port even without endpoints', () => {
    const svc = makeService('ns1', 'svc1', (s) => {
      s.type = 'LoadBalancer';
      s.clusterIPs = ['172.30.0.42'];
      s.ports = [port({ name: 'p80', port: 80, nodePort: 3001 })];
      s.healthCheckNodePort = 30000;
      s.externalTrafficPolicy = 'Local';
    });
    const flow = { name: 'hc', sourceIP: '1.2.3.4', destIP: testNodeIP, destPort: 30000 };
    runFlows(render([svc], [], { nodePortAddresses: ['127.0.0.0/8'] }), [
      { ...flow, output: 'ACCEPT' },
    ]);
    runFlows(render([], [], { nodePortAddresses: ['127.0.0.0/8'] }), [{ ...flow, output: '' }]);
  });
});

function lbWithTwoEndpoints(policy: 'Local' | 'Cluster') {
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

describe('TestExternalTrafficPolicyLocal', () => {
  it('keeps the client IP and uses local endpoints for external traffic only', () => {
    const both = '10.180.0.1:80, 10.180.2.1:80';
    const local = '10.180.2.1:80';
    runFlows(lbWithTwoEndpoints('Local'), [
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
});

describe('TestExternalTrafficPolicyCluster', () => {
  it('masquerades all external traffic', () => {
    const both = '10.180.0.1:80, 10.180.2.1:80';
    runFlows(lbWithTwoEndpoints('Cluster'), [
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

describe('TestInternalTrafficPolicy', () => {
  const cases = [
    {
      name: 'cluster',
      itp: 'Cluster' as const,
      nodes: [testNodeName, 'node1', 'node2'],
      output: '10.0.1.1:80, 10.0.1.2:80, 10.0.1.3:80',
    },
    {
      name: 'local, one local endpoint',
      itp: 'Local' as const,
      nodes: [testNodeName, 'node1', 'node2'],
      output: '10.0.1.1:80',
    },
    {
      name: 'local, two local endpoints',
      itp: 'Local' as const,
      nodes: [testNodeName, testNodeName, 'node2'],
      output: '10.0.1.1:80, 10.0.1.2:80',
    },
    {
      name: 'local, no local endpoints',
      itp: 'Local' as const,
      nodes: ['node0', 'node1', 'node2'],
      output: 'DROP',
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
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
});

function terminatingService(policy: 'Local' | 'Cluster'): Service {
  return makeService('ns1', 'svc1', (s) => {
    s.clusterIPs = ['172.30.1.1'];
    s.type = 'LoadBalancer';
    s.externalTrafficPolicy = policy;
    s.ports = [port({ port: 80 })];
    s.healthCheckNodePort = 30000;
    s.loadBalancerIPs = ['1.2.3.4'];
  });
}

const R = { ready: true, serving: true, terminating: false };
const ST = { ready: false, serving: true, terminating: true };
const T = { ready: false, serving: false, terminating: true };

describe('TestTerminatingEndpointsTrafficPolicyLocal', () => {
  const cases = [
    {
      name: 'ready endpoints exist',
      eps: [
        ep('10.0.1.1', { ...R, nodeName: testNodeName }),
        ep('10.0.1.2', { ...R, nodeName: testNodeName }),
        ep('10.0.1.3', { ...ST, nodeName: testNodeName }),
        ep('10.0.1.4', { ...T, nodeName: testNodeName }),
        ep('10.0.1.5', { ...R, nodeName: 'node-1' }),
      ],
      pod: '10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80',
      ext: '10.0.1.1:80, 10.0.1.2:80',
    },
    {
      name: 'only terminating endpoints exist',
      eps: [
        ep('10.0.1.2', { ...ST, nodeName: testNodeName }),
        ep('10.0.1.3', { ...ST, nodeName: testNodeName }),
        ep('10.0.1.4', { ...T, nodeName: testNodeName }),
        ep('10.0.1.5', { ...R, nodeName: 'node-1' }),
      ],
      pod: '10.0.1.5:80',
      ext: '10.0.1.2:80, 10.0.1.3:80',
    },
    {
      name: 'terminating endpoints on remote node',
      eps: [ep('10.0.1.5', { ...ST, nodeName: 'node-1' })],
      pod: '10.0.1.5:80',
      ext: 'DROP',
    },
    {
      name: 'no usable endpoints on any node',
      eps: [
        ep('10.0.1.5', { ...T, nodeName: testNodeName }),
        ep('10.0.1.5', { ...T, nodeName: 'node-1' }),
      ],
      pod: 'REJECT',
      ext: 'REJECT',
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const rules = render(
        [terminatingService('Local')],
        [makeSlice('ns1', 'svc1', c.eps, [slicePort('', 80)])],
      );
      runFlows(rules, [
        {
          name: 'pod to clusterIP',
          sourceIP: '10.0.0.2',
          destIP: '172.30.1.1',
          destPort: 80,
          output: c.pod,
        },
        {
          name: 'external to LB',
          sourceIP: testExternalClient,
          destIP: '1.2.3.4',
          destPort: 80,
          output: c.ext,
        },
      ]);
    });
  }
});

describe('TestTerminatingEndpointsTrafficPolicyCluster', () => {
  const cases = [
    {
      name: 'ready endpoints exist',
      eps: [
        ep('10.0.1.1', { ...R, nodeName: testNodeName }),
        ep('10.0.1.2', { ...R, nodeName: testNodeName }),
        ep('10.0.1.3', { ...ST, nodeName: 'another-node' }),
        ep('10.0.1.4', { ...T, nodeName: 'another-node' }),
        ep('10.0.1.5', { ...R, nodeName: 'another-node' }),
      ],
      out: '10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80',
    },
    {
      name: 'only terminating endpoints exist',
      eps: [
        ep('10.0.1.2', { ...ST, nodeName: testNodeName }),
        ep('10.0.1.3', { ...ST, nodeName: testNodeName }),
        ep('10.0.1.4', { ...T, nodeName: 'another-node' }),
        ep('10.0.1.5', { ...ST, nodeName: 'another-node' }),
      ],
      out: '10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80',
    },
    {
      name: 'terminating endpoints on remote node',
      eps: [ep('10.0.1.5', { ...ST, nodeName: 'node-1' })],
      out: '10.0.1.5:80',
    },
    {
      name: 'no usable endpoints',
      eps: [
        ep('10.0.1.5', { ...T, nodeName: testNodeName }),
        ep('10.0.1.5', { ...T, nodeName: 'node-1' }),
      ],
      out: 'REJECT',
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const rules = render(
        [terminatingService('Cluster')],
        [makeSlice('ns1', 'svc1', c.eps, [slicePort('', 80)])],
      );
      const masq = c.out !== 'REJECT';
      runFlows(rules, [
        {
          name: 'pod to clusterIP',
          sourceIP: '10.0.0.2',
          destIP: '172.30.1.1',
          destPort: 80,
          output: c.out,
        },
        {
          name: 'external to LB',
          sourceIP: testExternalClient,
          destIP: '1.2.3.4',
          destPort: 80,
          output: c.out,
          masq,
        },
      ]);
    });
  }
});

describe('TestInternalExternalMasquerade', () => {
  const lb = (ns: string, ip: string, np: number, lbip: string, fn: (s: Service) => void) =>
    makeService(ns, ns.replace('ns', 'svc'), (s) => {
      s.type = 'LoadBalancer';
      s.clusterIPs = [ip];
      s.ports = [port({ name: 'p80', port: 80, nodePort: np })];
      s.healthCheckNodePort = 30000 + np - 3000;
      s.loadBalancerIPs = [lbip];
      fn(s);
    });
  const services = [
    lb('ns1', '172.30.0.41', 3001, '1.2.3.4', () => {}),
    lb('ns2', '172.30.0.42', 3002, '5.6.7.8', (s) => {
      s.externalTrafficPolicy = 'Local';
    }),
    lb('ns3', '172.30.0.43', 3003, '9.10.11.12', (s) => {
      s.internalTrafficPolicy = 'Local';
    }),
  ];
  const slices = [1, 2, 3].map((i) =>
    makeSlice(
      `ns${i}`,
      `svc${i}`,
      [
        ep(`10.180.0.${i}`, { nodeName: testNodeName }),
        ep(`10.180.1.${i}`, { nodeName: 'remote' }),
      ],
      [slicePort('p80', 80)],
    ),
  );
  const all = (i: number) => `10.180.0.${i}:80, 10.180.1.${i}:80`;
  const base: Flow[] = [
    {
      name: 'pod to ClusterIP',
      sourceIP: '10.0.0.2',
      destIP: '172.30.0.41',
      destPort: 80,
      output: all(1),
    },
    {
      name: 'pod to NodePort',
      sourceIP: '10.0.0.2',
      destIP: testNodeIP,
      destPort: 3001,
      output: all(1),
      masq: true,
    },
    {
      name: 'pod to LB',
      sourceIP: '10.0.0.2',
      destIP: '1.2.3.4',
      destPort: 80,
      output: all(1),
      masq: true,
    },
    {
      name: 'node to ClusterIP',
      sourceIP: testNodeIP,
      destIP: '172.30.0.41',
      destPort: 80,
      output: all(1),
      masq: true,
    },
    {
      name: 'node to NodePort',
      sourceIP: testNodeIP,
      destIP: testNodeIP,
      destPort: 3001,
      output: all(1),
      masq: true,
    },
    {
      name: 'localhost to NodePort',
      sourceIP: '127.0.0.1',
      destIP: '127.0.0.1',
      destPort: 3001,
      output: all(1),
      masq: true,
    },
    {
      name: 'node to LB',
      sourceIP: testNodeIP,
      destIP: '1.2.3.4',
      destPort: 80,
      output: all(1),
      masq: true,
    },
    {
      name: 'external to ClusterIP',
      sourceIP: testExternalClient,
      destIP: '172.30.0.41',
      destPort: 80,
      output: all(1),
      masq: true,
    },
    {
      name: 'external to NodePort',
      sourceIP: testExternalClient,
      destIP: testNodeIP,
      destPort: 3001,
      output: all(1),
      masq: true,
    },
    {
      name: 'external to LB',
      sourceIP: testExternalClient,
      destIP: '1.2.3.4',
      destPort: 80,
      output: all(1),
      masq: true,
    },
    {
      name: 'pod to ClusterIP with eTP:Local',
      sourceIP: '10.0.0.2',
      destIP: '172.30.0.42',
      destPort: 80,
      output: all(2),
    },
    {
      name: 'pod to NodePort with eTP:Local',
      sourceIP: '10.0.0.2',
      destIP: testNodeIP,
      destPort: 3002,
      output: all(2),
    },
    {
      name: 'pod to LB with eTP:Local',
      sourceIP: '10.0.0.2',
      destIP: '5.6.7.8',
      destPort: 80,
      output: all(2),
    },
    {
      name: 'node to ClusterIP with eTP:Local',
      sourceIP: testNodeIP,
      destIP: '172.30.0.42',
      destPort: 80,
      output: all(2),
      masq: true,
    },
    {
      name: 'node to NodePort with eTP:Local',
      sourceIP: testNodeIP,
      destIP: testNodeIP,
      destPort: 3001,
      output: all(1),
      masq: true,
    },
    {
      name: 'localhost to NodePort with eTP:Local',
      sourceIP: '127.0.0.1',
      destIP: '127.0.0.1',
      destPort: 3002,
      output: all(2),
      masq: true,
    },
    {
      name: 'node to LB with eTP:Local',
      sourceIP: testNodeIP,
      destIP: '5.6.7.8',
      destPort: 80,
      output: all(2),
      masq: true,
    },
    {
      name: 'external to ClusterIP with eTP:Local',
      sourceIP: testExternalClient,
      destIP: '172.30.0.42',
      destPort: 80,
      output: all(2),
      masq: true,
    },
    {
      name: 'external to NodePort with eTP:Local',
      sourceIP: testExternalClient,
      destIP: testNodeIP,
      destPort: 3002,
      output: '10.180.0.2:80',
    },
    {
      name: 'external to LB with eTP:Local',
      sourceIP: testExternalClient,
      destIP: '5.6.7.8',
      destPort: 80,
      output: '10.180.0.2:80',
    },
    {
      name: 'pod to ClusterIP with iTP:Local',
      sourceIP: '10.0.0.2',
      destIP: '172.30.0.43',
      destPort: 80,
      output: '10.180.0.3:80',
    },
    {
      name: 'pod to NodePort with iTP:Local',
      sourceIP: '10.0.0.2',
      destIP: testNodeIP,
      destPort: 3003,
      output: all(3),
      masq: true,
    },
    {
      name: 'pod to LB with iTP:Local',
      sourceIP: '10.0.0.2',
      destIP: '9.10.11.12',
      destPort: 80,
      output: all(3),
      masq: true,
    },
    {
      name: 'node to ClusterIP with iTP:Local',
      sourceIP: testNodeIP,
      destIP: '172.30.0.43',
      destPort: 80,
      output: '10.180.0.3:80',
      masq: true,
    },
    {
      name: 'node to NodePort with iTP:Local',
      sourceIP: testNodeIP,
      destIP: testNodeIP,
      destPort: 3003,
      output: all(3),
      masq: true,
    },
    {
      name: 'localhost to NodePort with iTP:Local',
      sourceIP: '127.0.0.1',
      destIP: '127.0.0.1',
      destPort: 3003,
      output: all(3),
      masq: true,
    },
    {
      name: 'node to LB with iTP:Local',
      sourceIP: testNodeIP,
      destIP: '9.10.11.12',
      destPort: 80,
      output: all(3),
      masq: true,
    },
    {
      name: 'external to ClusterIP with iTP:Local',
      sourceIP: testExternalClient,
      destIP: '172.30.0.43',
      destPort: 80,
      output: '10.180.0.3:80',
      masq: true,
    },
    {
      name: 'external to NodePort with iTP:Local',
      sourceIP: testExternalClient,
      destIP: testNodeIP,
      destPort: 3003,
      output: all(3),
      masq: true,
    },
    {
      name: 'external to LB with iTP:Local',
      sourceIP: testExternalClient,
      destIP: '9.10.11.12',
      destPort: 80,
      output: all(3),
      masq: true,
    },
  ];
  const overrides: Record<string, Record<string, Partial<Flow>>> = {
    base: {},
    'no LocalTrafficDetector': {
      'node to ClusterIP': { masq: false },
      'node to ClusterIP with eTP:Local': { masq: false },
      'node to ClusterIP with iTP:Local': { masq: false },
      'external to ClusterIP': { masq: false },
      'external to ClusterIP with eTP:Local': { masq: false },
      'external to ClusterIP with iTP:Local': { masq: false },
      'pod to NodePort with eTP:Local': { output: '10.180.0.2:80' },
      'pod to LB with eTP:Local': { output: '10.180.0.2:80' },
    },
    masqueradeAll: {
      'pod to ClusterIP': { masq: true },
      'pod to ClusterIP with eTP:Local': { masq: true },
      'pod to ClusterIP with iTP:Local': { masq: true },
    },
  };
  const opts: Record<string, RulesOptions> = {
    base: {},
    'no LocalTrafficDetector': { clusterCIDR: undefined },
    masqueradeAll: { masqueradeAll: true },
  };
  for (const name of Object.keys(overrides)) {
    it(name, () => {
      const o = { ...fakeProxierOptions, ...opts[name] };
      const rules = renderIptables(resolve(services, slices), o);
      runFlows(
        rules,
        base.map((f) => ({ ...f, ...overrides[name][f.name] })),
      );
    });
  }
});

// The Services and EndpointSlices of kube-proxy's TestOverallIPTablesRules and
// TestOverallNFTablesRules (identical in both), as model objects.

import type { ResolvedServicePort } from '../../src/model.ts';
import { ep, makeService, makeSlice, port, resolve, slicePort, testNodeName } from './builders.ts';

export function overallModel(): ResolvedServicePort[] {
  const p80 = (nodePort = 0) => [port({ name: 'p80', port: 80, nodePort })];
  const services = [
    makeService('ns1', 'svc1', (s) => {
      s.clusterIPs = ['172.30.0.41'];
      s.ports = p80();
    }),
    makeService('ns2', 'svc2', (s) => {
      s.type = 'LoadBalancer';
      s.externalTrafficPolicy = 'Local';
      s.clusterIPs = ['172.30.0.42'];
      s.ports = p80(3001);
      s.loadBalancerIPs = ['1.2.3.4'];
      s.externalIPs = ['192.168.99.22'];
      s.healthCheckNodePort = 30000;
    }),
    makeService('ns3', 'svc3', (s) => {
      s.type = 'NodePort';
      s.clusterIPs = ['172.30.0.43'];
      s.ports = p80(3003);
    }),
    makeService('ns4', 'svc4', (s) => {
      s.type = 'NodePort';
      s.clusterIPs = ['172.30.0.44'];
      s.externalIPs = ['192.168.99.33'];
      s.ports = p80();
    }),
    makeService('ns5', 'svc5', (s) => {
      s.type = 'LoadBalancer';
      s.clusterIPs = ['172.30.0.45'];
      s.ports = p80(3002);
      s.loadBalancerIPs = ['5.6.7.8'];
      s.healthCheckNodePort = 30000;
      s.loadBalancerSourceRanges = [' 203.0.113.0/25'];
      s.sessionAffinity = 'ClientIP';
      s.affinityTimeoutSeconds = 10800;
    }),
    makeService('ns6', 'svc6', (s) => {
      s.clusterIPs = ['172.30.0.46'];
      s.ports = p80();
    }),
  ];
  const sp = [slicePort('p80', 80)];
  const slices = [
    makeSlice('ns1', 'svc1', [ep('10.180.0.1')], sp),
    // No nodeName: non-local, so ns2's Local policy has no endpoints on this node.
    makeSlice('ns2', 'svc2', [ep('10.180.0.2')], sp),
    makeSlice('ns3', 'svc3', [ep('10.180.0.3')], sp),
    makeSlice('ns4', 'svc4', [ep('10.180.0.4'), ep('10.180.0.5', { nodeName: testNodeName })], sp),
    makeSlice('ns5', 'svc5', [ep('10.180.0.3')], sp),
  ];
  return resolve(services, slices);
}

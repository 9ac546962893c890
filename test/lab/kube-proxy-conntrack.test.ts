// kube-proxy's stale UDP cleanup in the lab's kernel modes, offline: `conntrack -L` text read
// back, and the `conntrack -D` filters the shared rule (src/control/conntrack-reconcile.ts)
// asks for — a flow to a ClusterIP or a NodePort whose endpoint left is deleted; flows to a
// serving endpoint, TCP flows, and flows of a service left without any endpoint stay.
import { describe, expect, it } from 'vitest';
import { udpFrontends } from '../../src/control/conntrack-reconcile.ts';
import {
  familyUdpFrontends,
  parseUdpEntries,
  staleUdpDeletes,
  udpEndpointsSignature,
} from '../../src/lab/kube-proxy-conntrack.ts';
import { resolveServicePorts } from '../../src/manifests/index.ts';
import { parseManifests } from '../../src/manifests/parse.ts';

// conntrack v1.4.7 -L -p udp (and one TCP line, which -p udp would not print, to be sure)
const LISTED = `udp      17 27 src=10.244.2.2 dst=10.96.0.54 sport=10000 dport=53 src=10.244.2.3 dst=10.244.2.2 sport=5353 dport=10000 mark=0 use=1
udp      17 25 src=10.244.2.2 dst=10.96.0.54 sport=10001 dport=53 src=10.244.1.3 dst=10.244.2.2 sport=5353 dport=10001 [ASSURED] mark=0 use=1
udp      17 29 src=172.30.0.100 dst=172.30.0.12 sport=4000 dport=30053 [UNREPLIED] src=10.244.2.3 dst=172.30.0.12 sport=5353 dport=61440 mark=0 use=1
udp      17 20 src=10.244.2.2 dst=10.96.0.30 sport=10002 dport=53 src=10.244.9.9 dst=10.244.2.2 sport=5353 dport=10002 mark=0 use=1
tcp      6 86399 ESTABLISHED src=10.244.2.2 dst=10.96.0.54 sport=10003 dport=53 src=10.244.2.3 dst=10.244.2.2 sport=5353 dport=10003 [ASSURED] mark=0 use=1
conntrack v1.4.7 (conntrack-tools): 5 flow entries have been shown.
`;

/** A UDP Service 53 → 5353 and (with endpoints) its EndpointSlice, as YAML. */
function udpService(name: string, ip: string, eps: string[] | undefined, nodePort = 0): string {
  const np = nodePort ? `, nodePort: ${nodePort}` : '';
  const svc = `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default }
spec:
  type: ${nodePort ? 'NodePort' : 'ClusterIP'}
  clusterIP: ${ip}
  ports: [{ name: udp, protocol: UDP, port: 53, targetPort: 5353${np} }]
`;
  if (!eps) return svc;
  const endpoints = eps.map((a) => `{ addresses: [${a}], conditions: { ready: true } }`);
  return `${svc}---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: ${name}-1, namespace: default, labels: { kubernetes.io/service-name: ${name} } }
addressType: IPv4
ports: [{ name: udp, protocol: UDP, port: 5353 }]
endpoints: [${endpoints.join(', ')}]
`;
}

// udp-echo lost pod-d (10.244.2.3) and kept pod-b; udp-np the same; empty-udp has no endpoint
const VIEW = [
  udpService('udp-echo', '10.96.0.54', ['10.244.1.3']),
  udpService('udp-np', '10.96.0.57', ['10.244.1.3'], 30053),
  udpService('empty-udp', '10.96.0.30', undefined),
].join('---\n');

describe("kube-proxy's stale UDP cleanup for the kernel modes", () => {
  it('reads the original destination and the reply source of each UDP entry', () => {
    const entries = parseUdpEntries(LISTED);
    expect(entries).toHaveLength(4);
    expect(entries[0]).toEqual({ origDst: '10.96.0.54', origDport: 53, replySrc: '10.244.2.3' });
    // [UNREPLIED] between the tuples changes nothing
    expect(entries[2]).toEqual({
      origDst: '172.30.0.12',
      origDport: 30053,
      replySrc: '10.244.2.3',
    });
  });

  it('deletes the flows to an endpoint that left a ClusterIP or a NodePort, nothing else', () => {
    const ports = resolveServicePorts(parseManifests(VIEW, 'view.yaml'));
    const deletes = staleUdpDeletes(udpFrontends(ports), parseUdpEntries(LISTED));
    expect(deletes.map((a) => a.join(' '))).toEqual([
      'conntrack -D -p udp --orig-dst 10.96.0.54 --orig-port-dst 53 --reply-src 10.244.2.3',
      'conntrack -D -p udp --orig-dst 172.30.0.12 --orig-port-dst 30053 --reply-src 10.244.2.3',
    ]);
  });

  it('runs when the endpoints of a UDP service changed, not for a TCP-only change', () => {
    const base = resolveServicePorts(parseManifests(VIEW, 'view.yaml'));
    const tcp = `${VIEW}---
apiVersion: v1
kind: Service
metadata: { name: web2, namespace: default }
spec: { clusterIP: 10.96.0.58, ports: [{ name: http, protocol: TCP, port: 80 }] }
`;
    const moreTcp = resolveServicePorts(parseManifests(tcp, 'view.yaml'));
    expect(udpEndpointsSignature(moreTcp)).toBe(udpEndpointsSignature(base));
    const back = VIEW.replace(
      udpService('udp-echo', '10.96.0.54', ['10.244.1.3']),
      udpService('udp-echo', '10.96.0.54', ['10.244.1.3', '10.244.2.3']),
    );
    const moreUdp = resolveServicePorts(parseManifests(back, 'view.yaml'));
    expect(udpEndpointsSignature(moreUdp)).not.toBe(udpEndpointsSignature(base));
  });

  it("deletes an IPv6 flow to an endpoint that left a dual-stack Service's IPv6 ClusterIP, with -f ipv6", () => {
    // conntrack v1.4.7 -L -f ipv6 -p udp, pod-c to udp-echo's IPv6 ClusterIP, answered by
    // pod-d (gone from the IPv6 slice) and by pod-b (still in it)
    const listed6 = `udp      17 29 src=fd00:10:244:2::2 dst=fd00:10:96::36 sport=4000 dport=53 src=fd00:10:244:2::3 dst=fd00:10:244:2::2 sport=5353 dport=4000 mark=0 use=1
udp      17 29 src=fd00:10:244:2::2 dst=fd00:10:96::36 sport=4001 dport=53 src=fd00:10:244:1::3 dst=fd00:10:244:2::2 sport=5353 dport=4001 mark=0 use=1
`;
    const dual = (eps: string[]) => `apiVersion: v1
kind: Service
metadata: { name: udp-echo, namespace: default }
spec:
  ipFamilyPolicy: PreferDualStack
  ipFamilies: [IPv4, IPv6]
  clusterIP: 10.96.0.54
  clusterIPs: [10.96.0.54, "fd00:10:96::36"]
  ports: [{ name: udp, protocol: UDP, port: 53, targetPort: 5353 }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: udp-echo-6, namespace: default, labels: { kubernetes.io/service-name: udp-echo } }
addressType: IPv6
ports: [{ name: udp, protocol: UDP, port: 5353 }]
endpoints: [${eps.map((a) => `{ addresses: ["${a}"], conditions: { ready: true } }`).join(', ')}]
`;
    const state = parseManifests(dual(['fd00:10:244:1::3']), 'view.yaml');
    const v6 = resolveServicePorts(state, { family: 'IPv6' });
    const deletes = staleUdpDeletes(
      familyUdpFrontends(v6, 'IPv6'),
      parseUdpEntries(listed6),
      'IPv6',
    );
    expect(deletes.map((a) => a.join(' '))).toEqual([
      'conntrack -D -f ipv6 -p udp --orig-dst fd00:10:96::36 --orig-port-dst 53 --reply-src fd00:10:244:2::3',
    ]);
    // the IPv4 proxier's view of the same Service has no IPv6 frontend: nothing to delete
    const v4 = resolveServicePorts(state);
    expect(staleUdpDeletes(familyUdpFrontends(v4, 'IPv4'), parseUdpEntries(listed6))).toEqual([]);
    // an IPv6 endpoint change alone runs the cleanup: the signature takes the IPv6 ports too
    const before = parseManifests(dual(['fd00:10:244:1::3', 'fd00:10:244:2::3']), 'view.yaml');
    const v6Before = resolveServicePorts(before, { family: 'IPv6' });
    expect(udpEndpointsSignature(resolveServicePorts(before), v6Before)).not.toBe(
      udpEndpointsSignature(v4, v6),
    );
  });
});

// The comparison scenarios: what a client does, which packets belong to it, and how a random
// backend choice is made comparable (docs/compare.md, "Backend choice").
//
//   same-backend: the first plane's first connection picks the target backend; the second plane
//                 repeats the connection (a new flow each time, up to MAX_TRIES) until it lands
//                 on the same backend; only that flow's packets are compared.
//   first-choice: the backend of the first connection is renamed "backend1" in both planes
//                 (addresses and its veth's capture point); the other backends' veths are one
//                 capture point. Needs backends that sit alike relative to the client.
//   none:         no backend (ping, rejects).
//
// Isolation: every scenario owns a block of client ports (and ICMP echo identifiers),
// PORT_BLOCK wide, fixed by its place in SCENARIOS — not by the order a run takes. Each attempt
// binds its own port from the block, and a capture keeps only packets carrying one of the
// scenario's ports or identifiers (an ICMP error: in the packet it quotes). A late packet of the
// previous scenario (an ICMP host unreachable that waited out ARP, a retransmission) can then
// never land in the next one's capture, whichever order they run in.
import { setTimeout as sleep } from 'node:timers/promises';
import { UsageError } from '../../errors.ts';
import { familyOfIP, type IPFamily } from '../../model.ts';
import { inNs, nsNode, shTry } from '../../sh.ts';
import { apiCall } from '../api.ts';
import type { ApplyReply } from '../control-plane-api.ts';
import { LabError } from '../error.ts';
import type { LabClient, LabPod, Topology } from '../topology.ts';

export interface Attempt {
  ok: boolean;
  /** the client's source port (TCP/UDP), to pick this attempt's packets */
  clientPort?: number;
  /** the pod that answered */
  backend?: string;
  output: string;
  /** when it ran (µs, the capture clock): a failed connect has no client port to go by */
  startUs?: number;
  endUs?: number;
}

/** What an attempt may use: its own client port and ICMP echo identifier. */
export interface AttemptCtx {
  port: number;
  id: number;
  /** how much slower the lab's machines are than this one (a software-emulated VM: several
   * times): the client's own timeouts are scaled by it, alike for both data planes */
  slowness: number;
}

export interface Scenario {
  name: string;
  title: string;
  /** client pod name */
  client: string;
  /** the service whose endpoints are the possible backends (their veths are captured) */
  service?: string;
  choice: 'same-backend' | 'first-choice' | 'none';
  /** attempts per run (first-choice: all kept) */
  count: number;
  run(t: Topology, client: LabPod | LabClient, ctx: AttemptCtx): Attempt | Promise<Attempt>;
  /** changes the lab needs for this scenario only (an MTU, a route, a Service), undone by teardown */
  setup?(t: Topology): void | Promise<void>;
  teardown?(t: Topology): void | Promise<void>;
  /** the pod IPs whose veths are captured, when `service` is not in the lab before setup */
  backends?(t: Topology): string[];
  /** kernel modes whose behaviour differs on purpose, with the reason (docs/compare.md) */
  expectedDifference?: Partial<Record<'iptables' | 'nftables', string>>;
  /** same-backend: always this backend (a pod name), not the first plane's choice */
  wantBackend?: string;
  /** tcpdump filter when the client's address is not on every hop (masquerade) */
  captureFilter?: (t: Topology, client: LabPod | LabClient) => string;
  /** the data plane SNATs: packets are found by the attempt's time window, not its port */
  masquerades?: boolean;
  /** what the scenario needs from kubetun that it may not do yet */
  note?: string;
  /** the lab's control plane (it changes Services or EndpointSlices): not on VMs, whose nodes
   * read a static view (lab compare --vms) */
  needs?: 'control-plane';
  /** the address family its packets are (default IPv4): an IPv6 scenario needs a dual-stack
   * topology, captures IPv6 and is found by the client's IPv6 address */
  family?: 'IPv6';
}

/** Why a scenario cannot run on this topology (an IPv6 twin on an IPv4-only lab), or undefined. */
export function familyRefusal(s: Scenario, t: Topology | undefined): string | undefined {
  if (s.family !== 'IPv6' || t?.ipv6) return undefined;
  return 'an IPv6 scenario: the topology has no ipv6 block (lab/topology.yaml has one)';
}

/** The client's address of the scenario's family (what its packets carry). */
export function clientAddress(s: Scenario, c: LabPod | LabClient): string {
  return (s.family === 'IPv6' ? c.ip6 : c.ip) ?? c.ip;
}

export const MAX_TRIES = 20;

/**
 * Client ports per scenario: 10000 + 500 × its index, below the ephemeral range (32768+). An
 * attempt i binds from 21 × i on, and no scenario makes more than 20 (MAX_TRIES, count): 420.
 */
export const PORT_BLOCK = 500;
const PORT_BASE = 10000;

/** The scenario's block of client ports and echo identifiers: [first, last]. */
export function portBlock(s: Scenario): [number, number] {
  const i = SCENARIOS.findIndex((x) => x.name === s.name);
  const first = PORT_BASE + Math.max(i, 0) * PORT_BLOCK;
  return [first, first + PORT_BLOCK - 1];
}

function whoAnswered(t: Topology, body: string): string | undefined {
  const name = body.trim().split(' ')[0] ?? '';
  return t.nodes.flatMap((n) => n.pods).some((p) => p.name === name) ? name : undefined;
}

/** curl from the attempt's port (the next free one of the block when it is in TIME_WAIT). */
function curlOnce(
  t: Topology,
  client: LabPod | LabClient,
  ctx: AttemptCtx,
  url: string,
  timeoutS = 2,
): Attempt {
  const ports = `${ctx.port}-${ctx.port + 20}`;
  const argv = ['curl', '-sS', '-m', String(timeoutS * ctx.slowness), '--local-port', ports];
  const r = shTry(inNs(client.ns, [...argv, '-w', '\n%{local_port}', url]), 20_000 * ctx.slowness);
  const lines = r.out.trimEnd().split('\n');
  // A connect that never completed reports local port 0: which port of the range curl bound is
  // then unknown (the first is in TIME_WAIT after the other data plane's run, so curl takes the
  // next), and the attempt's packets are picked by its time window instead (run.ts).
  const port = Number(lines.pop());
  const body = lines.join('\n');
  return {
    ok: r.status === 0,
    clientPort: port > 0 ? port : undefined,
    backend: whoAnswered(t, body),
    output: (body || r.err).trim(),
  };
}

// argv: ip port localPort size waitMs. Linux sets DF on UDP (IP_PMTUDISC_WANT), which
// frag-needed uses.
const UDP_QUERY = `
const [ip, port, local, size, wait] = process.argv.slice(1).map((x, i) => (i ? Number(x) : x));
const s = require('node:dgram').createSocket(ip.includes(':') ? 'udp6' : 'udp4');
const timer = setTimeout(() => { console.log(s.address().port + ' timeout'); process.exit(1); }, wait);
s.on('message', (m) => { clearTimeout(timer); console.log(s.address().port + ' ' + m); s.close(); });
s.bind(local, () => s.send(size > 4 ? Buffer.alloc(size, 'x') : 'who?', port, ip));
`;

function udpOnce(
  t: Topology,
  client: LabPod | LabClient,
  ctx: AttemptCtx,
  ip: string,
  port: number,
  size = 4,
): Attempt {
  const args = [ip, String(port), String(ctx.port), String(size), String(2000 * ctx.slowness)];
  const r = shTry(inNs(client.ns, [nsNode(), '-e', UDP_QUERY, ...args]), 20_000 * ctx.slowness);
  const [p, ...rest] = r.out.trim().split(' ');
  const body = rest.join(' ');
  return {
    ok: r.status === 0,
    clientPort: Number(p) || undefined,
    backend: whoAnswered(t, body),
    output: body || r.err.trim(),
  };
}

function pingOnce(client: LabPod | LabClient, ctx: AttemptCtx, ip: string): Attempt {
  // -W 4: an ICMP host unreachable comes only when the node's ARP for the next hop gives up
  // (~3 s); the run must last until then to capture it in every run alike.
  const argv = ['ping', '-n', '-c', '2', '-i', '0.3', '-W', '4', '-e', String(ctx.id), ip];
  const r = shTry(inNs(client.ns, argv), 20_000 * ctx.slowness);
  const summary = r.out.split('\n').find((l) => /packets transmitted/.test(l)) ?? r.err.trim();
  return { ok: r.status === 0, output: summary };
}

// udp-stale-endpoint: a Service of its own, selector-less, its EndpointSlice written by hand
// (as web-local's) so the scenario changes the endpoints itself, the same way for both planes;
// both are deleted by teardown, so the lab's Services are as they were. Its IPv6 twin has a
// dual-stack Service of its own (the lab's primary family is IPv4: an IPv6 Service lists an
// IPv4 ClusterIP first) with an IPv6 slice only.
const STALE = {
  IPv4: { name: 'udp-stale', ip: '10.96.0.59', clusterIPs: ['10.96.0.59'] },
  IPv6: {
    name: 'udp-stale-v6',
    ip: 'fd00:10:96::3c',
    clusterIPs: ['10.96.0.60', 'fd00:10:96::3c'],
  },
  port: 53,
  file: 'lab compare udp-stale-endpoint',
};

/** web-dual's IPv6 ClusterIP (lab/manifests/web-dual.yaml). */
const WEB_DUAL_V6 = 'fd00:10:96::10';

/** The IPv6 ClusterIPs of the dual-stack Services the IPv6 twins use (lab/manifests). */
const V6 = {
  empty: 'fd00:10:96::1e',
  sticky: 'fd00:10:96::28',
  udpEcho: 'fd00:10:96::36',
};

/** web-lb-deny's LoadBalancer ingress IPs (lab/manifests/lb.yaml), per family. */
const LB_DENY_IP = { IPv4: '172.30.0.201', IPv6: 'fd00:172:30::c9' };

/**
 * Why a kernel REJECT of a pod's IPv6 connection shows the SYN twice (docs/compare.md, "A
 * rejected IPv6 connect"): seen in captures and with `nstat` (TcpExtLockDroppedIcmps) in the
 * client pod, not the ICMPv6 rate limit — every error is on the wire.
 */
const V6_REJECT_IN_CONNECT =
  "the kernel's REJECT answers the SYN inside the client's own connect() (the node's netfilter runs in the softirq that carries the SYN, before connect() lets go of the socket), so the client's TCP sees its ICMPv6 port unreachable while the socket is held and keeps it as a soft error only — IPv4's ip_icmp_error queues such an error on the socket even without IP_RECVERR (poll reports it, the connect fails at once), IPv6's ipv6_icmp_error queues nothing without IPV6_RECVERR — so the client sends its SYN again after the 1 s RTO and fails on the second error: 4 packets at the client instead of 2. kubetun's error (the same type 1 code 4, from the VIP, hop limit 63) comes back through the TUN after connect() returned and fails the connect at once. Not the ICMPv6 rate limit (net.ipv6.icmp.ratelimit): every error is on the wire";

/**
 * pod-d's node-side veth MTU: what its node forwards to pod-d must fit. 1280, the IPv6 minimum
 * (RFC 8200 section 5): below it Linux takes IPv6 off the device, and with it the pod's IPv6
 * gateway (fe80::1) and route, which setting 1500 back does not restore.
 */
const FRAG_MTU = '1280';

/** An address as a URL's host has it ([ip6]). */
function urlHost(ip: string): string {
  return ip.includes(':') ? `[${ip}]` : ip;
}

export const SCENARIOS: readonly Scenario[] = [
  {
    name: 'clusterip-tcp',
    title: 'curl a ClusterIP (web 10.96.0.10:80/TCP) from pod-d',
    client: 'pod-d',
    service: 'web',
    choice: 'same-backend',
    count: 1,
    run: (t, c, x) => curlOnce(t, c, x, 'http://10.96.0.10:80/'),
  },
  {
    name: 'udp',
    title: 'UDP request/reply through a ClusterIP (udp-echo 10.96.0.54:53/UDP) from pod-c',
    client: 'pod-c',
    service: 'udp-echo',
    choice: 'same-backend',
    count: 1,
    run: (t, c, x) => udpOnce(t, c, x, '10.96.0.54', 53),
  },
  {
    name: 'ping-vip',
    title: 'ping a ClusterIP (10.96.0.10) from pod-d: no answer',
    client: 'pod-d',
    service: 'web',
    choice: 'none',
    count: 1,
    run: (_t, c, x) => pingOnce(c, x, '10.96.0.10'),
    expectedDifference: {
      nftables:
        'nftables mode rejects everything to a ClusterIP that no service port matches, echo requests included (ICMP port unreachable); kubetun drops echo requests to a VIP silently and counts them (DROP_ECHO_TO_VIP), like iptables mode, where no rule matches them',
      iptables:
        'iptables mode has no rule for ICMP to a ClusterIP: the node routes the echo on out of its uplink towards a next hop that never answers ARP, and after ~3 s reports ICMP host unreachable from the pod gateway; kubetun drops it at the node and counts it (DROP_ECHO_TO_VIP)',
    },
  },
  {
    name: 'no-endpoints',
    title: 'curl a service without endpoints (empty 10.96.0.30:80) from pod-d: refused',
    client: 'pod-d',
    service: 'empty',
    choice: 'none',
    count: 1,
    run: (t, c, x) => curlOnce(t, c, x, 'http://10.96.0.30:80/'),
  },
  {
    name: 'unknown-port',
    title: 'curl a port the ClusterIP does not serve (10.96.0.10:81) from pod-d',
    client: 'pod-d',
    service: 'web',
    choice: 'none',
    count: 1,
    run: (t, c, x) => curlOnce(t, c, x, 'http://10.96.0.10:81/', 2),
    expectedDifference: {
      iptables:
        'kube-proxy in iptables mode has no rule for unused ports of a ClusterIP: the SYN is routed on towards the default route and times out; nftables mode and kubetun reject it at once',
    },
  },
  {
    name: 'nodeport',
    title:
      'curl a NodePort (web-np node1:30080, externalTrafficPolicy Cluster) from the external client',
    client: 'client',
    service: 'web-np',
    choice: 'same-backend',
    count: 1,
    captureFilter: (t, c) => `host ${c.ip} or tcp port ${t.httpPort}`,
    masquerades: true,
    run: (t, c, x) => curlOnce(t, c, x, `http://${t.nodes[0]!.ip}:30080/`),
  },
  {
    name: 'nodeport-local',
    title:
      'curl a NodePort with externalTrafficPolicy Local (web-local node2:30081) from the external client: the client IP is kept',
    client: 'client',
    service: 'web-local',
    choice: 'same-backend',
    count: 1,
    run: (t, c, x) => curlOnce(t, c, x, `http://${t.nodes[1]!.ip}:30081/`),
  },
  {
    name: 'hairpin',
    title:
      'hairpin: pod-a curls web 10.96.0.10:80 and lands on itself (masqueraded to its gateway)',
    client: 'pod-a',
    service: 'web',
    choice: 'same-backend',
    wantBackend: 'pod-a',
    count: 1,
    masquerades: true,
    run: (t, c, x) => curlOnce(t, c, x, 'http://10.96.0.10:80/'),
  },
  {
    name: 'session-affinity',
    title: 'sessionAffinity: ClientIP (sticky 10.96.0.40:80): 20 connections from pod-d',
    client: 'pod-d',
    service: 'sticky',
    choice: 'first-choice',
    count: 20,
    run: (t, c, x) => curlOnce(t, c, x, 'http://10.96.0.40:80/'),
    note: 'a difference here means the data plane ignored ClientIP affinity: packets on the other backends’ veths',
  },
  {
    name: 'etp-local-no-endpoint',
    title:
      'curl a NodePort with externalTrafficPolicy Local (web-local node1:30081), which has no local endpoint there, from the external client: dropped',
    client: 'client',
    service: 'web-local',
    choice: 'none',
    count: 1,
    // 1.5 s: the SYN and its one retransmission (after 1 s), in both planes
    run: (t, c, x) => curlOnce(t, c, x, `http://${t.nodes[0]!.ip}:30081/`, 1.5),
  },
  lbSourceRange('IPv4'),
  fragNeeded('IPv4'),
  staleEndpoint('IPv4'),
  // IPv6 twins (a dual-stack topology): the same client requests over IPv6 to a dual-stack
  // Service's IPv6 ClusterIP, against the kernel's IPv6 proxier (ip6tables / table ip6).
  {
    name: 'clusterip-tcp-v6',
    family: 'IPv6',
    title: `curl -6 a dual-stack Service's IPv6 ClusterIP (web-dual [${WEB_DUAL_V6}]:80/TCP) from pod-d`,
    client: 'pod-d',
    service: 'web-dual',
    choice: 'same-backend',
    count: 1,
    run: (t, c, x) => curlOnce(t, c, x, `http://[${WEB_DUAL_V6}]:80/`),
  },
  {
    name: 'udp-v6',
    family: 'IPv6',
    title: `UDP request/reply through a dual-stack Service's IPv6 ClusterIP (web-dual [${WEB_DUAL_V6}]:53/UDP) from pod-d`,
    client: 'pod-d',
    service: 'web-dual',
    choice: 'same-backend',
    count: 1,
    run: (t, c, x) => udpOnce(t, c, x, WEB_DUAL_V6, 53),
  },
  {
    name: 'ping-vip-v6',
    family: 'IPv6',
    title: `ping -6 a dual-stack Service's IPv6 ClusterIP (${WEB_DUAL_V6}) from pod-d: no answer`,
    client: 'pod-d',
    service: 'web-dual',
    choice: 'none',
    count: 1,
    run: (_t, c, x) => pingOnce(c, x, WEB_DUAL_V6),
    expectedDifference: {
      nftables:
        'nftables mode (table ip6 kube-proxy) rejects everything to an IPv6 ClusterIP that no service port matches, echo requests included: ICMPv6 destination unreachable, port unreachable (type 1 code 4), from the node; kubetun drops echo requests to a VIP silently and counts them (DROP_ECHO_TO_VIP), as for IPv4',
      iptables:
        'ip6tables mode has no rule for ICMPv6 to a ClusterIP: the node routes the echo on out of its uplink, neighbour discovery for the VIP finds nobody, and after ~3 s the node reports ICMPv6 address unreachable (type 1 code 3); kubetun drops it at the node and counts it (DROP_ECHO_TO_VIP)',
    },
  },
  {
    name: 'no-endpoints-v6',
    family: 'IPv6',
    title: `curl -6 a dual-stack service without endpoints (empty [${V6.empty}]:80) from pod-d: refused`,
    client: 'pod-d',
    service: 'empty',
    choice: 'none',
    count: 1,
    run: (t, c, x) => curlOnce(t, c, x, `http://[${V6.empty}]:80/`),
    // both kernel modes reject a Service without endpoints on the client's node
    expectedDifference: { iptables: V6_REJECT_IN_CONNECT, nftables: V6_REJECT_IN_CONNECT },
  },
  {
    name: 'unknown-port-v6',
    family: 'IPv6',
    title: `curl -6 a port the IPv6 ClusterIP does not serve ([${WEB_DUAL_V6}]:81) from pod-d`,
    client: 'pod-d',
    service: 'web-dual',
    choice: 'none',
    count: 1,
    run: (t, c, x) => curlOnce(t, c, x, `http://[${WEB_DUAL_V6}]:81/`, 2),
    expectedDifference: {
      iptables:
        'ip6tables mode has no rule for unused ports of an IPv6 ClusterIP: the SYN is routed towards the uplink (the IPv6 service CIDR route), where neighbour discovery for the VIP finds nobody, and times out; nftables mode and kubetun reject it at once',
      nftables: V6_REJECT_IN_CONNECT,
    },
  },
  {
    name: 'nodeport-v6',
    family: 'IPv6',
    title:
      "curl -6 a NodePort on node1's IPv6 address (web-np [fd00:172:30::b]:30080, externalTrafficPolicy Cluster) from the external client",
    client: 'client',
    service: 'web-np',
    choice: 'same-backend',
    count: 1,
    captureFilter: (t, c) => `host ${c.ip6} or tcp port ${t.httpPort}`,
    masquerades: true,
    run: (t, c, x) => curlOnce(t, c, x, `http://[${t.nodes[0]!.ip6}]:30080/`),
  },
  {
    name: 'nodeport-local-v6',
    family: 'IPv6',
    title:
      "curl -6 a NodePort with externalTrafficPolicy Local on node2's IPv6 address (web-local [fd00:172:30::c]:30081) from the external client: the client's IPv6 address is kept",
    client: 'client',
    service: 'web-local',
    choice: 'same-backend',
    count: 1,
    run: (t, c, x) => curlOnce(t, c, x, `http://[${t.nodes[1]!.ip6}]:30081/`),
  },
  {
    name: 'hairpin-v6',
    family: 'IPv6',
    title: `hairpin over IPv6: pod-a curls web-dual [${WEB_DUAL_V6}]:80 and lands on itself (masqueraded)`,
    client: 'pod-a',
    service: 'web-dual',
    choice: 'same-backend',
    wantBackend: 'pod-a',
    count: 1,
    masquerades: true,
    run: (t, c, x) => curlOnce(t, c, x, `http://[${WEB_DUAL_V6}]:80/`),
  },
  {
    name: 'session-affinity-v6',
    family: 'IPv6',
    title: `sessionAffinity: ClientIP over IPv6 (sticky [${V6.sticky}]:80): 20 connections from pod-d`,
    client: 'pod-d',
    service: 'sticky',
    choice: 'first-choice',
    count: 20,
    run: (t, c, x) => curlOnce(t, c, x, `http://[${V6.sticky}]:80/`),
    note: 'a difference here means the data plane ignored ClientIP affinity: packets on the other backends’ veths',
  },
  {
    name: 'etp-local-no-endpoint-v6',
    family: 'IPv6',
    title:
      "curl -6 a NodePort with externalTrafficPolicy Local on node1's IPv6 address (web-local [fd00:172:30::b]:30081), which has no local endpoint there, from the external client: dropped",
    client: 'client',
    service: 'web-local',
    choice: 'none',
    count: 1,
    // 1.5 s: the SYN and its one retransmission (after 1 s), in both planes
    run: (t, c, x) => curlOnce(t, c, x, `http://[${t.nodes[0]!.ip6}]:30081/`, 1.5),
  },
  lbSourceRange('IPv6'),
  fragNeeded('IPv6'),
  staleEndpoint('IPv6'),
];

/**
 * lb-source-range and its IPv6 twin: the external client to web-lb-deny's ingress IP of the
 * family, outside that family's loadBalancerSourceRanges (each family's proxier takes only its
 * own ranges).
 */
function lbSourceRange(family: IPFamily): Scenario {
  const ip = urlHost(LB_DENY_IP[family]);
  return {
    name: family === 'IPv6' ? 'lb-source-range-v6' : 'lb-source-range',
    ...(family === 'IPv6' ? { family } : {}),
    title: `curl a LoadBalancer IP whose loadBalancerSourceRanges exclude the client (web-lb-deny ${ip}:80, routed via node1) from the external client: dropped`,
    client: 'client',
    service: 'web-lb-deny',
    choice: 'none',
    count: 1,
    // A cloud load balancer would send its ingress IP to a node: here a route via node 1.
    setup: (t) => lbRoute(t, family, 'replace'),
    teardown: (t) => lbRoute(t, family, 'del'),
    run: (t, c, x) => curlOnce(t, c, x, `http://${ip}:80/`, 1.5),
  };
}

/**
 * icmp-frag-needed and its IPv6 twin: a datagram too big for pod-d's veth draws the ICMP error
 * that drives path MTU discovery (IPv4: fragmentation needed; IPv6: Packet Too Big, the only
 * way it works there: routers never fragment), which must reach the client through the VIP.
 */
function fragNeeded(family: IPFamily): Scenario {
  const v6 = family === 'IPv6';
  const vip = v6 ? V6.udpEcho : '10.96.0.54';
  const error = v6 ? 'ICMPv6 Packet Too Big' : 'ICMP frag-needed';
  return {
    name: v6 ? 'icmp-frag-needed-v6' : 'icmp-frag-needed',
    ...(family === 'IPv6' ? { family } : {}),
    title: `a 1400-byte UDP datagram (${v6 ? 'IPv6' : 'DF'}) from pod-a to udp-echo ${urlHost(vip)}:53 that lands on pod-d, whose veth takes ${FRAG_MTU}: the ${error} comes back through the VIP (its quoted packet reverse-NATed)`,
    client: 'pod-a',
    service: 'udp-echo',
    choice: 'same-backend',
    // pod-b answers (tried again); pod-d's oversized datagram draws the ICMP error, no answer
    wantBackend: 'pod-d',
    count: 1,
    setup: (t) => fragMtu(t, FRAG_MTU),
    teardown: (t) => fragMtu(t, '1500'),
    run: (t, c, x) => {
      // a path MTU learnt in an earlier attempt would make the client fragment instead
      shTry(inNs(c.ns, ['ip', v6 ? '-6' : '-4', 'route', 'flush', 'cache']), 30_000);
      return udpOnce(t, c, x, vip, 53, 1400);
    },
  };
}

/**
 * udp-stale-endpoint and its IPv6 twin: pod-c's datagrams from one source port, before and
 * after the endpoint changes from pod-d to pod-b.
 */
function staleEndpoint(family: IPFamily): Scenario {
  const svc = STALE[family];
  const v6 = family === 'IPv6';
  const pods = ['pod-b', 'pod-d'];
  return {
    name: v6 ? 'udp-stale-endpoint-v6' : 'udp-stale-endpoint',
    ...(family === 'IPv6' ? { family } : {}),
    needs: 'control-plane',
    title: `stale UDP: pod-c sends to ${svc.name} ${urlHost(svc.ip)}:53/UDP from one source port and lands on pod-d; the EndpointSlice then replaces pod-d by pod-b; the next datagram from the same port must reach pod-b (the data plane deletes the stale UDP conntrack entry, as kube-proxy does)`,
    client: 'pod-c',
    service: svc.name,
    // pod-b, pod-d: the veths of the endpoint before and after the change (setup makes them
    // the Service's endpoints, which serviceBackends reads before setup)
    backends: (t) => pods.map((n) => podAddress(podNamed(t, n), family)),
    choice: 'none',
    count: 1,
    setup: async (t) => {
      await applyStale(t, family, 'pod-d', true);
      // both planes start from the same programmed state: pod-d the only endpoint
      if (!(await untilAnswered(t, family, 'pod-c', 'pod-d')))
        throw new LabError(`scenario ${svc.name}: ${svc.ip} port 53 never answered from pod-d`);
    },
    teardown: () => removeStale(family),
    run: async (t, c, x) => {
      const before = udpOnce(t, c, x, svc.ip, STALE.port);
      await applyStale(t, family, 'pod-b', false);
      // programmed when a new flow lands on pod-b; the cleanup follows in the same sync
      const programmed = await untilAnswered(t, family, 'pod-c', 'pod-b');
      const after = udpOnce(t, c, x, svc.ip, STALE.port);
      const late = programmed ? '' : ' (no new flow reached pod-b in 20 s)';
      return {
        ok: before.backend === 'pod-d' && after.backend === 'pod-b',
        clientPort: x.port,
        backend: after.backend,
        output: `before: ${before.output}; after pod-d was replaced by pod-b${late}: ${after.output}`,
      };
    },
  };
}

function podNamed(t: Topology, name: string): LabPod {
  const pod = t.nodes.flatMap((n) => n.pods).find((p) => p.name === name);
  if (!pod) throw new LabError(`lab compare: the topology has no pod ${name}`);
  return pod;
}

function podAddress(p: LabPod, family: IPFamily): string {
  const ip = family === 'IPv6' ? p.ip6 : p.ip;
  if (!ip) throw new LabError(`lab compare: pod ${p.name} has no ${family} address`);
  return ip;
}

function staleObjects(
  pod: LabPod,
  family: IPFamily,
  withService: boolean,
): { file: string; object: unknown }[] {
  const { name, clusterIPs } = STALE[family];
  const meta = { namespace: 'default' };
  const slice = {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { ...meta, name: `${name}-1`, labels: { 'kubernetes.io/service-name': name } },
    addressType: family,
    ports: [{ name: 'udp', protocol: 'UDP', port: 5353 }],
    endpoints: [
      {
        addresses: [podAddress(pod, family)],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: pod.node,
        targetRef: { kind: 'Pod', namespace: 'default', name: pod.name },
      },
    ],
  };
  const service = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { ...meta, name },
    spec: {
      type: 'ClusterIP',
      ipFamilies: clusterIPs.map(familyOfIP),
      ipFamilyPolicy: clusterIPs.length > 1 ? 'RequireDualStack' : 'SingleStack',
      clusterIP: clusterIPs[0],
      clusterIPs,
      ports: [{ name: 'udp', protocol: 'UDP', port: STALE.port, targetPort: 5353 }],
    },
  };
  return (withService ? [service, slice] : [slice]).map((object) => ({ file: STALE.file, object }));
}

async function applyStale(
  t: Topology,
  family: IPFamily,
  podName: string,
  withService: boolean,
): Promise<void> {
  const objects = staleObjects(podNamed(t, podName), family, withService);
  const r = await apiCall<ApplyReply>('POST', '/apply', { objects });
  if (r.errors.length > 0)
    throw new LabError(`scenario ${STALE[family].name}: ${r.errors.join('; ')}`);
}

async function removeStale(family: IPFamily): Promise<void> {
  const { name } = STALE[family];
  await apiCall('POST', '/delete', {
    kind: 'EndpointSlice',
    namespace: 'default',
    name: `${name}-1`,
  });
  await apiCall('POST', '/delete', { kind: 'Service', namespace: 'default', name });
}

/** New flows (ephemeral ports, outside every block) until one is answered by `want`, ≤ 20 s. */
async function untilAnswered(
  t: Topology,
  family: IPFamily,
  client: string,
  want: string,
): Promise<boolean> {
  const c = podNamed(t, client);
  const ctx = { port: 0, id: 0, slowness: 1 };
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; ) {
    if (udpOnce(t, c, ctx, STALE[family].ip, STALE.port).backend === want) {
      await sleep(500);
      return true;
    }
    await sleep(200);
  }
  return false;
}

/**
 * The LB IP routed to node1 by the client, and on by node1, as a real node routes whatever is
 * not its own (its default route): only then does the kernel's drop of a source outside
 * loadBalancerSourceRanges happen (filter FORWARD, after routing) rather than a route lookup's
 * "net unreachable". The namespace lab's node1 has that route through its underlay subnet
 * already (172.30.0.0/24, fd00:172:30::/64); the VMs' nodes have none.
 */
function lbRoute(t: Topology, family: IPFamily, verb: 'replace' | 'del'): void {
  const client = t.clients[0]!;
  const node = t.nodes[0]!;
  const ip = LB_DENY_IP[family];
  const [route, len, via] =
    family === 'IPv6' ? (['-6', '128', node.ip6!] as const) : (['-4', '32', node.ip] as const);
  shTry(inNs(client.ns, ['ip', route, 'route', verb, `${ip}/${len}`, 'via', via]), 30_000);
  shTry(inNs(node.ns, ['ip', route, 'route', verb, `${ip}/${len}`, 'dev', node.uplink]), 30_000);
}

/** pod-d's node-side veth MTU: what its node forwards to pod-d must fit (FRAG_MTU). */
function fragMtu(t: Topology, mtu: string): void {
  const pod = podNamed(t, 'pod-d');
  const node = t.nodes.find((n) => n.name === pod.node)!;
  shTry(inNs(node.ns, ['ip', 'link', 'set', pod.hostIf, 'mtu', mtu]), 30_000);
}

export function findScenarios(names: string[]): Scenario[] {
  if (names.length === 0) return [...SCENARIOS];
  return names.map((n) => {
    const s = SCENARIOS.find((x) => x.name === n);
    if (!s)
      throw new UsageError(
        `unknown scenario "${n}" (known: ${SCENARIOS.map((x) => x.name).join(', ')})`,
      );
    return s;
  });
}

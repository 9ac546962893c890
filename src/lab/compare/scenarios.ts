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
import { UsageError } from '../../errors.ts';
import { inNs, shTry } from '../sh.ts';
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
  run(t: Topology, client: LabPod | LabClient): Attempt;
  /** kernel modes whose behaviour differs on purpose, with the reason (docs/compare.md) */
  expectedDifference?: Partial<Record<'iptables' | 'nftables', string>>;
  /** same-backend: always this backend (a pod name), not the first plane's choice */
  wantBackend?: string;
  /** tcpdump filter when the client's address is not on every hop (masquerade) */
  captureFilter?: string;
  /** the data plane SNATs: packets are found by the attempt's time window, not its port */
  masquerades?: boolean;
  /** what the scenario needs from kubetun that it may not do yet */
  note?: string;
}

export const MAX_TRIES = 20;

function whoAnswered(t: Topology, body: string): string | undefined {
  const name = body.trim().split(' ')[0] ?? '';
  return t.nodes.flatMap((n) => n.pods).some((p) => p.name === name) ? name : undefined;
}

function curlOnce(t: Topology, client: LabPod | LabClient, url: string, timeoutS = 2): Attempt {
  const r = shTry(
    inNs(client.ns, ['curl', '-sS', '-m', String(timeoutS), '-w', '\n%{local_port}', url]),
    20_000,
  );
  const lines = r.out.trimEnd().split('\n');
  const port = Number(lines.pop());
  const body = lines.join('\n');
  return {
    ok: r.status === 0,
    clientPort: port > 0 ? port : undefined,
    backend: whoAnswered(t, body),
    output: (body || r.err).trim(),
  };
}

const UDP_QUERY = `
const s = require('node:dgram').createSocket('udp4');
const timer = setTimeout(() => { console.log(s.address().port + ' timeout'); process.exit(1); }, 2000);
s.on('message', (m) => { clearTimeout(timer); console.log(s.address().port + ' ' + m); s.close(); });
s.send('who?', Number(process.argv[2]), process.argv[1]);
`;

function udpOnce(t: Topology, client: LabPod | LabClient, ip: string, port: number): Attempt {
  const r = shTry(inNs(client.ns, [process.execPath, '-e', UDP_QUERY, ip, String(port)]), 20_000);
  const [p, ...rest] = r.out.trim().split(' ');
  const body = rest.join(' ');
  return {
    ok: r.status === 0,
    clientPort: Number(p) || undefined,
    backend: whoAnswered(t, body),
    output: body || r.err.trim(),
  };
}

function pingOnce(client: LabPod | LabClient, ip: string): Attempt {
  const r = shTry(inNs(client.ns, ['ping', '-n', '-c', '2', '-i', '0.3', '-W', '1', ip]), 20_000);
  const summary = r.out.split('\n').find((l) => /packets transmitted/.test(l)) ?? r.err.trim();
  return { ok: r.status === 0, output: summary };
}

export const SCENARIOS: readonly Scenario[] = [
  {
    name: 'clusterip-tcp',
    title: 'curl a ClusterIP (web 10.96.0.10:80/TCP) from pod-d',
    client: 'pod-d',
    service: 'web',
    choice: 'same-backend',
    count: 1,
    run: (t, c) => curlOnce(t, c, 'http://10.96.0.10:80/'),
  },
  {
    name: 'udp',
    title: 'UDP request/reply through a ClusterIP (udp-echo 10.96.0.54:53/UDP) from pod-c',
    client: 'pod-c',
    service: 'udp-echo',
    choice: 'same-backend',
    count: 1,
    run: (t, c) => udpOnce(t, c, '10.96.0.54', 53),
  },
  {
    name: 'ping-vip',
    title: 'ping a ClusterIP (10.96.0.10) from pod-d: no answer',
    client: 'pod-d',
    service: 'web',
    choice: 'none',
    count: 1,
    run: (_t, c) => pingOnce(c, '10.96.0.10'),
    expectedDifference: {
      nftables:
        'nftables mode rejects everything to a ClusterIP that no service port matches, echo requests included (ICMP port unreachable); kubetun drops echo requests to a VIP silently and counts them (DROP_ECHO_TO_VIP), like iptables mode, where no rule matches them',
      iptables:
        'iptables mode has no rule for ICMP to a ClusterIP: the node routes the echo on (here out of the uplink, where nothing answers); kubetun drops it at the node and counts it (DROP_ECHO_TO_VIP)',
    },
  },
  {
    name: 'no-endpoints',
    title: 'curl a service without endpoints (empty 10.96.0.30:80) from pod-d: refused',
    client: 'pod-d',
    service: 'empty',
    choice: 'none',
    count: 1,
    run: (t, c) => curlOnce(t, c, 'http://10.96.0.30:80/'),
  },
  {
    name: 'unknown-port',
    title: 'curl a port the ClusterIP does not serve (10.96.0.10:81) from pod-d',
    client: 'pod-d',
    service: 'web',
    choice: 'none',
    count: 1,
    run: (t, c) => curlOnce(t, c, 'http://10.96.0.10:81/', 2),
    expectedDifference: {
      iptables:
        'kube-proxy in iptables mode has no rule for unused ports of a ClusterIP: the SYN is routed on towards the default route and times out; nftables mode and kubetun reject it at once',
    },
  },
  {
    name: 'nodeport',
    title:
      'curl a NodePort (web-np 172.30.0.11:30080, externalTrafficPolicy Cluster) from the external client',
    client: 'client',
    service: 'web-np',
    choice: 'same-backend',
    count: 1,
    captureFilter: 'host 172.30.0.100 or tcp port 8080',
    masquerades: true,
    run: (t, c) => curlOnce(t, c, 'http://172.30.0.11:30080/'),
  },
  {
    name: 'nodeport-local',
    title:
      'curl a NodePort with externalTrafficPolicy Local (web-local 172.30.0.12:30081) from the external client: the client IP is kept',
    client: 'client',
    service: 'web-local',
    choice: 'same-backend',
    count: 1,
    run: (t, c) => curlOnce(t, c, 'http://172.30.0.12:30081/'),
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
    run: (t, c) => curlOnce(t, c, 'http://10.96.0.10:80/'),
  },
  {
    name: 'session-affinity',
    title: 'sessionAffinity: ClientIP (sticky 10.96.0.40:80): 20 connections from pod-d',
    client: 'pod-d',
    service: 'sticky',
    choice: 'first-choice',
    count: 20,
    run: (t, c) => curlOnce(t, c, 'http://10.96.0.40:80/'),
    note: 'a difference here means the data plane ignored ClientIP affinity: packets on the other backends’ veths',
  },
];

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

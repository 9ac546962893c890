// Every consumer of kube-proxy's endpoint selection agrees (src/endpoints/select.ts): for each
// case, the rules renderer's KUBE-SVC / KUBE-SVL chains, the loader's ClusterIP slots, NodePort
// key and externalTrafficPolicy-Local key, the no_local_endpoints metric and the health-check node
// port's count are derived from one expected (cluster, local, ready-local) triple.
//
//   this node n1 (zone-a): a 10.244.1.5        n2 (zone-b): b 10.244.2.5, c 10.244.2.6

import { describe, expect, it } from 'vitest';
import { countNoLocalEndpoints } from '../../src/control/metrics.ts';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { SVC_SCOPE_LOCAL } from '../../src/maps/services.ts';
import type { ResolvedEndpoint, ResolvedServicePort, Service } from '../../src/model.ts';
import { healthServices } from '../../src/node/health-nodeport.ts';
import { renderIptables } from '../../src/rules/iptables.ts';
import { ipv4ToU32, u32ToIpv4 } from '../../src/wire/addr.ts';
import { endpoint, loaderOf, service } from '../datapath/harness.ts';

const NODE = 'n1';
const ZONE = 'zone-a';
const NODE_IP = '172.30.0.11';
const VIP = '10.96.0.10';
const NODE_PORT = 30080;
const A = '10.244.1.5';
const B = '10.244.2.5';
const C = '10.244.2.6';

type Over = Partial<ResolvedEndpoint>;
const TERM: Over = { ready: false, serving: true, terminating: true };
const GONE: Over = { ready: false, serving: false, terminating: true };

function eps(a: Over = {}, b: Over = {}, c: Over = {}): ResolvedEndpoint[] {
  return [
    endpoint(`${A}:8080`, { nodeName: 'n1', zone: 'zone-a', ...a }),
    endpoint(`${B}:8080`, { nodeName: 'n2', zone: 'zone-b', ...b }),
    endpoint(`${C}:8080`, { nodeName: 'n2', zone: 'zone-b', ...c }),
  ];
}

interface Case {
  name: string;
  svc: Partial<Service>;
  eps: ResolvedEndpoint[];
  /** kube-proxy's clusterEndpoints and localEndpoints (only when a Local policy applies) */
  cluster: string[];
  local: string[];
}

const ETP_LOCAL: Partial<Service> = {
  type: 'LoadBalancer',
  externalTrafficPolicy: 'Local',
  healthCheckNodePort: 32000,
};

const CASES: Case[] = [
  { name: 'all ready, Cluster policy', svc: {}, eps: eps(), cluster: [A, B, C], local: [] },
  {
    name: 'internalTrafficPolicy Local: this node only',
    svc: { internalTrafficPolicy: 'Local' },
    eps: eps(),
    cluster: [],
    local: [A],
  },
  {
    name: 'internalTrafficPolicy Local: the local terminating fallback',
    svc: { internalTrafficPolicy: 'Local' },
    eps: eps(TERM),
    cluster: [],
    local: [A],
  },
  {
    name: 'internalTrafficPolicy Local, no local endpoint: nothing (dropped)',
    svc: { internalTrafficPolicy: 'Local' },
    eps: eps({ nodeName: 'n3' }),
    cluster: [],
    local: [],
  },
  {
    // external traffic ignores internalTrafficPolicy: the NodePort serves the cluster set
    name: 'internalTrafficPolicy Local, externalTrafficPolicy Cluster: NodePort gets every endpoint',
    svc: { type: 'LoadBalancer', internalTrafficPolicy: 'Local', externalTrafficPolicy: 'Cluster' },
    eps: eps(),
    cluster: [A, B, C],
    local: [A],
  },
  {
    name: 'externalTrafficPolicy Local: ready local endpoint',
    svc: ETP_LOCAL,
    eps: eps(),
    cluster: [A, B, C],
    local: [A],
  },
  {
    name: 'externalTrafficPolicy Local: only a terminating local endpoint (health 503)',
    svc: ETP_LOCAL,
    eps: eps(TERM),
    cluster: [B, C],
    local: [A],
  },
  {
    name: 'externalTrafficPolicy Local: no local endpoint',
    svc: ETP_LOCAL,
    eps: eps({ nodeName: 'n3' }),
    cluster: [A, B, C],
    local: [],
  },
  {
    name: 'zone hints: this zone only',
    svc: {},
    eps: eps(
      { hintsForZones: ['zone-a'] },
      { hintsForZones: ['zone-b'] },
      { hintsForZones: ['zone-b'] },
    ),
    cluster: [A],
    local: [],
  },
  {
    name: 'zone hints incomplete: ignored',
    svc: {},
    eps: eps({ hintsForZones: ['zone-a'] }, { hintsForZones: ['zone-b'] }),
    cluster: [A, B, C],
    local: [],
  },
  {
    name: 'zone hints, none for this zone: ignored',
    svc: {},
    eps: eps(
      { hintsForZones: ['zone-b'] },
      { hintsForZones: ['zone-b'] },
      { hintsForZones: ['zone-b'] },
    ),
    cluster: [A, B, C],
    local: [],
  },
  {
    name: 'node hints (PreferSameNode): this node only',
    svc: {},
    eps: eps({ hintsForNodes: ['n1'] }, { hintsForNodes: ['n2'] }, { hintsForNodes: ['n2'] }),
    cluster: [A],
    local: [],
  },
  {
    name: 'node hints for another node, zone hints for ours: the zone',
    svc: {},
    eps: eps(
      { hintsForNodes: ['n2'], hintsForZones: ['zone-a'] },
      { hintsForNodes: ['n2'], hintsForZones: ['zone-a'] },
      { hintsForNodes: ['n2'], hintsForZones: ['zone-b'] },
    ),
    cluster: [A, B],
    local: [],
  },
  {
    name: 'PreferClose without a controller: endpoint zones stand in for hints',
    svc: { trafficDistribution: 'PreferClose' },
    eps: eps(),
    cluster: [A],
    local: [],
  },
  {
    name: 'none ready: serving+terminating fallback, not the non-serving one',
    svc: {},
    eps: eps(GONE, TERM, GONE),
    cluster: [B],
    local: [],
  },
  {
    name: 'a hinted zone whose endpoint is not ready: hints of ready ones only',
    svc: {},
    eps: eps({ hintsForZones: ['zone-a'] }, { hintsForZones: ['zone-b'] }, { ...GONE }),
    cluster: [A],
    local: [],
  },
];

function model(c: Case): ResolvedServicePort {
  const ext = c.svc.type === 'LoadBalancer';
  const svc = service('web', VIP, c.svc);
  const port = {
    name: 'http',
    protocol: 'TCP' as const,
    port: 80,
    targetPort: 8080,
    nodePort: ext ? NODE_PORT : 0,
  };
  svc.ports.push(port);
  return { service: svc, port, servicePortName: 'default/web:http', endpoints: c.eps };
}

/** Endpoints a chain jumps to: the "spn -> ip:port" comments of its rules. */
function chainEndpoints(rules: string, prefix: 'KUBE-SVC-' | 'KUBE-SVL-'): string[] {
  const re = new RegExp(`^-A ${prefix}\\S+ .*--comment "default/web:http -> ([0-9.]+):8080"`, 'gm');
  return [...rules.matchAll(re)].map((m) => m[1]!);
}

function slotAddrs(dp: Datapath, addr: number, port: number, proto: number): string[] {
  const m = dp.svc.lookup(addr, port, proto, 0);
  const out: string[] = [];
  for (let s = 1; m >= 0 && s <= dp.svc.count(m); s++) {
    const b = dp.be.lookup(dp.svc.backendId(dp.svc.lookup(addr, port, proto, s)));
    out.push(u32ToIpv4(dp.be.addr(b)));
  }
  return out.sort();
}

const readyLocal = (c: Case) => c.eps.filter((e) => e.ready && e.nodeName === NODE).length;
const itp = (c: Case) => c.svc.internalTrafficPolicy === 'Local';
const etp = (c: Case) => c.svc.externalTrafficPolicy === 'Local';
const hasAny = (c: Case) => c.eps.some((e) => e.ready || (e.serving && e.terminating));

describe('endpoint selection: every consumer agrees (src/endpoints/select.ts)', () => {
  for (const c of CASES) {
    it(c.name, () => {
      const rsp = model(c);
      // the rules renderer: KUBE-SVC holds the cluster endpoints, KUBE-SVL the local ones
      const rules = renderIptables([rsp], { nodeName: NODE, nodeZone: ZONE, nodeIPs: [NODE_IP] });
      expect(chainEndpoints(rules, 'KUBE-SVC-').sort()).toEqual(c.cluster);
      expect(chainEndpoints(rules, 'KUBE-SVL-').sort()).toEqual(c.local);
      // the loader: the ClusterIP slots, and the externalTrafficPolicy-Local key of the NodePort
      const dp = createDatapath({ nodeIp: ipv4ToU32(NODE_IP) });
      loaderOf(dp).load([rsp], { nodeName: NODE, nodeZone: ZONE });
      expect(slotAddrs(dp, ipv4ToU32(VIP), 80, 6)).toEqual(itp(c) ? c.local : c.cluster);
      if (c.svc.type === 'LoadBalancer') {
        // the NodePort's plain key: kube-proxy's cluster set, whatever internalTrafficPolicy
        expect(slotAddrs(dp, ipv4ToU32(NODE_IP), NODE_PORT, 6)).toEqual(c.cluster);
      }
      if (etp(c)) {
        const scoped = slotAddrs(dp, ipv4ToU32(NODE_IP), NODE_PORT, 6 | SVC_SCOPE_LOCAL);
        expect(scoped).toEqual(c.local);
      }
      // metrics: a Local policy with endpoints somewhere but none here
      const noLocal = hasAny(c) && c.local.length === 0;
      expect(countNoLocalEndpoints([rsp], NODE)).toEqual({
        internal: itp(c) && noLocal ? 1 : 0,
        external: etp(c) && noLocal ? 1 : 0,
      });
      // the health check: ready local endpoints only (the terminating fallback is 503)
      const health = healthServices([rsp], NODE);
      if (etp(c))
        expect(health).toEqual([expect.objectContaining({ localEndpoints: readyLocal(c) })]);
      else expect(health).toEqual([]);
    });
  }
});

// Masquerade, hairpin, NodePort, externalTrafficPolicy, LoadBalancer source ranges: every
// rewrite checked byte for byte against the packet built from scratch with the translated tuple
// (so the incremental checksums equal a full recompute).
//
//   node1 172.30.0.11, pod CIDR 10.244.1.0/24 (gateway 10.244.1.1), cluster CIDR 10.244.0.0/16
//   web   10.96.0.10:80/TCP  nodePort 30080   backends as each test says
//   client 172.30.0.100 (outside the cluster)
import { describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { natGcStep } from '../../src/datapath/stages/nat-gc.ts';
import { nat4SnatOf } from '../../src/datapath/state/nat-state.ts';
import { V_DROP, V_TX } from '../../src/datapath/state/verdict.ts';
import type { Service } from '../../src/model.ts';
import { ipv4ToU32 } from '../../src/wire/addr.ts';
import {
  ACK,
  buildTcp,
  buildUdp,
  checksumsVerify,
  endpoint,
  get16,
  ip,
  run,
  SYN,
  service,
  servicePort,
  loaderOf,
} from './harness.ts';

const NODE = '172.30.0.11';
const GW = '10.244.1.1';
const CLIENT = '172.30.0.100';
const VIP = '10.96.0.10';
const LOCAL_POD = '10.244.1.2';
const REMOTE_POD = '10.244.2.2';

function makeDp(over: Record<string, unknown> = {}): Datapath {
  return createDatapath({
    nodeIp: ipv4ToU32(NODE),
    podGateway: ipv4ToU32(GW),
    podCidr: '10.244.1.0/24',
    clusterCidr: '10.244.0.0/16',
    ...over,
  });
}

function load(
  dp: Datapath,
  backends: string[],
  over: Partial<Service> = {},
  proto: 'TCP' | 'UDP' = 'TCP',
): void {
  const svc = service('web', VIP, { type: 'NodePort', ...over });
  const eps = backends.map((b) =>
    endpoint(`${b}:8080`, { nodeName: b.startsWith('10.244.1.') ? 'node1' : 'node2' }),
  );
  const rsp = servicePort(svc, 80, proto, eps, 'http');
  rsp.port.nodePort = 30080;
  loaderOf(dp).load([rsp], { nodeName: 'node1' });
}

function sportOf(p: Uint8Array): number {
  return get16(p, 20);
}

const inRange = (p: number) => p >= 61440 && p <= 62463;

describe('hairpin: a pod reaching itself through its ClusterIP', () => {
  it('masquerades to the pod gateway, and the reply comes back to the pod from the VIP', () => {
    const dp = makeDp();
    load(dp, [LOCAL_POD]);
    const syn = { src: LOCAL_POD, dst: VIP, sport: 40000, dport: 80, flags: SYN };
    const r = run(dp, buildTcp(syn));
    expect([r.verdict, r.reason]).toEqual([V_TX, 'TX_DNAT_NEW']);
    const p = sportOf(r.pkt);
    expect(inRange(p)).toBe(true);
    expect(r.pkt).toEqual(buildTcp({ ...syn, src: GW, sport: p, dst: LOCAL_POD, dport: 8080 }));
    expect(checksumsVerify(r.pkt)).toBe(true);

    const synack = { src: LOCAL_POD, dst: GW, sport: 8080, dport: p, flags: SYN | ACK };
    const back = run(dp, buildTcp(synack));
    expect([back.verdict, back.reason]).toEqual([V_TX, 'TX_REVSNAT']);
    expect(back.pkt).toEqual(
      buildTcp({ ...synack, src: VIP, sport: 80, dst: LOCAL_POD, dport: 40000 }),
    );

    const ack = run(dp, buildTcp({ ...syn, flags: ACK, data: 'GET /' }));
    expect([ack.verdict, ack.reason]).toEqual([V_TX, 'TX_DNAT']);
    expect(ack.pkt).toEqual(
      buildTcp({
        ...syn,
        flags: ACK,
        data: 'GET /',
        src: GW,
        sport: p,
        dst: LOCAL_POD,
        dport: 8080,
      }),
    );
  });

  it('keeps the client port when it lies in the SNAT range and is free', () => {
    const dp = makeDp();
    load(dp, [LOCAL_POD]);
    const r = run(dp, buildTcp({ src: LOCAL_POD, dst: VIP, sport: 61500, dport: 80, flags: SYN }));
    expect(sportOf(r.pkt)).toBe(61500);
  });

  it('does not masquerade a pod reaching another pod through the ClusterIP', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD]);
    const syn = { src: LOCAL_POD, dst: VIP, sport: 40000, dport: 80, flags: SYN };
    const r = run(dp, buildTcp(syn));
    expect(r.pkt).toEqual(buildTcp({ ...syn, dst: REMOTE_POD, dport: 8080 }));
    expect(dp.nat.snat.size).toBe(0);
  });

  it('masquerades ClusterIP traffic from outside the cluster CIDR (the node itself) to the node IP', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD]);
    const syn = { src: NODE, dst: VIP, sport: 40000, dport: 80, flags: SYN };
    const r = run(dp, buildTcp(syn));
    const p = sportOf(r.pkt);
    expect(r.pkt).toEqual(buildTcp({ ...syn, sport: p, dst: REMOTE_POD, dport: 8080 }));
    expect(inRange(p)).toBe(true);
  });
});

describe('NodePort, externalTrafficPolicy Cluster', () => {
  it('DNATs to a remote backend, masquerades to the node IP, and reverses both on the reply', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD]);
    const syn = { src: CLIENT, dst: NODE, sport: 50000, dport: 30080, flags: SYN };
    const r = run(dp, buildTcp(syn));
    expect([r.verdict, r.reason]).toEqual([V_TX, 'TX_DNAT_NEW']);
    const p = sportOf(r.pkt);
    expect(inRange(p)).toBe(true);
    expect(r.pkt).toEqual(buildTcp({ ...syn, src: NODE, sport: p, dst: REMOTE_POD, dport: 8080 }));
    const e = nat4SnatOf(dp.ct, dp.nat.snat, dp.lastCtIdx);
    expect([dp.nat.snat.natAddr(e) >>> 0, dp.nat.snat.natPort(e)]).toEqual([ip(NODE), p]);
    const reply = { src: REMOTE_POD, dst: NODE, sport: 8080, dport: p, flags: SYN | ACK };
    const back = run(dp, buildTcp(reply));
    expect(back.reason).toBe('TX_REVSNAT');
    expect(back.pkt).toEqual(
      buildTcp({ ...reply, src: NODE, sport: 30080, dst: CLIENT, dport: 50000 }),
    );
  });

  it('masquerades also when the backend is local, to the pod gateway (the interface toward it)', () => {
    const dp = makeDp();
    load(dp, [LOCAL_POD]);
    const syn = { src: CLIENT, dst: NODE, sport: 50000, dport: 30080, flags: SYN };
    const r = run(dp, buildTcp(syn));
    const p = sportOf(r.pkt);
    expect(r.pkt).toEqual(buildTcp({ ...syn, src: GW, sport: p, dst: LOCAL_POD, dport: 8080 }));
  });

  it('works for UDP, checksums included (and a zero UDP checksum stays zero)', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD], {}, 'UDP');
    const q = { src: CLIENT, dst: NODE, sport: 50000, dport: 30080, data: 'q' };
    const r = run(dp, buildUdp(q));
    const p = sportOf(r.pkt);
    expect(r.pkt).toEqual(buildUdp({ ...q, src: NODE, sport: p, dst: REMOTE_POD, dport: 8080 }));
    const a = { src: REMOTE_POD, dst: NODE, sport: 8080, dport: p, data: 'answer' };
    const back = run(dp, buildUdp(a));
    expect(back.pkt).toEqual(
      buildUdp({ ...a, src: NODE, sport: 30080, dst: CLIENT, dport: 50000 }),
    );
    const nz = run(dp, buildUdp({ ...q, sport: 50001, noCsum: true }));
    expect(get16(nz.pkt, 26)).toBe(0);
  });

  it('leaves traffic to other ports of the node IP alone', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD]);
    const r = run(dp, buildTcp({ src: CLIENT, dst: NODE, sport: 50000, dport: 22, flags: SYN }));
    expect(r.reason).toBe('PASS_NOT_SERVICE');
  });
});

describe('SNAT port allocation', () => {
  it('drops with DROP_NAT_NO_PORT when every port of the range is taken, and reuses ports of expired flows', () => {
    const dp = makeDp({ snatPortMin: 61440, snatPortMax: 61443 });
    load(dp, [REMOTE_POD], {}, 'UDP');
    const ports = new Set<number>();
    for (let k = 0; k < 4; k++) {
      const r = run(dp, buildUdp({ src: CLIENT, dst: NODE, sport: 50000 + k, dport: 30080 }));
      expect(r.verdict).toBe(V_TX);
      ports.add(sportOf(r.pkt));
    }
    expect([...ports].sort()).toEqual([61440, 61441, 61442, 61443]);
    const full = run(dp, buildUdp({ src: CLIENT, dst: NODE, sport: 50009, dport: 30080 }));
    expect([full.verdict, full.reason]).toEqual([V_DROP, 'DROP_NAT_NO_PORT']);
    expect(dp.counters[dp.lastReason]).toBe(1);
    expect(dp.ct.size).toBe(4); // the refused flow left no conntrack entry behind
    // 31 s later the unanswered UDP flows have expired: their ports are free again.
    const later = run(
      dp,
      buildUdp({ src: CLIENT, dst: NODE, sport: 50010, dport: 30080 }),
      1_000_000 + 31_000,
    );
    expect(later.verdict).toBe(V_TX);
    expect(natGcStep(dp, 1000, 1031)).toBe(3);
    expect(dp.nat.snat.size).toBe(1);
  });
});

describe('internalTrafficPolicy Local with externalTrafficPolicy Cluster (regression, issue 16)', () => {
  // kube-proxy: the ClusterIP serves this node's endpoints only, the NodePort (external traffic,
  // Cluster policy) every eligible endpoint. The NodePort key copied the ClusterIP's local slots.
  const policies = {
    internalTrafficPolicy: 'Local' as const,
    externalTrafficPolicy: 'Cluster' as const,
  };

  it('the NodePort reaches the remote endpoint when no endpoint is local', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD], policies);
    const syn = { src: CLIENT, dst: NODE, sport: 50000, dport: 30080, flags: SYN };
    const r = run(dp, buildTcp(syn));
    expect([r.verdict, r.reason]).toEqual([V_TX, 'TX_DNAT_NEW']);
    expect(r.pkt).toEqual(
      buildTcp({ ...syn, src: NODE, sport: sportOf(r.pkt), dst: REMOTE_POD, dport: 8080 }),
    );
    // the ClusterIP keeps its Local policy: no local endpoint, dropped
    const fromPod = run(
      dp,
      buildTcp({ src: LOCAL_POD, dst: VIP, sport: 40000, dport: 80, flags: SYN }),
    );
    expect(fromPod.reason).toBe('DROP_NO_LOCAL_ENDPOINTS');
  });

  it.each(['random', 'rr'])(
    'the NodePort spreads over local and remote endpoints (%s), the ClusterIP stays local',
    (sched) => {
      const dp = makeDp({ seed: 7 });
      const annotations = { 'kubetun.io/scheduler': sched };
      load(dp, [LOCAL_POD, REMOTE_POD], { ...policies, annotations });
      const seen = new Set<string>();
      for (let k = 0; k < 40; k++) {
        const syn = { src: CLIENT, dst: NODE, sport: 50000 + k, dport: 30080, flags: SYN };
        const r = run(dp, buildTcp(syn));
        expect(r.reason).toBe('TX_DNAT_NEW');
        seen.add([r.pkt[16], r.pkt[17], r.pkt[18], r.pkt[19]].join('.'));
        const toVip = { src: LOCAL_POD, dst: VIP, sport: 40000 + k, dport: 80, flags: SYN };
        const c = run(dp, buildTcp(toVip));
        expect([c.pkt[16], c.pkt[17], c.pkt[18], c.pkt[19]].join('.')).toBe(LOCAL_POD);
      }
      expect([...seen].sort()).toEqual([LOCAL_POD, REMOTE_POD].sort());
    },
  );
});

describe('externalTrafficPolicy: Local', () => {
  it('sends external clients to local endpoints only, client IP kept, no SNAT', () => {
    const dp = makeDp();
    load(dp, [LOCAL_POD, REMOTE_POD], { externalTrafficPolicy: 'Local' });
    for (let k = 0; k < 20; k++) {
      const syn = { src: CLIENT, dst: NODE, sport: 50000 + k, dport: 30080, flags: SYN };
      const r = run(dp, buildTcp(syn));
      expect(r.pkt).toEqual(buildTcp({ ...syn, dst: LOCAL_POD, dport: 8080 }));
    }
    expect(dp.nat.snat.size).toBe(0);
    const reply = { src: LOCAL_POD, dst: CLIENT, sport: 8080, dport: 50000, flags: SYN | ACK };
    expect(run(dp, buildTcp(reply)).pkt).toEqual(buildTcp({ ...reply, src: NODE, sport: 30080 }));
  });

  it('drops external clients on a node without local endpoints; pods still reach every endpoint', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD], { externalTrafficPolicy: 'Local' });
    const r = run(dp, buildTcp({ src: CLIENT, dst: NODE, sport: 50000, dport: 30080, flags: SYN }));
    expect([r.verdict, r.reason]).toEqual([V_DROP, 'DROP_ETP_NO_LOCAL_ENDPOINTS']);
    const syn = { src: LOCAL_POD, dst: NODE, sport: 40000, dport: 30080, flags: SYN };
    const fromPod = run(dp, buildTcp(syn));
    expect(fromPod.pkt).toEqual(buildTcp({ ...syn, dst: REMOTE_POD, dport: 8080 }));
  });
});

describe('the conntrack side is the same on every path (regressions)', () => {
  it('counts an externalTrafficPolicy: Local flow as a connection of an lc service', () => {
    // was: the local-scope path created its entry without lbConnOpen, so lc never saw it
    const dp = makeDp();
    load(dp, [LOCAL_POD], {
      externalTrafficPolicy: 'Local',
      annotations: { 'kubetun.io/scheduler': 'lc' },
    });
    const r = run(dp, buildTcp({ src: CLIENT, dst: NODE, sport: 50000, dport: 30080, flags: SYN }));
    expect(r.reason).toBe('TX_DNAT_NEW');
    const rn = dp.ct.revNat(dp.lastCtIdx);
    expect(dp.sched.inactive(rn, 0)).toBe(1);
  });

  it('drops an INVALID reply of a masqueraded flow when ctDropInvalid is set', () => {
    // was: replies found through the SNAT table skipped the INVALID check
    const dp = makeDp({ ctDropInvalid: true });
    load(dp, [REMOTE_POD]);
    const syn = run(
      dp,
      buildTcp({ src: CLIENT, dst: NODE, sport: 50000, dport: 30080, flags: SYN }),
    );
    const p = sportOf(syn.pkt);
    // a bare ACK answering a SYN (no SYN+ACK yet) is INVALID in SYN_SENT
    const ack = { src: REMOTE_POD, dst: NODE, sport: 8080, dport: p, flags: ACK };
    const r = run(dp, buildTcp(ack));
    expect([r.verdict, r.reason]).toEqual([V_DROP, 'DROP_CT_INVALID']);
    // a proper SYN+ACK still goes back to the client
    const synack = run(dp, buildTcp({ ...ack, flags: SYN | ACK }));
    expect(synack.reason).toBe('TX_REVSNAT');
  });
});

describe('LoadBalancer and externalIPs', () => {
  const LB = '172.30.0.200';
  it('masquerades LoadBalancer traffic and enforces loadBalancerSourceRanges', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD], {
      type: 'LoadBalancer',
      loadBalancerIPs: [LB],
      loadBalancerSourceRanges: ['172.30.0.96/28'],
    });
    const syn = { src: CLIENT, dst: LB, sport: 50000, dport: 80, flags: SYN };
    const r = run(dp, buildTcp(syn));
    const p = sportOf(r.pkt);
    expect(r.pkt).toEqual(buildTcp({ ...syn, src: NODE, sport: p, dst: REMOTE_POD, dport: 8080 }));
    const back = run(
      dp,
      buildTcp({ src: REMOTE_POD, dst: NODE, sport: 8080, dport: p, flags: ACK }),
    );
    expect(back.pkt).toEqual(
      buildTcp({ src: LB, dst: CLIENT, sport: 80, dport: 50000, flags: ACK }),
    );
    const out = run(dp, buildTcp({ ...syn, src: '172.30.0.50' }));
    expect([out.verdict, out.reason]).toEqual([V_DROP, 'DROP_SOURCE_RANGE']);
    // The NodePort of the same service has no source ranges (kube-proxy: KUBE-FW is per LB IP).
    expect(run(dp, buildTcp({ ...syn, src: '172.30.0.50', dst: NODE, dport: 30080 })).verdict).toBe(
      V_TX,
    );
  });

  it("keeps a service's source ranges through partial writes of other services, and drops them with it", () => {
    const dp = makeDp();
    const lb = { type: 'LoadBalancer' as const, loadBalancerIPs: [LB] };
    load(dp, [REMOTE_POD], { ...lb, loadBalancerSourceRanges: ['172.30.0.96/28'] });
    const syn = { src: '172.30.0.50', dst: LB, sport: 50000, dport: 80, flags: SYN };
    const eps = [endpoint(`${REMOTE_POD}:8080`)];
    const other = servicePort(service('other', '10.96.0.11', lb), 81, 'TCP', eps, 'http');
    other.port.nodePort = 30081;
    const loader = loaderOf(dp);
    loader.update([other], [], { nodeName: 'node1' });
    expect(run(dp, buildTcp(syn)).reason).toBe('DROP_SOURCE_RANGE');
    loader.update([], [other.servicePortName], { nodeName: 'node1' });
    expect(run(dp, buildTcp(syn)).reason).toBe('DROP_SOURCE_RANGE');
    // written again without ranges, the same client is served
    load(dp, [REMOTE_POD], lb);
    expect(run(dp, buildTcp(syn)).verdict).toBe(V_TX);
  });

  it('serves spec.externalIPs like an external destination', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD], { type: 'ClusterIP', externalIPs: ['192.0.2.7'] });
    const syn = { src: CLIENT, dst: '192.0.2.7', sport: 50000, dport: 80, flags: SYN };
    const r = run(dp, buildTcp(syn));
    expect(r.pkt).toEqual(
      buildTcp({ ...syn, src: NODE, sport: sportOf(r.pkt), dst: REMOTE_POD, dport: 8080 }),
    );
    // type ClusterIP: no NodePort frontend
    expect(run(dp, buildTcp({ ...syn, dst: NODE, dport: 30080 })).reason).toBe('PASS_NOT_SERVICE');
  });

  it('rejects a bad source range naming the object and field, before touching the maps', () => {
    const dp = makeDp();
    expect(() =>
      load(dp, [REMOTE_POD], { type: 'LoadBalancer', loadBalancerSourceRanges: ['10.0.0.0/33'] }),
    ).toThrow(/Service default\/web: spec\.loadBalancerSourceRanges\[0\]/);
    expect(dp.svc.size).toBe(0);
  });

  it('removes the external frontends when the service goes', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD], { type: 'LoadBalancer', loadBalancerIPs: [LB] });
    loaderOf(dp).load([], { nodeName: 'node1' });
    expect(dp.svc.size).toBe(0);
    expect(ip(LB)).toBeGreaterThan(0);
  });
});

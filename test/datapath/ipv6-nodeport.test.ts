// IPv6 NodePort, external IPs, LoadBalancer with source ranges, externalTrafficPolicy Local,
// hairpin: masquerade (NAT66 of the source) to the node's IPv6 address or the pod gateway, from
// the IPv6 SNAT port range, every rewrite checked byte for byte against harness6's packets.
//
//   node1 fd00:172:30::11, pod CIDR fd00:10:244:1::/64 (gateway fd00:10:244:1::1), cluster
//   CIDR fd00:10:244::/56; web [fd00:10:96::a]:80/TCP nodePort 30080; client 2001:db8:7::100

import { describe, expect, it } from 'vitest';
import { natGcStep } from '../../src/datapath/stages/nat-gc.ts';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { V_TX } from '../../src/datapath/state/verdict.ts';
import type { Service } from '../../src/model.ts';
import { ACK, loaderOf, run, SYN } from './harness.ts';
import { buildIcmp6, buildTcp6, buildUdp6, l4Of, servicePort6 } from './harness6.ts';

const NODE = 'fd00:172:30::11';
const GW = 'fd00:10:244:1::1';
const CLIENT = '2001:db8:7::100';
const VIP = 'fd00:10:96::a';
const LOCAL_POD = 'fd00:10:244:1::2';
const REMOTE_POD = 'fd00:10:244:2::2';
const T0 = 1_000_000;

function makeDp(over: Record<string, unknown> = {}): Datapath {
  return createDatapath({
    seed: 1,
    nodeIp6: NODE,
    podGateway6: GW,
    podCidr6: 'fd00:10:244:1::/64',
    clusterCidr6: 'fd00:10:244::/56',
    // the IPv4 range elsewhere: the IPv6 one is its own
    snat6PortMin: 0xe000,
    snat6PortMax: 0xe3ff,
    ...over,
  });
}

function load(
  dp: Datapath,
  backends: string[],
  over: Partial<Service> = {},
  proto: 'TCP' | 'UDP' = 'TCP',
): void {
  const rsp = servicePort6(
    'web',
    VIP,
    80,
    proto,
    backends.map((b) => `[${b}]:8080`),
    { type: 'NodePort', ...over },
  );
  rsp.port.nodePort = 30080;
  for (const e of rsp.endpoints6 ?? [])
    e.nodeName = e.ip.startsWith('fd00:10:244:1:') ? 'node1' : 'node2';
  loaderOf(dp).load([rsp], { nodeName: 'node1' });
}

const sportOf = (p: Uint8Array) => (p[l4Of(p)] << 8) | p[l4Of(p) + 1];
const inRange = (p: number) => p >= 0xe000 && p <= 0xe3ff;

describe('IPv6 NodePort, externalTrafficPolicy Cluster', () => {
  it('DNATs, masquerades to the node IPv6 address, and reverses both on the reply', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD]);
    const syn = { src: CLIENT, dst: NODE, sport: 50000, dport: 30080, flags: SYN };
    const r = run(dp, buildTcp6(syn), T0);
    expect([r.verdict, r.reason]).toEqual([V_TX, 'TX_DNAT_NEW']);
    const p = sportOf(r.pkt);
    expect(inRange(p)).toBe(true);
    expect([...r.pkt]).toEqual([
      ...buildTcp6({ ...syn, src: NODE, sport: p, dst: REMOTE_POD, dport: 8080 }),
    ]);
    expect([dp.nat.snat6.size, dp.nat.snat.size]).toEqual([1, 0]);
    const reply = { src: REMOTE_POD, dst: NODE, sport: 8080, dport: p, flags: SYN | ACK };
    const back = run(dp, buildTcp6(reply), T0);
    expect(back.reason).toBe('TX_REVSNAT');
    expect([...back.pkt]).toEqual([
      ...buildTcp6({ ...reply, src: NODE, sport: 30080, dst: CLIENT, dport: 50000 }),
    ]);
    const ack = run(dp, buildTcp6({ ...syn, flags: ACK }), T0);
    expect(ack.reason).toBe('TX_DNAT');
    expect([...ack.pkt]).toEqual([
      ...buildTcp6({ ...syn, flags: ACK, src: NODE, sport: p, dst: REMOTE_POD, dport: 8080 }),
    ]);
  });

  it('masquerades to the pod gateway toward a local backend; UDP too', () => {
    const dp = makeDp();
    load(dp, [LOCAL_POD], {}, 'UDP');
    const q = { src: CLIENT, dst: NODE, sport: 50000, dport: 30080, data: 'q' };
    const r = run(dp, buildUdp6(q), T0);
    const p = sportOf(r.pkt);
    expect([...r.pkt]).toEqual([
      ...buildUdp6({ ...q, src: GW, sport: p, dst: LOCAL_POD, dport: 8080 }),
    ]);
    const a = { src: LOCAL_POD, dst: GW, sport: 8080, dport: p, data: 'answer' };
    expect([...run(dp, buildUdp6(a), T0).pkt]).toEqual([
      ...buildUdp6({ ...a, src: NODE, sport: 30080, dst: CLIENT, dport: 50000 }),
    ]);
  });

  it('a Packet Too Big about a masqueraded packet goes back to the client, quote translated', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD]);
    const orig = buildTcp6({
      src: CLIENT,
      dst: NODE,
      sport: 50000,
      dport: 30080,
      flags: SYN,
      data: 'x'.repeat(40),
    });
    const r = run(dp, orig.slice(), T0);
    const ptb = buildIcmp6({ src: 'fd00:10:244:2::fe', dst: NODE }, 2, 0, 1280, r.pkt);
    const back = run(dp, ptb, T0);
    expect(back.reason).toBe('TX_ICMP_ERR_REVNAT');
    expect([...back.pkt]).toEqual([...buildIcmp6({ src: NODE, dst: CLIENT }, 2, 0, 1280, orig)]);
  });

  it('without nodeIp6 there is no IPv6 NodePort (the IPv4 one is not an IPv6 address)', () => {
    const dp = makeDp({ nodeIp6: '', podGateway6: '' });
    load(dp, [REMOTE_POD]);
    const r = run(
      dp,
      buildTcp6({ src: CLIENT, dst: NODE, sport: 50000, dport: 30080, flags: SYN }),
      T0,
    );
    expect(r.reason).toBe('PASS_NOT_SERVICE');
  });

  it('the SNAT table of flows conntrack no longer has is collected (natGcStep, IPv6 too)', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD], {}, 'UDP');
    for (let k = 0; k < 3; k++)
      run(dp, buildUdp6({ src: CLIENT, dst: NODE, sport: 50000 + k, dport: 30080 }), T0);
    expect(dp.nat.snat6.size).toBe(3);
    expect(natGcStep(dp, 1000, Math.floor(T0 / 1000) + 31)).toBe(3); // UDP: 30 s unreplied
    expect(dp.nat.snat6.size).toBe(0);
  });
});

describe('ClusterIP masquerade and hairpin over IPv6', () => {
  it('a pod reaching itself through the VIP is masqueraded to the gateway', () => {
    const dp = makeDp();
    load(dp, [LOCAL_POD]);
    const syn = { src: LOCAL_POD, dst: VIP, sport: 40000, dport: 80, flags: SYN };
    const r = run(dp, buildTcp6(syn), T0);
    const p = sportOf(r.pkt);
    expect([...r.pkt]).toEqual([
      ...buildTcp6({ ...syn, src: GW, sport: p, dst: LOCAL_POD, dport: 8080 }),
    ]);
    const back = run(
      dp,
      buildTcp6({ src: LOCAL_POD, dst: GW, sport: 8080, dport: p, flags: SYN | ACK }),
      T0,
    );
    expect([...back.pkt]).toEqual([
      ...buildTcp6({ src: VIP, dst: LOCAL_POD, sport: 80, dport: 40000, flags: SYN | ACK }),
    ]);
  });

  it('pod to pod is not masqueraded; the node itself is (outside the cluster CIDR)', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD]);
    const pod = { src: LOCAL_POD, dst: VIP, sport: 40000, dport: 80, flags: SYN };
    expect([...run(dp, buildTcp6(pod), T0).pkt]).toEqual([
      ...buildTcp6({ ...pod, dst: REMOTE_POD, dport: 8080 }),
    ]);
    const node = { src: NODE, dst: VIP, sport: 40000, dport: 80, flags: SYN };
    const r = run(dp, buildTcp6(node), T0);
    expect(inRange(sportOf(r.pkt))).toBe(true);
    expect([...r.pkt]).toEqual([
      ...buildTcp6({ ...node, sport: sportOf(r.pkt), dst: REMOTE_POD, dport: 8080 }),
    ]);
  });
});

describe('IPv6 external IPs, LoadBalancer IPs and source ranges, externalTrafficPolicy Local', () => {
  const lb = {
    type: 'LoadBalancer' as const,
    externalIPs: ['2001:db8:e::9'],
    loadBalancerIPs: ['2001:db8:e::10'],
    loadBalancerSourceRanges: ['2001:db8:7::/48'],
  };

  it('serves the external IP to anyone and the LB IP only to clients in the ranges', () => {
    const dp = makeDp();
    load(dp, [REMOTE_POD], lb);
    const to = (dst: string, src: string, sport: number) =>
      run(dp, buildTcp6({ src, dst, sport, dport: 80, flags: SYN }), T0).reason;
    expect(to('2001:db8:e::9', '2001:db9::1', 1)).toBe('TX_DNAT_NEW');
    expect(to('2001:db8:e::10', CLIENT, 2)).toBe('TX_DNAT_NEW');
    expect(to('2001:db8:e::10', '2001:db8:8::1', 3)).toBe('DROP_SOURCE_RANGE');
  });

  it('externalTrafficPolicy Local: an external client reaches a local endpoint, its address kept', () => {
    const dp = makeDp();
    load(dp, [LOCAL_POD, REMOTE_POD], { externalTrafficPolicy: 'Local' });
    for (let k = 0; k < 8; k++) {
      const syn = { src: CLIENT, dst: NODE, sport: 50000 + k, dport: 30080, flags: SYN };
      const r = run(dp, buildTcp6(syn), T0);
      expect([...r.pkt]).toEqual([...buildTcp6({ ...syn, dst: LOCAL_POD, dport: 8080 })]);
    }
    expect(dp.nat.snat6.size).toBe(0);
    const none = makeDp();
    load(none, [REMOTE_POD], { externalTrafficPolicy: 'Local' });
    const r = run(
      none,
      buildTcp6({ src: CLIENT, dst: NODE, sport: 1, dport: 30080, flags: SYN }),
      T0,
    );
    expect(r.reason).toBe('DROP_ETP_NO_LOCAL_ENDPOINTS');
  });
});

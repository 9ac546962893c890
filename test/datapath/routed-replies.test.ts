// Replies routed into the TUN (DatapathConfig.routedReplies, src/node/steer-replies.ts): the
// kernel forwarded them into the TUN, spending one TTL, and forwards them again once reverse-NATed;
// the program gives the first back so the client sees kube-proxy's single pass. Every packet is
// compared byte for byte with one built from scratch (own checksums), so a TTL without its header
// checksum, or a TTL given back where it must not be, fails.
//
//   pod 10.244.1.5:40000 ─▶ VIP 10.96.0.10:80 ─DNAT─▶ 10.244.2.7:8080 (no masquerade)
//   reply arrives routed: TTL 63 ─▶ revNAT, TTL 64 (given back) ─▶ written, forwarded: 63
//   node 172.30.0.11 ─▶ VIP, masqueraded: its reply came by tc to the SNAT port: TTL unchanged
//   a reply to the node's own address (not routed, tc): TTL unchanged
import { describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { V_TX } from '../../src/datapath/state/verdict.ts';
import { ipv4ToU32 } from '../../src/wire/addr.ts';
import {
  ACK,
  buildIcmp,
  buildIpv4,
  buildTcp,
  buildUdp,
  checksumsVerify,
  endpoint,
  get16,
  loaderOf,
  run,
  SYN,
  service,
  servicePort,
  UDP,
} from './harness.ts';
import { buildTcp6, buildUdp6, servicePort6 } from './harness6.ts';

const NODE = '172.30.0.11';
const GW = '10.244.1.1';
const POD = '10.244.1.5';
const VIP = '10.96.0.10';
const BE = '10.244.2.7';

function makeDp(routedReplies: boolean): Datapath {
  const dp = createDatapath({
    seed: 1,
    routedReplies,
    nodeIp: ipv4ToU32(NODE),
    podGateway: ipv4ToU32(GW),
    podCidr: '10.244.1.0/24',
    clusterCidr: '10.244.0.0/16',
  });
  const svc = service('web', VIP);
  const tcp = servicePort(svc, 80, 'TCP', [endpoint(`${BE}:8080`)], 'http');
  const udp = servicePort(svc, 53, 'UDP', [endpoint(`${BE}:5353`)], 'dns');
  loaderOf(dp).load([tcp, udp], { nodeName: 'node1' });
  return dp;
}

const syn = { src: POD, dst: VIP, sport: 40000, dport: 80, flags: SYN };
const synack = { src: BE, dst: POD, sport: 8080, dport: 40000, flags: SYN | ACK, ttl: 63 };

describe('routed replies get back the TTL their way into the TUN took', () => {
  it('a reverse-NATed reply to a pod: TTL + 1, header checksum right', () => {
    const dp = makeDp(true);
    expect(run(dp, buildTcp(syn)).reason).toBe('TX_DNAT_NEW');
    const r = run(dp, buildTcp(synack));
    expect([r.verdict, r.reason]).toEqual([V_TX, 'TX_REVNAT']);
    expect(r.pkt).toEqual(buildTcp({ ...synack, src: VIP, sport: 80, ttl: 64 }));
    expect(checksumsVerify(r.pkt)).toBe(true);
  });

  it('not without routedReplies (offline: a capture, a test), and never past 255', () => {
    const dp = makeDp(false);
    run(dp, buildTcp(syn));
    expect(run(dp, buildTcp(synack)).pkt).toEqual(buildTcp({ ...synack, src: VIP, sport: 80 }));
    const on = makeDp(true);
    run(on, buildTcp(syn));
    const top = { ...synack, ttl: 255 };
    expect(run(on, buildTcp(top)).pkt).toEqual(buildTcp({ ...top, src: VIP, sport: 80 }));
  });

  it("not for a masqueraded flow's reply (tc took it to the SNAT port, before routing)", () => {
    const dp = makeDp(true);
    const fromNode = { src: NODE, dst: VIP, sport: 41000, dport: 80, flags: SYN };
    const out = run(dp, buildTcp(fromNode));
    expect(out.reason).toBe('TX_DNAT_NEW');
    const snat = get16(out.pkt, 20);
    const reply = { src: BE, dst: NODE, sport: 8080, dport: snat, flags: SYN | ACK, ttl: 63 };
    const r = run(dp, buildTcp(reply));
    expect(r.reason).toBe('TX_REVSNAT');
    expect(r.pkt).toEqual(
      buildTcp({ ...reply, src: VIP, sport: 80, dst: NODE, dport: 41000, ttl: 63 }),
    );
  });

  it('an ICMP error about the flow, reverse-NATed: its outer TTL too', () => {
    const dp = makeDp(true);
    const q = buildUdp({ src: POD, dst: VIP, sport: 40001, dport: 53, data: 'who' });
    const fwd = run(dp, q).pkt; // as it left: DNATed to the backend
    const quote = fwd.slice(0, 28);
    const err = buildIcmp({ src: BE, dst: POD, ttl: 63 }, 3, 3, 0, quote);
    const r = run(dp, err);
    expect(r.reason).toBe('TX_ICMP_ERR_REVNAT');
    expect(r.pkt[8]).toBe(64);
    expect(checksumsVerify(r.pkt)).toBe(true);
    const off = makeDp(false);
    run(off, q);
    expect(run(off, err).pkt[8]).toBe(63);
  });

  it('a fragmented reply: every later fragment as its first (UDP)', () => {
    const dp = makeDp(true);
    run(dp, buildUdp({ src: POD, dst: VIP, sport: 40002, dport: 53, data: 'big' }));
    // the backend's 1480 + 20 bytes of reply, fragmented: the first with the UDP header
    const data = 'x'.repeat(1500);
    const whole = buildUdp({ src: BE, dst: POD, sport: 5353, dport: 40002, data, ttl: 63 });
    const l4 = whole.slice(20);
    const first = buildIpv4(
      { src: BE, dst: POD, ttl: 63, id: 77, mf: true },
      UDP,
      l4.slice(0, 1480),
    );
    const later = buildIpv4(
      { src: BE, dst: POD, ttl: 63, id: 77, fragOffset: 185 },
      UDP,
      l4.slice(1480),
    );
    const a = run(dp, first);
    const b = run(dp, later);
    expect([a.reason, b.reason]).toEqual(['TX_REVNAT', 'TX_FRAG']);
    expect([a.pkt[8], b.pkt[8]]).toEqual([64, 64]);
    expect(b.pkt).toEqual(
      buildIpv4({ src: VIP, dst: POD, ttl: 64, id: 77, fragOffset: 185 }, UDP, l4.slice(1480)),
    );
  });
});

describe('IPv6: the hop limit', () => {
  const C6 = 'fd00:10:244:1::5';
  const VIP6 = 'fd00:10:96::a';
  const BE6 = 'fd00:10:244:2::7';
  const NODE6 = 'fd00:172:30::b';

  function dp6(routedReplies: boolean): Datapath {
    const dp = createDatapath({ seed: 1, routedReplies, nodeIp6: NODE6 });
    const tcp = servicePort6('web', VIP6, 80, 'TCP', [`[${BE6}]:8080`]);
    const udp = servicePort6('dns', VIP6, 53, 'UDP', [`[${BE6}]:5353`]);
    loaderOf(dp).load([tcp, udp]);
    return dp;
  }

  it('a reverse-NATed reply to a pod: hop limit + 1; to the node itself: unchanged', () => {
    const dp = dp6(true);
    const s = { src: C6, dst: VIP6, sport: 40000, dport: 80, flags: SYN };
    expect(run(dp, buildTcp6(s)).reason).toBe('TX_DNAT_NEW');
    const sa = { src: BE6, dst: C6, sport: 8080, dport: 40000, flags: SYN | ACK, hlim: 63 };
    const r = run(dp, buildTcp6(sa));
    expect(r.reason).toBe('TX_REVNAT');
    expect(r.pkt).toEqual(buildTcp6({ ...sa, src: VIP6, sport: 80, hlim: 64 }));
    // the node's own flow, not masqueraded (no IPv6 cluster CIDR): its reply came by tc
    const q = { src: NODE6, dst: VIP6, sport: 41000, dport: 53 };
    expect(run(dp, buildUdp6(q)).reason).toBe('TX_DNAT_NEW');
    const a = { src: BE6, dst: NODE6, sport: 5353, dport: 41000, hlim: 63 };
    const back = run(dp, buildUdp6(a));
    expect(back.reason).toBe('TX_REVNAT');
    expect(back.pkt).toEqual(buildUdp6({ ...a, src: VIP6, sport: 53 }));
    const off = dp6(false);
    run(off, buildTcp6(s));
    expect(run(off, buildTcp6(sa)).pkt).toEqual(buildTcp6({ ...sa, src: VIP6, sport: 80 }));
  });
});

// Issue 18, point 4: what the kernel refuses is never translated. Martian sources toward a
// service are dropped under their own reasons; a first packet with a bad TCP/UDP checksum is
// conntrack INVALID and creates no flow (nf_conntrack_checksum=1); a TTL that runs out toward
// a VIP is answered with time exceeded quoting the packet to the VIP, as the kernel does after
// its NAT — never the backend.
import { beforeEach, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { dpProcess } from '../../src/datapath/program.ts';
import { REASON_NAMES } from '../../src/datapath/state/reasons.ts';
import { V_DROP, V_REPLY, V_TX } from '../../src/datapath/state/verdict.ts';
import {
  ACK,
  buildIcmp,
  buildIpv4,
  buildTcp,
  buildUdp,
  checksumsVerify,
  endpoint,
  get16,
  get32,
  ip,
  loaderOf,
  run,
  SYN,
  service,
  servicePort,
} from './harness.ts';

const CLIENT = '10.244.1.10';
const VIP = '10.96.0.10';
const OTHER_VIP = '10.96.0.11';
const BACKEND = '10.244.2.2';
const NODE_IP = '10.250.0.2';

let dp: Datapath;

beforeEach(() => {
  dp = createDatapath({
    seed: 7,
    nodeIp: ip(NODE_IP),
    podCidr: '10.244.1.0/24',
    clusterCidr: '10.244.0.0/16',
  });
  loaderOf(dp).load([
    servicePort(service('web', VIP), 80, 'TCP', [endpoint(`${BACKEND}:8080`)], 'http'),
    servicePort(service('dns', OTHER_VIP), 53, 'UDP', [endpoint(`${BACKEND}:5353`)], 'dns'),
  ]);
});

const syn = (src: string, o: { ttl?: number; sport?: number } = {}) =>
  buildTcp({ src, dst: VIP, sport: o.sport ?? 41000, dport: 80, flags: SYN, ttl: o.ttl });

describe('martian sources toward a service', () => {
  const martians: [string, string][] = [
    ['0.0.0.0', 'DROP_MARTIAN_ZERONET'],
    ['0.1.2.3', 'DROP_MARTIAN_ZERONET'],
    ['127.0.0.1', 'DROP_MARTIAN_LOOPBACK'],
    ['127.255.0.9', 'DROP_MARTIAN_LOOPBACK'],
    ['224.0.0.5', 'DROP_MARTIAN_MULTICAST'],
    ['239.255.255.250', 'DROP_MARTIAN_MULTICAST'],
    ['240.0.0.1', 'DROP_MARTIAN_CLASS_E'],
    ['255.255.255.254', 'DROP_MARTIAN_CLASS_E'],
    ['255.255.255.255', 'DROP_MARTIAN_BROADCAST'],
    [VIP, 'DROP_MARTIAN_VIP_SOURCE'],
    [OTHER_VIP, 'DROP_MARTIAN_VIP_SOURCE'],
  ];

  it('are dropped, each under its own reason, and never create a flow', () => {
    for (const [src, reason] of martians) {
      const r = run(dp, syn(src));
      expect([src, r.verdict, r.reason]).toEqual([src, V_DROP, reason]);
    }
    const udp = run(dp, buildUdp({ src: '127.0.0.1', dst: OTHER_VIP, sport: 9, dport: 53 }));
    expect(udp.reason).toBe('DROP_MARTIAN_LOOPBACK');
    expect(dp.ct.size).toBe(0);
    expect(dp.nat.snat.size).toBe(0); // nothing masqueraded either
  });

  it('an unused port of a VIP sends no port unreachable to a martian source', () => {
    const r = run(dp, buildTcp({ src: '127.0.0.1', dst: VIP, sport: 1, dport: 443, flags: SYN }));
    expect([r.verdict, r.reason, r.out.length]).toEqual([V_DROP, 'DROP_MARTIAN_LOOPBACK', 0]);
  });

  it('a real client, and packets not toward a service, are untouched by the check', () => {
    expect(run(dp, syn(CLIENT)).reason).toBe('TX_DNAT_NEW');
    const pass = run(
      dp,
      buildTcp({ src: '127.0.0.1', dst: '10.244.1.20', sport: 1, dport: 2, flags: SYN }),
    );
    expect(pass.reason).toBe('PASS_NOT_SERVICE'); // the kernel's own rules decide
  });
});

describe('a bad TCP/UDP checksum on the first packet', () => {
  function corrupt(p: Uint8Array): Uint8Array {
    const q = p.slice();
    q[q.length - 1] ^= 0x5a; // payload byte: the L4 checksum no longer verifies
    return q;
  }

  it('is INVALID: dropped, counted, and no flow is created (TCP and UDP)', () => {
    const bad = corrupt(
      buildTcp({ src: CLIENT, dst: VIP, sport: 41000, dport: 80, flags: SYN, data: 'x' }),
    );
    const r = run(dp, bad);
    expect([r.verdict, r.reason]).toEqual([V_DROP, 'DROP_BAD_L4_CSUM']);
    const u = run(
      dp,
      corrupt(buildUdp({ src: CLIENT, dst: OTHER_VIP, sport: 5000, dport: 53, data: 'q' })),
    );
    expect([u.verdict, u.reason]).toEqual([V_DROP, 'DROP_BAD_L4_CSUM']);
    expect(dp.ct.size).toBe(0);
    expect(dp.ctInvalid).toBe(2);
  });

  it('a UDP checksum of 0 (none) is valid; a partial or verified checksum (offloads) is trusted', () => {
    const none = buildUdp({
      src: CLIENT,
      dst: OTHER_VIP,
      sport: 5001,
      dport: 53,
      data: 'q',
      noCsum: true,
    });
    expect(run(dp, none).reason).toBe('TX_DNAT_NEW');
    const bad = corrupt(
      buildTcp({ src: CLIENT, dst: VIP, sport: 41001, dport: 80, flags: SYN, data: 'x' }),
    );
    const v = dpProcess(dp, bad, 0, bad.length, 1_000_000, 1, 0, 1);
    expect([v, REASON_NAMES[dp.lastReason]]).toEqual([V_TX, 'TX_DNAT_NEW']);
  });
});

describe('TTL <= 1 toward a VIP', () => {
  /** What the kernel sends: 11/0 from the VIP, quoting the client's packet to the VIP. */
  function expectedTimeExceeded(orig: Uint8Array): Uint8Array {
    const icmp = buildIcmp({ src: '0.0.0.0', dst: '0.0.0.0' }, 11, 0, 0, orig);
    return buildIpv4({ src: VIP, dst: CLIENT, ttl: 64, id: 0, tos: 0xc0 }, 1, icmp.subarray(20));
  }

  it('a SYN with TTL 1 (or 0) gets time exceeded quoting the VIP, and creates no flow', () => {
    for (const ttl of [1, 0]) {
      const p = syn(CLIENT, { ttl });
      const r = run(dp, p);
      expect([r.verdict, r.reason]).toEqual([V_REPLY, 'REPLY_TTL_EXCEEDED']);
      expect(r.out).toEqual(expectedTimeExceeded(p));
      expect(checksumsVerify(r.out)).toBe(true);
      // the quote names the VIP and its port, never the backend
      expect(get32(r.out, 28 + 16)).toBe(ip(VIP));
      expect(get16(r.out, 28 + 20 + 2)).toBe(80);
    }
    expect(dp.ct.size).toBe(0);
  });

  it('a packet of an established flow with TTL 1 is answered the same way; TTL 2 is forwarded', () => {
    expect(run(dp, syn(CLIENT)).reason).toBe('TX_DNAT_NEW');
    const ack = (ttl: number) =>
      buildTcp({ src: CLIENT, dst: VIP, sport: 41000, dport: 80, flags: ACK, ttl });
    const r = run(dp, ack(1));
    expect([r.verdict, r.reason]).toEqual([V_REPLY, 'REPLY_TTL_EXCEEDED']);
    expect(get32(r.out, 28 + 16)).toBe(ip(VIP));
    expect(run(dp, ack(2)).reason).toBe('TX_DNAT');
  });

  it('a hairpinning pod (its own Service, its own address the only endpoint) gets it too, quoting the VIP', () => {
    // the probe: lost for a hairpinning pod. The answer goes back to the pod itself, from the
    // VIP, quoting pod -> VIP:80 — not a masqueraded or DNATed copy of it
    const p = buildTcp({ src: BACKEND, dst: VIP, sport: 41003, dport: 80, flags: SYN, ttl: 1 });
    const r = run(dp, p);
    expect([r.verdict, r.reason]).toEqual([V_REPLY, 'REPLY_TTL_EXCEEDED']);
    const icmp = buildIcmp({ src: '0.0.0.0', dst: '0.0.0.0' }, 11, 0, 0, p);
    const want = buildIpv4(
      { src: VIP, dst: BACKEND, ttl: 64, id: 0, tos: 0xc0 },
      1,
      icmp.subarray(20),
    );
    expect(r.out).toEqual(want);
    expect(checksumsVerify(r.out)).toBe(true);
    expect(dp.ct.size).toBe(0);
  });

  it('node-originated packets are exempt (the kernel does not decrement its own)', () => {
    const p = buildTcp({ src: NODE_IP, dst: VIP, sport: 41002, dport: 80, flags: SYN, ttl: 1 });
    expect(run(dp, p).verdict).toBe(V_TX);
  });
});

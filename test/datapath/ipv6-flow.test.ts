// IPv6 through a ClusterIP, byte for byte (issue 19 point 2): every rewritten or generated
// packet must equal one built from scratch by harness6.ts (own address parser, own checksum
// over the IPv6 pseudo-header), so a stale checksum word or a wrong address word fails.
//
//   client fd00:10:244:1::5:40000 ──▶ VIP [fd00:10:96::a]:80 ──DNAT──▶ [fd00:10:244:2::7]:8080
//   client fd00:10:244:1::5:40000 ◀── VIP [fd00:10:96::a]:80 ◀─revNAT─ [fd00:10:244:2::7]:8080
//
// Also: UDP and SCTP, conntrack states and lifetimes (the same table as IPv4), extension
// headers in front of the upper layer, every scheduler kind picking over IPv6 backends,
// sessionAffinity ClientIP, the ICMPv6 rejects (port unreachable code 4, the kernel's own
// bytes from test/fixtures/ipv6-linux-6.18.pcap), time exceeded for hop limit <= 1, echo and
// other ICMPv6 to a VIP, martian sources, Neighbor Discovery and MLD, malformed packets.

import { describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { ctTcpState } from '../../src/datapath/state/ct-state.ts';
import { V_DROP, V_PASS, V_REPLY, V_TX } from '../../src/datapath/state/verdict.ts';
import { ctStateName } from '../../src/inspect/ct-state.ts';
import { ipv6ToWords } from '../../src/wire/addr6.ts';
import { ipv6LinuxCapture } from '../fixtures/ipv6-capture.ts';
import { ACK, FIN, loaderOf, put16, refCrc32c, run, SYN, TCP, UDP } from './harness.ts';
import {
  buildIcmp6,
  buildIpv6,
  buildSctp6,
  buildTcp6,
  buildUdp6,
  DSTOPTS,
  HOPOPTS,
  ip6,
  l6CsumVerifies,
  servicePort6,
  tuple6,
} from './harness6.ts';

const CLIENT = 'fd00:10:244:1::5';
const VIP = 'fd00:10:96::a';
const BE = 'fd00:10:244:2::7';
const T0 = 5_000_000;
const SEC = Math.floor(T0 / 1000);

function web(dp: Datapath, backends = [`[${BE}]:8080`], over = {}): void {
  loaderOf(dp).load([servicePort6('web', VIP, 80, 'TCP', backends, over)]);
}

const syn = (sport = 40000, o = {}) =>
  buildTcp6({ src: CLIENT, dst: VIP, sport, dport: 80, flags: SYN, data: 'hello', ...o });

function ct6(dp: Datapath, sport = 40000, proto = TCP): number {
  const a = new Int32Array(8);
  a.set(ipv6ToWords(CLIENT), 0);
  a.set(ipv6ToWords(VIP), 4);
  return dp.ct6.lookupOrig6(proto, a, 0, 4, sport, proto === TCP ? 80 : 53);
}

describe('ClusterIP over IPv6: TCP', () => {
  it('DNATs the SYN, reverse-NATs the SYN-ACK, DNATs the ACK: exact bytes, one flow', () => {
    const dp = createDatapath({ seed: 1 });
    web(dp);
    const r1 = run(dp, syn(), T0);
    expect([r1.verdict, r1.reason]).toEqual([V_TX, 'TX_DNAT_NEW']);
    const want1 = buildTcp6({
      src: CLIENT,
      dst: BE,
      sport: 40000,
      dport: 8080,
      flags: SYN,
      data: 'hello',
    });
    expect([...r1.pkt]).toEqual([...want1]);
    const sa = { sport: 8080, dport: 40000, flags: SYN | ACK, seq: 7 };
    const r2 = run(dp, buildTcp6({ src: BE, dst: CLIENT, ...sa }), T0 + 1);
    expect(r2.reason).toBe('TX_REVNAT');
    expect([...r2.pkt]).toEqual([...buildTcp6({ src: VIP, dst: CLIENT, ...sa, sport: 80 })]);
    const r3 = run(dp, syn(40000, { flags: ACK }), T0 + 2);
    expect(r3.reason).toBe('TX_DNAT');
    expect(tuple6(r3.pkt)).toBe(`[${CLIENT}]:40000 > [${BE}]:8080`);
    expect(dp.ct6.size).toBe(1);
    expect(dp.ct.size).toBe(0); // the IPv4 table is not touched
    const i = ct6(dp);
    expect(ctStateName(TCP, dp.ct6.flags(i))).toBe('ESTABLISHED');
    expect(dp.ct6.expires(i) - SEC).toBe(86400); // kube-proxy's established lifetime
    expect([dp.ct6.pktsOrig(i), dp.ct6.pktsReply(i)]).toEqual([2, 1]);
  });

  it('follows the close with the IPv4 state table and lifetimes', () => {
    const dp = createDatapath({ seed: 1 });
    web(dp);
    run(dp, syn(), T0);
    const i = ct6(dp);
    expect([ctStateName(TCP, dp.ct6.flags(i)), dp.ct6.expires(i) - SEC]).toEqual(['SYN_SENT', 120]);
    run(dp, buildTcp6({ src: BE, dst: CLIENT, sport: 8080, dport: 40000, flags: SYN | ACK }), T0);
    run(dp, syn(40000, { flags: ACK }), T0);
    run(dp, syn(40000, { flags: FIN | ACK }), T0);
    expect(ctStateName(TCP, dp.ct6.flags(i))).toBe('FIN_WAIT');
    run(dp, buildTcp6({ src: BE, dst: CLIENT, sport: 8080, dport: 40000, flags: FIN | ACK }), T0);
    run(dp, syn(40000, { flags: ACK }), T0);
    expect([ctStateName(TCP, dp.ct6.flags(i)), dp.ct6.expires(i) - SEC]).toEqual([
      'TIME_WAIT',
      120,
    ]);
  });

  it('a non-SYN first packet is conntrack INVALID (dropped with --ct-drop-invalid)', () => {
    const dp = createDatapath({ seed: 1, ctDropInvalid: true });
    web(dp);
    expect(run(dp, syn(40000, { flags: ACK })).reason).toBe('DROP_CT_INVALID');
    expect(dp.ctInvalid).toBe(1);
  });

  it('translates past extension headers (Hop-by-Hop, Destination Options) in front of TCP', () => {
    const dp = createDatapath({ seed: 1 });
    web(dp);
    const ext: [number, number[]][] = [
      [HOPOPTS, [0, 5, 2, 0, 0, 1, 0]], // Router Alert, PadN
      [DSTOPTS, [0, 1, 4, 0, 0, 0, 0]],
    ];
    const r = run(dp, syn(40000, { ext }), T0);
    expect(r.reason).toBe('TX_DNAT_NEW');
    const want = buildTcp6({
      src: CLIENT,
      dst: BE,
      sport: 40000,
      dport: 8080,
      flags: SYN,
      data: 'hello',
      ext,
    });
    expect([...r.pkt]).toEqual([...want]);
  });

  it('refuses the first packet of a flow whose checksum does not verify', () => {
    const dp = createDatapath({ seed: 1 });
    web(dp);
    const p = syn();
    p[8 + 15] ^= 1; // a source address bit: covered by the pseudo-header only
    expect(run(dp, p).reason).toBe('DROP_BAD_L4_CSUM');
    expect(dp.ct6.size).toBe(0);
  });
});

describe('ClusterIP over IPv6: UDP and SCTP', () => {
  it('DNATs UDP and reverse-NATs the answer, with the lifetimes of UDP', () => {
    const dp = createDatapath({ seed: 1 });
    loaderOf(dp).load([servicePort6('dns', VIP, 53, 'UDP', [`[${BE}]:5353`])]);
    const q = { sport: 40000, data: 'query' };
    const r1 = run(dp, buildUdp6({ src: CLIENT, dst: VIP, dport: 53, ...q }), T0);
    expect(r1.reason).toBe('TX_DNAT_NEW');
    expect([...r1.pkt]).toEqual([...buildUdp6({ src: CLIENT, dst: BE, dport: 5353, ...q })]);
    const a = { dport: 40000, data: 'answer' };
    const r2 = run(dp, buildUdp6({ src: BE, dst: CLIENT, sport: 5353, ...a }), T0);
    expect([...r2.pkt]).toEqual([...buildUdp6({ src: VIP, dst: CLIENT, sport: 53, ...a })]);
    const i = ct6(dp, 40000, UDP);
    expect(dp.ct6.expires(i) - SEC).toBe(120); // replied: the UDP stream lifetime
  });

  it('drops UDP with checksum 0 (invalid over IPv6), before anything is tracked', () => {
    const dp = createDatapath({ seed: 1 });
    loaderOf(dp).load([servicePort6('dns', VIP, 53, 'UDP', [`[${BE}]:5353`])]);
    const p = buildUdp6({ src: CLIENT, dst: VIP, sport: 40000, dport: 53, zeroCsum: true });
    expect(run(dp, p).reason).toBe('DROP_UDP6_ZERO_CSUM');
    expect(dp.ct6.size).toBe(0);
  });

  it('DNATs an SCTP INIT with the CRC32c recomputed over the packet (no pseudo-header)', () => {
    const dp = createDatapath({ seed: 1 });
    loaderOf(dp).load([servicePort6('sctp', VIP, 9000, 'SCTP', [`[${BE}]:9900`])]);
    const init: [number, number, number[]][] = [
      [1, 0, [0, 0, 0, 1, 0, 0, 0x10, 0, 0, 1, 0, 1, 0, 0, 0, 1]],
    ];
    const o = { src: CLIENT, sport: 40000, vtag: 0, chunks: init };
    const r = run(dp, buildSctp6({ ...o, dst: VIP, dport: 9000 }), T0);
    expect(r.reason).toBe('TX_DNAT_NEW');
    expect([...r.pkt]).toEqual([...buildSctp6({ ...o, dst: BE, dport: 9900 })]);
    const crc = r.pkt.slice(40);
    const stored = crc.slice(8, 12);
    crc.fill(0, 8, 12);
    const c = refCrc32c(crc, 0, crc.length);
    expect([...stored]).toEqual([c & 255, (c >>> 8) & 255, (c >>> 16) & 255, c >>> 24]);
    const a = new Int32Array(8);
    a.set(ipv6ToWords(CLIENT), 0);
    a.set(ipv6ToWords(VIP), 4);
    const i = dp.ct6.lookupOrig6(132, a, 0, 4, 40000, 9000);
    expect(ctStateName(132, dp.ct6.flags(i))).toBe('CLOSED');
  });
});

describe('IPv6 backend selection', () => {
  const BES = ['a', 'b', 'c'].map((x, k) => `[fd00:10:244:${k + 1}::${x}]:8080`);
  const which = (p: Uint8Array) => 'abc'[p[31] - 1]; // the backend's fourth group: 1, 2, 3

  function picks(
    sched: string,
    n: number,
    src = (k: number) => `fd00:10:244:9::${k + 1}`,
    seed = 7,
  ) {
    const dp = createDatapath({ seed });
    web(dp, BES, { annotations: { 'kubetun.io/scheduler': sched } });
    const out: string[] = [];
    for (let k = 0; k < n; k++) {
      const r = run(
        dp,
        buildTcp6({ src: src(k), dst: VIP, sport: 30000 + k, dport: 80, flags: SYN }),
      );
      expect(r.reason).toBe('TX_DNAT_NEW');
      out.push(which(r.pkt));
    }
    return out.join('');
  }

  it('rr, wrr, lc go round the candidates by index, as for IPv4', () => {
    expect(picks('rr', 6)).toBe('abcabc');
    expect(picks('wrr', 6)).toBe('abcabc');
    expect(new Set(picks('lc', 3))).toEqual(new Set(['a', 'b', 'c']));
  });

  it('sh keeps a client on one backend, dh a VIP; maglev and sh are functions of the flow', () => {
    const one = () => 'fd00:10:244:9::1';
    expect(new Set(picks('sh', 8, one)).size).toBe(1); // any source port: the address decides
    expect(new Set(picks('dh', 8)).size).toBe(1); // one VIP
    // sources that differ only in their second word: sh folds all four words (IPVS)
    expect(new Set(picks('sh', 60, (k) => `fd00:${k + 1}::9`)).size).toBeGreaterThan(1);
    expect(new Set(picks('maglev', 60)).size).toBe(3);
    // no RNG in sh and maglev: another seed, the same choices; random's differ
    const src = (k: number) => `fd00:10:244:9::${k + 1}`;
    expect(picks('maglev', 30, src, 8)).toBe(picks('maglev', 30, src, 9));
    expect(picks('sh', 30, src, 8)).toBe(picks('sh', 30, src, 9));
    expect(picks('random', 30, src, 8)).not.toBe(picks('random', 30, src, 9));
    expect(new Set(picks('random', 60)).size).toBe(3);
  });

  it('sessionAffinity ClientIP keeps a client on its backend across connections', () => {
    const dp = createDatapath({ seed: 3 });
    web(dp, BES, { sessionAffinity: 'ClientIP', affinityTimeoutSeconds: 60 });
    const first = which(run(dp, syn(40000), T0).pkt);
    for (let k = 1; k < 12; k++) expect(which(run(dp, syn(40000 + k), T0 + k).pkt)).toBe(first);
    expect(dp.aff6.size).toBe(1);
    expect(dp.aff.size).toBe(0);
    // another client is not held to it: across many clients every backend is used
    const seen = new Set<string>();
    for (let k = 0; k < 30; k++) {
      const p = buildTcp6({
        src: `fd00:10:244:7::${k + 1}`,
        dst: VIP,
        sport: 1000,
        dport: 80,
        flags: SYN,
      });
      seen.add(which(run(dp, p, T0).pkt));
    }
    expect(seen.size).toBe(3);
  });
});

/** Linux's own IPv6 packets (test/wire/ipv6.test.ts says what each one is). */
const [, MLD, ECHO, , UDP_5353, UNREACH_FROM_LINUX] = ipv6LinuxCapture();

describe('ICMPv6 rejects', () => {
  it('answers a UDP port without endpoints as Linux answers a closed port: its bytes', () => {
    // fd00:10::2 is the VIP here; the kernel's ICMPv6 port unreachable for the same datagram,
    // captured, is what the client must get (the flow label aside: Linux hashes one)
    const dp = createDatapath({ seed: 1 });
    loaderOf(dp).load([servicePort6('dns', 'fd00:10::2', 5353, 'UDP', [])]);
    const r = run(dp, UDP_5353, T0);
    expect([r.verdict, r.reason]).toEqual([V_REPLY, 'REPLY_REJECT_NO_ENDPOINTS']);
    const linux = UNREACH_FROM_LINUX.slice();
    linux[1] &= 0xf0;
    linux[2] = linux[3] = 0;
    expect([...r.out]).toEqual([...linux]);
  });

  it('an unused port of a VIP and an unknown protocol get port unreachable from the VIP', () => {
    const dp = createDatapath({ seed: 1 });
    web(dp);
    const p = syn(40000, { dport: 81 });
    const r = run(dp, p, T0);
    expect(r.reason).toBe('REPLY_REJECT_UNKNOWN_PORT');
    expect([...r.out]).toEqual([...buildIcmp6({ src: VIP, dst: CLIENT }, 1, 4, 0, p)]);
    const gre = buildIpv6({ src: CLIENT, dst: VIP }, 47, new Uint8Array(8));
    expect(run(dp, gre, T0 + 1).reason).toBe('REPLY_REJECT_UNKNOWN_PROTO');
  });

  it('quotes at most 1280 bytes of a big packet (RFC 4443 2.4(c))', () => {
    const dp = createDatapath({ seed: 1 });
    loaderOf(dp).load([servicePort6('dns', VIP, 53, 'UDP', [])]);
    const big = buildUdp6({
      src: CLIENT,
      dst: VIP,
      sport: 1,
      dport: 53,
      bytes: new Uint8Array(1400).fill(7),
    });
    const r = run(dp, big, T0);
    expect(r.out.length).toBe(1280);
    expect([...r.out]).toEqual([
      ...buildIcmp6({ src: VIP, dst: CLIENT }, 1, 4, 0, big.slice(0, 1232)),
    ]);
  });

  it('never answers a multicast or unspecified source (RFC 4443 2.4(e))', () => {
    const dp = createDatapath({ seed: 1 });
    loaderOf(dp).load([servicePort6('dns', VIP, 53, 'UDP', [])]);
    const r = run(dp, buildUdp6({ src: '::', dst: VIP, sport: 1, dport: 53 }), T0);
    expect(r.reason).toBe('DROP_MARTIAN6_UNSPECIFIED'); // a martian first, never an error
    const dp2 = createDatapath({ seed: 1 });
    loaderOf(dp2).load([servicePort6('dns', VIP, 53, 'UDP', [])]);
    const err = buildIcmp6({ src: CLIENT, dst: VIP }, 1, 4, 0, new Uint8Array(48));
    expect(run(dp2, err, T0).reason).toBe('DROP_ICMP_TO_VIP'); // no error about an error
  });

  it('hop limit 1 toward a VIP: time exceeded from the VIP quoting the packet as sent', () => {
    const dp = createDatapath({ seed: 1 });
    web(dp);
    const p = syn(40000, { hlim: 1 });
    const r = run(dp, p, T0);
    expect(r.reason).toBe('REPLY_TTL_EXCEEDED');
    expect([...r.out]).toEqual([...buildIcmp6({ src: VIP, dst: CLIENT }, 3, 0, 0, p)]);
    expect(dp.ct6.size).toBe(0);
    expect(run(dp, syn(40000, { hlim: 2 }), T0).reason).toBe('TX_DNAT_NEW');
  });
});

describe('other ICMPv6, martians, link traffic', () => {
  it('drops an echo request to a VIP (Linux: ping6 to fd00:10::2) and other ICMPv6 to it', () => {
    const dp = createDatapath({ seed: 1 });
    loaderOf(dp).load([servicePort6('web', 'fd00:10::2', 80, 'TCP', [])]);
    expect(run(dp, ECHO).reason).toBe('DROP_ECHO_TO_VIP');
    const reply = buildIcmp6({ src: CLIENT, dst: 'fd00:10::2' }, 129, 0, 0, new Uint8Array(8));
    expect(run(dp, reply).reason).toBe('DROP_ICMP_TO_VIP');
    const notVip = buildIcmp6({ src: CLIENT, dst: 'fd00:10::3' }, 128, 0, 0, new Uint8Array(8));
    expect([run(dp, notVip).verdict, dp.lastReason]).toEqual([V_PASS, 0]);
  });

  it('passes Neighbor Discovery and MLD untouched (Linux MLDv2 report, an NS to a VIP)', () => {
    const dp = createDatapath({ seed: 1 });
    web(dp);
    const r = run(dp, MLD);
    expect([r.verdict, r.reason]).toEqual([V_PASS, 'PASS_ND_MLD']);
    expect([...r.pkt]).toEqual([...MLD]);
    const ns = buildIcmp6({ src: CLIENT, dst: VIP, hlim: 255 }, 135, 0, 0, ip6(VIP));
    expect(run(dp, ns).reason).toBe('PASS_ND_MLD');
  });

  it('drops service packets from ::, ::1, a multicast group or a VIP, each with its reason', () => {
    const dp = createDatapath({ seed: 1 });
    web(dp);
    const from = (src: string) =>
      run(dp, buildTcp6({ src, dst: VIP, sport: 1, dport: 80, flags: SYN })).reason;
    expect(from('::')).toBe('DROP_MARTIAN6_UNSPECIFIED');
    expect(from('::1')).toBe('DROP_MARTIAN6_LOOPBACK');
    expect(from('ff02::1')).toBe('DROP_MARTIAN6_MULTICAST');
    expect(from(VIP)).toBe('DROP_MARTIAN_VIP_SOURCE');
    expect(from('::2')).toBe('TX_DNAT_NEW'); // ::2 is no martian
    expect(dp.ct6.size).toBe(1);
  });
});

describe('malformed IPv6', () => {
  const dp = createDatapath({ seed: 1 });
  web(dp);
  const cases: [string, () => Uint8Array][] = [
    ['DROP_TRUNCATED_IPV6', () => syn().slice(0, 39)],
    ['DROP_BAD_PAYLOAD_LEN', () => syn().slice(0, 60)], // payload length says more
    ['DROP_BAD_PAYLOAD_LEN', () => Object.assign(syn(), { 4: 0, 5: 0 })], // a jumbogram
    // a Destination Options header claiming 64 bytes in a 28-byte payload
    [
      'DROP_BAD_EXT_HDR',
      () =>
        buildIpv6({ src: CLIENT, dst: VIP }, 6, new Uint8Array(20)).fill(7, 40, 41) &&
        dstoptsTooLong(),
    ],
    [
      'DROP_BAD_EXT_HDR',
      () =>
        buildIpv6(
          {
            src: CLIENT,
            dst: VIP,
            ext: [
              [DSTOPTS, [0, 1, 4, 0, 0, 0, 0]],
              [HOPOPTS, [0, 1, 4, 0, 0, 0, 0]],
            ],
          },
          59,
          new Uint8Array(0),
        ),
    ],
    [
      'DROP_EXT_HDR_CHAIN',
      () =>
        buildIpv6(
          { src: CLIENT, dst: VIP, ext: new Array(9).fill([DSTOPTS, [0, 1, 4, 0, 0, 0, 0]]) },
          59,
          new Uint8Array(0),
        ),
    ],
    ['DROP_TRUNCATED_L4', () => buildIpv6({ src: CLIENT, dst: VIP }, 6, new Uint8Array(12))],
    ['DROP_BAD_TCP_DOFF', () => Object.assign(syn(), { 52: 4 << 4 })],
    [
      'DROP_BAD_UDP_LEN',
      () => {
        const u = buildUdp6({ src: CLIENT, dst: VIP, sport: 1, dport: 80 });
        put16(u, 44, 200);
        return u;
      },
    ],
  ];
  for (const [reason, make] of cases) {
    it(`${reason}: dropped with that reason, bytes untouched`, () => {
      const p = make();
      const r = run(dp, p);
      expect([r.verdict, r.reason]).toEqual([V_DROP, reason]);
      expect([...r.pkt]).toEqual([...p]);
    });
  }
  it('tracked nothing', () => expect(dp.ct6.size).toBe(0));
});

function dstoptsTooLong(): Uint8Array {
  const p = buildIpv6(
    { src: CLIENT, dst: VIP, ext: [[DSTOPTS, [0, 1, 4, 0, 0, 0, 0]]] },
    6,
    new Uint8Array(20),
  );
  p[41] = 7; // Hdr Ext Len 7: 64 bytes
  return p;
}

// keep the harness's checksum honest: a DNATed packet verifies, its original does not any more
describe('harness6 oracle', () => {
  it('recomputes the pseudo-header checksum independently', () => {
    const dp = createDatapath({ seed: 1 });
    web(dp);
    const p = syn();
    expect(l6CsumVerifies(p)).toBe(true);
    const r = run(dp, p);
    expect(l6CsumVerifies(r.pkt)).toBe(true);
    const stale = r.pkt.slice();
    stale.set(p.subarray(52, 58), 52); // the original checksum under the new addresses
    expect(l6CsumVerifies(stale)).toBe(false);
    expect(ctTcpState(0)).toBe(0);
  });
});

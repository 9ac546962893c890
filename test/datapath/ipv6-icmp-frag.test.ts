// ICMPv6 errors about service flows, and IPv6 fragments, byte for byte.
//
//   client fd00:10:244:1::5:40000 ──▶ [fd00:10:96::a]:80 ──DNAT──▶ [fd00:10:244:2::7]:8080
//   a router fd00:10:244:ff::1 (or the backend) ──▶ client: Packet Too Big, MTU 1400, quoting
//   client -> backend:8080 as it was on its wire  ═▶  VIP -> client quoting client -> VIP:80
//
// Packet Too Big is the only way an IPv6 sender learns a path MTU (routers never fragment), and
// its socket takes it only when the quote is its own packet: so the translated error must equal,
// byte for byte, the error the client would get with no NAT in between — the original packet
// quoted, every checksum (the quoted TCP one, the ICMPv6 one over the pseudo-header) right.
// Fragments go by the Fragment header: Linux's own fragmented datagram from
// test/fixtures/ipv6-linux-6.18.pcap through a VIP.

import { describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { V_TX } from '../../src/datapath/state/verdict.ts';
import { ipv6LinuxCapture } from '../fixtures/ipv6-capture.ts';
import { ACK, loaderOf, put16, run, SYN, UDP } from './harness.ts';
import {
  buildIcmp6,
  buildIpv6,
  buildSctp6,
  buildTcp6,
  buildUdp6,
  ip6,
  refL6Csum,
  servicePort6,
} from './harness6.ts';

const CLIENT = 'fd00:10:244:1::5';
const VIP = 'fd00:10:96::a';
const BE = 'fd00:10:244:2::7';
const ROUTER = 'fd00:10:244:ff::1';
const T0 = 5_000_000;

function setup(): { dp: Datapath; orig: Uint8Array; onWire: Uint8Array } {
  const dp = createDatapath({ seed: 1 });
  loaderOf(dp).load([servicePort6('web', VIP, 80, 'TCP', [`[${BE}]:8080`])]);
  const orig = buildTcp6({
    src: CLIENT,
    dst: VIP,
    sport: 40000,
    dport: 80,
    flags: SYN,
    data: 'x'.repeat(64),
  });
  const r = run(dp, orig, T0);
  expect(r.reason).toBe('TX_DNAT_NEW');
  return { dp, orig, onWire: r.pkt };
}

describe('ICMPv6 errors about a DNATed flow', () => {
  it('Packet Too Big from a router: from the VIP, quoting the client its own packet', () => {
    const { dp, orig, onWire } = setup();
    const ptb = buildIcmp6({ src: ROUTER, dst: CLIENT }, 2, 0, 1400, onWire);
    const r = run(dp, ptb, T0 + 1);
    expect([r.verdict, r.reason]).toEqual([V_TX, 'TX_ICMP_ERR_REVNAT']);
    expect([...r.pkt]).toEqual([...buildIcmp6({ src: VIP, dst: CLIENT }, 2, 0, 1400, orig)]);
  });

  it('a quote cut before the TCP checksum: addresses and ports restored all the same', () => {
    const { dp, orig, onWire } = setup();
    const cut = (p: Uint8Array) => p.slice(0, 48); // fixed header + 8 bytes: ports and seq
    const err = buildIcmp6({ src: BE, dst: CLIENT }, 1, 4, 0, cut(onWire));
    const r = run(dp, err, T0 + 1);
    expect(r.reason).toBe('TX_ICMP_ERR_REVNAT');
    expect([...r.pkt]).toEqual([...buildIcmp6({ src: VIP, dst: CLIENT }, 1, 4, 0, cut(orig))]);
  });

  it('time exceeded and dest unreachable (admin) are translated the same way', () => {
    for (const [type, code] of [
      [3, 0],
      [1, 1],
    ]) {
      const { dp, orig, onWire } = setup();
      const r = run(dp, buildIcmp6({ src: ROUTER, dst: CLIENT }, type, code, 0, onWire), T0 + 1);
      expect([...r.pkt]).toEqual([...buildIcmp6({ src: VIP, dst: CLIENT }, type, code, 0, orig)]);
    }
  });

  it('an error from the client about a reply goes to the backend, quoting what it sent', () => {
    const { dp } = setup();
    const asSent = buildTcp6({ src: BE, dst: CLIENT, sport: 8080, dport: 40000, flags: SYN | ACK });
    const seen = run(dp, asSent.slice(), T0 + 1);
    expect(seen.reason).toBe('TX_REVNAT');
    const err = buildIcmp6({ src: CLIENT, dst: VIP }, 1, 4, 0, seen.pkt);
    const r = run(dp, err, T0 + 2);
    expect(r.reason).toBe('TX_ICMP_ERR_DNAT');
    expect([...r.pkt]).toEqual([...buildIcmp6({ src: CLIENT, dst: BE }, 1, 4, 0, asSent)]);
  });

  it("is not translated when it goes to anyone but the quoted packet's sender", () => {
    const { dp, onWire } = setup();
    const r = run(dp, buildIcmp6({ src: ROUTER, dst: 'fd00:10:244:1::6' }, 2, 0, 1400, onWire));
    expect(r.reason).toBe('PASS_NOT_SERVICE');
  });
});

/** Linux's own IPv6 packets: [8] is a 1500-byte UDP datagram's first fragment, [9] the rest. */
const P = ipv6LinuxCapture();
const FRAG1 = P[8];
const FRAG2 = P[9];
const LVIP = 'fd00:10::2'; // the capture's destination, a VIP here; port 5354

function fragDp(): Datapath {
  const dp = createDatapath({ seed: 1 });
  loaderOf(dp).load([servicePort6('big', LVIP, 5354, 'UDP', [`[${BE}]:9999`])]);
  return dp;
}

/** `p` with its destination (and, for a first fragment, nothing else) replaced by hand. */
function withDst(p: Uint8Array, dst: string): Uint8Array {
  const q = p.slice();
  q.set(ip6(dst), 24);
  return q;
}

describe('IPv6 fragments through a VIP (Linux fragmented a 1500-byte datagram)', () => {
  it("the first fragment is DNATed (the whole datagram's checksum), the later one follows it", () => {
    const dp = fragDp();
    const r1 = run(dp, FRAG1, T0);
    expect(r1.reason).toBe('TX_DNAT_NEW');
    const r2 = run(dp, FRAG2, T0 + 1);
    expect([r2.verdict, r2.reason]).toEqual([V_TX, 'TX_FRAG']);
    expect([...r2.pkt]).toEqual([...withDst(FRAG2, BE)]); // only the address: no L4 header here
    // the first fragment: new destination and port, and a UDP checksum that is right for the
    // reassembled datagram under the new addresses (computed independently)
    const want1 = withDst(FRAG1, BE);
    put16(want1, 48 + 2, 9999);
    const whole = buildIpv6(
      { src: 'fd00:10::1', dst: BE },
      UDP,
      new Uint8Array([...r1.pkt.slice(48), ...FRAG2.slice(48)]),
    );
    put16(want1, 48 + 6, refL6Csum(whole));
    expect([...r1.pkt]).toEqual([...want1]);
    expect(dp.frags6.countLive(Math.floor(T0 / 1000))).toBe(1);
  });

  it('a later fragment before its first is dropped; one not to a VIP passes untouched', () => {
    const dp = fragDp();
    expect(run(dp, FRAG2, T0).reason).toBe('DROP_FRAG_OUT_OF_ORDER');
    const other = withDst(FRAG2, 'fd00:10::3');
    const r = run(dp, other, T0);
    expect(r.reason).toBe('PASS_NON_FIRST_FRAGMENT');
    expect([...r.pkt]).toEqual([...other]);
  });

  it('reply fragments get the VIP as source (the reverse direction remembers too)', () => {
    const dp = fragDp();
    run(dp, buildUdp6({ src: 'fd00:10::1', dst: LVIP, sport: 53211, dport: 5354, data: 'q' }), T0);
    const data = new Uint8Array(64).fill(9);
    const first = buildUdp6({
      src: BE,
      dst: 'fd00:10::1',
      sport: 9999,
      dport: 53211,
      bytes: data,
      frag: { offset: 0, more: true, id: 0x80000001 },
    });
    const rest = buildIpv6(
      { src: BE, dst: 'fd00:10::1', frag: { offset: 9, more: false, id: 0x80000001 } },
      UDP,
      new Uint8Array(16).fill(3),
    );
    expect(run(dp, first, T0 + 1).reason).toBe('TX_REVNAT');
    const r = run(dp, rest, T0 + 2);
    expect(r.reason).toBe('TX_FRAG');
    const want = rest.slice();
    want.set(ip6(LVIP), 8);
    expect([...r.pkt]).toEqual([...want]);
  });

  it('a later fragment whose next header is an extension header is data, not a header', () => {
    // the Fragment header of a later fragment names Destination Options (60) and the data that
    // follows is no valid header: before, the walk parsed it and dropped DROP_BAD_EXT_HDR
    const p = buildIpv6(
      { src: 'fd00:10::1', dst: 'fd00:10::3', frag: { offset: 100, more: false, id: 5 } },
      60,
      new Uint8Array(8).fill(0xff),
    );
    const r = run(fragDp(), p, T0);
    expect(r.reason).toBe('PASS_NON_FIRST_FRAGMENT');
  });

  it('drops a fragmented SCTP packet (its CRC32c needs the whole packet)', () => {
    const dp = createDatapath({ seed: 1 });
    loaderOf(dp).load([servicePort6('s', VIP, 9000, 'SCTP', [`[${BE}]:9900`])]);
    const p = buildSctp6({
      src: CLIENT,
      dst: VIP,
      sport: 1,
      dport: 9000,
      vtag: 0,
      chunks: [[1, 0, new Array(16).fill(0)]],
      frag: { offset: 0, more: true, id: 9 },
    });
    expect(run(dp, p, T0).reason).toBe('DROP_SCTP_FRAGMENT');
  });
});

// IPv6, ICMPv6, the IPv6 pseudo-header checksums and NAT66 against packets Linux sent.
//
// test/fixtures/ipv6-linux-6.18.pcap was captured with tcpdump on a veth (checksum offload
// off) between two throwaway namespaces, fd00:10::1 -> fd00:10::2, on Linux 6.18: the
// kernel's own MLDv2 report (Hop-by-Hop header with Router Alert and PadN), `ping -6 -s 16`
// and its reply, a UDP datagram to closed port 5353 and the kernel's ICMPv6 port unreachable
// quoting it, a TCP SYN to closed port 80 and the RST, and a 1500-byte UDP datagram the
// sender fragmented (Fragment header) with the port unreachable for the reassembled datagram.
// tcpdump called every checksum in it correct.

import { describe, expect, it } from 'vitest';
import { l4v6ChecksumFull, l4v6ChecksumValid, l4v6FillCsum } from '../../src/wire/checksum6.ts';
import {
  ICMPV6_DEST_UNREACH,
  ICMPV6_ECHO_REQUEST,
  ICMPV6_ERR_QUOTE,
  ICMPV6_OK,
  ICMPV6_PORT_UNREACH,
  icmpv6Check,
  icmpv6Code,
  icmpv6EchoId,
  icmpv6EchoSeq,
  icmpv6IsError,
  icmpv6QuoteOff,
  icmpv6Type,
} from '../../src/wire/icmpv6.ts';
import {
  IPV6_ERR_EXT,
  IPV6_ERR_EXT_CHAIN,
  IPV6_ERR_PAYLEN,
  IPV6_ERR_TRUNCATED,
  IPV6_ERR_VERSION,
  IPV6_EXT_FRAGMENT,
  IPV6_EXT_HOPOPTS,
  IPV6_OK,
  ipv6Check,
  ipv6CheckQuoted,
  ipv6DstWord,
  ipv6Emit,
  ipv6End,
  ipv6FlowLabel,
  ipv6FragHdrOff,
  ipv6FragId,
  ipv6FragMore,
  ipv6FragOffset,
  ipv6HopLimit,
  ipv6L4Off,
  ipv6L4Proto,
  ipv6NextHeader,
  ipv6Parse,
  ipv6QuotedL4Off,
  ipv6QuotedL4Proto,
  ipv6SrcWord,
} from '../../src/wire/ipv6.ts';
import { IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP } from '../../src/wire/proto.ts';
import {
  ipv6RewriteDst,
  ipv6RewriteSrc,
  l6RewriteDstPort,
  l6RewriteSrcPort,
} from '../../src/wire/rewrite6.ts';
import { ipv6LinuxCapture } from '../fixtures/ipv6-capture.ts';
import { guardsIntact, mulberry32, oddView } from './helpers.ts';

const P = ipv6LinuxCapture();
const [MLD, ECHO, ECHO_REPLY, UDP, UNREACH, SYN, RST, FRAG1, FRAG2, UNREACH_BIG] = P.slice(1);
const L4 = 40;

describe('ipv6 deconstruct (Linux packets)', () => {
  it('every captured packet checks OK, also at an odd offset', () => {
    expect(P).toHaveLength(11);
    for (const p of P) {
      const v = oddView(p);
      expect(ipv6Check(v, 0, v.length)).toBe(IPV6_OK);
      expect(ipv6End(v, 0)).toBe(p.length);
      expect(guardsIntact(v)).toBe(true);
    }
  });

  it('reads the echo request: flow label, hop limit, addresses, ICMPv6 fields', () => {
    const v = oddView(ECHO);
    expect([ipv6FlowLabel(v, 0), ipv6HopLimit(v, 0), ipv6NextHeader(v, 0)]).toEqual([
      0x1a3e9,
      64,
      IPPROTO_ICMPV6,
    ]);
    expect([0, 1, 2, 3].map((k) => ipv6SrcWord(v, 0, k) >>> 0)).toEqual([0xfd000010, 0, 0, 1]);
    expect(ipv6DstWord(v, 0, 3)).toBe(2);
    expect([ipv6L4Off(v, 0), ipv6L4Proto(v, 0)]).toEqual([L4, IPPROTO_ICMPV6]);
    expect(icmpv6Check(v, L4, v.length)).toBe(ICMPV6_OK);
    expect([icmpv6Type(v, L4), icmpv6EchoId(v, L4), icmpv6EchoSeq(v, L4)]).toEqual([
      ICMPV6_ECHO_REQUEST,
      22428,
      1,
    ]);
    for (const p of [ECHO, ECHO_REPLY])
      expect(l4v6ChecksumValid(p, 0, L4, p.length, IPPROTO_ICMPV6)).toBe(true);
  });

  it('walks the Hop-by-Hop header of the MLD report to ICMPv6 at 48', () => {
    expect(ipv6NextHeader(MLD, 0)).toBe(IPV6_EXT_HOPOPTS);
    expect([ipv6L4Off(MLD, 0), ipv6L4Proto(MLD, 0)]).toEqual([48, IPPROTO_ICMPV6]);
    expect(icmpv6Type(MLD, 48)).toBe(143);
    expect(l4v6ChecksumValid(MLD, 0, 48, MLD.length, IPPROTO_ICMPV6)).toBe(true);
    expect(ipv6FragHdrOff(MLD, 0)).toBe(-1);
  });

  it('verifies the kernel TCP and UDP checksums over the pseudo-header; UDP 0 is invalid', () => {
    expect(l4v6ChecksumValid(UDP, 0, L4, UDP.length, IPPROTO_UDP)).toBe(true);
    expect(l4v6ChecksumValid(SYN, 0, L4, SYN.length, IPPROTO_TCP)).toBe(true);
    expect(l4v6ChecksumValid(RST, 0, L4, RST.length, IPPROTO_TCP)).toBe(true);
    const zero = UDP.slice();
    zero[L4 + 6] = zero[L4 + 7] = 0;
    expect(l4v6ChecksumValid(zero, 0, L4, zero.length, IPPROTO_UDP)).toBe(false);
    const flip = SYN.slice();
    flip[9] ^= 1; // a source address bit: the pseudo-header covers it
    expect(l4v6ChecksumValid(flip, 0, L4, flip.length, IPPROTO_TCP)).toBe(false);
  });

  it('finds the Fragment header: offset, M flag, identification, L4 in the first only', () => {
    const f1 = ipv6FragHdrOff(FRAG1, 0);
    const f2 = ipv6FragHdrOff(FRAG2, 0);
    expect([f1, ipv6FragOffset(FRAG1, f1), ipv6FragMore(FRAG1, f1), ipv6FragId(FRAG1, f1)]).toEqual(
      [40, 0, true, 0xee33abf3],
    );
    expect([ipv6FragOffset(FRAG2, f2), ipv6FragMore(FRAG2, f2), ipv6FragId(FRAG2, f2)]).toEqual([
      1448 / 8,
      false,
      0xee33abf3,
    ]);
    expect([ipv6L4Off(FRAG1, 0), ipv6L4Proto(FRAG1, 0)]).toEqual([48, IPPROTO_UDP]);
    expect(ipv6NextHeader(FRAG1, 0)).toBe(IPV6_EXT_FRAGMENT);
  });

  it('reads the port unreachable and the UDP header it quotes (small and 1240-byte quotes)', () => {
    for (const [p, port] of [
      [UNREACH, 5353],
      [UNREACH_BIG, 5354],
    ] as const) {
      expect(icmpv6Check(p, L4, p.length)).toBe(ICMPV6_OK);
      expect([icmpv6Type(p, L4), icmpv6Code(p, L4)]).toEqual([
        ICMPV6_DEST_UNREACH,
        ICMPV6_PORT_UNREACH,
      ]);
      expect(icmpv6IsError(icmpv6Type(p, L4))).toBe(true);
      expect(l4v6ChecksumValid(p, 0, L4, p.length, IPPROTO_ICMPV6)).toBe(true);
      const q = icmpv6QuoteOff(L4);
      expect(ipv6CheckQuoted(p, q, p.length)).toBe(IPV6_OK);
      expect(ipv6QuotedL4Proto(p, q, p.length)).toBe(IPPROTO_UDP);
      const ql4 = ipv6QuotedL4Off(p, q, p.length);
      expect((p[ql4 + 2] << 8) | p[ql4 + 3]).toBe(port);
    }
    // the big one quotes a datagram longer than the quote: ipv6Check would refuse it
    expect(ipv6Check(UNREACH_BIG, icmpv6QuoteOff(L4), UNREACH_BIG.length)).toBe(IPV6_ERR_PAYLEN);
    expect(icmpv6Check(UNREACH, L4, L4 + 8 + 39)).toBe(ICMPV6_ERR_QUOTE);
  });
});

describe('ipv6 check', () => {
  const hdr = (nh: number, payload: number[]) => {
    const b = new Uint8Array(40 + payload.length);
    b.set(UDP.subarray(0, 40));
    b[4] = payload.length >> 8;
    b[5] = payload.length & 0xff;
    b[6] = nh;
    b.set(payload, 40);
    return b;
  };
  it('names each malformation', () => {
    expect(ipv6Check(UDP, 0, 39)).toBe(IPV6_ERR_TRUNCATED);
    const v4 = UDP.slice();
    v4[0] = 0x40;
    expect(ipv6Check(v4, 0, v4.length)).toBe(IPV6_ERR_VERSION);
    const jumbo = UDP.slice();
    jumbo[4] = jumbo[5] = 0;
    expect(ipv6Check(jumbo, 0, jumbo.length)).toBe(IPV6_ERR_PAYLEN);
    expect(ipv6Check(UDP, 0, UDP.length - 1)).toBe(IPV6_ERR_PAYLEN);
    // Destination Options, then Hop-by-Hop: HBH must come first (RFC 8200 4.3)
    expect(ipv6Check(hdr(60, [0, 0, 1, 4, 0, 0, 0, 0, 59, 0, 1, 4, 0, 0, 0, 0]), 0, 56)).toBe(
      IPV6_ERR_EXT,
    );
    // Hop-by-Hop claiming 16 bytes in an 8-byte payload
    expect(ipv6Check(hdr(0, [59, 1, 1, 4, 0, 0, 0, 0]), 0, 48)).toBe(IPV6_ERR_EXT);
    // a fragment header cut short
    expect(ipv6Check(hdr(44, [17, 0, 0, 0]), 0, 44)).toBe(IPV6_ERR_EXT);
    // HBH, then No Next Header: fine
    expect(ipv6Check(hdr(0, [59, 0, 1, 4, 0, 0, 0, 0]), 0, 48)).toBe(IPV6_OK);
    // nine Destination Options headers: a chain longer than any real packet's
    const opts = (n: number) =>
      Array.from({ length: n }, (_, i) => [i === n - 1 ? 59 : 60, 0, 1, 4, 0, 0, 0, 0]).flat();
    expect(ipv6Check(hdr(60, opts(8)), 0, 40 + 64)).toBe(IPV6_OK);
    expect(ipv6Check(hdr(60, opts(9)), 0, 40 + 72)).toBe(IPV6_ERR_EXT_CHAIN);
  });

  it('stops at a later fragment: what follows its Fragment header is data, not a header', () => {
    // offset 100, Next Header 60 (Destination Options) and data that is no valid header
    const p = hdr(
      44,
      [60, 0, 0x03, 0x20, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    );
    expect(ipv6Check(p, 0, p.length)).toBe(IPV6_OK);
    expect([ipv6L4Off(p, 0), ipv6L4Proto(p, 0), ipv6FragHdrOff(p, 0)]).toEqual([48, 60, 40]);
  });
});

describe('ipv6 parse / emit', () => {
  it('emits the MLD report and the first fragment header-for-header as Linux sent them', () => {
    for (const p of [MLD, FRAG1, SYN]) {
      const r = ipv6Parse(p, 0, p.length);
      const out = new Uint8Array(p.length);
      const n = ipv6Emit(r, out, 0);
      out.set(p.subarray(n), n);
      expect([...out]).toEqual([...p]);
    }
    expect(ipv6Parse(MLD, 0, MLD.length).ext.map((e) => e.type)).toEqual([IPV6_EXT_HOPOPTS]);
  });
});

describe('NAT66 rewrites', () => {
  // fd00:96::10, the VIP, and the backend fd00:244:2::7
  const VIP = [0xfd000096 | 0, 0, 0, 0x10];
  const BE = [0xfd000244 | 0, 0x00020000, 0, 7];
  it('DNAT of UDP and TCP equals a full recompute; reverse NAT restores the Linux bytes', () => {
    for (const [p, proto] of [
      [UDP, IPPROTO_UDP],
      [SYN, IPPROTO_TCP],
    ] as const) {
      const v = oddView(p);
      ipv6RewriteDst(v, 0, BE[0], BE[1], BE[2], BE[3]);
      l6RewriteDstPort(v, 0, 9153);
      expect(l4v6ChecksumValid(v, 0, L4, v.length, proto)).toBe(true);
      const c = v.slice();
      l4v6FillCsum(c, 0, L4, c.length, proto);
      expect([...v]).toEqual([...c]);
      ipv6RewriteDst(v, 0, 0xfd000010 | 0, 0, 0, 2);
      l6RewriteDstPort(v, 0, proto === IPPROTO_UDP ? 5353 : 80);
      expect([...v]).toEqual([...p]);
      expect(guardsIntact(v)).toBe(true);
    }
  });

  it('an address change fixes the ICMPv6 checksum (it covers the pseudo-header)', () => {
    const v = ECHO.slice();
    ipv6RewriteSrc(v, 0, VIP[0], VIP[1], VIP[2], VIP[3]);
    expect(l4v6ChecksumValid(v, 0, L4, v.length, IPPROTO_ICMPV6)).toBe(true);
    const after = v.slice();
    l6RewriteSrcPort(v, 0, 1); // ICMPv6 has no ports: nothing changes
    expect([...v]).toEqual([...after]);
  });

  it('patches a first fragment by the same delta and leaves a later one at the address', () => {
    const f1 = FRAG1.slice();
    const before = (f1[48 + 6] << 8) | f1[48 + 7];
    ipv6RewriteDst(f1, 0, BE[0], BE[1], BE[2], BE[3]);
    expect((f1[48 + 6] << 8) | f1[48 + 7]).not.toBe(before);
    const f2 = FRAG2.slice();
    ipv6RewriteDst(f2, 0, BE[0], BE[1], BE[2], BE[3]);
    l6RewriteDstPort(f2, 0, 1);
    expect([...f2.subarray(48)]).toEqual([...FRAG2.subarray(48)]); // no L4 header to touch
    expect(ipv6DstWord(f2, 0, 3)).toBe(7);
  });

  it('equals a full recompute for random addresses and ports (seeded), UDP never 0', () => {
    const rnd = mulberry32(66);
    const w = () => (rnd() * 2 ** 32) | 0;
    for (let n = 0; n < 400; n++) {
      const [p, proto] = n % 2 ? [UDP, IPPROTO_UDP] : [SYN, IPPROTO_TCP];
      const v = p.slice();
      ipv6RewriteSrc(v, 0, w(), w(), w(), w());
      ipv6RewriteDst(v, 0, w(), w(), w(), w());
      l6RewriteSrcPort(v, 0, w() & 0xffff);
      const c =
        (v[L4 + (proto === IPPROTO_UDP ? 6 : 16)] << 8) | v[L4 + (proto === IPPROTO_UDP ? 7 : 17)];
      expect(c).toBe(l4v6ChecksumFull(v, 0, L4, v.length, proto));
    }
  });
});

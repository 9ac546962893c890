import { describe, expect, it } from 'vitest';
import {
  csumAdd,
  csumFinish,
  csumFold,
  csumPartialReplace32,
  csumReplace16,
  csumReplace32,
  ipv4HeaderChecksum,
  l4ChecksumFull,
  l4ChecksumValid,
  l4FillCsum,
  pseudoHeaderSum,
} from '../../src/wire/checksum.ts';
import {
  ICMP_ECHO_REPLY,
  ICMP_ECHO_REQUEST,
  ICMP_PORT_UNREACH_FROM_KERNEL,
  TCP_SYN,
  TCP_SYN_ACK,
  UDP_DNS_QUERY,
  UDP_WITH_IP_OPTIONS,
} from './golden.ts';
import { guardsIntact, oddView } from './helpers.ts';

const u16 = (b: Uint8Array, at: number) => (b[at] << 8) | b[at + 1];

describe('csumAdd / csumFold / csumFinish', () => {
  it('computes the RFC 1071 section 3 example sum', () => {
    // RFC 1071: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2 (folded).
    const b = Uint8Array.of(0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7);
    expect(csumFold(csumAdd(b, 0, 8))).toBe(0xddf2);
    expect(csumFinish(csumAdd(b, 0, 8))).toBe(0x220d);
  });

  it('pads an odd tail with a zero byte', () => {
    const b = Uint8Array.of(0x12, 0x34, 0x56);
    expect(csumAdd(b, 0, 3)).toBe(0x1234 + 0x5600);
  });

  it('chains running sums across calls', () => {
    const b = Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8);
    expect(csumFold(csumAdd(b, 4, 4, csumAdd(b, 0, 4)))).toBe(csumFold(csumAdd(b, 0, 8)));
  });

  it('folds sums above 2^32 without losing carries', () => {
    expect(csumFold(0x1_0000_0000)).toBe(1);
    expect(csumFold(0xffff * 70000)).toBe((0xffff * 70000) % 0xffff || 0xffff);
  });
});

describe('full checksums against golden packets', () => {
  const cases: [string, Uint8Array, number][] = [
    ['TCP SYN', TCP_SYN, 0x1d56],
    ['TCP SYN-ACK', TCP_SYN_ACK, 0xd389],
    ['UDP DNS query', UDP_DNS_QUERY, 0x1cea],
    ['ICMP echo request', ICMP_ECHO_REQUEST, 0x7263],
    ['ICMP echo reply', ICMP_ECHO_REPLY, 0x7a63],
    ['ICMP port unreachable', ICMP_PORT_UNREACH_FROM_KERNEL, 0x19e7],
    ['UDP with IP options', UDP_WITH_IP_OPTIONS, 0x366a],
  ];
  for (const [name, pkt, l4] of cases) {
    it(`${name}: header and L4 checksums, on an odd-offset subarray`, () => {
      const v = oddView(pkt);
      expect(ipv4HeaderChecksum(v, 0)).toBe(u16(pkt, 10));
      expect(l4ChecksumFull(v, 0)).toBe(l4);
      expect(l4ChecksumValid(v, 0)).toBe(true);
      expect(guardsIntact(v)).toBe(true);
    });
  }

  it('l4FillCsum stores the checksum at the right place and nowhere else', () => {
    const v = oddView(TCP_SYN);
    v[36] = 0;
    v[37] = 0;
    expect(l4ChecksumValid(v, 0)).toBe(false);
    l4FillCsum(v, 0);
    expect([...v]).toEqual([...TCP_SYN]);
    expect(guardsIntact(v)).toBe(true);
  });

  it('l4ChecksumValid rejects a flipped payload bit', () => {
    const v = oddView(UDP_DNS_QUERY);
    v[60] ^= 0x10;
    expect(l4ChecksumValid(v, 0)).toBe(false);
  });

  it('UDP checksum 0 means "none" and verifies', () => {
    const v = oddView(UDP_DNS_QUERY);
    v[26] = 0;
    v[27] = 0;
    v[60] ^= 0x10;
    expect(l4ChecksumValid(v, 0)).toBe(true);
  });

  it('UDP: a computed checksum of 0 is returned as 0xffff (RFC 768)', () => {
    // Adjust one payload word so the segment sums to 0xffff: the complement would be 0.
    const p = UDP_WITH_IP_OPTIONS.slice();
    const c = l4ChecksumFull(p, 0);
    // Raising the sum by c turns ~sum into 0; the payload word "hi" carries the change.
    const word = u16(p, 32);
    const next = csumFold(word + c);
    p[32] = next >>> 8;
    p[33] = next & 0xff;
    expect(l4ChecksumFull(p, 0)).toBe(0xffff);
  });

  it('pseudoHeaderSum covers src, dst, protocol and length', () => {
    const s = pseudoHeaderSum(UDP_DNS_QUERY, 0, 17, 62);
    expect(csumFold(s)).toBe(csumFold(0x0af4 + 0x0105 + 0x0a60 + 0x000a + 17 + 62));
  });

  it('returns -1 for protocols it does not know', () => {
    const p = UDP_DNS_QUERY.slice();
    p[9] = 47;
    expect(l4ChecksumFull(p, 0)).toBe(-1);
  });
});

describe('RFC 1624 incremental update', () => {
  it('replace16 matches a full recompute on the IPv4 header (TTL/proto word)', () => {
    const p = TCP_SYN.slice();
    const old = u16(p, 8);
    p[8] = 63;
    const inc = csumReplace16(u16(p, 10), old, u16(p, 8));
    expect(inc).toBe(ipv4HeaderChecksum(p, 0));
  });

  it('replace32 matches a full recompute on an address change', () => {
    const p = TCP_SYN.slice();
    const old = ((p[16] << 24) | (p[17] << 16) | (p[18] << 8) | p[19]) >>> 0;
    p.set([10, 244, 2, 9], 16);
    const inc = csumReplace32(u16(p, 10), old, 0x0af40209);
    expect(inc).toBe(ipv4HeaderChecksum(p, 0));
  });

  it('leaves the checksum alone when the value does not change (0xffff stays 0xffff)', () => {
    // Plain eqn 3 would turn 0xffff into 0x0000 here: "no checksum" for UDP.
    expect(csumReplace16(0xffff, 0x1234, 0x1234)).toBe(0xffff);
    expect(csumReplace32(0xffff, 0x0a000001, 0x0a000001)).toBe(0xffff);
  });

  it('RFC 1624 section 4 example: eqn 3 gives 0x0000 where eqn 2 gave -0', () => {
    // RFC 1624 section 4: "HC = 0xDD2F, m = 0x5555, m' = 0x3285 ... HC' = 0x0000"
    expect(csumReplace16(0xdd2f, 0x5555, 0x3285)).toBe(0x0000);
  });

  it('partial seed update adds without complements', () => {
    const seed = csumFold(pseudoHeaderSum(TCP_SYN, 0, 6, 40));
    const p = TCP_SYN.slice();
    p.set([10, 244, 2, 9], 16);
    const want = csumFold(pseudoHeaderSum(p, 0, 6, 40));
    expect(csumPartialReplace32(seed, 0x0a60000a, 0x0af40209)).toBe(want);
  });
});

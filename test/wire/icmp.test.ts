import { describe, expect, it } from 'vitest';
import { l4ChecksumValid } from '../../src/wire/checksum.ts';
import {
  ICMP_DEST_UNREACH,
  ICMP_ECHO,
  ICMP_ECHO_REPLY,
  ICMP_EMBEDDED_OFF,
  ICMP_ERR_TRUNCATED,
  ICMP_EXC_TTL,
  ICMP_FRAG_NEEDED,
  ICMP_OK,
  ICMP_PORT_UNREACH,
  ICMP_TIME_EXCEEDED,
  type IcmpRepr,
  icmpBuildDestUnreach,
  icmpBuildError,
  icmpBuildFragNeeded,
  icmpBuildTimeExceeded,
  icmpCheck,
  icmpCode,
  icmpCsum,
  icmpEchoId,
  icmpEchoSeq,
  icmpEmit,
  icmpErrorAllowed,
  icmpIsError,
  icmpNextHopMtu,
  icmpParse,
  icmpSetEchoId,
  icmpSetEchoSeq,
  icmpSetNextHopMtu,
  icmpType,
} from '../../src/wire/icmp.ts';
import {
  IPV4_OK,
  ipv4Check,
  ipv4CheckQuoted,
  ipv4Dst,
  ipv4FillCsum,
  ipv4Proto,
  ipv4SetFlagsFrag,
  ipv4SetId,
  ipv4SetSrc,
  ipv4SetTotalLen,
  ipv4Src,
  ipv4TotalLen,
} from '../../src/wire/ipv4.ts';
import { IPPROTO_UDP } from '../../src/wire/proto.ts';
import { udpDstPort, udpSrcPort } from '../../src/wire/udp.ts';
import {
  ICMP_ECHO_REPLY as ECHO_REPLY_PKT,
  ICMP_ECHO_REQUEST,
  ICMP_PORT_UNREACH_FROM_KERNEL,
  TCP_SYN,
  UDP_DNS_QUERY,
  UDP_DNS_QUERY_AS_RECEIVED_ON_LO,
} from './golden.ts';
import { guardsIntact, hex, oddView } from './helpers.ts';

const L4 = 20;
const VIP = 0x0a60000a;

describe('icmp deconstruct', () => {
  it('reads the echo request and reply at an odd offset', () => {
    const v = oddView(ICMP_ECHO_REQUEST);
    expect(icmpCheck(v, L4, v.length)).toBe(ICMP_OK);
    expect(icmpType(v, L4)).toBe(ICMP_ECHO);
    expect(icmpCode(v, L4)).toBe(0);
    expect(icmpCsum(v, L4)).toBe(0x7263);
    expect(icmpEchoId(v, L4)).toBe(6600);
    expect(icmpEchoSeq(v, L4)).toBe(1);
    const r = oddView(ECHO_REPLY_PKT);
    expect(icmpType(r, L4)).toBe(ICMP_ECHO_REPLY);
    expect(icmpEchoId(r, L4)).toBe(6600);
  });

  it("reads the kernel's port unreachable and the datagram it quotes", () => {
    const v = oddView(ICMP_PORT_UNREACH_FROM_KERNEL);
    const end = v.length;
    expect(ipv4Check(v, 0, end)).toBe(IPV4_OK);
    expect(icmpType(v, L4)).toBe(ICMP_DEST_UNREACH);
    expect(icmpCode(v, L4)).toBe(ICMP_PORT_UNREACH);
    expect(icmpIsError(icmpType(v, L4))).toBe(true);
    const inner = L4 + ICMP_EMBEDDED_OFF;
    expect(ipv4CheckQuoted(v, inner, end)).toBe(IPV4_OK);
    expect(ipv4Proto(v, inner)).toBe(IPPROTO_UDP);
    expect(ipv4Src(v, inner)).toBe(0x0af40105);
    expect(ipv4Dst(v, inner)).toBe(VIP);
    expect(udpSrcPort(v, inner + 20)).toBe(53211);
    expect(udpDstPort(v, inner + 20)).toBe(53);
  });

  it('icmpIsError: errors carry a quote, queries do not', () => {
    for (const t of [3, 4, 5, 11, 12]) expect(icmpIsError(t)).toBe(true);
    for (const t of [0, 8, 13, 14, 255]) expect(icmpIsError(t)).toBe(false);
  });
});

describe('icmp construct / parse / emit', () => {
  it('constructs the echo request with setters', () => {
    const v = oddView(ICMP_ECHO_REQUEST);
    icmpSetEchoId(v, L4, 0);
    icmpSetEchoSeq(v, L4, 0);
    icmpSetEchoId(v, L4, 6600);
    icmpSetEchoSeq(v, L4, 1);
    expect([...v]).toEqual([...ICMP_ECHO_REQUEST]);
    icmpSetNextHopMtu(v, L4, 1400);
    expect(icmpNextHopMtu(v, L4)).toBe(1400);
    expect(guardsIntact(v)).toBe(true);
  });

  const echo: IcmpRepr = {
    type: ICMP_ECHO,
    code: 0,
    rest: (6600 << 16) | 1,
    data: ICMP_ECHO_REQUEST.slice(28),
  };

  it('parses the echo request', () => {
    expect(icmpParse(oddView(ICMP_ECHO_REQUEST), L4, 44)).toEqual(echo);
  });

  it('emits the echo request with its checksum', () => {
    const v = oddView(ICMP_ECHO_REQUEST);
    v.fill(0, L4);
    expect(icmpEmit(echo, v, L4)).toBe(24);
    expect([...v]).toEqual([...ICMP_ECHO_REQUEST]);
    expect(guardsIntact(v)).toBe(true);
  });

  it('ICMP_ERR_TRUNCATED below 8 bytes', () => {
    for (let end = L4; end < L4 + 8; end++) {
      expect(icmpCheck(ICMP_ECHO_REQUEST, L4, end)).toBe(ICMP_ERR_TRUNCATED);
    }
    expect(icmpCheck(ICMP_ECHO_REQUEST, L4, L4 + 8)).toBe(ICMP_OK);
    expect(() => icmpParse(ICMP_ECHO_REQUEST, L4, L4 + 7)).toThrow('icmp: truncated');
  });
});

describe('icmpBuildDestUnreach (like Linux icmp_send)', () => {
  it("reproduces the kernel's port unreachable byte for byte (but for the IP id)", () => {
    const orig = oddView(UDP_DNS_QUERY_AS_RECEIVED_ON_LO);
    const out = oddView(new Uint8Array(600));
    const n = icmpBuildDestUnreach(out, 0, 600, orig, 0, orig.length, ICMP_PORT_UNREACH, VIP, 64);
    expect(n).toBe(ICMP_PORT_UNREACH_FROM_KERNEL.length);
    expect(out[4]).toBe(0);
    expect(out[5]).toBe(0);
    // The kernel picks an IP id; ours is 0. Put the kernel's in and everything else must match.
    ipv4SetId(out, 0, 0xd923);
    ipv4FillCsum(out, 0);
    expect(hex(out.subarray(0, n))).toBe(hex(ICMP_PORT_UNREACH_FROM_KERNEL));
    expect(guardsIntact(out)).toBe(true);
  });

  it('quotes the datagram only, not trailing padding', () => {
    const padded = new Uint8Array(UDP_DNS_QUERY.length + 6);
    padded.set(UDP_DNS_QUERY);
    const out = new Uint8Array(600);
    const n = icmpBuildDestUnreach(out, 0, 600, padded, 0, padded.length, 3, VIP, 64);
    expect(n).toBe(28 + UDP_DNS_QUERY.length);
  });

  it('cuts a large datagram so the error is exactly 576 bytes, checksums valid', () => {
    const big = new Uint8Array(1500);
    big.set(UDP_DNS_QUERY.subarray(0, 28));
    for (let i = 28; i < 1500; i++) big[i] = (i * 7) & 0xff;
    ipv4SetTotalLen(big, 0, 1500);
    ipv4FillCsum(big, 0);
    const out = new Uint8Array(2000);
    const n = icmpBuildDestUnreach(out, 3, 1997, big, 0, 1500, ICMP_PORT_UNREACH, VIP, 64);
    expect(n).toBe(576);
    const pkt = out.subarray(3, 3 + n);
    expect(ipv4Check(pkt, 0, n)).toBe(IPV4_OK);
    expect(ipv4TotalLen(pkt, 0)).toBe(576);
    expect(l4ChecksumValid(pkt, 0)).toBe(true);
    expect([...pkt.subarray(28)]).toEqual([...big.subarray(0, 548)]);
    expect(out[3 + 576]).toBe(0);
  });

  it('shortens the quote to the room given, down to IP header + 8 bytes, then gives up', () => {
    const out = new Uint8Array(100);
    const orig = UDP_DNS_QUERY;
    expect(icmpBuildDestUnreach(out, 0, 60, orig, 0, orig.length, 3, VIP, 64)).toBe(60);
    expect(ipv4Check(out, 0, 60)).toBe(IPV4_OK);
    expect(l4ChecksumValid(out, 0)).toBe(true);
    expect(icmpBuildDestUnreach(out, 0, 56, orig, 0, orig.length, 3, VIP, 64)).toBe(56);
    expect(icmpBuildDestUnreach(out, 0, 55, orig, 0, orig.length, 3, VIP, 64)).toBe(0);
    expect(icmpBuildDestUnreach(out, 90, 100, orig, 0, orig.length, 3, VIP, 64)).toBe(0);
  });

  it('sets TOS like Linux: (original & 0x1e) | 0xc0', () => {
    // Observed on Linux 6.18 (UDP to a closed port on lo): TOS 0x13 -> 0xd2, 0xb8 -> 0xd8.
    const out = new Uint8Array(200);
    for (const [tos, want] of [
      [0x13, 0xd2],
      [0xb8, 0xd8],
      [0x00, 0xc0],
    ]) {
      const orig = UDP_DNS_QUERY.slice();
      orig[1] = tos;
      ipv4FillCsum(orig, 0);
      expect(icmpBuildDestUnreach(out, 0, 200, orig, 0, orig.length, 3, VIP, 7)).toBeGreaterThan(0);
      expect(out[1]).toBe(want);
      expect(out[8]).toBe(7);
    }
  });

  it('frag-needed carries the next-hop MTU; time exceeded its own type', () => {
    const out = new Uint8Array(600);
    const n = icmpBuildFragNeeded(out, 0, 600, TCP_SYN, 0, 60, 1400, VIP, 64);
    expect(n).toBe(88);
    expect(icmpType(out, L4)).toBe(ICMP_DEST_UNREACH);
    expect(icmpCode(out, L4)).toBe(ICMP_FRAG_NEEDED);
    expect(icmpNextHopMtu(out, L4)).toBe(1400);
    expect([out[L4 + 4], out[L4 + 5]]).toEqual([0, 0]);
    expect(l4ChecksumValid(out, 0)).toBe(true);
    expect(icmpBuildTimeExceeded(out, 0, 600, TCP_SYN, 0, 60, ICMP_EXC_TTL, VIP, 64)).toBe(88);
    expect(icmpType(out, L4)).toBe(ICMP_TIME_EXCEEDED);
    expect(l4ChecksumValid(out, 0)).toBe(true);
  });

  it('refuses what RFC 1122 3.2.2 forbids', () => {
    const out = new Uint8Array(600);
    const build = (p: Uint8Array) => icmpBuildError(out, 0, 600, p, 0, p.length, 3, 3, 0, VIP, 64);
    // an ICMP error
    expect(icmpErrorAllowed(ICMP_PORT_UNREACH_FROM_KERNEL, 0, 110)).toBe(false);
    expect(build(ICMP_PORT_UNREACH_FROM_KERNEL)).toBe(0);
    // but an echo request is fine
    expect(build(ICMP_ECHO_REQUEST)).toBe(72);
    // a non-initial fragment
    const frag = UDP_DNS_QUERY.slice();
    ipv4SetFlagsFrag(frag, 0, false, false, 10);
    expect(build(frag)).toBe(0);
    // a first fragment is fine
    ipv4SetFlagsFrag(frag, 0, false, true, 0);
    expect(build(frag)).toBeGreaterThan(0);
    // sources that are not one host; multicast / broadcast destinations
    for (const src of [0, 0x00000001, 0xe0000001, 0xffffffff]) {
      const p = UDP_DNS_QUERY.slice();
      ipv4SetSrc(p, 0, src);
      expect(build(p)).toBe(0);
    }
    const mc = UDP_DNS_QUERY.slice();
    mc.set([239, 1, 1, 1], 16);
    expect(build(mc)).toBe(0);
    // garbage
    expect(build(new Uint8Array(19))).toBe(0);
    expect(build(Uint8Array.of(0x44, ...new Uint8Array(39)))).toBe(0);
  });
});

// NAT rewrites against golden packets:
//
//   client 10.244.1.5:43210 ──SYN──▶ VIP 10.96.0.10:80      DNAT ──▶ backend 10.244.2.7:8080
//   client ◀──SYN-ACK── 10.96.0.10:80   rev-NAT ◀── 10.244.2.7:8080
//   client ◀──ICMP port unreachable (quoting the DNATed query)── 10.244.2.7, reverse-NATed
//   inside and out so the client sees 10.96.0.10:53, as the kernel's conntrack would do.
import { describe, expect, it } from 'vitest';
import { ipv4HeaderChecksum, l4ChecksumFull, l4ChecksumValid } from '../../src/wire/checksum.ts';
import { icmpBuildDestUnreach, icmpBuildTimeExceeded } from '../../src/wire/icmp.ts';
import {
  IPV4_OK,
  ipv4Check,
  ipv4CheckQuoted,
  ipv4FillCsum,
  ipv4SetFlagsFrag,
} from '../../src/wire/ipv4.ts';
import {
  icmpErrRewriteInnerDst,
  icmpErrRewriteInnerDstPort,
  icmpErrRewriteInnerEchoId,
  icmpErrRewriteInnerSrc,
  icmpErrRewriteInnerSrcPort,
  icmpRewriteEchoId,
  ipv4RewriteDst,
  ipv4RewriteSrc,
  l4RewriteDstPort,
  l4RewriteSrcPort,
} from '../../src/wire/rewrite.ts';
import {
  ICMP_ECHO_REQUEST,
  ICMP_PORT_UNREACH_FROM_BACKEND,
  ICMP_PORT_UNREACH_REVERSE_NATED,
  TCP_SYN,
  TCP_SYN_ACK,
  TCP_SYN_ACK_FROM_10_244_2_7_8080,
  TCP_SYN_DNAT_TO_10_244_2_7_8080,
  UDP_DNS_QUERY,
  UDP_DNS_QUERY_DNAT_TO_10_244_2_7_5353,
} from './golden.ts';
import { guardsIntact, hex, oddView } from './helpers.ts';

const VIP = 0x0a60000a;
const BACKEND = 0x0af40207;
const CLIENT = 0x0af40105;
const u16 = (b: Uint8Array, at: number) => (b[at] << 8) | b[at + 1];

describe('DNAT and reverse NAT on golden packets (odd offset)', () => {
  it('DNATs the SYN to the backend', () => {
    const v = oddView(TCP_SYN);
    ipv4RewriteDst(v, 0, BACKEND);
    l4RewriteDstPort(v, 0, 8080);
    expect(hex(v)).toBe(hex(TCP_SYN_DNAT_TO_10_244_2_7_8080));
    expect(guardsIntact(v)).toBe(true);
  });

  it('reverse-NATs the SYN-ACK to the VIP', () => {
    const v = oddView(TCP_SYN_ACK_FROM_10_244_2_7_8080);
    ipv4RewriteSrc(v, 0, VIP);
    l4RewriteSrcPort(v, 0, 80);
    expect(hex(v)).toBe(hex(TCP_SYN_ACK));
    expect(guardsIntact(v)).toBe(true);
  });

  it('DNATs the UDP DNS query', () => {
    const v = oddView(UDP_DNS_QUERY);
    ipv4RewriteDst(v, 0, BACKEND);
    l4RewriteDstPort(v, 0, 5353);
    expect(hex(v)).toBe(hex(UDP_DNS_QUERY_DNAT_TO_10_244_2_7_5353));
  });

  it('reverse-NATs an ICMP error inside and out', () => {
    const v = oddView(ICMP_PORT_UNREACH_FROM_BACKEND);
    ipv4RewriteSrc(v, 0, VIP);
    icmpErrRewriteInnerDst(v, 0, VIP);
    icmpErrRewriteInnerDstPort(v, 0, 53);
    expect(hex(v)).toBe(hex(ICMP_PORT_UNREACH_REVERSE_NATED));
    expect(guardsIntact(v)).toBe(true);
  });

  it('the reverse-NATed error is what icmpBuildDestUnreach makes from the original query', () => {
    const out = new Uint8Array(200);
    const n = icmpBuildDestUnreach(out, 0, 200, UDP_DNS_QUERY, 0, UDP_DNS_QUERY.length, 3, VIP, 64);
    expect(hex(out.subarray(0, n))).toBe(hex(ICMP_PORT_UNREACH_REVERSE_NATED));
  });
});

describe('rewrite edge cases', () => {
  it('leaves a zero UDP checksum at zero', () => {
    const p = UDP_DNS_QUERY.slice();
    p[26] = 0;
    p[27] = 0;
    ipv4RewriteDst(p, 0, BACKEND);
    l4RewriteDstPort(p, 0, 5353);
    ipv4RewriteSrc(p, 0, 0x0a000001);
    l4RewriteSrcPort(p, 0, 1);
    expect(u16(p, 26)).toBe(0);
    expect(ipv4Check(p, 0, p.length)).toBe(IPV4_OK);
  });

  it('a rewrite to the same value changes nothing (0xffff is not turned into 0)', () => {
    const p = UDP_DNS_QUERY.slice();
    p[26] = 0xff;
    p[27] = 0xff;
    const before = hex(p);
    ipv4RewriteDst(p, 0, VIP);
    l4RewriteDstPort(p, 0, 53);
    expect(hex(p)).toBe(before);
  });

  it('non-first fragments: addresses and header checksum only, L4 bytes untouched', () => {
    const p = UDP_DNS_QUERY.slice();
    ipv4SetFlagsFrag(p, 0, false, false, 3);
    ipv4FillCsum(p, 0);
    const l4Before = hex(p.subarray(20));
    ipv4RewriteDst(p, 0, BACKEND);
    l4RewriteDstPort(p, 0, 5353);
    expect(hex(p.subarray(20))).toBe(l4Before);
    expect(ipv4HeaderChecksum(p, 0)).toBe(u16(p, 10));
    expect(ipv4Check(p, 0, p.length)).toBe(IPV4_OK);
  });

  it('first fragment (MF, offset 0): the L4 checksum takes the delta', () => {
    const p = UDP_DNS_QUERY.slice();
    ipv4SetFlagsFrag(p, 0, false, true, 0);
    ipv4FillCsum(p, 0);
    const c0 = u16(p, 26);
    ipv4RewriteDst(p, 0, BACKEND);
    expect(u16(p, 26)).not.toBe(c0);
    expect(l4ChecksumFull(p, 0)).toBe(u16(p, 26));
  });

  it('port rewrites ignore ICMP; echo id rewrite patches the ICMP checksum', () => {
    const v = oddView(ICMP_ECHO_REQUEST);
    const before = hex(v);
    l4RewriteDstPort(v, 0, 1234);
    l4RewriteSrcPort(v, 0, 1234);
    expect(hex(v)).toBe(before);
    icmpRewriteEchoId(v, 0, 0xbeef);
    expect(u16(v, 24)).toBe(0xbeef);
    expect(l4ChecksumValid(v, 0)).toBe(true);
    expect(u16(v, 22)).not.toBe(0x7263);
    expect(guardsIntact(v)).toBe(true);
  });

  it('echo id rewrite leaves TCP alone', () => {
    const p = TCP_SYN.slice();
    icmpRewriteEchoId(p, 0, 7);
    expect(hex(p)).toBe(hex(TCP_SYN));
  });

  it('an error quoting only IP header + 8 bytes of TCP: ports rewritten, no checksum to patch', () => {
    const out = new Uint8Array(56);
    expect(icmpBuildDestUnreach(out, 0, 56, TCP_SYN_DNAT_TO_10_244_2_7_8080, 0, 60, 3, BACKEND, 64)).toBe(56);
    ipv4RewriteSrc(out, 0, VIP);
    icmpErrRewriteInnerDst(out, 0, VIP);
    icmpErrRewriteInnerDstPort(out, 0, 80);
    expect(ipv4Check(out, 0, 56)).toBe(IPV4_OK);
    expect(l4ChecksumValid(out, 0)).toBe(true);
    expect(ipv4CheckQuoted(out, 28, 56)).toBe(IPV4_OK);
    expect(hex(out.subarray(28, 56))).toBe(hex(TCP_SYN.subarray(0, 28)));
  });

  it('inner source rewrite (SNAT direction) with a full quote keeps every checksum valid', () => {
    const out = new Uint8Array(200);
    const n = icmpBuildDestUnreach(out, 0, 200, TCP_SYN, 0, 60, 3, VIP, 64);
    icmpErrRewriteInnerSrc(out, 0, 0x0a000063);
    icmpErrRewriteInnerSrcPort(out, 0, 61440);
    expect(l4ChecksumValid(out, 0)).toBe(true);
    expect(ipv4CheckQuoted(out, 28, n)).toBe(IPV4_OK);
    expect(l4ChecksumValid(out, 28)).toBe(true);
    icmpErrRewriteInnerSrc(out, 0, CLIENT);
    icmpErrRewriteInnerSrcPort(out, 0, 43210);
    expect(hex(out.subarray(28, n))).toBe(hex(TCP_SYN));
  });

  it('time exceeded about a ping: the quoted echo id is rewritten, both ICMP checksums valid', () => {
    const out = new Uint8Array(200);
    const n = icmpBuildTimeExceeded(out, 0, 200, ICMP_ECHO_REQUEST, 0, 44, 0, 0x0a000001, 64);
    expect(n).toBe(72);
    icmpErrRewriteInnerEchoId(out, 0, 0x4242);
    expect((out[52] << 8) | out[53]).toBe(0x4242);
    expect(l4ChecksumValid(out, 0)).toBe(true);
    expect(l4ChecksumValid(out, 28)).toBe(true);
    icmpErrRewriteInnerEchoId(out, 0, 6600);
    expect(hex(out.subarray(28, n))).toBe(hex(ICMP_ECHO_REQUEST));
  });
});

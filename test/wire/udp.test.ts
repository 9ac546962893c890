import { describe, expect, it } from 'vitest';
import { l4FillCsum } from '../../src/wire/checksum.ts';
import {
  UDP_ERR_LEN,
  UDP_ERR_TRUNCATED,
  UDP_OK,
  type UdpRepr,
  udpCheck,
  udpCsum,
  udpDstPort,
  udpEmit,
  udpLength,
  udpParse,
  udpSetCsum,
  udpSetDstPort,
  udpSetLength,
  udpSetSrcPort,
  udpSrcPort,
} from '../../src/wire/udp.ts';
import { UDP_DNS_QUERY, UDP_WITH_IP_OPTIONS } from './golden.ts';
import { guardsIntact, oddView } from './helpers.ts';

const L4 = 20;
const END = UDP_DNS_QUERY.length;

describe('udp deconstruct', () => {
  it('reads the DNS query at an odd offset', () => {
    const v = oddView(UDP_DNS_QUERY);
    expect(udpCheck(v, L4, END)).toBe(UDP_OK);
    expect(udpSrcPort(v, L4)).toBe(53211);
    expect(udpDstPort(v, L4)).toBe(53);
    expect(udpLength(v, L4)).toBe(62);
    expect(udpCsum(v, L4)).toBe(0x1cea);
  });

  it('reads a datagram behind IP options', () => {
    const v = oddView(UDP_WITH_IP_OPTIONS);
    expect(udpCheck(v, 24, v.length)).toBe(UDP_OK);
    expect(udpSrcPort(v, 24)).toBe(5000);
    expect(udpDstPort(v, 24)).toBe(5001);
    expect(udpLength(v, 24)).toBe(11);
  });
});

describe('udp construct / parse / emit', () => {
  const repr: UdpRepr = { srcPort: 53211, dstPort: 53, payloadLen: 54 };

  it('constructs with setters', () => {
    const v = oddView(UDP_DNS_QUERY);
    v.fill(0, L4, L4 + 8);
    udpSetSrcPort(v, L4, 53211);
    udpSetDstPort(v, L4, 53);
    udpSetLength(v, L4, 62);
    udpSetCsum(v, L4, 0x1cea);
    expect([...v]).toEqual([...UDP_DNS_QUERY]);
    expect(guardsIntact(v)).toBe(true);
  });

  it('parses', () => {
    expect(udpParse(oddView(UDP_DNS_QUERY), L4, END)).toEqual(repr);
  });

  it('emits (zero checksum = none), then l4FillCsum gives the golden checksum', () => {
    const v = oddView(UDP_DNS_QUERY);
    v.fill(0x55, L4, L4 + 8);
    expect(udpEmit(repr, v, L4)).toBe(8);
    expect(udpCsum(v, L4)).toBe(0);
    l4FillCsum(v, 0);
    expect([...v]).toEqual([...UDP_DNS_QUERY]);
  });
});

describe('udpCheck error codes', () => {
  it('TRUNCATED below 8 bytes', () => {
    for (let end = L4; end < L4 + 8; end++) expect(udpCheck(UDP_DNS_QUERY, L4, end)).toBe(UDP_ERR_TRUNCATED);
  });
  it('LEN when Length < 8', () => {
    const p = UDP_DNS_QUERY.slice();
    udpSetLength(p, L4, 7);
    expect(udpCheck(p, L4, END)).toBe(UDP_ERR_LEN);
  });
  it('LEN when Length runs past the packet end', () => {
    expect(udpCheck(UDP_DNS_QUERY, L4, END - 1)).toBe(UDP_ERR_LEN);
  });
  it('accepts Length shorter than the IP payload', () => {
    const p = UDP_DNS_QUERY.slice();
    udpSetLength(p, L4, 8);
    expect(udpCheck(p, L4, END)).toBe(UDP_OK);
  });
});

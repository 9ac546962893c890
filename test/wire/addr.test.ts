import { describe, expect, it } from 'vitest';
import {
  cidrContains,
  cidrToString,
  ipv4ToU32,
  parseCidr,
  prefixMask,
  u32ToIpv4,
} from '../../src/wire/addr.ts';

describe('ipv4ToU32 / u32ToIpv4', () => {
  it('converts both ways, high addresses stay positive', () => {
    expect(ipv4ToU32('10.96.0.10')).toBe(0x0a60000a);
    expect(ipv4ToU32('255.255.255.255')).toBe(0xffffffff);
    expect(ipv4ToU32('0.0.0.0')).toBe(0);
    expect(u32ToIpv4(0xc0a80101)).toBe('192.168.1.1');
    expect(u32ToIpv4(ipv4ToU32('172.16.254.3'))).toBe('172.16.254.3');
  });

  it('rejects malformed text', () => {
    for (const bad of ['', '1.2.3', '1.2.3.4.5', '256.0.0.1', '01.2.3.4', '1.2.3.-4', ' 1.2.3.4', '1.2.3.4 ', 'a.b.c.d', '1..2.3']) {
      expect(() => ipv4ToU32(bad), bad).toThrow(/invalid IPv4 address/);
    }
  });
});

describe('CIDR', () => {
  it('parses, masks host bits, and tests membership', () => {
    const c = parseCidr('10.96.0.10/12');
    expect(c).toEqual({ addr: 0x0a600000, prefix: 12, mask: 0xfff00000 });
    expect(cidrToString(c)).toBe('10.96.0.0/12');
    expect(cidrContains(c, ipv4ToU32('10.111.255.255'))).toBe(true);
    expect(cidrContains(c, ipv4ToU32('10.112.0.0'))).toBe(false);
  });

  it('handles /0 and /32', () => {
    expect(prefixMask(0)).toBe(0);
    expect(prefixMask(32)).toBe(0xffffffff);
    expect(cidrContains(parseCidr('0.0.0.0/0'), 0xdeadbeef)).toBe(true);
    const host = parseCidr('192.168.0.1/32');
    expect(cidrContains(host, 0xc0a80001)).toBe(true);
    expect(cidrContains(host, 0xc0a80002)).toBe(false);
  });

  it('rejects a missing or out-of-range prefix', () => {
    expect(() => parseCidr('10.0.0.0')).toThrow(/missing \/prefix/);
    expect(() => parseCidr('10.0.0.0/33')).toThrow(/0\.\.32/);
    expect(() => parseCidr('10.0.0.0/08')).toThrow(/0\.\.32/);
    expect(() => parseCidr('10.0.0/8')).toThrow(/invalid IPv4/);
  });
});

import { describe, expect, it } from 'vitest';
import {
  cidrContains,
  cidrToString,
  ipv4ToU32,
  parseCidr,
  prefixMask,
  u32ToIpv4,
} from '../../src/wire/addr.ts';
import { below, mulberry32 } from '../maps/prng.ts';

describe('ipv4ToU32 / u32ToIpv4', () => {
  it('converts both ways, high addresses stay positive', () => {
    expect(ipv4ToU32('10.96.0.10')).toBe(0x0a60000a);
    expect(ipv4ToU32('255.255.255.255')).toBe(0xffffffff);
    expect(ipv4ToU32('0.0.0.0')).toBe(0);
    expect(u32ToIpv4(0xc0a80101)).toBe('192.168.1.1');
    expect(u32ToIpv4(ipv4ToU32('172.16.254.3'))).toBe('172.16.254.3');
  });

  it('rejects malformed text', () => {
    for (const bad of [
      '',
      '1.2.3',
      '1.2.3.4.5',
      '256.0.0.1',
      '01.2.3.4',
      '1.2.3.-4',
      ' 1.2.3.4',
      '1.2.3.4 ',
      'a.b.c.d',
      '1..2.3',
    ]) {
      expect(() => ipv4ToU32(bad), bad).toThrow(/invalid IPv4 address/);
    }
  });

  // ipv4ToU32 has a character loop in front of the regex rule: on random text it must accept
  // exactly what the rule accepts, with the same value, and the text it accepts must be the
  // one u32ToIpv4 prints (the loader keys backends by the endpoint's text on that ground).
  it('accepts what the dotted-quad rule accepts, nothing else (random text)', () => {
    const rule = (s: string): number | undefined => {
      const m =
        /^(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})$/.exec(
          s,
        );
      if (!m) return undefined;
      const o = m.slice(1).map(Number);
      return o.every((v) => v <= 255)
        ? (o[0] * 2 ** 24 + o[1] * 65536 + o[2] * 256 + o[3]) >>> 0
        : undefined;
    };
    const rnd = mulberry32(18);
    const chars = '0123456789.0123456789...25 -+a:x';
    const octet = () => {
      const k = below(rnd, 10);
      if (k === 0) return below(rnd, 2) ? '256' : `0${below(rnd, 10)}`;
      return k === 1 ? '255' : String(below(rnd, k < 5 ? 10 : 256));
    };
    const wrong: string[] = [];
    let accepted = 0;
    for (let i = 0; i < 20_000; i++) {
      let s: string;
      if (i % 2 === 0) {
        s = '';
        const len = below(rnd, 18);
        for (let k = 0; k < len; k++) s += chars[below(rnd, chars.length)];
      } else {
        const n = below(rnd, 4) === 0 ? 3 + 2 * below(rnd, 2) : 4;
        s = Array.from({ length: n }, octet).join('.');
      }
      const want = rule(s);
      let got: number | string;
      try {
        got = ipv4ToU32(s);
      } catch (e) {
        got = (e as Error).message.startsWith('invalid IPv4 address') ? 'refused' : 'other error';
      }
      if (want !== undefined) accepted++;
      if (got !== (want ?? 'refused') || (want !== undefined && u32ToIpv4(want) !== s)) {
        wrong.push(`${JSON.stringify(s)}: ${got}, want ${want ?? 'refused'}`);
      }
    }
    expect(wrong).toEqual([]);
    expect(accepted).toBeGreaterThan(1000);
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

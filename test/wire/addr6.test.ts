// IPv6 text in and out (src/wire/addr6.ts): RFC 5952 canonical form, checked by hand on the
// RFC's own cases and against an independent serializer (the WHATWG URL host serializer Node
// ships, which follows the same compression rules) on seeded random addresses.
import { describe, expect, it } from 'vitest';
import {
  canonIpv6,
  cidr6Contains,
  groupsToIpv6,
  ipv6Groups,
  parseCidr6,
} from '../../src/wire/addr6.ts';

describe('ipv6Groups / canonIpv6', () => {
  it.each([
    ['FD00:0:0:0:0:0:0:1', 'fd00::1'],
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'], // RFC 5952 4.2.3: the first longest run
    ['2001:0db8:0000:0000:0000:ff00:0042:8329', '2001:db8::ff00:42:8329'],
    ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'], // 4.2.2: one zero group is not "::"
    ['::', '::'],
    ['::1', '::1'],
    ['1::', '1::'],
    ['::ffff:10.0.0.1', '::ffff:10.0.0.1'],
    ['::ffff:a00:1', '::ffff:10.0.0.1'],
    ['fd00:10:96::a', 'fd00:10:96::a'],
  ])('%s → %s', (text, want) => {
    expect(canonIpv6(text)).toBe(want);
  });

  it.each([
    '1:2:3:4:5:6:7:8:9',
    '1::2::3',
    ':::',
    '1:2:3:4:5:6:7',
    '12345::',
    'fe80::1%eth0',
    '10.0.0.1',
    '::ffff:10.0.0.256',
    '::ffff:010.0.0.1',
    'g::1',
    '',
  ])('refuses %j', (text) => {
    expect(ipv6Groups(text)).toBeNull();
  });

  it('agrees with the URL host serializer on seeded random addresses', () => {
    let seed = 0x6a09e667;
    const rnd = () => {
      seed = (seed * 1103515245 + 12345) >>> 0;
      return seed >>> 16;
    };
    for (let n = 0; n < 2000; n++) {
      // mostly zero groups, so that runs of zeros of every length and place occur
      const g = Array.from({ length: 8 }, () => (rnd() % 3 === 0 ? rnd() & 0xffff : 0));
      if (g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0xffff) {
        continue; // IPv4-mapped: URL prints hex groups, RFC 5952 dotted quad
      }
      const full = g.map((x) => x.toString(16)).join(':');
      const oracle = new URL(`http://[${full}]/`).hostname.slice(1, -1);
      expect(groupsToIpv6(g)).toBe(oracle);
      expect(ipv6Groups(oracle)).toEqual(g);
    }
  });
});

describe('parseCidr6 / cidr6Contains', () => {
  it('clears host bits and tests membership by prefix', () => {
    const c = parseCidr6('fd00:10:96::ffff/112');
    expect(c?.text).toBe('fd00:10:96::/112');
    expect(cidr6Contains(c!, ipv6Groups('fd00:10:96::1:0')!)).toBe(false);
    expect(cidr6Contains(c!, ipv6Groups('fd00:10:96::abcd')!)).toBe(true);
    const odd = parseCidr6('fd00:10:244:1::/60');
    expect(odd?.text).toBe('fd00:10:244::/60');
    expect(cidr6Contains(odd!, ipv6Groups('fd00:10:244:f::1')!)).toBe(true);
    expect(cidr6Contains(odd!, ipv6Groups('fd00:10:244:10::1')!)).toBe(false);
  });

  it.each(['fd00::/129', 'fd00::', 'fd00::/-1', 'fd00::/012', 'x::/64'])('refuses %j', (t) => {
    expect(parseCidr6(t)).toBeNull();
  });
});

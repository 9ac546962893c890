import { describe, expect, it } from 'vitest';
import {
  IPV4_ERR_CSUM,
  IPV4_ERR_IHL,
  IPV4_ERR_TOTLEN,
  IPV4_ERR_TRUNCATED,
  IPV4_ERR_VERSION,
  IPV4_OK,
  type Ipv4Repr,
  ipv4Check,
  ipv4CheckQuoted,
  ipv4Csum,
  ipv4Df,
  ipv4Dst,
  ipv4Emit,
  ipv4FillCsum,
  ipv4FragOffset,
  ipv4HeaderLen,
  ipv4Id,
  ipv4IsFirstFragment,
  ipv4IsFragment,
  ipv4Mf,
  ipv4Parse,
  ipv4Proto,
  ipv4SetCsum,
  ipv4SetDst,
  ipv4SetFlagsFrag,
  ipv4SetId,
  ipv4SetSrc,
  ipv4SetTtl,
  ipv4SetTtlWithCsum,
  ipv4Src,
  ipv4TotalLen,
  ipv4Tos,
  ipv4Ttl,
  ipv4Version,
} from '../../src/wire/ipv4.ts';
import { IPPROTO_TCP, IPPROTO_UDP } from '../../src/wire/proto.ts';
import { TCP_SYN, UDP_DNS_QUERY, UDP_WITH_IP_OPTIONS } from './golden.ts';
import { guardsIntact, oddView } from './helpers.ts';

const IP_10_244_1_5 = 0x0af40105;
const IP_10_96_0_10 = 0x0a60000a;

describe('ipv4 deconstruct (getters over golden bytes, odd offset)', () => {
  it('reads every field of the TCP SYN header', () => {
    const v = oddView(TCP_SYN);
    expect(ipv4Check(v, 0, v.length)).toBe(IPV4_OK);
    expect(ipv4Version(v, 0)).toBe(4);
    expect(ipv4HeaderLen(v, 0)).toBe(20);
    expect(ipv4Tos(v, 0)).toBe(0);
    expect(ipv4TotalLen(v, 0)).toBe(60);
    expect(ipv4Id(v, 0)).toBe(0xbf7f);
    expect(ipv4Df(v, 0)).toBe(true);
    expect(ipv4Mf(v, 0)).toBe(false);
    expect(ipv4FragOffset(v, 0)).toBe(0);
    expect(ipv4IsFragment(v, 0)).toBe(false);
    expect(ipv4IsFirstFragment(v, 0)).toBe(true);
    expect(ipv4Ttl(v, 0)).toBe(64);
    expect(ipv4Proto(v, 0)).toBe(IPPROTO_TCP);
    expect(ipv4Csum(v, 0)).toBe(0x64da);
    expect(ipv4Src(v, 0)).toBe(IP_10_244_1_5);
    expect(ipv4Dst(v, 0)).toBe(IP_10_96_0_10);
  });

  it('addresses above 127.255.255.255 read as int32, the same 32 bits as the u32', () => {
    const p = TCP_SYN.slice();
    p.set([192, 168, 0, 1], 12);
    p.set([172, 30, 0, 11], 16);
    // int32 on the fast path: an unsigned value >= 2^31 would be a heap number in V8
    expect(ipv4Src(p, 0)).toBe(0xc0a80001 | 0);
    expect(ipv4Src(p, 0) >>> 0).toBe(0xc0a80001);
    expect(ipv4Dst(p, 0)).toBe(0xac1e000b | 0);
    expect(ipv4Dst(p, 0) >>> 0).toBe(0xac1e000b);
  });

  it('reads IHL 6 (options) and finds the L4 header after them', () => {
    const v = oddView(UDP_WITH_IP_OPTIONS);
    expect(ipv4Check(v, 0, v.length)).toBe(IPV4_OK);
    expect(ipv4HeaderLen(v, 0)).toBe(24);
    expect(ipv4Proto(v, 0)).toBe(IPPROTO_UDP);
    expect(ipv4Df(v, 0)).toBe(false);
    const l4 = ipv4HeaderLen(v, 0);
    expect((v[l4] << 8) | v[l4 + 1]).toBe(5000);
  });

  it('fragment flags: MF with offset 0 is the first fragment; offset > 0 is not', () => {
    const p = UDP_DNS_QUERY.slice();
    ipv4SetFlagsFrag(p, 0, false, true, 0);
    expect(ipv4IsFragment(p, 0)).toBe(true);
    expect(ipv4IsFirstFragment(p, 0)).toBe(true);
    expect(ipv4Mf(p, 0)).toBe(true);
    ipv4SetFlagsFrag(p, 0, false, false, 185);
    expect(ipv4IsFragment(p, 0)).toBe(true);
    expect(ipv4IsFirstFragment(p, 0)).toBe(false);
    expect(ipv4FragOffset(p, 0)).toBe(185);
    expect(ipv4Mf(p, 0)).toBe(false);
    ipv4SetFlagsFrag(p, 0, true, false, 0x1fff);
    expect(ipv4FragOffset(p, 0)).toBe(0x1fff);
    expect(ipv4Df(p, 0)).toBe(true);
  });
});

describe('ipv4 construct (setters, odd offset)', () => {
  it('rebuilds the TCP SYN header from a scrambled copy', () => {
    const v = oddView(TCP_SYN);
    v.fill(0x5a, 0, 20);
    v[0] = 0x45;
    v[1] = 0;
    v[2] = 0;
    v[3] = 60;
    ipv4SetId(v, 0, 0xbf7f);
    ipv4SetFlagsFrag(v, 0, true, false, 0);
    ipv4SetTtl(v, 0, 64);
    v[9] = IPPROTO_TCP;
    ipv4SetSrc(v, 0, IP_10_244_1_5);
    ipv4SetDst(v, 0, IP_10_96_0_10);
    ipv4SetCsum(v, 0, 0);
    ipv4FillCsum(v, 0);
    expect([...v]).toEqual([...TCP_SYN]);
    expect(guardsIntact(v)).toBe(true);
  });

  it('setTtlWithCsum keeps the header checksum valid', () => {
    const v = oddView(UDP_WITH_IP_OPTIONS);
    ipv4SetTtlWithCsum(v, 0, 1);
    expect(ipv4Ttl(v, 0)).toBe(1);
    expect(ipv4Check(v, 0, v.length)).toBe(IPV4_OK);
  });
});

describe('ipv4 parse / emit (repr)', () => {
  const synRepr: Ipv4Repr = {
    tos: 0,
    id: 0xbf7f,
    df: true,
    mf: false,
    fragOffset: 0,
    ttl: 64,
    proto: IPPROTO_TCP,
    src: IP_10_244_1_5,
    dst: IP_10_96_0_10,
    options: new Uint8Array(0),
    payloadLen: 40,
  };

  it('parses the SYN header into its repr', () => {
    expect(ipv4Parse(oddView(TCP_SYN), 0, 60)).toEqual(synRepr);
  });

  it('emits the SYN header byte for byte', () => {
    const v = oddView(new Uint8Array(20));
    expect(ipv4Emit(synRepr, v, 0)).toBe(20);
    expect([...v]).toEqual([...TCP_SYN.subarray(0, 20)]);
    expect(guardsIntact(v)).toBe(true);
  });

  it('round-trips a header with options', () => {
    const r = ipv4Parse(UDP_WITH_IP_OPTIONS, 0, UDP_WITH_IP_OPTIONS.length);
    expect([...r.options]).toEqual([0x94, 0x04, 0x00, 0x00]);
    const out = new Uint8Array(24);
    expect(ipv4Emit(r, out, 0)).toBe(24);
    expect([...out]).toEqual([...UDP_WITH_IP_OPTIONS.subarray(0, 24)]);
  });

  it('parse throws with the check failure name', () => {
    expect(() => ipv4Parse(TCP_SYN, 0, 19)).toThrow('ipv4: truncated');
  });
});

describe('ipv4Check error codes (truncation and malformation)', () => {
  const syn = () => TCP_SYN.slice();

  it('accepts a packet shorter than the buffer (Ethernet padding)', () => {
    const padded = new Uint8Array(80);
    padded.set(TCP_SYN);
    expect(ipv4Check(padded, 0, 80)).toBe(IPV4_OK);
  });

  it('TRUNCATED below 20 bytes, at every length', () => {
    for (let n = 0; n < 20; n++) expect(ipv4Check(TCP_SYN, 0, n)).toBe(IPV4_ERR_TRUNCATED);
  });

  it('TRUNCATED when end lies beyond the buffer (end is clamped)', () => {
    expect(ipv4Check(TCP_SYN.subarray(0, 19), 0, 60)).toBe(IPV4_ERR_TRUNCATED);
  });

  it('VERSION when the version nibble is not 4', () => {
    const p = syn();
    p[0] = 0x65;
    expect(ipv4Check(p, 0, p.length)).toBe(IPV4_ERR_VERSION);
  });

  it('IHL when IHL < 5', () => {
    for (const ihl of [0, 1, 4]) {
      const p = syn();
      p[0] = 0x40 | ihl;
      expect(ipv4Check(p, 0, p.length)).toBe(IPV4_ERR_IHL);
    }
  });

  it('TRUNCATED when IHL*4 runs past end', () => {
    const p = UDP_WITH_IP_OPTIONS;
    expect(ipv4Check(p, 0, 23)).toBe(IPV4_ERR_TRUNCATED);
    expect(ipv4Check(p, 0, 24)).toBe(IPV4_ERR_TOTLEN);
  });

  it('TOTLEN when total length < header length or runs past end', () => {
    const p = syn();
    p[2] = 0;
    p[3] = 19;
    ipv4FillCsum(p, 0);
    expect(ipv4Check(p, 0, p.length)).toBe(IPV4_ERR_TOTLEN);
    expect(ipv4Check(TCP_SYN, 0, 59)).toBe(IPV4_ERR_TOTLEN);
    const q = syn();
    q[3] = 61;
    ipv4FillCsum(q, 0);
    expect(ipv4Check(q, 0, q.length)).toBe(IPV4_ERR_TOTLEN);
  });

  it('CSUM when any header bit flips, including in options', () => {
    for (const at of [1, 8, 12, 19]) {
      const p = syn();
      p[at] ^= 0x01;
      expect(ipv4Check(p, 0, p.length)).toBe(IPV4_ERR_CSUM);
    }
    const q = UDP_WITH_IP_OPTIONS.slice();
    q[22] ^= 0x80;
    expect(ipv4Check(q, 0, q.length)).toBe(IPV4_ERR_CSUM);
  });

  it('checks at an odd offset against the absolute end', () => {
    const v = oddView(TCP_SYN);
    const big = new Uint8Array(v.buffer);
    expect(ipv4Check(big, v.byteOffset, v.byteOffset + 60)).toBe(IPV4_OK);
    expect(ipv4Check(big, v.byteOffset, v.byteOffset + 59)).toBe(IPV4_ERR_TOTLEN);
  });

  it('quoted headers may announce more than is there', () => {
    const cut = TCP_SYN.subarray(0, 28);
    expect(ipv4Check(cut, 0, 28)).toBe(IPV4_ERR_TOTLEN);
    expect(ipv4CheckQuoted(cut, 0, 28)).toBe(IPV4_OK);
    expect(ipv4CheckQuoted(cut, 0, 19)).toBe(IPV4_ERR_TRUNCATED);
    const p = syn();
    p[0] = 0x44;
    expect(ipv4CheckQuoted(p, 0, 28)).toBe(IPV4_ERR_IHL);
  });
});

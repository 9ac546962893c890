// virtio_net_hdr: parse / emit against the bytes a real kernel (Linux 6.18, tun.c with
// TUNSETVNETLE) handed a TUN reader for one UDP_SEGMENT send of 10 x 1000 bytes from
// 10.99.0.1:40000 to 10.99.0.7:9999 (test/tun/fixtures/tun-offload.ts prints them), and the
// validation contract: each malformed header its own error, never a read past the end.
import { describe, expect, it } from 'vitest';
import { csumFold, pseudoHeaderSum } from '../../src/wire/checksum.ts';
import {
  VNET_ERR_CSUM,
  VNET_ERR_GSO_SIZE,
  VNET_ERR_GSO_TYPE,
  VNET_ERR_HDR_LEN,
  VNET_ERR_TRUNCATED,
  VNET_F_NEEDS_CSUM,
  VNET_GSO_ECN,
  VNET_GSO_TCPV4,
  VNET_GSO_TCPV6,
  VNET_GSO_UDP,
  VNET_GSO_UDP_L4,
  VNET_HDR_LEN,
  VNET_OK,
  type VnetHdrRepr,
  vnetCheck,
  vnetEmit,
  vnetExtraBytes,
  vnetParse,
  vnetSegments,
  vnetZero,
} from '../../src/wire/virtio.ts';
import { buildTcp, put16 } from '../datapath/harness.ts';
import { hex, oddView } from './helpers.ts';

// Do not compute: the kernel's bytes. virtio_net_hdr (10) + IPv4 (20) + UDP header (8).
const KERNEL_UDP_GSO_HEAD = Uint8Array.of(
  0x01,
  0x05,
  0x1c,
  0x00,
  0xe8,
  0x03,
  0x14,
  0x00,
  0x06,
  0x00,
  0x45,
  0x00,
  0x27,
  0x2c,
  0x50,
  0xde,
  0x00,
  0x00,
  0x40,
  0x11,
  0xee,
  0x15,
  0x0a,
  0x63,
  0x00,
  0x01,
  0x0a,
  0x63,
  0x00,
  0x07,
  0x9c,
  0x40,
  0x27,
  0x0f,
  0x27,
  0x18,
  0x3b,
  0xf7,
);
const KERNEL_HDR: VnetHdrRepr = {
  flags: VNET_F_NEEDS_CSUM,
  gsoType: VNET_GSO_UDP_L4,
  hdrLen: 28,
  gsoSize: 1000,
  csumStart: 20,
  csumOffset: 6,
};

/** The whole read: the golden head, then the 10 000 payload bytes of the send. */
function kernelRead(): Uint8Array {
  const p = new Uint8Array(KERNEL_UDP_GSO_HEAD.length + 10_000);
  p.set(KERNEL_UDP_GSO_HEAD);
  for (let i = 0; i < 10_000; i++) p[38 + i] = (Math.floor(i / 1000) + (i % 1000)) & 0xff;
  return p;
}

/** A TCP super-packet: 20 + 32 bytes of headers (timestamps), `payload` bytes, MSS `mss`. */
function tcpSuper(payload: number, mss: number, hdr: Partial<VnetHdrRepr> = {}): Uint8Array {
  const ipPkt = buildTcp({
    src: '10.244.1.2',
    dst: '10.96.0.10',
    sport: 40000,
    dport: 80,
    flags: 0x18,
  });
  const pkt = new Uint8Array(VNET_HDR_LEN + 20 + 32 + payload);
  pkt.set(ipPkt.subarray(0, 40), VNET_HDR_LEN);
  pkt[VNET_HDR_LEN + 20 + 12] = 8 << 4; // data offset 8 words: 12 option bytes
  put16(pkt, VNET_HDR_LEN + 2, 20 + 32 + payload);
  vnetEmit(
    {
      flags: VNET_F_NEEDS_CSUM,
      gsoType: VNET_GSO_TCPV4,
      hdrLen: 52,
      gsoSize: mss,
      csumStart: 20,
      csumOffset: 16,
      ...hdr,
    },
    pkt,
    0,
  );
  return pkt;
}

describe('virtio_net_hdr', () => {
  it('parse: the kernel header of a UDP_L4 super-packet', () => {
    expect(vnetParse(KERNEL_UDP_GSO_HEAD, 0)).toEqual(KERNEL_HDR);
  });

  it('emit: the same bytes back, at an odd offset of a larger buffer', () => {
    const v = oddView(new Uint8Array(VNET_HDR_LEN));
    vnetEmit(KERNEL_HDR, v, 0);
    expect(hex(v.subarray(0, VNET_HDR_LEN))).toBe(hex(KERNEL_UDP_GSO_HEAD.subarray(0, 10)));
  });

  it('the kernel put the folded pseudo-header sum, full UDP length, in the checksum field', () => {
    const seed = csumFold(pseudoHeaderSum(KERNEL_UDP_GSO_HEAD, VNET_HDR_LEN, 17, 10_008));
    expect(seed).toBe(0x3bf7);
  });

  it('check: the kernel read passes; 10 segments, 9 repeated headers of 28 bytes', () => {
    const p = kernelRead();
    expect(vnetCheck(p, 0, p.length)).toBe(VNET_OK);
    expect(vnetSegments(p, 0, p.length)).toBe(10);
    expect(vnetExtraBytes(p, 0, p.length)).toBe(9 * 28);
  });

  it('check: TCP super-packet, segments from the TCP header length and the MSS', () => {
    const p = tcpSuper(64_000, 1448);
    expect(vnetCheck(p, 0, p.length)).toBe(VNET_OK);
    expect(vnetSegments(p, 0, p.length)).toBe(Math.ceil(64_000 / 1448));
    expect(vnetExtraBytes(p, 0, p.length)).toBe((Math.ceil(64_000 / 1448) - 1) * 52);
    // ECN may ride on a TCP type
    const e = tcpSuper(4000, 1448, { gsoType: VNET_GSO_TCPV4 | VNET_GSO_ECN });
    expect(vnetCheck(e, 0, e.length)).toBe(VNET_OK);
  });

  it('a payload within gso_size is one packet: the kernel does not treat it as GSO', () => {
    const p = tcpSuper(1000, 1448);
    expect(vnetSegments(p, 0, p.length)).toBe(1);
    expect(vnetExtraBytes(p, 0, p.length)).toBe(0);
  });

  it('a plain packet: the zero header', () => {
    const p = new Uint8Array(VNET_HDR_LEN + 40).fill(0xaa);
    p.set(
      buildTcp({ src: '10.0.0.1', dst: '10.0.0.2', sport: 1, dport: 2, flags: 2 }),
      VNET_HDR_LEN,
    );
    vnetZero(p, 0);
    expect([...p.subarray(0, VNET_HDR_LEN)]).toEqual(new Array(10).fill(0));
    expect(vnetCheck(p, 0, p.length)).toBe(VNET_OK);
    expect(vnetSegments(p, 0, p.length)).toBe(1);
  });

  it('check: each malformed header has its own error', () => {
    const cases: [string, Uint8Array, number][] = [];
    const p = kernelRead();
    cases.push(['shorter than the header', p.subarray(0, 9), VNET_ERR_TRUNCATED]);
    const mut = (f: (h: VnetHdrRepr) => void) => {
      const q = p.slice();
      const h = { ...KERNEL_HDR };
      f(h);
      vnetEmit(h, q, 0);
      return q;
    };
    cases.push([
      'unknown gso_type 9',
      mut((h) => {
        h.gsoType = 9;
      }),
      VNET_ERR_GSO_TYPE,
    ]);
    cases.push([
      'UFO',
      mut((h) => {
        h.gsoType = VNET_GSO_UDP;
      }),
      VNET_ERR_GSO_TYPE,
    ]);
    cases.push([
      'TCPV6 on IPv4',
      mut((h) => {
        h.gsoType = VNET_GSO_TCPV6;
      }),
      VNET_ERR_GSO_TYPE,
    ]);
    cases.push([
      'TCPV4 on a UDP packet',
      mut((h) => {
        h.gsoType = VNET_GSO_TCPV4;
      }),
      VNET_ERR_GSO_TYPE,
    ]);
    cases.push([
      'ECN on UDP_L4',
      mut((h) => {
        h.gsoType = VNET_GSO_UDP_L4 | VNET_GSO_ECN;
      }),
      VNET_ERR_GSO_TYPE,
    ]);
    cases.push([
      'ECN alone',
      mut((h) => {
        h.gsoType = VNET_GSO_ECN;
      }),
      VNET_ERR_GSO_TYPE,
    ]);
    cases.push([
      'gso_size 0 with GSO',
      mut((h) => {
        h.gsoSize = 0;
      }),
      VNET_ERR_GSO_SIZE,
    ]);
    cases.push([
      'UDP_L4 of 100 segments',
      mut((h) => {
        h.gsoSize = 100;
      }),
      VNET_ERR_GSO_SIZE,
    ]);
    cases.push([
      'hdr_len > length',
      mut((h) => {
        h.hdrLen = 10_029;
      }),
      VNET_ERR_HDR_LEN,
    ]);
    cases.push([
      'csum_start past the packet',
      mut((h) => {
        h.csumStart = 10_027;
      }),
      VNET_ERR_CSUM,
    ]);
    cases.push([
      'csum_start not at L4',
      mut((h) => {
        h.csumStart = 24;
      }),
      VNET_ERR_CSUM,
    ]);
    cases.push([
      'csum_offset 16 on UDP',
      mut((h) => {
        h.csumOffset = 16;
      }),
      VNET_ERR_CSUM,
    ]);
    cases.push([
      'GSO without NEEDS_CSUM',
      mut((h) => {
        h.flags = 0;
      }),
      VNET_ERR_CSUM,
    ]);
    for (const [what, q, want] of cases)
      expect([what, vnetCheck(q, 0, q.length)]).toEqual([what, want]);
    // the same headers without GSO: the GSO-only rules do not apply
    const plain = mut((h) => {
      h.gsoType = 0;
      h.gsoSize = 0;
    });
    expect(vnetCheck(plain, 0, plain.length)).toBe(VNET_OK);
  });

  it('check: never reads past end (the bytes after it cannot change an answer)', () => {
    const whole = kernelRead();
    for (let n = 0; n <= 60; n++) {
      const answers = [0x00, 0xaa, 0xff].map((fill) => {
        const b = new Uint8Array(80).fill(fill);
        b.set(whole.subarray(0, n));
        return [vnetCheck(b, 0, n), vnetSegments(b, 0, n), vnetExtraBytes(b, 0, n)].join();
      });
      expect(new Set(answers).size).toBe(1);
    }
  });
});

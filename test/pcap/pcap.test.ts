import { describe, expect, it } from 'vitest';
import {
  LINKTYPE_ETHERNET,
  LINKTYPE_IPV4,
  LINKTYPE_LINUX_SLL,
  LINKTYPE_LINUX_SLL2,
  LINKTYPE_RAW,
  PcapError,
} from '../../src/pcap/format.ts';
import { PcapReader, readPcap } from '../../src/pcap/reader.ts';
import { PcapWriter } from '../../src/pcap/writer.ts';
import { icmpEcho, SYN, tcp, udp } from '../fixtures/packets.ts';
import { craftPcap, ether } from '../fixtures/pcap-craft.ts';

const P1 = tcp({
  src: '10.244.0.5',
  sport: 40000,
  dst: '10.96.0.10',
  dport: 80,
  flags: SYN,
  seq: 1,
});
const P2 = udp({ src: '10.244.0.5', sport: 5000, dst: '10.96.0.53', dport: 53, data: 'query' });
const P3 = icmpEcho({ src: '10.244.0.5', dst: '10.96.0.10', id: 7, seq: 1 });
const IPV6 = new Uint8Array([0x60, 0, 0, 0, 0, 0, 59, 64, ...new Array(32).fill(0)]);

const simplify = (bytes: Uint8Array) =>
  readPcap(bytes).packets.map((p) => ({
    record: p.record,
    tsSec: p.tsSec,
    tsNsec: p.tsNsec,
    origLen: p.origLen,
    data: [...p.data],
  }));

describe('PcapWriter', () => {
  it('writes a little-endian µs LINKTYPE_RAW file header', () => {
    const head = [...new PcapWriter().bytes()];
    expect(head).toEqual([
      0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0x04, 0x00, 101, 0, 0,
      0,
    ]);
  });

  it('round-trips packets and timestamps (ns cut to µs) through the reader', () => {
    const w = new PcapWriter();
    w.write(P1, 0, P1.length, 1700000000, 1_234_567);
    w.write(P2, 0, P2.length, 1700000001, 999_999_999);
    w.write(P3, 0, P3.length, 1700000002, 0);
    const { header, packets, skipped } = readPcap(w.bytes());
    expect(header).toEqual({
      bigEndian: false,
      nanos: false,
      versionMajor: 2,
      versionMinor: 4,
      snaplen: 262144,
      linkType: LINKTYPE_RAW,
    });
    expect(skipped).toBe(0);
    expect(packets.map((p) => [p.record, p.tsSec, p.tsNsec, p.origLen, [...p.data]])).toEqual([
      [0, 1700000000, 1_234_000, P1.length, [...P1]],
      [1, 1700000001, 999_999_000, P2.length, [...P2]],
      [2, 1700000002, 0, P3.length, [...P3]],
    ]);
  });

  it('writes the bytes pkt[off, off+len) only', () => {
    const big = new Uint8Array(P1.length + 10);
    big.set(P1, 7);
    const w = new PcapWriter();
    w.write(big, 7, P1.length, 1, 0);
    expect([...readPcap(w.bytes()).packets[0].data]).toEqual([...P1]);
  });

  it('cuts packets at snaplen and keeps their original length', () => {
    const w = new PcapWriter(30);
    w.write(P2, 0, P2.length, 1, 0);
    const [p] = readPcap(w.bytes()).packets;
    expect([p.data.length, p.origLen]).toEqual([30, P2.length]);
    expect([...p.data]).toEqual([...P2.subarray(0, 30)]);
  });

  it('grows past its initial buffer', () => {
    const w = new PcapWriter();
    const big = new Uint8Array(1500);
    for (let i = 0; i < 100; i++) {
      big[0] = 0x45;
      big[1] = i;
      w.write(big, 0, big.length, i, 0);
    }
    const { packets } = readPcap(w.bytes());
    expect(packets.length).toBe(100);
    expect(packets.map((p) => p.data[1])).toEqual([...Array(100).keys()]);
    expect(w.count).toBe(100);
  });
});

describe('PcapReader', () => {
  const records = [
    { tsSec: 10, frac: 500, data: P1 },
    { tsSec: 11, frac: 7, data: P2 },
  ];

  it('reads big-endian µs files', () => {
    const be = craftPcap({ bigEndian: true, nanos: false, linkType: LINKTYPE_RAW, records });
    const le = craftPcap({ bigEndian: false, nanos: false, linkType: LINKTYPE_RAW, records });
    expect(be.subarray(0, 4)).toEqual(new Uint8Array([0xa1, 0xb2, 0xc3, 0xd4]));
    expect(new PcapReader(be).header.bigEndian).toBe(true);
    expect(simplify(be)).toEqual(simplify(le));
    expect(simplify(be).map((p) => [p.tsSec, p.tsNsec])).toEqual([
      [10, 500_000],
      [11, 7_000],
    ]);
  });

  it('reads nanosecond files in both byte orders', () => {
    for (const bigEndian of [false, true]) {
      const f = craftPcap({ bigEndian, nanos: true, linkType: LINKTYPE_RAW, records });
      const r = new PcapReader(f);
      expect(r.header.nanos).toBe(true);
      expect(r.next()).toBe(true);
      expect([r.tsSec, r.tsNsec, r.timeMs()]).toEqual([10, 500, 10000.0005]);
      expect(r.next()).toBe(true);
      expect([r.tsSec, r.tsNsec]).toEqual([11, 7]);
      expect(r.next()).toBe(false);
    }
  });

  it('reads a file that sits at an odd offset inside a larger buffer', () => {
    const f = craftPcap({ bigEndian: false, nanos: false, linkType: LINKTYPE_RAW, records });
    const big = new Uint8Array(f.length + 8);
    big.fill(0xee);
    big.set(f, 3);
    expect(simplify(big.subarray(3, 3 + f.length))).toEqual(simplify(f));
  });

  it('strips Ethernet headers, 802.1Q and QinQ tags, and skips non-IPv4 frames', () => {
    const f = craftPcap({
      bigEndian: false,
      nanos: false,
      linkType: LINKTYPE_ETHERNET,
      records: [
        { tsSec: 1, frac: 0, data: ether(0x0806, new Uint8Array(28)) }, // ARP
        { tsSec: 2, frac: 0, data: ether(0x0800, P1) },
        { tsSec: 3, frac: 0, data: ether(0x86dd, IPV6) },
        { tsSec: 4, frac: 0, data: ether(0x0800, P2, [{ tpid: 0x8100, vid: 42 }]) },
        {
          tsSec: 5,
          frac: 0,
          data: ether(0x0800, P3, [
            { tpid: 0x88a8, vid: 1 },
            { tpid: 0x8100, vid: 2 },
          ]),
        },
        { tsSec: 6, frac: 0, data: new Uint8Array(10) }, // runt frame
        { tsSec: 7, frac: 0, data: ether(0x86dd, IPV6, [{ tpid: 0x8100, vid: 42 }]) },
      ],
    });
    const { packets, skipped } = readPcap(f);
    expect(packets.map((p) => [p.record, p.tsSec, [...p.data]])).toEqual([
      [1, 2, [...P1]],
      [3, 4, [...P2]],
      [4, 5, [...P3]],
    ]);
    expect(skipped).toBe(4);
  });

  it('cuts Ethernet padding (frames are at least 60 bytes) at the IPv4 total length', () => {
    const padded = new Uint8Array(60);
    padded.set(ether(0x0800, P1));
    const short = ether(0x0800, P1.subarray(0, 30)); // captured short: keep what is there
    const f = craftPcap({
      bigEndian: false,
      nanos: false,
      linkType: LINKTYPE_ETHERNET,
      records: [
        { tsSec: 1, frac: 0, data: padded },
        { tsSec: 2, frac: 0, data: short },
      ],
    });
    expect(P1.length).toBe(40);
    expect(simplify(f).map((p) => p.data)).toEqual([[...P1], [...P1.subarray(0, 30)]]);
    // raw IP has no link padding: trailing bytes are the datagram's problem, passed on as captured
    const raw = craftPcap({
      bigEndian: false,
      nanos: false,
      linkType: LINKTYPE_RAW,
      records: [{ tsSec: 1, frac: 0, data: padded.subarray(14) }],
    });
    expect(simplify(raw)[0].data.length).toBe(46);
  });

  it('reads LINKTYPE_IPV4 and skips IPv6 in LINKTYPE_RAW', () => {
    const v4 = craftPcap({
      bigEndian: false,
      nanos: false,
      linkType: LINKTYPE_IPV4,
      records: [{ tsSec: 1, frac: 0, data: P1 }],
    });
    expect(simplify(v4).map((p) => p.data)).toEqual([[...P1]]);
    const raw = craftPcap({
      bigEndian: false,
      nanos: false,
      linkType: LINKTYPE_RAW,
      records: [
        { tsSec: 1, frac: 0, data: IPV6 },
        { tsSec: 2, frac: 0, data: P2 },
      ],
    });
    const c = readPcap(raw);
    expect([c.packets.map((p) => p.record), c.skipped]).toEqual([[1], 1]);
  });

  it('hands malformed raw IP (bad version, empty) to the caller: the datapath drops it with a reason', () => {
    const bad = new Uint8Array(P1);
    bad[0] = 0x55;
    const f = craftPcap({
      bigEndian: false,
      nanos: false,
      linkType: LINKTYPE_RAW,
      records: [
        { tsSec: 1, frac: 0, data: bad },
        { tsSec: 2, frac: 0, data: new Uint8Array(0) },
      ],
    });
    expect(readPcap(f).packets.map((p) => p.data.length)).toEqual([P1.length, 0]);
  });

  it('strips Linux cooked headers (v1 and v2)', () => {
    const sll = new Uint8Array(16 + P1.length);
    sll.set([0x08, 0x00], 14);
    sll.set(P1, 16);
    const sllArp = new Uint8Array(16 + 28);
    sllArp.set([0x08, 0x06], 14);
    const f1 = craftPcap({
      bigEndian: false,
      nanos: false,
      linkType: LINKTYPE_LINUX_SLL,
      records: [
        { tsSec: 1, frac: 0, data: sllArp },
        { tsSec: 2, frac: 0, data: sll },
      ],
    });
    expect(simplify(f1).map((p) => p.data)).toEqual([[...P1]]);
    const sll2 = new Uint8Array(20 + P2.length);
    sll2.set([0x08, 0x00], 0);
    sll2.set(P2, 20);
    const f2 = craftPcap({
      bigEndian: true,
      nanos: false,
      linkType: LINKTYPE_LINUX_SLL2,
      records: [{ tsSec: 1, frac: 0, data: sll2 }],
    });
    expect(simplify(f2).map((p) => p.data)).toEqual([[...P2]]);
  });

  it('rejects what it cannot read with a PcapError that says why', () => {
    const good = craftPcap({
      bigEndian: false,
      nanos: false,
      linkType: LINKTYPE_RAW,
      records: [{ tsSec: 1, frac: 0, data: P1 }],
    });
    const cases: [Uint8Array, string, RegExp][] = [
      [new Uint8Array(10), 'PCAP_TRUNCATED', /in.pcap: 10 bytes is too short/],
      [new Uint8Array(24), 'PCAP_BAD_MAGIC', /not a pcap file: magic 0x00000000/],
      [
        new Uint8Array([0x0a, 0x0d, 0x0d, 0x0a, ...new Array(28).fill(0)]),
        'PCAP_BAD_MAGIC',
        /pcapng/,
      ],
      [
        craftPcap({ bigEndian: false, nanos: false, linkType: 147, records: [] }),
        'PCAP_LINKTYPE',
        /link type 147/,
      ],
      [good.subarray(0, 30), 'PCAP_TRUNCATED', /record 0 at byte 24: truncated record header/],
      [
        good.subarray(0, good.length - 1),
        'PCAP_TRUNCATED',
        /record 0 at byte 24: 40 bytes of data run past the end/,
      ],
    ];
    for (const [bytes, code, msg] of cases) {
      let err: unknown;
      try {
        readPcap(bytes, 'in.pcap');
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(PcapError);
      expect((err as PcapError).code).toBe(code);
      expect((err as PcapError).message).toMatch(msg);
    }
  });
});

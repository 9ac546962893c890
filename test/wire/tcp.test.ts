import { describe, expect, it } from 'vitest';
import { l4ChecksumValid, l4FillCsum } from '../../src/wire/checksum.ts';
import {
  TCP_ACK,
  TCP_ERR_DOFF,
  TCP_ERR_TRUNCATED,
  TCP_OK,
  TCP_SYN,
  type TcpRepr,
  tcpAck,
  tcpCheck,
  tcpCsum,
  tcpDataOffset,
  tcpDstPort,
  tcpEmit,
  tcpFlags,
  tcpFlagsValid,
  tcpParse,
  tcpSeq,
  tcpSetAck,
  tcpSetDataOffset,
  tcpSetDstPort,
  tcpSetFlags,
  tcpSetSeq,
  tcpSetSrcPort,
  tcpSetWindow,
  tcpSrcPort,
  tcpUrgent,
  tcpWindow,
} from '../../src/wire/tcp.ts';
import { TCP_SYN as SYN_PKT, TCP_SYN_ACK } from './golden.ts';
import { guardsIntact, oddView } from './helpers.ts';

const L4 = 20;

describe('tcp deconstruct (golden SYN and SYN-ACK at an odd offset)', () => {
  it('reads the SYN', () => {
    const v = oddView(SYN_PKT);
    expect(tcpCheck(v, L4, 60)).toBe(TCP_OK);
    expect(tcpSrcPort(v, L4)).toBe(43210);
    expect(tcpDstPort(v, L4)).toBe(80);
    expect(tcpSeq(v, L4)).toBe(2214483536);
    expect(tcpAck(v, L4)).toBe(0);
    expect(tcpDataOffset(v, L4)).toBe(40);
    expect(tcpFlags(v, L4)).toBe(TCP_SYN);
    expect(tcpWindow(v, L4)).toBe(65495);
    expect(tcpCsum(v, L4)).toBe(0x1d56);
    expect(tcpUrgent(v, L4)).toBe(0);
  });

  it('reads the SYN-ACK (seq/ack above 2^31 stay positive)', () => {
    const v = oddView(TCP_SYN_ACK);
    expect(tcpFlags(v, L4)).toBe(TCP_SYN | TCP_ACK);
    expect(tcpSeq(v, L4)).toBe(277897080);
    expect(tcpAck(v, L4)).toBe(2214483537);
    const p = TCP_SYN_ACK.slice();
    tcpSetSeq(p, L4, 0xfffffffe);
    expect(tcpSeq(p, L4)).toBe(0xfffffffe);
  });
});

describe('tcp construct', () => {
  it('rebuilds the SYN header from zeros with setters, then fills the checksum', () => {
    const v = oddView(SYN_PKT);
    v.fill(0, L4, L4 + 20);
    tcpSetSrcPort(v, L4, 43210);
    tcpSetDstPort(v, L4, 80);
    tcpSetSeq(v, L4, 2214483536);
    tcpSetAck(v, L4, 0);
    tcpSetDataOffset(v, L4, 40);
    tcpSetFlags(v, L4, TCP_SYN);
    tcpSetWindow(v, L4, 65495);
    l4FillCsum(v, 0);
    expect([...v]).toEqual([...SYN_PKT]);
    expect(guardsIntact(v)).toBe(true);
  });
});

describe('tcp parse / emit', () => {
  const repr: TcpRepr = {
    srcPort: 43210,
    dstPort: 80,
    seq: 2214483536,
    ack: 0,
    flags: TCP_SYN,
    window: 65495,
    urgent: 0,
    options: SYN_PKT.slice(40, 60),
  };

  it('parses the SYN', () => {
    expect(tcpParse(oddView(SYN_PKT), L4, 60)).toEqual(repr);
  });

  it('emits the SYN (checksum filled afterwards over the pseudo-header)', () => {
    const v = oddView(SYN_PKT);
    v.fill(0x77, L4);
    expect(tcpEmit(repr, v, L4)).toBe(40);
    expect(l4ChecksumValid(v, 0)).toBe(false);
    l4FillCsum(v, 0);
    expect([...v]).toEqual([...SYN_PKT]);
    expect(guardsIntact(v)).toBe(true);
  });

  it('parse throws naming the failure', () => {
    expect(() => tcpParse(SYN_PKT, L4, 59)).toThrow('tcp: truncated');
  });
});

describe('tcpCheck error codes', () => {
  it('TRUNCATED below 20 bytes', () => {
    for (let end = L4; end < L4 + 20; end++) expect(tcpCheck(SYN_PKT, L4, end)).toBe(TCP_ERR_TRUNCATED);
  });
  it('DOFF when data offset < 5', () => {
    const p = SYN_PKT.slice();
    p[L4 + 12] = 0x40;
    expect(tcpCheck(p, L4, 60)).toBe(TCP_ERR_DOFF);
  });
  it('TRUNCATED when options run past end', () => {
    expect(tcpCheck(SYN_PKT, L4, 59)).toBe(TCP_ERR_TRUNCATED);
    expect(tcpCheck(SYN_PKT, L4, 60)).toBe(TCP_OK);
    const p = SYN_PKT.slice();
    p[L4 + 12] = 0xf0;
    expect(tcpCheck(p, L4, 60)).toBe(TCP_ERR_TRUNCATED);
  });
  it('end beyond the buffer counts as the buffer end', () => {
    expect(tcpCheck(SYN_PKT.subarray(0, 50), L4, 60)).toBe(TCP_ERR_TRUNCATED);
  });
});

describe('tcpFlagsValid (nf_conntrack_proto_tcp.c tcp_valid_flags)', () => {
  // The kernel's table as it reads: FIN 1, SYN 2, RST 4, PSH 8, ACK 16, URG 32, ECE 64, CWR 128.
  const KERNEL_VALID = new Set([2, 2 | 32, 2 | 16, 4, 4 | 16, 1 | 16, 1 | 16 | 32, 16, 16 | 32]);
  it('takes exactly the kernel table for all 256 flag bytes, PSH, ECE and CWR ignored', () => {
    for (let f = 0; f < 256; f++) {
      expect([f, tcpFlagsValid(f)]).toEqual([f, KERNEL_VALID.has(f & ~(8 | 64 | 128))]);
    }
  });
});

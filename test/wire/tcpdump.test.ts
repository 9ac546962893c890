// One tcpdump-style flag writer (src/wire/tcpdump.ts): the pcap summaries and lab compare print
// the flags of every TCP packet the same way, as tcpdump does (print-tcp.c: F S R P . U E W).

import { describe, expect, it } from 'vitest';
import { decodeIpv4 } from '../../src/lab/compare/packets.ts';
import { summarizeIpv4 } from '../../src/pcap/summary.ts';
import { tcpdumpFlags } from '../../src/wire/tcpdump.ts';
import { buildTcp } from '../datapath/harness.ts';

describe('tcpdump flags', () => {
  it("tcpdump's letters in tcpdump's order", () => {
    expect(tcpdumpFlags(0x02)).toBe('S');
    expect(tcpdumpFlags(0x12)).toBe('S.');
    expect(tcpdumpFlags(0x19)).toBe('FP.');
    expect(tcpdumpFlags(0x03)).toBe('FS');
    expect(tcpdumpFlags(0xc2)).toBe('SEW');
    expect(tcpdumpFlags(0)).toBe('none');
  });

  it('pcap summaries and lab compare print every flag combination alike', () => {
    for (let f = 0; f < 256; f++) {
      const pkt = buildTcp({ src: '10.0.0.1', dst: '10.0.0.2', sport: 1, dport: 2, flags: f });
      const summary = summarizeIpv4(pkt, 0, pkt.length);
      expect(summary).toContain(`[${tcpdumpFlags(f)}]`);
      expect(decodeIpv4(pkt)?.flags).toBe(tcpdumpFlags(f));
    }
  });
});

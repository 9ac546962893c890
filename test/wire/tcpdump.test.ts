// One tcpdump-style formatter (src/wire/tcpdump.ts): the pcap summaries and lab compare print
// TCP flags (print-tcp.c: F S R P . U E W), endpoints (addr.port) and ICMP names the same way.

import { describe, expect, it } from 'vitest';
import { decodeIpv4 } from '../../src/lab/compare/packets.ts';
import { summarizeIpv4 } from '../../src/pcap/summary.ts';
import { normaliseRun } from '../../src/lab/compare/normalise.ts';
import { tcpdumpEndpoint, tcpdumpFlags, tcpdumpIcmp } from '../../src/wire/tcpdump.ts';
import { buildTcp } from '../datapath/harness.ts';
import { ipv4 } from '../fixtures/packets.ts';

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

describe('one tcpdump formatter for endpoints and ICMP', () => {
  it('names ICMP messages as tcpdump does', () => {
    expect(tcpdumpIcmp(8, 0)).toBe('echo request');
    expect(tcpdumpIcmp(0, 0)).toBe('echo reply');
    expect(tcpdumpIcmp(3, 3)).toBe('unreachable port');
    expect(tcpdumpIcmp(3, 4)).toBe('unreachable need to frag');
    expect(tcpdumpIcmp(3, 9)).toBe('unreachable code 9');
    expect(tcpdumpIcmp(11, 0)).toBe('time exceeded');
    expect(tcpdumpIcmp(5, 1)).toBe('type 5 code 1');
    expect(tcpdumpEndpoint('10.0.0.1', 80)).toBe('10.0.0.1.80');
    expect(tcpdumpEndpoint('10.0.0.1')).toBe('10.0.0.1');
  });

  it('pcap summaries and lab compare write the same endpoints and ICMP names', () => {
    const syn = buildTcp({ src: '10.0.0.1', dst: '10.0.0.2', sport: 1234, dport: 80, flags: 2 });
    expect(summarizeIpv4(syn, 0, syn.length)).toContain('10.0.0.1.1234 > 10.0.0.2.80');
    const [cmp] = normaliseRun([{ name: 'x', packets: [decodeIpv4(syn)!] }]);
    expect(cmp!.packets[0]!.text).toMatch(/^10\.0\.0\.1\.\S+ > 10\.0\.0\.2\.80: /);
    for (const [type, code] of [
      [8, 0],
      [0, 0],
      [3, 3],
      [3, 4],
      [11, 0],
    ] as const) {
      const m = new Uint8Array(8 + 28);
      m[0] = type;
      m[1] = code;
      m.set(syn.subarray(0, 28), 8);
      const pkt = ipv4({ src: '10.0.0.2', dst: '10.0.0.1', proto: 1 }, m);
      const name = tcpdumpIcmp(type, code);
      expect(summarizeIpv4(pkt, 0, pkt.length)).toContain(`ICMP 10.0.0.2 > 10.0.0.1 ${name}`);
      const [run] = normaliseRun([{ name: 'x', packets: [decodeIpv4(pkt)!] }]);
      expect(run!.packets[0]!.text).toContain(`icmp ${name}`);
    }
  });
});

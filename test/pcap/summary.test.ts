import { describe, expect, it } from 'vitest';
import { summarizeIpv4, tcpFlagString } from '../../src/pcap/summary.ts';
import { ACK, checksum, FIN, icmpEcho, ipv4, PSH, SYN, tcp, udp } from '../fixtures/packets.ts';

const s = (p: Uint8Array) => summarizeIpv4(p, 0, p.length);

describe('summarizeIpv4', () => {
  it('describes TCP like tcpdump: ports, flags in FSRP. order, payload length', () => {
    expect(
      s(tcp({ src: '10.0.0.1', sport: 1234, dst: '10.0.0.2', dport: 80, flags: SYN | ACK })),
    ).toBe('TCP 10.0.0.1.1234 > 10.0.0.2.80 [S.] len 0');
    expect(
      s(
        tcp({
          src: '10.0.0.1',
          sport: 1234,
          dst: '10.0.0.2',
          dport: 80,
          flags: FIN | PSH | ACK,
          data: 'hi',
        }),
      ),
    ).toBe('TCP 10.0.0.1.1234 > 10.0.0.2.80 [FP.] len 2');
    expect(tcpFlagString(0)).toBe('none');
    expect(tcpFlagString(0xff)).toBe('FSRP.UEW');
  });

  it('describes UDP and ICMP echo', () => {
    expect(
      s(udp({ src: '10.0.0.1', sport: 53000, dst: '10.96.0.53', dport: 53, data: 'abc' })),
    ).toBe('UDP 10.0.0.1.53000 > 10.96.0.53.53 len 3');
    expect(s(icmpEcho({ src: '10.0.0.1', dst: '10.0.0.2', id: 9, seq: 3 }))).toBe(
      'ICMP 10.0.0.1 > 10.0.0.2 echo request id 9 seq 3',
    );
    expect(s(icmpEcho({ src: '10.0.0.2', dst: '10.0.0.1', id: 9, seq: 3, reply: true }))).toBe(
      'ICMP 10.0.0.2 > 10.0.0.1 echo reply id 9 seq 3',
    );
  });

  it('describes an ICMP error with the packet it quotes', () => {
    const orig = tcp({ src: '10.0.0.1', sport: 1234, dst: '10.96.0.99', dport: 80, flags: SYN });
    const m = new Uint8Array(8 + 28);
    m[0] = 3;
    m[1] = 3;
    m.set(orig.subarray(0, 28), 8);
    const c = checksum(m);
    m[2] = c >> 8;
    m[3] = c & 0xff;
    const err = ipv4({ src: '10.96.0.99', dst: '10.0.0.1', proto: 1 }, m);
    expect(s(err)).toBe(
      'ICMP 10.96.0.99 > 10.0.0.1 unreachable port quoting {TCP 10.0.0.1.1234 > 10.96.0.99.80}',
    );
  });

  it('describes malformed packets without throwing', () => {
    const p = tcp({ src: '10.0.0.1', sport: 1, dst: '10.0.0.2', dport: 2, flags: SYN });
    expect(s(p.subarray(0, 10))).toBe('IPv4 truncated (10 bytes)');
    const v6 = new Uint8Array(p);
    v6[0] = 0x65;
    expect(s(v6)).toBe('IP version 6 (40 bytes)');
    const ihl = new Uint8Array(p);
    ihl[0] = 0x4f;
    expect(s(ihl)).toBe('TCP 10.0.0.1 > 10.0.0.2 bad header length 60');
    expect(s(p.subarray(0, 22))).toBe('TCP 10.0.0.1 > 10.0.0.2 truncated');
    const frag = new Uint8Array(p);
    frag[6] = 0x00;
    frag[7] = 0x10;
    expect(s(frag)).toBe('TCP 10.0.0.1 > 10.0.0.2 fragment at 128');
    expect(s(ipv4({ src: '10.0.0.1', dst: '10.0.0.2', proto: 47 }, new Uint8Array(4)))).toBe(
      'proto 47 10.0.0.1 > 10.0.0.2 len 4',
    );
  });
});

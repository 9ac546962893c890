// The trace's conntrack column: new / established / reply, told from the datapath's trace
// fields and the packet's own source (ICMP echo flows are keyed by echo id, not a port).
import { describe, expect, it } from 'vitest';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import { ctStateOf, flowSource } from '../../src/pcap/replay.ts';
import { icmpEcho, SYN, tcp } from '../fixtures/packets.ts';

const u32 = (s: string) => s.split('.').reduce((a, o) => a * 256 + Number(o), 0);

describe('ctStateOf', () => {
  const dp = createDatapath({
    ctCapacity: 16,
    svcCapacity: 16,
    beCapacity: 16,
    revNatCapacity: 16,
  });
  const client = u32('10.244.0.5');
  const vip = u32('10.96.0.10');
  const backend = u32('10.244.1.5');
  const tcpFlow = dp.ct.create(6, client, vip, 40000, 80, backend, 8080, 1, 1, 1000);
  const echoFlow = dp.ct.create(1, client, vip, 77, 77, backend, 77, 1, 1, 1000);
  const state = (pkt: Uint8Array, idx: number, isNew = 0) => {
    dp.lastCtIdx = idx;
    dp.lastCtNew = isNew;
    return ctStateOf(dp, flowSource(pkt, pkt.length));
  };

  it('tells originals from replies by the packet source', () => {
    const orig = tcp({ src: '10.244.0.5', sport: 40000, dst: '10.96.0.10', dport: 80, flags: SYN });
    const reply = tcp({
      src: '10.244.1.5',
      sport: 8080,
      dst: '10.244.0.5',
      dport: 40000,
      flags: SYN,
    });
    expect([
      state(orig, tcpFlow, 1),
      state(orig, tcpFlow),
      state(reply, tcpFlow),
      state(orig, -1),
    ]).toEqual(['new', 'established', 'reply', '-']);
  });

  it('keys ICMP echo by its id', () => {
    const req = icmpEcho({ src: '10.244.0.5', dst: '10.96.0.10', id: 77, seq: 1 });
    const rep = icmpEcho({ src: '10.244.1.5', dst: '10.244.0.5', id: 77, seq: 1, reply: true });
    expect([state(req, echoFlow), state(rep, echoFlow)]).toEqual(['established', 'reply']);
  });

  it('compares a source >= 2^31 with the conntrack int32 address as the same address', () => {
    const hi = dp.ct.create(6, u32('192.168.0.5'), vip, 40001, 80, backend, 8080, 1, 1, 1000);
    const orig = tcp({
      src: '192.168.0.5',
      sport: 40001,
      dst: '10.96.0.10',
      dport: 80,
      flags: SYN,
    });
    const reply = tcp({
      src: '10.244.1.5',
      sport: 8080,
      dst: '192.168.0.5',
      dport: 40001,
      flags: SYN,
    });
    expect([state(orig, hi), state(reply, hi)]).toEqual(['established', 'reply']);
  });

  it('has no state for a packet too short to have a source', () => {
    expect(state(new Uint8Array(10), tcpFlow)).toBe('-');
  });
});

// The capture the replay tests feed to the datapath, as a client pod on node-1 would send it and
// as the backends would answer, against test/fixtures/cluster:
//
//   client 10.244.0.5 ──TCP──▶ web 10.96.0.10:80  ══DNAT══▶ 10.244.1.5:8080
//                     ◀──────  (replies from 10.244.1.5:8080 reverse-NATed to 10.96.0.10:80)
//   client ──UDP──▶ dns 10.96.0.53:53 ══DNAT══▶ 10.244.2.7:5353, and the answer back
//   client ──ping──▶ 10.96.0.10        (iptables mode: neither translated nor answered)
//   client ──SYN──▶ empty 10.96.0.99:80 (no endpoints: ICMP port unreachable from the VIP)
//   client ──UDP──▶ pod 10.244.3.3     (not a service: passed unchanged)
//   the first 12 bytes of a SYN      (malformed: dropped as truncated)
//
// Framed as Ethernet (padded to 60 bytes, as on the wire) with an ARP frame in the middle, so the
// replay also proves it strips link headers and padding and skips what is not IPv4.
import { ACK, FIN, icmpEcho, PSH, SYN, tcp, udp } from '../fixtures/packets.ts';
import { craftPcap, ether } from '../fixtures/pcap-craft.ts';

export const CLIENT = '10.244.0.5';
export const WEB_VIP = '10.96.0.10';
export const WEB_BACKEND = '10.244.1.5';
export const DNS_VIP = '10.96.0.53';
export const DNS_BACKEND = '10.244.2.7';
export const EMPTY_VIP = '10.96.0.99';
export const T0 = 1_700_000_000;

const c = { src: CLIENT, sport: 40000, dst: WEB_VIP, dport: 80 };
const b = { src: WEB_BACKEND, sport: 8080, dst: CLIENT, dport: 40000 };

/** `short`: a record cut by the capture's snaplen, so no Ethernet padding follows it. */
export const PACKETS: { what: string; data: Uint8Array | null; short?: boolean }[] = [
  { what: 'SYN', data: tcp({ ...c, flags: SYN, seq: 1000 }) },
  { what: 'SYN-ACK', data: tcp({ ...b, flags: SYN | ACK, seq: 5000, ack: 1001 }) },
  { what: 'ACK', data: tcp({ ...c, flags: ACK, seq: 1001, ack: 5001 }) },
  {
    what: 'request',
    data: tcp({ ...c, flags: PSH | ACK, seq: 1001, ack: 5001, data: 'GET / HTTP/1.0\r\n\r\n' }),
  },
  { what: 'ARP', data: null },
  {
    what: 'response',
    data: tcp({
      ...b,
      flags: PSH | ACK,
      seq: 5001,
      ack: 1019,
      data: 'HTTP/1.0 200 OK\r\n\r\nhello',
    }),
  },
  { what: 'client FIN', data: tcp({ ...c, flags: FIN | ACK, seq: 1019, ack: 5025 }) },
  { what: 'server FIN', data: tcp({ ...b, flags: FIN | ACK, seq: 5025, ack: 1020 }) },
  { what: 'last ACK', data: tcp({ ...c, flags: ACK, seq: 1020, ack: 5026 }) },
  {
    what: 'DNS query',
    data: udp({ src: CLIENT, sport: 53000, dst: DNS_VIP, dport: 53, data: 'query' }),
  },
  {
    what: 'DNS answer',
    data: udp({ src: DNS_BACKEND, sport: 5353, dst: CLIENT, dport: 53000, data: 'answer!' }),
  },
  { what: 'ping VIP', data: icmpEcho({ src: CLIENT, dst: WEB_VIP, id: 77, seq: 1 }) },
  {
    what: 'SYN to empty',
    data: tcp({ src: CLIENT, sport: 40001, dst: EMPTY_VIP, dport: 80, flags: SYN, seq: 1 }),
  },
  {
    what: 'pod to pod',
    data: udp({ src: CLIENT, sport: 7000, dst: '10.244.3.3', dport: 7000, data: 'direct' }),
  },
  { what: 'truncated', data: tcp({ ...c, flags: SYN }).subarray(0, 12), short: true },
];

/** Record i is stamped T0 + i seconds + i*1000+1 µs (distinct, sub-second parts checked). */
export function tsOf(i: number): { tsSec: number; frac: number } {
  return { tsSec: T0 + i, frac: i * 1000 + 1 };
}

export function scenarioPcap(): Uint8Array {
  return craftPcap({
    bigEndian: false,
    nanos: false,
    linkType: 1,
    records: PACKETS.map((p, i) => ({
      ...tsOf(i),
      data: p.short
        ? ether(0x0800, p.data!)
        : padded(p.data ? ether(0x0800, p.data) : ether(0x0806, new Uint8Array(28))),
    })),
  });
}

/** Ethernet frames are at least 60 bytes (without FCS): short ones carry padding after the IP datagram. */
function padded(frame: Uint8Array): Uint8Array {
  if (frame.length >= 60) return frame;
  const f = new Uint8Array(60);
  f.set(frame);
  return f;
}

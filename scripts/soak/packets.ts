// The soak's injection classes: malformed or impossible packets toward the lab's VIPs, as the
// probe crafted them, each with the reason kubetun should count it under. Sent from pod-a
// (10.244.1.2) through a raw IPPROTO_RAW socket (inject.cjs): the kernel fills in the IPv4
// header checksum and total length itself, so header damage it would repair is not in the list
// (fuzz covers it in-process).
import { buildIcmpEcho, buildTcp, buildUdp, put16, SYN, FIN } from '../../test/datapath/harness.ts';

const POD_A = '10.244.1.2';
const WEB = '10.96.0.10';
const DNS = '10.96.0.53';

export interface InjectionClass {
  name: string;
  packet: Uint8Array;
  /** the reason kubetun counts it under */
  expect: string;
}

const syn = (src: string, sport: number, ttl = 64) =>
  buildTcp({ src, dst: WEB, sport, dport: 80, flags: SYN, ttl });

export function injectionClasses(): InjectionClass[] {
  const badTcp = syn(POD_A, 42006);
  badTcp[36] ^= 0x5a; // TCP checksum (20 + 16)
  const badUdp = buildUdp({ src: POD_A, dst: DNS, sport: 42007, dport: 53, data: 'xx' });
  badUdp[26] ^= 0x5a; // UDP checksum (20 + 6)
  const shortDoff = syn(POD_A, 42009);
  shortDoff[32] = 4 << 4; // data offset 4: shorter than a TCP header
  const truncated = syn(POD_A, 42010).subarray(0, 30); // 10 bytes of TCP
  const synFin = buildTcp({ src: POD_A, dst: WEB, sport: 42011, dport: 80, flags: SYN | FIN });
  const udpLen = buildUdp({ src: POD_A, dst: DNS, sport: 42012, dport: 53, data: 'abcd' });
  put16(udpLen, 24, 200); // UDP length beyond the datagram
  return [
    { name: 'src-loopback', packet: syn('127.0.0.1', 42001), expect: 'DROP_MARTIAN_LOOPBACK' },
    { name: 'src-multicast', packet: syn('224.0.0.5', 42002), expect: 'DROP_MARTIAN_MULTICAST' },
    { name: 'src-class-e', packet: syn('240.0.0.1', 42003), expect: 'DROP_MARTIAN_CLASS_E' },
    {
      name: 'src-broadcast',
      packet: syn('255.255.255.255', 42004),
      expect: 'DROP_MARTIAN_BROADCAST',
    },
    { name: 'src-vip', packet: syn(WEB, 42005), expect: 'DROP_MARTIAN_VIP_SOURCE' },
    { name: 'bad-tcp-checksum', packet: badTcp, expect: 'DROP_BAD_L4_CSUM' },
    { name: 'bad-udp-checksum', packet: badUdp, expect: 'DROP_BAD_L4_CSUM' },
    { name: 'ttl-1', packet: syn(POD_A, 42008, 1), expect: 'REPLY_TTL_EXCEEDED' },
    { name: 'tcp-doff-4', packet: shortDoff, expect: 'a DROP_ reason' },
    { name: 'tcp-truncated', packet: truncated, expect: 'a DROP_ reason' },
    { name: 'syn-fin', packet: synFin, expect: 'INVALID (counted) or a DROP_ reason' },
    { name: 'udp-length-beyond', packet: udpLen, expect: 'a DROP_ reason' },
    {
      name: 'icmp-echo-to-vip',
      packet: buildIcmpEcho({ src: POD_A, dst: WEB, ident: 4242, seq: 1 }),
      expect: 'DROP_ECHO_TO_VIP',
    },
  ];
}

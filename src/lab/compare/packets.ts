// Decoding captured IPv4 and IPv6 packets into plain records for the comparison (slow path: a capture
// holds tens of packets). Only what a data plane can change, or what tells two packets apart,
// is kept; the normaliser (normalise.ts) then decides which fields are legitimately random.
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |Version|  IHL  |Type of Service|          Total Length         |
//   |         Identification        |Flags|      Fragment Offset    |
//   |  Time to Live |    Protocol   |         Header Checksum       |
//   |                       Source Address                          |
//   |                    Destination Address                        |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+   (RFC 791)
//
// IPv6 (decodeIpv6): the hop limit stands in the ttl field; ipId 0, df false and ipCsumOk true
// (IPv6 has none of them); the L4 header is found past the extension headers (src/wire/ipv6.ts);
// ICMPv6 is proto 'icmp6' with its type and code, an error's quoted packet in inner.
//
// Fields are read with src/wire's accessors once the bytes are known to be there; TCP flags are
// written as tcpdump writes them (src/wire/tcpdump.ts, shared with the pcap summaries).

import { u32ToIpv4 } from '../../wire/addr.ts';
import { csumAdd, csumFold } from '../../wire/checksum.ts';
import {
  ICMP_DEST_UNREACH,
  ICMP_ECHO,
  ICMP_ECHO_REPLY,
  ICMP_HEADER_LEN,
  ICMP_TIME_EXCEEDED,
  icmpCode,
  icmpEchoId,
  icmpEchoSeq,
  icmpType,
} from '../../wire/icmp.ts';
import {
  IPV4_MIN_HEADER_LEN,
  ipv4Df,
  ipv4Dst,
  ipv4HeaderLen,
  ipv4Id,
  ipv4Proto,
  ipv4Src,
  ipv4TotalLen,
  ipv4Ttl,
  ipv4Version,
} from '../../wire/ipv4.ts';
import { IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP } from '../../wire/proto.ts';
import { wordsToIpv6 } from '../../wire/addr6.ts';
import {
  IPV6_HEADER_LEN,
  IPV6_OK,
  ipv6Check,
  ipv6CheckQuoted,
  ipv6DstWord,
  ipv6HopLimit,
  ipv6L4Off,
  ipv6L4Proto,
  ipv6QuotedL4Off,
  ipv6QuotedL4Proto,
  ipv6SrcWord,
} from '../../wire/ipv6.ts';
import {
  TCP_MIN_HEADER_LEN,
  tcpAck,
  tcpDataOffset,
  tcpDstPort,
  tcpFlags,
  tcpSeq,
  tcpSrcPort,
  tcpWindow,
} from '../../wire/tcp.ts';
import { tcpdumpFlags } from '../../wire/tcpdump.ts';
import { UDP_HEADER_LEN, udpDstPort, udpLength, udpSrcPort } from '../../wire/udp.ts';

export interface Pkt {
  /** capture time, microseconds */
  tUs: number;
  src: string;
  dst: string;
  proto: 'tcp' | 'udp' | 'icmp' | 'icmp6' | number;
  ttl: number;
  ipId: number;
  df: boolean;
  /** the IPv4 header checksum verifies */
  ipCsumOk: boolean;
  sport?: number;
  dport?: number;
  /** TCP: flags as tcpdump writes them (S, S., ., P., F., R.) */
  flags?: string;
  seq?: number;
  ack?: number;
  win?: number;
  /** TCP options in order, values kept except timestamps ("mss 1460,sackOK,TS,nop,wscale 7") */
  opts?: string;
  /** L4 payload length */
  len: number;
  icmpType?: number;
  icmpCode?: number;
  /** ICMP echo identifier / sequence */
  icmpId?: number;
  icmpSeq?: number;
  /** ICMP error: the embedded packet's header */
  inner?: Pkt;
}

const be16 = (b: Uint8Array, o: number) => (b[o]! << 8) | b[o + 1]!;

function ipCsumOk(b: Uint8Array, ihl: number): boolean {
  return csumFold(csumAdd(b, 0, ihl)) === 0xffff;
}

function protoOf(n: number): Pkt['proto'] {
  if (n === IPPROTO_TCP) return 'tcp';
  if (n === IPPROTO_UDP) return 'udp';
  if (n === IPPROTO_ICMPV6) return 'icmp6';
  return n === IPPROTO_ICMP ? 'icmp' : n;
}

/** ICMPv6 types the decoder reads further (RFC 4443). */
const ICMP6_ECHO_REQUEST = 128;
const ICMP6_ECHO_REPLY = 129;
/** destination unreachable, packet too big, time exceeded, parameter problem */
const ICMP6_ERRORS = new Set([1, 2, 3, 4]);

/** An IPv4 or IPv6 packet, by its version nibble; undefined if unreadable. */
export function decodeIp(b: Uint8Array, tUs = 0): Pkt | undefined {
  return b.length > 0 && b[0]! >> 4 === 6 ? decodeIpv6(b, tUs) : decodeIpv4(b, tUs);
}

/** An IPv6 packet (or, for ICMPv6 errors, a truncated quoted one); undefined if unreadable. */
export function decodeIpv6(b: Uint8Array, tUs = 0, embedded = false): Pkt | undefined {
  const ok = embedded ? ipv6CheckQuoted(b, 0, b.length) : ipv6Check(b, 0, b.length);
  if (ok !== IPV6_OK) return undefined;
  const words = (get: (buf: Uint8Array, off: number, k: number) => number) =>
    wordsToIpv6([0, 1, 2, 3].map((k) => get(b, 0, k)));
  const proto = protoOf(embedded ? ipv6QuotedL4Proto(b, 0, b.length) : ipv6L4Proto(b, 0));
  const p: Pkt = {
    tUs,
    src: words(ipv6SrcWord),
    dst: words(ipv6DstWord),
    proto,
    ttl: ipv6HopLimit(b, 0),
    ipId: 0,
    df: false,
    ipCsumOk: true,
    len: 0,
  };
  const off = embedded ? ipv6QuotedL4Off(b, 0, b.length) : ipv6L4Off(b, 0);
  if (off < IPV6_HEADER_LEN) return p;
  const l4 = b.subarray(off);
  if (decodeTcpUdp(p, l4, embedded)) return p;
  if (proto === 'icmp6' && l4.length >= ICMP_HEADER_LEN) {
    p.icmpType = icmpType(l4, 0);
    p.icmpCode = icmpCode(l4, 0);
    p.len = l4.length - ICMP_HEADER_LEN;
    if (p.icmpType === ICMP6_ECHO_REQUEST || p.icmpType === ICMP6_ECHO_REPLY) {
      p.icmpId = icmpEchoId(l4, 0);
      p.icmpSeq = icmpEchoSeq(l4, 0);
    } else if (!embedded && ICMP6_ERRORS.has(p.icmpType))
      p.inner = decodeIpv6(l4.subarray(ICMP_HEADER_LEN), tUs, true);
  }
  return p;
}

/** An IPv4 packet (or, for ICMP errors, a truncated embedded one); undefined if unreadable. */
export function decodeIpv4(b: Uint8Array, tUs = 0, embedded = false): Pkt | undefined {
  if (b.length < IPV4_MIN_HEADER_LEN || ipv4Version(b, 0) !== 4) return undefined;
  const ihl = ipv4HeaderLen(b, 0);
  const total = Math.min(ipv4TotalLen(b, 0), b.length);
  if (ihl < IPV4_MIN_HEADER_LEN || b.length < ihl) return undefined;
  const proto = protoOf(ipv4Proto(b, 0));
  const p: Pkt = {
    tUs,
    src: u32ToIpv4(ipv4Src(b, 0) >>> 0),
    dst: u32ToIpv4(ipv4Dst(b, 0) >>> 0),
    proto,
    ttl: ipv4Ttl(b, 0),
    ipId: ipv4Id(b, 0),
    df: ipv4Df(b, 0),
    ipCsumOk: ipCsumOk(b, ihl),
    len: 0,
  };
  const l4 = b.subarray(ihl, embedded ? b.length : total);
  if (decodeTcpUdp(p, l4, embedded)) return p;
  if (proto === 'icmp' && l4.length >= ICMP_HEADER_LEN) decodeIcmp(p, l4, tUs, embedded);
  return p;
}

/** The TCP or UDP header of p (either family) from l4; false for another protocol or too short. */
function decodeTcpUdp(p: Pkt, l4: Uint8Array, embedded: boolean): boolean {
  // an ICMP error quotes at least 8 bytes of the L4 header: ports and sequence number
  const tcpMin = embedded ? 8 : TCP_MIN_HEADER_LEN;
  if (p.proto === 'tcp' && l4.length >= tcpMin) decodeTcp(p, l4, embedded);
  else if (p.proto === 'udp' && l4.length >= UDP_HEADER_LEN) {
    p.sport = udpSrcPort(l4, 0);
    p.dport = udpDstPort(l4, 0);
    p.len = embedded ? 0 : udpLength(l4, 0) - UDP_HEADER_LEN;
  } else return false;
  return true;
}

function decodeTcp(p: Pkt, t: Uint8Array, embedded: boolean): void {
  p.sport = tcpSrcPort(t, 0);
  p.dport = tcpDstPort(t, 0);
  p.seq = tcpSeq(t, 0);
  if (embedded) return;
  p.ack = tcpAck(t, 0);
  const off = tcpDataOffset(t, 0);
  p.flags = tcpdumpFlags(tcpFlags(t, 0));
  p.win = tcpWindow(t, 0);
  p.len = t.length - off;
  p.opts = tcpOptions(t.subarray(TCP_MIN_HEADER_LEN, off));
}

function tcpOptions(o: Uint8Array): string {
  const out: string[] = [];
  for (let i = 0; i < o.length; ) {
    const kind = o[i]!;
    if (kind === 0) break;
    if (kind === 1) {
      out.push('nop');
      i++;
      continue;
    }
    const len = o[i + 1] ?? 0;
    if (len < 2) break;
    if (kind === 2) out.push(`mss ${be16(o, i + 2)}`);
    else if (kind === 3) out.push(`wscale ${o[i + 2]}`);
    else if (kind === 4) out.push('sackOK');
    else if (kind === 8) out.push('TS');
    else out.push(`opt${kind}`);
    i += len;
  }
  return out.join(',');
}

function decodeIcmp(p: Pkt, c: Uint8Array, tUs: number, embedded: boolean): void {
  p.icmpType = icmpType(c, 0);
  p.icmpCode = icmpCode(c, 0);
  p.len = c.length - ICMP_HEADER_LEN;
  if (p.icmpType === ICMP_ECHO_REPLY || p.icmpType === ICMP_ECHO) {
    p.icmpId = icmpEchoId(c, 0);
    p.icmpSeq = icmpEchoSeq(c, 0);
  } else if (!embedded && (p.icmpType === ICMP_DEST_UNREACH || p.icmpType === ICMP_TIME_EXCEEDED)) {
    p.inner = decodeIpv4(c.subarray(ICMP_HEADER_LEN), tUs, true);
  }
}

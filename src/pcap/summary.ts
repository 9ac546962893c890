// One-line, tcpdump-like description of an IPv4 packet for traces: "TCP a:p > b:p [S.] len 0".
// Slow world, but it must describe malformed packets too (they are what a trace is read for),
// so every read is bounded by the bytes actually present and nothing here throws.

// Fields are read with src/wire's accessors once the bytes they need are known to be present.

import { u32ToIpv4 } from '../wire/addr.ts';
import {
  ICMP_DEST_UNREACH,
  ICMP_ECHO,
  ICMP_ECHO_REPLY,
  ICMP_FRAG_NEEDED,
  ICMP_HEADER_LEN,
  ICMP_PARAMETER_PROBLEM,
  ICMP_TIME_EXCEEDED,
  icmpCode,
  icmpEchoId,
  icmpEchoSeq,
  icmpNextHopMtu,
  icmpType,
} from '../wire/icmp.ts';
import {
  IPV4_MIN_HEADER_LEN,
  ipv4FragOffset,
  ipv4HeaderLen,
  ipv4Proto,
  ipv4Src,
  ipv4Dst,
  ipv4TotalLen,
  ipv4Version,
} from '../wire/ipv4.ts';
import { IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP, protoName } from '../wire/proto.ts';
import { tcpDataOffset, tcpDstPort, tcpFlags, tcpSrcPort } from '../wire/tcp.ts';
import { tcpdumpEndpoint, tcpdumpFlags, tcpdumpIcmp } from '../wire/tcpdump.ts';
import { UDP_HEADER_LEN, udpDstPort, udpSrcPort } from '../wire/udp.ts';

/** tcpdump's letters for a TCP flags byte (src/wire/tcpdump.ts). */
export const tcpFlagString = tcpdumpFlags;

/** Describe the IPv4 packet buf[off, off+len). */
export function summarizeIpv4(buf: Uint8Array, off: number, len: number): string {
  return describe(buf, off, Math.min(off + len, buf.length), 0);
}

function describe(b: Uint8Array, off: number, end: number, depth: number): string {
  const avail = end - off;
  if (avail < IPV4_MIN_HEADER_LEN) return `IPv4 truncated (${avail} bytes)`;
  const version = ipv4Version(b, off);
  if (version !== 4) return `IP version ${version} (${avail} bytes)`;
  const ihl = ipv4HeaderLen(b, off);
  const proto = ipv4Proto(b, off);
  const name = protoName(proto) === String(proto) ? `proto ${proto}` : protoName(proto);
  const src = u32ToIpv4(ipv4Src(b, off) >>> 0);
  const dst = u32ToIpv4(ipv4Dst(b, off) >>> 0);
  const fragOff = ipv4FragOffset(b, off) * 8; // the field counts 8-byte units
  if (ihl < 20 || off + ihl > end) return `${name} ${src} > ${dst} bad header length ${ihl}`;
  if (fragOff !== 0) return `${name} ${src} > ${dst} fragment at ${fragOff}`;
  // Within an ICMP error only the first bytes are quoted: trust the bytes present, not totlen.
  const ipEnd = depth === 0 ? Math.min(end, off + ipv4TotalLen(b, off)) : end;
  const l4 = off + ihl;
  if (proto === IPPROTO_TCP || proto === IPPROTO_UDP) {
    return `${name} ${ports(b, l4, ipEnd, src, dst, proto, depth)}`;
  }
  if (proto === IPPROTO_ICMP) return `ICMP ${src} > ${dst} ${icmp(b, l4, ipEnd, depth)}`;
  return `${name} ${src} > ${dst} len ${ipEnd - l4}`;
}

function ports(
  b: Uint8Array,
  l4: number,
  end: number,
  src: string,
  dst: string,
  proto: number,
  depth: number,
): string {
  if (l4 + 4 > end) return `${src} > ${dst} truncated`;
  // source and destination ports are the first 4 bytes of both headers
  const ep = tcpdumpEndpoint;
  const head = `${ep(src, tcpSrcPort(b, l4))} > ${ep(dst, tcpDstPort(b, l4))}`;
  if (proto === IPPROTO_UDP) {
    const u = `${ep(src, udpSrcPort(b, l4))} > ${ep(dst, udpDstPort(b, l4))}`;
    return depth > 0 || l4 + UDP_HEADER_LEN > end ? u : `${u} len ${end - l4 - UDP_HEADER_LEN}`;
  }
  if (l4 + 14 > end) return head;
  const flags = `${head} [${tcpdumpFlags(tcpFlags(b, l4))}]`;
  const doff = tcpDataOffset(b, l4);
  return depth > 0 || l4 + doff > end ? flags : `${flags} len ${end - l4 - doff}`;
}

function icmp(b: Uint8Array, l4: number, end: number, depth: number): string {
  if (l4 + ICMP_HEADER_LEN > end) return 'truncated';
  const type = icmpType(b, l4);
  const code = icmpCode(b, l4);
  let what = tcpdumpIcmp(type, code);
  if (type === ICMP_ECHO || type === ICMP_ECHO_REPLY) {
    return `${what} id ${icmpEchoId(b, l4)} seq ${icmpEchoSeq(b, l4)}`;
  }
  const unreach = type === ICMP_DEST_UNREACH;
  if (unreach && code === ICMP_FRAG_NEEDED) what += ` (mtu ${icmpNextHopMtu(b, l4)})`;
  const quotes = unreach || type === ICMP_TIME_EXCEEDED || type === ICMP_PARAMETER_PROBLEM;
  if (quotes && depth === 0) {
    what += ` quoting {${describe(b, l4 + ICMP_HEADER_LEN, end, depth + 1)}}`;
  }
  return what;
}

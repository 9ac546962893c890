// Decoding captured IPv4 packets into plain records for the comparison (slow path: a capture
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

export interface Pkt {
  /** capture time, microseconds */
  tUs: number;
  src: string;
  dst: string;
  proto: 'tcp' | 'udp' | 'icmp' | number;
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

const ip4 = (b: Uint8Array, o: number) => `${b[o]}.${b[o + 1]}.${b[o + 2]}.${b[o + 3]}`;
const be16 = (b: Uint8Array, o: number) => (b[o]! << 8) | b[o + 1]!;
const be32 = (b: Uint8Array, o: number) => be16(b, o) * 65536 + be16(b, o + 2);

function ipCsumOk(b: Uint8Array, ihl: number): boolean {
  let sum = 0;
  for (let i = 0; i < ihl; i += 2) sum += be16(b, i);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return sum === 0xffff;
}

/** An IPv4 packet (or, for ICMP errors, a truncated embedded one); undefined if unreadable. */
export function decodeIpv4(b: Uint8Array, tUs = 0, embedded = false): Pkt | undefined {
  if (b.length < 20 || b[0]! >> 4 !== 4) return undefined;
  const ihl = (b[0]! & 15) * 4;
  const total = Math.min(be16(b, 2), b.length);
  if (ihl < 20 || b.length < ihl) return undefined;
  const protoNum = b[9]!;
  const proto =
    protoNum === 6 ? 'tcp' : protoNum === 17 ? 'udp' : protoNum === 1 ? 'icmp' : protoNum;
  const p: Pkt = {
    tUs,
    src: ip4(b, 12),
    dst: ip4(b, 16),
    proto,
    ttl: b[8]!,
    ipId: be16(b, 4),
    df: (b[6]! & 0x40) !== 0,
    ipCsumOk: ipCsumOk(b, ihl),
    len: 0,
  };
  const l4 = b.subarray(ihl, embedded ? b.length : total);
  if (proto === 'tcp' && l4.length >= (embedded ? 8 : 20)) decodeTcp(p, l4, embedded);
  else if (proto === 'udp' && l4.length >= 8) {
    p.sport = be16(l4, 0);
    p.dport = be16(l4, 2);
    p.len = embedded ? 0 : be16(l4, 4) - 8;
  } else if (proto === 'icmp' && l4.length >= 8) decodeIcmp(p, l4, tUs, embedded);
  return p;
}

function decodeTcp(p: Pkt, t: Uint8Array, embedded: boolean): void {
  p.sport = be16(t, 0);
  p.dport = be16(t, 2);
  p.seq = be32(t, 4);
  if (embedded) return;
  p.ack = be32(t, 8);
  const off = (t[12]! >> 4) * 4;
  const f = t[13]!;
  const letters = (f & 2 ? 'S' : '') + (f & 1 ? 'F' : '') + (f & 8 ? 'P' : '') + (f & 4 ? 'R' : '');
  p.flags = letters + (f & 16 ? '.' : '') || 'none';
  p.win = be16(t, 14);
  p.len = t.length - off;
  p.opts = tcpOptions(t.subarray(20, off));
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
  p.icmpType = c[0]!;
  p.icmpCode = c[1]!;
  p.len = c.length - 8;
  if (p.icmpType === 0 || p.icmpType === 8) {
    p.icmpId = be16(c, 4);
    p.icmpSeq = be16(c, 6);
  } else if (!embedded && (p.icmpType === 3 || p.icmpType === 11)) {
    p.inner = decodeIpv4(c.subarray(8), tUs, true);
  }
}

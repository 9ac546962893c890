// One-line, tcpdump-like description of an IPv4 packet for traces: "TCP a:p > b:p [S.] len 0".
// Slow world, but it must describe malformed packets too (they are what a trace is read for),
// so every read is bounded by the bytes actually present and nothing here throws.

const PROTO_NAMES: Record<number, string> = { 1: 'ICMP', 6: 'TCP', 17: 'UDP', 132: 'SCTP' };
// tcpdump's order and letters: FIN SYN RST PSH ACK URG ECE CWR
const TCP_FLAG_LETTERS = 'FSRP.UEW';

function be16(b: Uint8Array, at: number): number {
  return (b[at] << 8) | b[at + 1];
}

function addr(b: Uint8Array, at: number): string {
  return `${b[at]}.${b[at + 1]}.${b[at + 2]}.${b[at + 3]}`;
}

export function tcpFlagString(flags: number): string {
  let s = '';
  for (let i = 0; i < 8; i++) if (flags & (1 << i)) s += TCP_FLAG_LETTERS[i];
  return s === '' ? 'none' : s;
}

/** Describe the IPv4 packet buf[off, off+len). */
export function summarizeIpv4(buf: Uint8Array, off: number, len: number): string {
  return describe(buf, off, Math.min(off + len, buf.length), 0);
}

function describe(b: Uint8Array, off: number, end: number, depth: number): string {
  const avail = end - off;
  if (avail < 20) return `IPv4 truncated (${avail} bytes)`;
  const version = b[off] >> 4;
  if (version !== 4) return `IP version ${version} (${avail} bytes)`;
  const ihl = (b[off] & 0x0f) * 4;
  const proto = b[off + 9];
  const name = PROTO_NAMES[proto] ?? `proto ${proto}`;
  const src = addr(b, off + 12);
  const dst = addr(b, off + 16);
  const fragOff = (be16(b, off + 6) & 0x1fff) * 8;
  if (ihl < 20 || off + ihl > end) return `${name} ${src} > ${dst} bad header length ${ihl}`;
  if (fragOff !== 0) return `${name} ${src} > ${dst} fragment at ${fragOff}`;
  // Within an ICMP error only the first bytes are quoted: trust the bytes present, not totlen.
  const ipEnd = depth === 0 ? Math.min(end, off + be16(b, off + 2)) : end;
  const l4 = off + ihl;
  if (proto === 6 || proto === 17) return `${name} ${ports(b, l4, ipEnd, src, dst, proto, depth)}`;
  if (proto === 1) return `ICMP ${src} > ${dst} ${icmp(b, l4, ipEnd, depth)}`;
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
  const head = `${src}:${be16(b, l4)} > ${dst}:${be16(b, l4 + 2)}`;
  if (proto === 17) return depth > 0 || l4 + 8 > end ? head : `${head} len ${end - l4 - 8}`;
  if (l4 + 14 > end) return head;
  const flags = `${head} [${tcpFlagString(b[l4 + 13])}]`;
  const doff = (b[l4 + 12] >> 4) * 4;
  return depth > 0 || l4 + doff > end ? flags : `${flags} len ${end - l4 - doff}`;
}

const UNREACH_CODES: Record<number, string> = {
  0: 'net',
  1: 'host',
  2: 'protocol',
  3: 'port',
  4: 'need to frag',
  13: 'admin prohibited',
};

function icmp(b: Uint8Array, l4: number, end: number, depth: number): string {
  if (l4 + 8 > end) return 'truncated';
  const type = b[l4];
  const code = b[l4 + 1];
  if (type === 8 || type === 0) {
    return `echo ${type === 8 ? 'request' : 'reply'} id ${be16(b, l4 + 4)} seq ${be16(b, l4 + 6)}`;
  }
  let what = `type ${type} code ${code}`;
  if (type === 3) what = `unreachable ${UNREACH_CODES[code] ?? `code ${code}`}`;
  if (type === 3 && code === 4) what += ` (mtu ${be16(b, l4 + 6)})`;
  if (type === 11) what = 'time exceeded';
  if ((type === 3 || type === 11 || type === 12) && depth === 0) {
    what += ` quoting {${describe(b, l4 + 8, end, depth + 1)}}`;
  }
  return what;
}

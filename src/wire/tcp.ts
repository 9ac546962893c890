// TCP header (RFC 793, section 3.1; flag bits per RFC 3168):
//
//     0                   1                   2                   3
//     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |          Source Port          |       Destination Port        |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                        Sequence Number                        |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                    Acknowledgment Number                      |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |  Data |       |C|E|U|A|P|R|S|F|                               |
//    | Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//    |       |       |R|E|G|K|H|T|N|N|                               |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |           Checksum            |         Urgent Pointer        |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//    |                    Options                    |    Padding    |
//    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// RFC 793: "Data Offset: 4 bits. The number of 32 bit words in the TCP Header. This indicates
// where the data begins." The fixed header is 5 words, so a smaller offset is malformed.
//
// Validation contract: tcpCheck(buf, off, end) — `off` is the L4 offset (IP offset + IHL*4),
// `end` the end of the IP packet (IP offset + Total Length) — returns TCP_OK or an error; after
// TCP_OK the whole TCP header (Data Offset*4 bytes, options included) lies within [off, end),
// and no accessor here reads outside it. tcpCheck does not verify the checksum (it needs the
// pseudo-header: see l4ChecksumValid in checksum.ts).
//
// Accessors over (buf, off), setters raw (no checksum patch; see rewrite.ts for patched ones).

import { read16, read32, write16, write32 } from './bytes.ts';
import {
  TCP_ACKNO as ACK,
  TCP_CSUM as CSUM,
  TCP_DOFF as DOFF,
  TCP_DPORT as DPORT,
  TCP_FLAGS as FLAGS,
  TCP_SEQ as SEQ,
  TCP_SPORT as SPORT,
  TCP_URGPTR as URG,
  TCP_WINDOW as WINDOW,
} from './layout.ts';

export const TCP_FIN = 1;
export const TCP_SYN = 2;
export const TCP_RST = 4;
export const TCP_PSH = 8;
export const TCP_ACK = 16;
export const TCP_URG = 32;
export const TCP_ECE = 64;
export const TCP_CWR = 128;

/**
 * The flag combinations nf_conntrack accepts (nf_conntrack_proto_tcp.c tcp_valid_flags; PSH,
 * ECE and CWR are always valid): SYN, SYN|URG, SYN|ACK, RST, RST|ACK, FIN|ACK, FIN|ACK|URG,
 * ACK, ACK|URG. Anything else — no flag at all, SYN|FIN, SYN|RST, a FIN without ACK — is
 * INVALID before any conntrack lookup: the kernel tracks and translates no such packet.
 * One bit per combination of FIN, SYN, RST, ACK, URG packed into five bits (tcpFlagsIndex).
 */
const TCP_VALID_FLAGS_MASK = [
  TCP_SYN,
  TCP_SYN | TCP_URG,
  TCP_SYN | TCP_ACK,
  TCP_RST,
  TCP_RST | TCP_ACK,
  TCP_FIN | TCP_ACK,
  TCP_FIN | TCP_ACK | TCP_URG,
  TCP_ACK,
  TCP_ACK | TCP_URG,
].reduce((m, f) => m | (1 << tcpFlagsIndex(f)), 0);

/** FIN, SYN, RST (bits 0-2) and ACK, URG (bits 4-5, moved to 3-4): PSH, ECE, CWR dropped. */
function tcpFlagsIndex(flags: number): number {
  return (flags & 7) | ((flags >>> 1) & 0x18);
}

/** Whether conntrack takes a TCP packet with this flags byte (see TCP_VALID_FLAGS_MASK). */
export function tcpFlagsValid(flags: number): boolean {
  return ((TCP_VALID_FLAGS_MASK >>> tcpFlagsIndex(flags)) & 1) === 1;
}

export const TCP_OK = 0;
/** fewer than 20 bytes, or Data Offset*4 beyond end */
export const TCP_ERR_TRUNCATED = 1;
/** Data Offset < 5 */
export const TCP_ERR_DOFF = 2;

export const TCP_ERR_NAMES: readonly string[] = ['ok', 'truncated', 'doff'];

export const TCP_MIN_HEADER_LEN = 20;

/** Validate the TCP header at `off` against the packet end; see the contract above. */
export function tcpCheck(buf: Uint8Array, off: number, end: number): number {
  if (end > buf.length) end = buf.length;
  if (off < 0 || end - off < TCP_MIN_HEADER_LEN) return TCP_ERR_TRUNCATED;
  const hlen = (buf[off + DOFF] >>> 4) << 2;
  if (hlen < TCP_MIN_HEADER_LEN) return TCP_ERR_DOFF;
  // Like Linux (tcp_v4_rcv: pskb_may_pull(skb, th->doff * 4)), options cut off are truncation.
  if (off + hlen > end) return TCP_ERR_TRUNCATED;
  return TCP_OK;
}

export function tcpSrcPort(buf: Uint8Array, off: number): number {
  return read16(buf, off + SPORT);
}
export function tcpDstPort(buf: Uint8Array, off: number): number {
  return read16(buf, off + DPORT);
}
export function tcpSeq(buf: Uint8Array, off: number): number {
  return read32(buf, off + SEQ);
}
export function tcpAck(buf: Uint8Array, off: number): number {
  return read32(buf, off + ACK);
}
/** Header length in bytes (Data Offset * 4), options included. */
export function tcpDataOffset(buf: Uint8Array, off: number): number {
  return (buf[off + DOFF] >>> 4) << 2;
}
/** The eight flag bits CWR..FIN (TCP_* constants). */
export function tcpFlags(buf: Uint8Array, off: number): number {
  return buf[off + FLAGS];
}
export function tcpWindow(buf: Uint8Array, off: number): number {
  return read16(buf, off + WINDOW);
}
export function tcpCsum(buf: Uint8Array, off: number): number {
  return read16(buf, off + CSUM);
}
export function tcpUrgent(buf: Uint8Array, off: number): number {
  return read16(buf, off + URG);
}

export function tcpSetSrcPort(buf: Uint8Array, off: number, port: number): void {
  write16(buf, off + SPORT, port);
}
export function tcpSetDstPort(buf: Uint8Array, off: number, port: number): void {
  write16(buf, off + DPORT, port);
}
export function tcpSetSeq(buf: Uint8Array, off: number, seq: number): void {
  write32(buf, off + SEQ, seq);
}
export function tcpSetAck(buf: Uint8Array, off: number, ack: number): void {
  write32(buf, off + ACK, ack);
}
/** Header length in bytes, a multiple of 4 in 20..60; the reserved bits are kept. */
export function tcpSetDataOffset(buf: Uint8Array, off: number, bytes: number): void {
  buf[off + DOFF] = ((bytes >>> 2) << 4) | (buf[off + DOFF] & 0x0f);
}
export function tcpSetFlags(buf: Uint8Array, off: number, flags: number): void {
  buf[off + FLAGS] = flags;
}
export function tcpSetWindow(buf: Uint8Array, off: number, win: number): void {
  write16(buf, off + WINDOW, win);
}
export function tcpSetCsum(buf: Uint8Array, off: number, csum: number): void {
  write16(buf, off + CSUM, csum);
}
export function tcpSetUrgent(buf: Uint8Array, off: number, urg: number): void {
  write16(buf, off + URG, urg);
}

// ---- slow world ----------------------------------------------------------------------------

export interface TcpRepr {
  srcPort: number;
  dstPort: number;
  seq: number;
  ack: number;
  /** TCP_* bits */
  flags: number;
  window: number;
  urgent: number;
  /** raw option bytes, padded: length a multiple of 4, at most 40 */
  options: Uint8Array;
}

/** Decode the header at `off` (L4 offset) up to `end`; throws Error on a check failure. */
export function tcpParse(buf: Uint8Array, off: number, end: number): TcpRepr {
  const rc = tcpCheck(buf, off, end);
  if (rc !== TCP_OK) throw new Error(`tcp: ${TCP_ERR_NAMES[rc]}`);
  return {
    srcPort: tcpSrcPort(buf, off),
    dstPort: tcpDstPort(buf, off),
    seq: tcpSeq(buf, off),
    ack: tcpAck(buf, off),
    flags: tcpFlags(buf, off),
    window: tcpWindow(buf, off),
    urgent: tcpUrgent(buf, off),
    options: buf.slice(off + TCP_MIN_HEADER_LEN, off + tcpDataOffset(buf, off)),
  };
}

/**
 * Write the header at `off` with a zero checksum; returns its length. The checksum needs the
 * IP pseudo-header and the payload: once both are in place, call l4FillCsum(buf, ipOff).
 */
export function tcpEmit(repr: TcpRepr, buf: Uint8Array, off: number): number {
  const optLen = repr.options.length;
  if (optLen % 4 !== 0 || optLen > 40) throw new Error('tcp: options length must be 4k <= 40');
  const hlen = TCP_MIN_HEADER_LEN + optLen;
  tcpSetSrcPort(buf, off, repr.srcPort);
  tcpSetDstPort(buf, off, repr.dstPort);
  tcpSetSeq(buf, off, repr.seq);
  tcpSetAck(buf, off, repr.ack);
  buf[off + DOFF] = (hlen >>> 2) << 4;
  buf[off + FLAGS] = repr.flags;
  tcpSetWindow(buf, off, repr.window);
  tcpSetCsum(buf, off, 0);
  tcpSetUrgent(buf, off, repr.urgent);
  buf.set(repr.options, off + TCP_MIN_HEADER_LEN);
  return hlen;
}

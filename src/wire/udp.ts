// UDP header (RFC 768):
//
//     0      7 8     15 16    23 24    31
//    +--------+--------+--------+--------+
//    |     Source      |   Destination   |
//    |      Port       |      Port       |
//    +--------+--------+--------+--------+
//    |                 |                 |
//    |     Length      |    Checksum     |
//    +--------+--------+--------+--------+
//    |
//    |          data octets ...
//    +---------------- ...
//
// RFC 768: "Length is the length in octets of this user datagram including this header and the
// data. (This means the minimum value of the length is eight.)"
//
// RFC 768 on the checksum: "If the computed checksum is zero, it is transmitted as all ones
// (the equivalent in one's complement arithmetic). An all zero transmitted checksum value means
// that the transmitter generated no checksum (for debugging or for higher level protocols that
// don't care)." So over IPv4 a stored 0 must stay 0 through NAT (rewrite.ts), and a checksum
// that computes to 0 is stored as 0xFFFF (l4ChecksumFull in checksum.ts).
//
// Validation contract: udpCheck(buf, off, end) — `off` is the L4 offset (IP offset + IHL*4),
// `end` the end of the IP packet (IP offset + Total Length) — returns UDP_OK or an error; after
// UDP_OK the 8-byte header and the Length bytes it announces lie within [off, end), and no
// accessor here reads outside the header. Length may be less than end - off (Linux trims the
// excess); the datagram is [off, off + udpLength). The checksum is not verified here
// (l4ChecksumValid in checksum.ts).

import { read16, write16 } from './bytes.ts';
import {
  UDP_CSUM as CSUM,
  UDP_DPORT as DPORT,
  UDP_LEN as LEN,
  UDP_SPORT as SPORT,
} from './layout.ts';

export const UDP_OK = 0;
/** fewer than 8 bytes */
export const UDP_ERR_TRUNCATED = 1;
/** Length < 8, or beyond end */
export const UDP_ERR_LEN = 2;

export const UDP_ERR_NAMES: readonly string[] = ['ok', 'truncated', 'len'];

export const UDP_HEADER_LEN = 8;

/** Validate the UDP header at `off` against the packet end; see the contract above. */
export function udpCheck(buf: Uint8Array, off: number, end: number): number {
  if (end > buf.length) end = buf.length;
  if (off < 0 || end - off < UDP_HEADER_LEN) return UDP_ERR_TRUNCATED;
  const len = read16(buf, off + LEN);
  if (len < UDP_HEADER_LEN || off + len > end) return UDP_ERR_LEN;
  return UDP_OK;
}

export function udpSrcPort(buf: Uint8Array, off: number): number {
  return read16(buf, off + SPORT);
}
export function udpDstPort(buf: Uint8Array, off: number): number {
  return read16(buf, off + DPORT);
}
/** Header + data, in bytes. */
export function udpLength(buf: Uint8Array, off: number): number {
  return read16(buf, off + LEN);
}
/** 0 means the sender computed no checksum. */
export function udpCsum(buf: Uint8Array, off: number): number {
  return read16(buf, off + CSUM);
}

export function udpSetSrcPort(buf: Uint8Array, off: number, port: number): void {
  write16(buf, off + SPORT, port);
}
export function udpSetDstPort(buf: Uint8Array, off: number, port: number): void {
  write16(buf, off + DPORT, port);
}
export function udpSetLength(buf: Uint8Array, off: number, len: number): void {
  write16(buf, off + LEN, len);
}
export function udpSetCsum(buf: Uint8Array, off: number, csum: number): void {
  write16(buf, off + CSUM, csum);
}

// ---- slow world ----------------------------------------------------------------------------

export interface UdpRepr {
  srcPort: number;
  dstPort: number;
  /** Length - 8 */
  payloadLen: number;
}

/** Decode the header at `off` (L4 offset) up to `end`; throws Error on a check failure. */
export function udpParse(buf: Uint8Array, off: number, end: number): UdpRepr {
  const rc = udpCheck(buf, off, end);
  if (rc !== UDP_OK) throw new Error(`udp: ${UDP_ERR_NAMES[rc]}`);
  return {
    srcPort: udpSrcPort(buf, off),
    dstPort: udpDstPort(buf, off),
    payloadLen: udpLength(buf, off) - UDP_HEADER_LEN,
  };
}

/**
 * Write the header at `off` with Length = 8 + payloadLen and a zero checksum ("none"); returns
 * 8. For a real checksum, call l4FillCsum(buf, ipOff) once the IP header and payload are in.
 */
export function udpEmit(repr: UdpRepr, buf: Uint8Array, off: number): number {
  udpSetSrcPort(buf, off, repr.srcPort);
  udpSetDstPort(buf, off, repr.dstPort);
  udpSetLength(buf, off, UDP_HEADER_LEN + repr.payloadLen);
  udpSetCsum(buf, off, 0);
  return UDP_HEADER_LEN;
}

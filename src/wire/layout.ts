// Field offsets of the headers kubetun reads and rewrites, declared once. Each format's file
// (ipv4.ts, tcp.ts, udp.ts, icmp.ts) carries the RFC diagram and the accessors; the checksum,
// rewrite and virtio helpers, which reach into several headers at once, take the same offsets
// from here instead of keeping copies. Offsets are from the start of their own header.

// IPv4 (RFC 791, section 3.1)
export const IPV4_VER_IHL = 0;
export const IPV4_TOS = 1;
export const IPV4_TOTLEN = 2;
export const IPV4_ID = 4;
export const IPV4_FLAGS_FRAG = 6;
export const IPV4_TTL = 8;
export const IPV4_PROTO = 9;
export const IPV4_CSUM = 10;
export const IPV4_SADDR = 12;
export const IPV4_DADDR = 16;

// TCP (RFC 9293, section 3.1)
export const TCP_SPORT = 0;
export const TCP_DPORT = 2;
export const TCP_SEQ = 4;
export const TCP_ACKNO = 8;
export const TCP_DOFF = 12;
export const TCP_FLAGS = 13;
export const TCP_WINDOW = 14;
export const TCP_CSUM = 16;
export const TCP_URGPTR = 18;

// UDP (RFC 768)
export const UDP_SPORT = 0;
export const UDP_DPORT = 2;
export const UDP_LEN = 4;
export const UDP_CSUM = 6;

// ICMP (RFC 792): type, code, checksum; then 4 bytes whose meaning depends on the type
export const ICMP_TYPE = 0;
export const ICMP_CODE = 1;
export const ICMP_CSUM = 2;
export const ICMP_REST = 4;
export const ICMP_ECHO_ID = 4;
export const ICMP_ECHO_SEQ = 6;
/** Destination Unreachable / Fragmentation Needed: next-hop MTU (RFC 1191) */
export const ICMP_MTU = 6;

// Classic libpcap file format (https://www.tcpdump.org/manpages/pcap-savefile.5.txt,
// draft-ietf-opsawg-pcap). Not pcapng.
//
//  File header (24 bytes), in the writer's byte order, told apart by the magic:
//   0                   1                   2                   3
//   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |  magic: a1b2c3d4 (µs timestamps) or a1b23c4d (ns timestamps)  |
//  +-------------------------------+-------------------------------+
//  |        version major (2)      |       version minor (4)       |
//  +-------------------------------+-------------------------------+
//  |                   thiszone (reserved, 0)                      |
//  +---------------------------------------------------------------+
//  |                   sigfigs (reserved, 0)                       |
//  +---------------------------------------------------------------+
//  |                          snaplen                              |
//  +---------------------------------------------------------------+
//  | FCS info (bits 28-31) |        |      link type (bits 0-15)    |
//  +---------------------------------------------------------------+
//
//  Record header (16 bytes), then incl_len bytes of packet data:
//  +---------------------------------------------------------------+
//  |                  timestamp, seconds (u32)                     |
//  +---------------------------------------------------------------+
//  |         timestamp, microseconds or nanoseconds (u32)          |
//  +---------------------------------------------------------------+
//  |             captured length (incl_len) (u32)                  |
//  +---------------------------------------------------------------+
//  |             original length (orig_len) (u32)                  |
//  +---------------------------------------------------------------+
//
// Link-layer headers inside the packet data are in network byte order whatever the file's order.
import { UserError } from '../errors.ts';

export const PCAP_MAGIC_US = 0xa1b2c3d4;
export const PCAP_MAGIC_NS = 0xa1b23c4d;
export const PCAP_FILE_HEADER_LEN = 24;
export const PCAP_RECORD_HEADER_LEN = 16;

/** Ethernet II (DLT_EN10MB) */
export const LINKTYPE_ETHERNET = 1;
/** Raw IP, version from the first nibble (DLT_RAW as written in files) */
export const LINKTYPE_RAW = 101;
/** Linux cooked capture v1 (tcpdump -i any, older libpcap) */
export const LINKTYPE_LINUX_SLL = 113;
/** Raw IPv4 only */
export const LINKTYPE_IPV4 = 228;
/** Linux cooked capture v2 (tcpdump -i any, libpcap >= 1.10) */
export const LINKTYPE_LINUX_SLL2 = 276;

export const ETHERTYPE_IPV4 = 0x0800;
export const ETHERTYPE_IPV6 = 0x86dd;
export const ETHERTYPE_VLAN = 0x8100;
export const ETHERTYPE_QINQ = 0x88a8;

export type PcapErrorCode = 'PCAP_BAD_MAGIC' | 'PCAP_TRUNCATED' | 'PCAP_LINKTYPE';

/** A file that is not a capture kubetun can read: the user gave the wrong file (exit 2). */
export class PcapError extends UserError {
  declare readonly code: PcapErrorCode;
  constructor(code: PcapErrorCode, message: string) {
    super(code, message);
    this.name = 'PcapError';
  }
}

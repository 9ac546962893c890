// Classic pcap reader: a cursor over the records of an in-memory file that yields, for each
// record carrying an IPv4 packet, where that packet lies in the file's bytes. Link headers are
// stripped (Ethernet with 802.1Q/802.1ad tags, Linux cooked v1/v2); records that carry something
// other than IPv4 (ARP, IPv6, LLDP…) are skipped and counted — unless the reader is asked for
// IPv6 too (options.ipv6: `lab compare`'s IPv6 scenarios), when IPv6 packets are yielded as well. The cursor keeps no per-record
// objects so a large capture can be replayed without garbage; readPcap() is the convenient form.
import {
  ETHERTYPE_IPV4,
  ETHERTYPE_IPV6,
  ETHERTYPE_QINQ,
  ETHERTYPE_VLAN,
  LINKTYPE_ETHERNET,
  LINKTYPE_IPV4,
  LINKTYPE_LINUX_SLL,
  LINKTYPE_LINUX_SLL2,
  LINKTYPE_RAW,
  PCAP_FILE_HEADER_LEN,
  PCAP_MAGIC_NS,
  PCAP_MAGIC_US,
  PCAP_RECORD_HEADER_LEN,
  PcapError,
} from './format.ts';

export interface PcapHeader {
  bigEndian: boolean;
  /** timestamps' second field is nanoseconds (magic a1b23c4d) rather than microseconds */
  nanos: boolean;
  versionMajor: number;
  versionMinor: number;
  snaplen: number;
  linkType: number;
}

const SUPPORTED_LINKTYPES = [
  LINKTYPE_ETHERNET,
  LINKTYPE_RAW,
  LINKTYPE_LINUX_SLL,
  LINKTYPE_IPV4,
  LINKTYPE_LINUX_SLL2,
];

export class PcapReader {
  readonly header: PcapHeader;
  readonly bytes: Uint8Array;
  private readonly view: DataView;
  private readonly le: boolean;
  private pos = PCAP_FILE_HEADER_LEN;

  // ---- the current record, valid after next() returned true
  /** 0-based index of the record in the file, skipped records included */
  record = -1;
  tsSec = 0;
  /** sub-second part in nanoseconds, whatever the file's resolution */
  tsNsec = 0;
  /** bytes captured for the record (link header included) and the length on the wire */
  capLen = 0;
  origLen = 0;
  /** the IPv4 packet: bytes[ipOff, ipOff + ipLen) */
  ipOff = 0;
  ipLen = 0;

  /** records skipped because they carry no IPv4 packet */
  skipped = 0;

  /** `name` only appears in error messages; options.ipv6: yield IPv6 packets too. */
  constructor(
    bytes: Uint8Array,
    readonly name = 'pcap',
    private readonly options: { ipv6?: boolean } = {},
  ) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (bytes.length < PCAP_FILE_HEADER_LEN) {
      throw new PcapError(
        'PCAP_TRUNCATED',
        `${name}: ${bytes.length} bytes is too short for a pcap file header`,
      );
    }
    const magicLE = this.view.getUint32(0, true);
    const magicBE = this.view.getUint32(0, false);
    const magic = magicLE === PCAP_MAGIC_US || magicLE === PCAP_MAGIC_NS ? magicLE : magicBE;
    if (magic !== PCAP_MAGIC_US && magic !== PCAP_MAGIC_NS) {
      const hint =
        magicBE === 0x0a0d0d0a ? ' (this is pcapng: convert with `editcap -F pcap`)' : '';
      throw new PcapError(
        'PCAP_BAD_MAGIC',
        `${name}: not a pcap file: magic 0x${magicBE.toString(16).padStart(8, '0')}${hint}`,
      );
    }
    this.le = magic === magicLE;
    this.header = {
      bigEndian: !this.le,
      nanos: magic === PCAP_MAGIC_NS,
      versionMajor: this.view.getUint16(4, this.le),
      versionMinor: this.view.getUint16(6, this.le),
      snaplen: this.view.getUint32(16, this.le),
      linkType: this.view.getUint32(20, this.le) & 0xffff,
    };
    if (!SUPPORTED_LINKTYPES.includes(this.header.linkType)) {
      throw new PcapError(
        'PCAP_LINKTYPE',
        `${name}: link type ${this.header.linkType} is not supported (Ethernet 1, raw IP 101, IPv4 228, Linux cooked 113/276)`,
      );
    }
  }

  /** Advance to the next record that carries an IPv4 packet; false at the end of the file. */
  next(): boolean {
    while (this.readRecord()) {
      if (this.locateIpv4()) return true;
      this.skipped++;
    }
    return false;
  }

  /** The current record's time in milliseconds since the epoch (fractional). */
  timeMs(): number {
    return this.tsSec * 1000 + this.tsNsec / 1e6;
  }

  private readRecord(): boolean {
    const at = this.pos;
    if (at === this.bytes.length) return false;
    const n = this.record + 1;
    if (at + PCAP_RECORD_HEADER_LEN > this.bytes.length) {
      throw new PcapError(
        'PCAP_TRUNCATED',
        `${this.name}: record ${n} at byte ${at}: truncated record header`,
      );
    }
    const capLen = this.view.getUint32(at + 8, this.le);
    if (at + PCAP_RECORD_HEADER_LEN + capLen > this.bytes.length) {
      throw new PcapError(
        'PCAP_TRUNCATED',
        `${this.name}: record ${n} at byte ${at}: ${capLen} bytes of data run past the end of the file`,
      );
    }
    this.record = n;
    this.tsSec = this.view.getUint32(at, this.le);
    const frac = this.view.getUint32(at + 4, this.le);
    this.tsNsec = this.header.nanos ? frac : frac * 1000;
    this.capLen = capLen;
    this.origLen = this.view.getUint32(at + 12, this.le);
    this.pos = at + PCAP_RECORD_HEADER_LEN + capLen;
    return true;
  }

  /** Set ipOff/ipLen past the link header; false when the record is not IPv4. */
  private locateIpv4(): boolean {
    const start = this.pos - this.capLen;
    const end = this.pos;
    let off: number;
    switch (this.header.linkType) {
      case LINKTYPE_IPV4:
        off = start;
        break;
      case LINKTYPE_RAW:
        // Hand anything that is not IPv6 to the datapath, which drops bad versions with a reason.
        if (this.capLen > 0 && this.bytes[start] >> 4 === 6) return false;
        off = start;
        break;
      case LINKTYPE_ETHERNET:
        off = this.etherPayload(start, end);
        break;
      case LINKTYPE_LINUX_SLL:
        off = this.capLen >= 16 && this.isIp(this.be16(start + 14)) ? start + 16 : -1;
        break;
      default: // LINKTYPE_LINUX_SLL2
        off = this.capLen >= 20 && this.isIp(this.be16(start)) ? start + 20 : -1;
    }
    if (off < 0) return false;
    this.ipOff = off;
    this.ipLen = end - off;
    if (this.header.linkType !== LINKTYPE_RAW && this.header.linkType !== LINKTYPE_IPV4) {
      this.ipLen = this.withoutLinkPadding(off, this.ipLen);
    }
    return true;
  }

  /**
   * Ethernet pads frames to 60 bytes: a 40-byte SYN arrives with 6 bytes of zeros after it.
   * Those bytes are the link's, not the datagram's, so cut at the IPv4 total length.
   */
  private withoutLinkPadding(off: number, len: number): number {
    if (len < 4) return len;
    if (this.bytes[off]! >> 4 === 6) {
      const total6 = len >= 40 ? 40 + this.be16(off + 4) : len; // header + payload length
      return Math.min(total6, len);
    }
    const total = this.be16(off + 2);
    return total >= 20 && total < len ? total : len;
  }

  /** Offset of the IPv4 payload of an Ethernet frame (VLAN tags skipped), or -1. */
  private etherPayload(start: number, end: number): number {
    let typeOff = start + 12;
    for (;;) {
      if (typeOff + 2 > end) return -1;
      const type = this.be16(typeOff);
      if (this.isIp(type)) return typeOff + 2;
      if (type !== ETHERTYPE_VLAN && type !== ETHERTYPE_QINQ) return -1;
      typeOff += 4;
    }
  }

  /** The EtherTypes yielded: IPv4, and IPv6 when asked for. */
  private isIp(type: number): boolean {
    return type === ETHERTYPE_IPV4 || (this.options.ipv6 === true && type === ETHERTYPE_IPV6);
  }

  private be16(off: number): number {
    return (this.bytes[off] << 8) | this.bytes[off + 1];
  }
}

export interface PcapPacket {
  /** 0-based record index in the file */
  record: number;
  tsSec: number;
  tsNsec: number;
  origLen: number;
  /** the IPv4 packet (a view into the file's bytes) */
  data: Uint8Array;
}

export interface PcapContents {
  header: PcapHeader;
  packets: PcapPacket[];
  /** records without an IPv4 packet */
  skipped: number;
}

/** Every IPv4 packet (options.ipv6: and IPv6 one) of a pcap file, as objects: for tests and small captures. */
export function readPcap(
  bytes: Uint8Array,
  name?: string,
  options: { ipv6?: boolean } = {},
): PcapContents {
  const r = new PcapReader(bytes, name, options);
  const packets: PcapPacket[] = [];
  while (r.next()) {
    packets.push({
      record: r.record,
      tsSec: r.tsSec,
      tsNsec: r.tsNsec,
      origLen: r.origLen,
      data: bytes.subarray(r.ipOff, r.ipOff + r.ipLen),
    });
  }
  return { header: r.header, packets, skipped: r.skipped };
}

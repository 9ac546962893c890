// Classic pcap writer: little-endian, microsecond timestamps, LINKTYPE_RAW (101) — the form
// every tool reads and the TUN's own framing (IP packets with no link header).
import {
  LINKTYPE_RAW,
  PCAP_FILE_HEADER_LEN,
  PCAP_MAGIC_US,
  PCAP_RECORD_HEADER_LEN,
} from './format.ts';

export const DEFAULT_SNAPLEN = 262144;

export class PcapWriter {
  private buf: Uint8Array;
  private view: DataView;
  private len = 0;
  /** records written */
  count = 0;

  constructor(readonly snaplen = DEFAULT_SNAPLEN) {
    this.buf = new Uint8Array(64 * 1024);
    this.view = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
    const v = this.view;
    v.setUint32(0, PCAP_MAGIC_US, true);
    v.setUint16(4, 2, true);
    v.setUint16(6, 4, true);
    v.setInt32(8, 0, true); // thiszone: timestamps are UTC
    v.setUint32(12, 0, true); // sigfigs
    v.setUint32(16, snaplen, true);
    v.setUint32(20, LINKTYPE_RAW, true);
    this.len = PCAP_FILE_HEADER_LEN;
  }

  /**
   * Append the IP packet pkt[off, off+len) stamped tsSec + tsNsec (rounded down to µs).
   * Packets longer than snaplen are cut, keeping their original length in the record.
   */
  write(pkt: Uint8Array, off: number, len: number, tsSec: number, tsNsec = 0): void {
    const cap = Math.min(len, this.snaplen);
    this.reserve(PCAP_RECORD_HEADER_LEN + cap);
    const v = this.view;
    const at = this.len;
    v.setUint32(at, tsSec, true);
    v.setUint32(at + 4, Math.floor(tsNsec / 1000), true);
    v.setUint32(at + 8, cap, true);
    v.setUint32(at + 12, len, true);
    this.buf.set(pkt.subarray(off, off + cap), at + PCAP_RECORD_HEADER_LEN);
    this.len = at + PCAP_RECORD_HEADER_LEN + cap;
    this.count++;
  }

  /** The file so far (a view: copy it before writing more if you keep it). */
  bytes(): Uint8Array {
    return this.buf.subarray(0, this.len);
  }

  private reserve(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.buf.subarray(0, this.len));
    this.buf = grown;
    this.view = new DataView(grown.buffer, grown.byteOffset, grown.byteLength);
  }
}

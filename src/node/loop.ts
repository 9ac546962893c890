// The packet loop: one TUN batch in, one dpProcess per packet, one writeBatch out.
//
// Packets that go back into the kernel (V_PASS, V_TX) are written from where they were read: the
// batch's offsets/lengths are compacted into preallocated arrays and written in ONE native call.
// A V_REPLY's generated packet lives in dp.out until the next dpProcess, so the pending batch is
// flushed first (order kept) and the reply written on its own — rejects are rare.
//
// With offloads (the TUN opened with a vnet header, src/tun/tun.ts) every read starts with a
// virtio_net_hdr (src/wire/virtio.ts), and the loop is the driver's half of the work, as
// virtio_net_hdr_to_skb is in the kernel:
//   - the header is validated (vnetCheck): a malformed one is dropped here with its own
//     AGENT_DROP_VNET_* counter — the kernel would refuse it on the way back anyway;
//   - the IP packet behind it goes to the program once, however many segments it will become;
//     the program is told those segments (conntrack counts packets and bytes as the wire will);
//   - a partial checksum (NEEDS_CSUM) is kept partial: the program's rewrites assume a full one,
//     so the seed is re-derived after them from the addresses it came with (rewrite.ts);
//   - an IPv6 packet (version 6, the one test per read the IPv4 reads pay) takes processVnet6:
//     its own header check (vnetCheck6) and segment count, the seed re-derived from the sums of
//     its 32 address bytes before and after the program (checksum6.ts ipv6AddrSum);
//   - a written-back packet keeps its own header — it passed the checks the kernel makes on a
//     write (csum_start at the transport header, csum_offset 16/6, gso_size > 0 with GSO);
//     a generated packet (reject, ICMP error) gets a zero header.
// Nothing here allocates per packet or per batch.
import { A6_DST, type Datapath } from '../datapath/state/datapath.ts';
import { dpProcess } from '../datapath/program.ts';
import { TX_REVNAT } from '../datapath/state/reasons.ts';
import { V_DROP, V_PASS, V_REPLY, V_TX } from '../datapath/state/verdict.ts';
import { read16, read32s, write16 } from '../wire/bytes.ts';
import { csumPartialReplaceSum } from '../wire/checksum.ts';
import { ipv6AddrSum } from '../wire/checksum6.ts';
import { IPPROTO_TCP, IPPROTO_UDP } from '../wire/proto.ts';
import { ipv4RewriteSrc, l4PartialCsumAfterNat, l4RewriteSrcPort } from '../wire/rewrite.ts';
import {
  VNET_F_DATA_VALID,
  VNET_F_NEEDS_CSUM,
  VNET_HDR_LEN,
  VNET_OK,
  vnetFlags,
  vnetCheck,
  vnetCheck6,
  vnetCsumFieldOff,
  vnetExtraBytes,
  vnetExtraBytes6,
  vnetNeedsCsum,
  vnetSegments,
  vnetSegments6,
  vnetZero,
} from '../wire/virtio.ts';
import type { TunDevice } from '../tun/tun.ts';
import type { Cidr } from '../wire/addr.ts';
import type { Cidr6Words } from '../wire/addr6.ts';

/** Agent-level outcomes, beside the datapath's reasons (index into AgentCounters.values). */
export const AGENT_PACKETS = 0;
/**
 * Passed by the datapath but addressed into the service CIDR (IPv4, or with --service-cidr-v6 the
 * IPv6 one): the kernel routes the service CIDR into the TUN, so writing it back would loop until
 * its TTL (hop limit) runs out. Dropped (kube-proxy would send it to the default route; there is
 * nothing there to answer it either).
 */
export const AGENT_DROP_SERVICE_CIDR_LOOP = 1;
/** The kernel refused a written packet (counted per packet by the addon too). */
export const AGENT_TX_REFUSED = 2;
export const AGENT_BATCHES = 3;
/** Read shorter than a virtio_net_hdr (VNET_ERR_TRUNCATED). */
export const AGENT_DROP_VNET_TRUNCATED = 4;
/** Unknown gso_type, or one the IP protocol denies (VNET_ERR_GSO_TYPE). */
export const AGENT_DROP_VNET_BAD_GSO_TYPE = 5;
/** gso_size 0 with GSO, or a UDP_L4 packet of more than 64 segments (VNET_ERR_GSO_SIZE). */
export const AGENT_DROP_VNET_BAD_GSO_SIZE = 6;
/** hdr_len longer than the packet (VNET_ERR_HDR_LEN). */
export const AGENT_DROP_VNET_BAD_HDR_LEN = 7;
/** csum_start / csum_offset past the packet or not at the L4 checksum (VNET_ERR_CSUM). */
export const AGENT_DROP_VNET_BAD_CSUM = 8;
/** GSO super-packets read (each counted once in AGENT_PACKETS). */
export const AGENT_GSO_PACKETS = 9;
/** Segments those super-packets become on the wire. */
export const AGENT_GSO_SEGMENTS = 10;
export const AGENT_COUNTER_NAMES: readonly string[] = [
  'AGENT_PACKETS',
  'AGENT_DROP_SERVICE_CIDR_LOOP',
  'AGENT_TX_REFUSED',
  'AGENT_BATCHES',
  'AGENT_DROP_VNET_TRUNCATED',
  'AGENT_DROP_VNET_BAD_GSO_TYPE',
  'AGENT_DROP_VNET_BAD_GSO_SIZE',
  'AGENT_DROP_VNET_BAD_HDR_LEN',
  'AGENT_DROP_VNET_BAD_CSUM',
  'AGENT_GSO_PACKETS',
  'AGENT_GSO_SEGMENTS',
];
/** vnetCheck's VNET_ERR_x is counted in AGENT_DROP_VNET_TRUNCATED + x - 1. */
const VNET_DROP_BASE = AGENT_DROP_VNET_TRUNCATED - 1;

export interface PacketLoop {
  readonly counters: Float64Array;
  handle(buf: Uint8Array, offs: Uint32Array, lens: Uint32Array, n: number): void;
}

export interface PacketLoopOptions {
  /** every read and write carries a virtio_net_hdr (the TUN was opened with offloads) */
  vnet?: boolean;
  /** the IPv6 service CIDR (--service-cidr-v6): its unassigned addresses are dropped as loops */
  serviceCidr6?: Cidr6Words;
}

export function createPacketLoop(
  dp: Datapath,
  tun: TunDevice,
  serviceCidr: Cidr,
  batchMax: number,
  nowMs: () => number,
  opts: PacketLoopOptions = {},
): PacketLoop {
  const counters = new Float64Array(AGENT_COUNTER_NAMES.length);
  const txOffs = new Uint32Array(batchMax);
  const txLens = new Uint32Array(batchMax);
  const svcNet = serviceCidr.addr;
  const svcMask = serviceCidr.mask;
  // no IPv6 service CIDR: a mask that matches nothing (net bits outside it)
  const svc6Net = opts.serviceCidr6?.net ?? Int32Array.of(0, 0, 0, 1);
  const svc6Mask = opts.serviceCidr6?.mask ?? Int32Array.of(0, 0, 0, 0);
  const vnet = opts.vnet === true;
  const hdr = vnet ? VNET_HDR_LEN : 0;
  // a generated packet behind its (zero) vnet header, written on its own
  const reply = new Uint8Array(VNET_HDR_LEN + dp.out.length);
  vnetZero(reply, 0);
  // TEST HOOK (lab compare tests only): a deliberately broken kubetun that undoes reverse NAT,
  // so replies leave with the backend's address. Read once here, never per packet.
  const testSkipRevNat = process.env.KUBETUN_TEST_SKIP_REVNAT === '1';

  function flush(buf: Uint8Array, m: number): void {
    if (m === 0) return;
    const w = tun.writeBatch(buf, txOffs, txLens, m);
    if (w < m) counters[AGENT_TX_REFUSED] += m - w;
  }

  function writeReply(): void {
    const out = dp.out;
    const n = dp.outLen;
    for (let k = 0; k < n; k++) reply[hdr + k] = out[k];
    if (!tun.write(vnet ? reply : out, 0, hdr + n)) counters[AGENT_TX_REFUSED] += 1;
  }

  /** Whether the IPv6 packet just processed is to the IPv6 service CIDR (dp.a6, its dst). */
  function inSvc6(): boolean {
    const a = dp.a6;
    for (let k = 0; k < 4; k++) {
      if ((a[A6_DST + k] & svc6Mask[k]) !== svc6Net[k]) return false;
    }
    return true;
  }

  /** One read with its virtio_net_hdr; returns the verdict (V_DROP for a malformed header). */
  function processVnet(buf: Uint8Array, off: number, end: number, now: number): number {
    if (end > off + VNET_HDR_LEN && buf[off + VNET_HDR_LEN] >>> 4 === 6) {
      return processVnet6(buf, off, end, now);
    }
    const rc = vnetCheck(buf, off, end);
    if (rc !== VNET_OK) {
      counters[VNET_DROP_BASE + rc] += 1;
      return V_DROP;
    }
    const ip = off + VNET_HDR_LEN;
    const segs = vnetSegments(buf, off, end);
    if (segs > 1) {
      counters[AGENT_GSO_PACKETS] += 1;
      counters[AGENT_GSO_SEGMENTS] += segs;
    }
    const extra = segs > 1 ? vnetExtraBytes(buf, off, end) : 0;
    // a partial checksum is not a checksum yet, and DATA_VALID says the kernel verified it
    const trusted = (vnetFlags(buf, off) & (VNET_F_NEEDS_CSUM | VNET_F_DATA_VALID)) !== 0 ? 1 : 0;
    if (!vnetNeedsCsum(buf, off))
      return dpProcess(dp, buf, ip, end - ip, now, segs, extra, trusted);
    const csumAt = ip + vnetCsumFieldOff(buf, off);
    const seed = read16(buf, csumAt);
    const src = read32s(buf, ip + 12);
    const dst = read32s(buf, ip + 16);
    const v = dpProcess(dp, buf, ip, end - ip, now, segs, extra, trusted);
    if (v === V_TX && (dp.proto === IPPROTO_TCP || dp.proto === IPPROTO_UDP)) {
      l4PartialCsumAfterNat(buf, ip, csumAt, seed, src, dst);
    }
    return v;
  }

  /** processVnet of an IPv6 packet (see the header). */
  function processVnet6(buf: Uint8Array, off: number, end: number, now: number): number {
    const rc = vnetCheck6(buf, off, end);
    if (rc !== VNET_OK) {
      counters[VNET_DROP_BASE + rc] += 1;
      return V_DROP;
    }
    const ip = off + VNET_HDR_LEN;
    const segs = vnetSegments6(buf, off, end);
    if (segs > 1) {
      counters[AGENT_GSO_PACKETS] += 1;
      counters[AGENT_GSO_SEGMENTS] += segs;
    }
    const extra = segs > 1 ? vnetExtraBytes6(buf, off, end) : 0;
    const trusted = (vnetFlags(buf, off) & (VNET_F_NEEDS_CSUM | VNET_F_DATA_VALID)) !== 0 ? 1 : 0;
    if (!vnetNeedsCsum(buf, off))
      return dpProcess(dp, buf, ip, end - ip, now, segs, extra, trusted);
    const csumAt = ip + vnetCsumFieldOff(buf, off);
    const seed = read16(buf, csumAt);
    const addrs = ipv6AddrSum(buf, ip);
    const v = dpProcess(dp, buf, ip, end - ip, now, segs, extra, trusted);
    if (v === V_TX && (dp.proto === IPPROTO_TCP || dp.proto === IPPROTO_UDP)) {
      write16(buf, csumAt, csumPartialReplaceSum(seed, addrs, ipv6AddrSum(buf, ip)));
    }
    return v;
  }

  function handle(buf: Uint8Array, offs: Uint32Array, lens: Uint32Array, n: number): void {
    const now = nowMs();
    let m = 0;
    counters[AGENT_BATCHES] += 1;
    counters[AGENT_PACKETS] += n;
    for (let i = 0; i < n; i++) {
      const off = offs[i];
      const v = vnet
        ? processVnet(buf, off, off + lens[i], now)
        : dpProcess(dp, buf, off, lens[i], now);
      if (testSkipRevNat && v === V_TX && dp.lastReason === TX_REVNAT) undoRevNat(dp, buf);
      if (v === V_TX || v === V_PASS) {
        if (v === V_PASS && (dp.ipv6 === 0 ? (dp.daddr & svcMask) >>> 0 === svcNet : inSvc6())) {
          counters[AGENT_DROP_SERVICE_CIDR_LOOP] += 1;
          continue;
        }
        txOffs[m] = off;
        txLens[m] = lens[i];
        m++;
      } else if (v === V_REPLY) {
        flush(buf, m);
        m = 0;
        writeReply();
      }
      // V_DROP: nothing to write; dp.counters (or, for a bad vnet header, counters) holds why.
    }
    flush(buf, m);
  }

  return { counters, handle };
}

/** The test hook's work: put the backend (the conntrack entry's) back as the reply's source. */
function undoRevNat(dp: Datapath, buf: Uint8Array): void {
  ipv4RewriteSrc(buf, dp.ipOff, dp.ct.baddr(dp.lastCtIdx));
  l4RewriteSrcPort(buf, dp.ipOff, dp.ct.bport(dp.lastCtIdx));
}

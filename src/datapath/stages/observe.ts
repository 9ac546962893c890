// The observed path of dpProcess: taken only while someone subscribes to the event ring
// (state/events.ts: `kubetun monitor`, `kubetun tap`); with nobody listening dpProcess never
// comes here. Runs the program as usual, then describes what it did in one ring event:
// reason and verdict, the tuple as received (dp's parsed fields) and as written (read back
// from the packet, or from dp.out for a generated reply), the map entries used (backend id,
// conntrack entry, its service's revNat id) and the stages, derived from those. Filters run
// before anything is written; with capture on, the bytes as received are copied first (the
// program rewrites in place) and kept only if the event is emitted. Allocation-free.
import { read16, read32s } from '../../wire/bytes.ts';
import {
  IPPROTO_ICMP,
  IPPROTO_ICMPV6,
  IPPROTO_SCTP,
  IPPROTO_TCP,
  IPPROTO_UDP,
} from '../../wire/proto.ts';
import type { Datapath } from '../state/datapath.ts';
import {
  EV_F_IPV6,
  type EventRing,
  ST_CT,
  ST_FRAG,
  ST_ICMP,
  ST_LB,
  ST_NAT,
  ST_PARSE,
  ST_REJECT,
} from '../state/events.ts';
import {
  DROP_BAD_EXT_HDR,
  DROP_BAD_PAYLOAD_LEN,
  DROP_EXT_HDR_CHAIN,
  DROP_TRUNCATED_IPV6,
  DROP_BAD_IHL,
  DROP_BAD_IP_CSUM,
  DROP_BAD_TOTLEN,
  DROP_BAD_VERSION,
  DROP_FRAG_OUT_OF_ORDER,
  DROP_TRUNCATED_IPV4,
  PASS_NON_FIRST_FRAGMENT,
  REASON_VERDICT,
  TX_DNAT,
  TX_DNAT_NEW,
  TX_FRAG,
  TX_REVSNAT,
} from '../state/reasons.ts';
import { V_DROP, V_REPLY, V_TX } from '../state/verdict.ts';

/** Before the program: a clean tuple (a packet refused by parse has none) and, when capturing, the bytes. */
export function obsBefore(
  ev: EventRing,
  dp: Datapath,
  buf: Uint8Array,
  off: number,
  len: number,
): number {
  dp.proto = 0;
  dp.saddr = 0;
  dp.daddr = 0;
  dp.sport = 0;
  dp.dport = 0;
  dp.frag = 0;
  dp.ipv6 = 0;
  if (ev.capture === 0) return 0;
  const n = Math.min(len, ev.snap);
  copyBytes(ev.bytes, ev.nextBytesAt(), buf, off, n);
  return n;
}

/** After the program: emit the event if a subscriber's filter wants it. */
export function obsAfter(
  ev: EventRing,
  dp: Datapath,
  buf: Uint8Array,
  off: number,
  len: number,
  r: number,
  capBefore: number,
): void {
  const v = REASON_VERDICT[r];
  const ports = ((dp.sport & 0xffff) << 16) | (dp.dport & 0xffff);
  let as = dp.saddr;
  let ad = dp.daddr;
  let aports = ports;
  // where the (low word of the) addresses sit: IPv4 12 / 16, IPv6 20 / 36
  const sa = dp.ipv6 === 1 ? 20 : 12;
  const da = dp.ipv6 === 1 ? 36 : 16;
  if (v === V_TX && dp.ipOff >= 0) {
    as = read32s(buf, dp.ipOff + sa);
    ad = read32s(buf, dp.ipOff + da);
    if (hasPorts(dp.proto) && dp.frag !== 2) {
      aports = (read16(buf, dp.l4Off) << 16) | read16(buf, dp.l4Off + 2);
    }
  } else if (v === V_REPLY && dp.outLen >= 40) {
    as = read32s(dp.out, sa);
    ad = read32s(dp.out, da);
    aports = 0;
  }
  const m = ev.match(r, v === V_DROP ? 1 : 0, dp.proto, dp.saddr, dp.daddr, ports, as, ad, aports);
  if (m === 0) return;
  let capAfter = 0;
  if (ev.capture !== 0 && v !== V_DROP) capAfter = obsCopyAfter(ev, dp, buf, off, len, v);
  const ct = dp.lastCtIdx;
  const service = ct >= 0 ? dp.ct.revNat(ct) : 0;
  const stages = obsStages(dp, r, v, ct, as !== dp.saddr);
  const fam = dp.ipv6 === 1 ? EV_F_IPV6 : 0;
  const flags = v | (stages << 8) | ((dp.proto & 0xff) << 16) | ((dp.lastCtNew & 1) << 24) | fam;
  ev.emit(
    m,
    dp.nowMs,
    r,
    flags,
    dp.saddr,
    dp.daddr,
    ports,
    as,
    ad,
    aports,
    dp.lastBackendId,
    ct,
    service,
    len,
    capBefore,
    capAfter,
  );
}

function obsCopyAfter(
  ev: EventRing,
  dp: Datapath,
  buf: Uint8Array,
  off: number,
  len: number,
  v: number,
): number {
  const at = ev.nextBytesAt() + ev.snap;
  const src = v === V_REPLY ? dp.out : buf;
  const from = v === V_REPLY ? 0 : off;
  const total = v === V_REPLY ? dp.outLen : len;
  const n = Math.min(total, ev.snap);
  copyBytes(ev.bytes, at, src, from, n);
  return n;
}

/** A loop, not set(subarray()): a subarray is an allocation per packet. */
function copyBytes(dst: Uint8Array, at: number, src: Uint8Array, from: number, n: number): void {
  for (let k = 0; k < n; k++) dst[at + k] = src[from + k];
}

/** TCP, UDP and SCTP start with the two ports (and are tracked by conntrack). */
function hasPorts(proto: number): boolean {
  return proto === IPPROTO_TCP || proto === IPPROTO_UDP || proto === IPPROTO_SCTP;
}

/** The stages a packet went through, from what it left behind (no per-stage bookkeeping). */
function obsStages(dp: Datapath, r: number, v: number, ct: number, srcChanged: boolean): number {
  if (r === DROP_TRUNCATED_IPV4 || r === DROP_BAD_VERSION || r === DROP_BAD_IHL) return ST_PARSE;
  if (r === DROP_BAD_TOTLEN || r === DROP_BAD_IP_CSUM) return ST_PARSE;
  if (r === DROP_TRUNCATED_IPV6 || r === DROP_BAD_PAYLOAD_LEN) return ST_PARSE;
  if (r === DROP_BAD_EXT_HDR || r === DROP_EXT_HDR_CHAIN) return ST_PARSE;
  let s = ST_PARSE;
  if (r === TX_FRAG || r === DROP_FRAG_OUT_OF_ORDER || r === PASS_NON_FIRST_FRAGMENT) s |= ST_FRAG;
  if (hasPorts(dp.proto)) s |= ST_CT;
  if (dp.proto === IPPROTO_ICMP || dp.proto === IPPROTO_ICMPV6) s |= ST_ICMP;
  if (dp.lastBackendId !== 0 || (ct >= 0 && dp.lastCtNew !== 0)) s |= ST_LB;
  // masquerade: a client -> service packet leaving with another source; its replies (REVSNAT)
  if (r === TX_REVSNAT || (srcChanged && (r === TX_DNAT || r === TX_DNAT_NEW))) s |= ST_NAT;
  if (v === V_REPLY) s |= ST_REJECT;
  return s;
}

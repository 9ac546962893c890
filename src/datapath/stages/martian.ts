// Impossible sources of a service packet (the kernel's martian sources, ip_route_input_slow):
// such a packet must never be translated — DNAT and masquerade would launder it into a
// well-formed packet a backend answers. Checked only on the new-flow path toward a service
// (VIP or node port): other packets go back to the kernel, which applies its own rules.
//
//   0.0.0.0/8         DROP_MARTIAN_ZERONET    "this network", never a source on the wire
//   127.0.0.0/8       DROP_MARTIAN_LOOPBACK   loopback from outside (route_localnet off)
//   224.0.0.0/4       DROP_MARTIAN_MULTICAST  a group is never a sender
//   240.0.0.0/4       DROP_MARTIAN_CLASS_E    reserved (except the broadcast below)
//   255.255.255.255   DROP_MARTIAN_BROADCAST  limited broadcast
//   a ClusterIP       DROP_MARTIAN_VIP_SOURCE no host owns a VIP: spoofed
// One branch on the first octet and at most one service-map lookup; no allocation.
//
// IPv6 (lb6MartianSource), the sources RFC 4291 says never appear on a forwarded packet:
//   ::                DROP_MARTIAN6_UNSPECIFIED  2.5.2 "must never be assigned to any node"
//   ::1               DROP_MARTIAN6_LOOPBACK     2.5.3 "must never be sent outside a single node"
//   ff00::/8          DROP_MARTIAN6_MULTICAST    2.7 "must not be used as source addresses"
//   an IPv6 ClusterIP DROP_MARTIAN_VIP_SOURCE

import { A6_SRC, type Datapath } from '../state/datapath.ts';
import {
  DROP_MARTIAN_BROADCAST,
  DROP_MARTIAN_CLASS_E,
  DROP_MARTIAN_LOOPBACK,
  DROP_MARTIAN_MULTICAST,
  DROP_MARTIAN_VIP_SOURCE,
  DROP_MARTIAN_ZERONET,
  DROP_MARTIAN6_LOOPBACK,
  DROP_MARTIAN6_MULTICAST,
  DROP_MARTIAN6_UNSPECIFIED,
  R_CONTINUE,
} from '../state/reasons.ts';
import { lb4IsVip } from './lb.ts';
import { lb6IsVip } from './lb6.ts';

/** The martian reason of dp.saddr, or R_CONTINUE for a source that may send. */
export function lb4MartianSource(dp: Datapath): number {
  const s = dp.saddr;
  const a = s >>> 24;
  if (a === 0) return DROP_MARTIAN_ZERONET;
  if (a === 127) return DROP_MARTIAN_LOOPBACK;
  if (a >= 224) {
    if (a < 240) return DROP_MARTIAN_MULTICAST;
    return s === -1 ? DROP_MARTIAN_BROADCAST : DROP_MARTIAN_CLASS_E;
  }
  if (lb4IsVip(dp, s)) return DROP_MARTIAN_VIP_SOURCE;
  return R_CONTINUE;
}

/** The martian reason of the IPv6 source (dp.a6[A6_SRC]), or R_CONTINUE. */
export function lb6MartianSource(dp: Datapath): number {
  const a = dp.a6;
  const w0 = a[A6_SRC];
  if (w0 >>> 24 === 0xff) return DROP_MARTIAN6_MULTICAST;
  if ((w0 | a[A6_SRC + 1] | a[A6_SRC + 2]) === 0) {
    const w3 = a[A6_SRC + 3];
    if (w3 === 0) return DROP_MARTIAN6_UNSPECIFIED;
    if (w3 === 1) return DROP_MARTIAN6_LOOPBACK;
  }
  if (lb6IsVip(dp, a, A6_SRC)) return DROP_MARTIAN_VIP_SOURCE;
  return R_CONTINUE;
}

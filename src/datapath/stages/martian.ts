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

import type { Datapath } from '../state/datapath.ts';
import {
  DROP_MARTIAN_BROADCAST,
  DROP_MARTIAN_CLASS_E,
  DROP_MARTIAN_LOOPBACK,
  DROP_MARTIAN_MULTICAST,
  DROP_MARTIAN_VIP_SOURCE,
  DROP_MARTIAN_ZERONET,
  R_CONTINUE,
} from '../state/reasons.ts';
import { lb4IsVip } from './lb.ts';

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

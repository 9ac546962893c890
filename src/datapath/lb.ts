// Load-balancing stages of the ClusterIP program, Cilium's split (bpf/lib/lb.h): find the
// service master entry, pick a backend slot, and rewrite the packet (DNAT on the way in,
// reverse NAT on the way out) with incremental checksum updates.

import { SVC_F_WILDCARD } from '../maps/services.ts';
import {
  ipv4RewriteDst,
  ipv4RewriteSrc,
  l4RewriteDstPort,
  l4RewriteSrcPort,
} from '../wire/rewrite.ts';
import type { Datapath } from './datapath.ts';

/** Master entry of (daddr, dport, proto), or -1. */
export function lb4LookupService(dp: Datapath): number {
  return dp.svc.lookup(dp.daddr, dp.dport, dp.proto, 0);
}

/** Whether daddr is a known VIP (a wildcard master: port 0, proto 0). */
export function lb4IsVip(dp: Datapath, addr: number): boolean {
  const w = dp.svc.lookup(addr, 0, 0, 0);
  return w >= 0 && (dp.svc.flags(w) & SVC_F_WILDCARD) !== 0;
}

/**
 * Pick a backend for a new flow: a uniformly random slot among the master's `count` slots
 * (iptables `statistic --mode random`). The control plane puts only eligible endpoints in the
 * slots, so the backend's state is not consulted here. Returns the backend map index, or -1
 * when the slot or backend entry is missing (maps inconsistent). The backend id is left in
 * dp.selBackendId.
 */
export function lb4SelectBackend(dp: Datapath, master: number): number {
  const slot = 1 + dp.rng.below(dp.svc.count(master));
  const s = dp.svc.lookup(dp.daddr, dp.dport, dp.proto, slot);
  if (s < 0) return -1;
  const id = dp.svc.backendId(s);
  dp.selBackendId = id;
  return dp.be.lookup(id);
}

/** Client -> VIP becomes client -> backend: destination address and port. */
export function lb4Dnat(dp: Datapath, buf: Uint8Array, baddr: number, bport: number): void {
  ipv4RewriteDst(buf, dp.ipOff, baddr);
  if (bport !== dp.dport) l4RewriteDstPort(buf, dp.ipOff, bport);
}

/** Backend -> client becomes VIP -> client: source address and port. */
export function lb4RevNat(dp: Datapath, buf: Uint8Array, vip: number, vport: number): void {
  ipv4RewriteSrc(buf, dp.ipOff, vip);
  if (vport !== dp.sport) l4RewriteSrcPort(buf, dp.ipOff, vport);
}

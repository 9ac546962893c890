// Stale UDP conntrack cleanup, after kube-proxy's conntrack reconciler
// (pkg/proxy/conntrack/cleanup.go, 1.33): after a sync that touched UDP service ports, every UDP
// flow whose original destination is a UDP service address must be going to one of that service
// port's serving endpoints; any other flow is deleted, or the client keeps sending into a
// backend that is gone (DNS blackholed after a CoreDNS restart, #59368). NodePort flows (to the
// node's address, matched by the port as kube-proxy does) are held to the same test. Flows to
// addresses and NodePorts the last sync removed are deleted too. TCP flows are never touched: TCP notices a
// dead peer by itself (RST) and deleting its entries would break live connections.

import type { ChangeTracker, SyncChanges } from './tracker.ts';
import { serviceIPs } from './tracker.ts';
import { ipv4ToU32 } from '../wire/addr.ts';
import { IPPROTO_UDP } from '../wire/proto.ts';

/** The part of ConntrackMap (src/maps/conntrack.ts) the reconciler uses. */
export interface ConntrackView {
  next(from: number): number;
  proto(i: number): number;
  daddr(i: number): number;
  dport(i: number): number;
  baddr(i: number): number;
  bport(i: number): number;
  delete(i: number): void;
}

/** addr (u32) and port as one exact number: addr × 65536 + port < 2^48. */
// `>>> 0`: the conntrack hands addresses out as int32, the model's ipv4ToU32 gives u32
const addrPort = (addr: number, port: number): number => (addr >>> 0) * 65536 + port;

interface UdpFrontends {
  /** service address (ClusterIP, external IP, LB IP) and port → serving endpoints */
  byAddr: Map<number, Set<number>>;
  /** NodePort → serving endpoints (kube-proxy matches NodePort flows by the port alone) */
  byNodePort: Map<number, Set<number>>;
}

/** UDP frontends → serving endpoints, from the applied state. */
function udpFrontends(tracker: ChangeTracker): UdpFrontends {
  const byAddr = new Map<number, Set<number>>();
  const byNodePort = new Map<number, Set<number>>();
  for (const p of tracker.resolveAll()) {
    if (p.port.protocol !== 'UDP') continue;
    const serving = new Set(
      p.endpoints.filter((e) => e.serving).map((e) => addrPort(ipv4ToU32(e.ip), e.port)),
    );
    for (const ip of serviceIPs(p.service))
      byAddr.set(addrPort(ipv4ToU32(ip), p.port.port), serving);
    if (p.port.nodePort !== 0) byNodePort.set(p.port.nodePort, serving);
  }
  return { byAddr, byNodePort };
}

/** Deletes stale UDP flows; returns how many. Scans the whole table (not for the hot path). */
export function reconcileUdpConntrack(
  ct: ConntrackView,
  tracker: ChangeTracker,
  changes: SyncChanges,
): number {
  const { byAddr, byNodePort } = udpFrontends(tracker);
  const staleAddrs = new Set(
    changes.udpStaleServiceAddrs.map((a) => addrPort(ipv4ToU32(a.ip), a.port)),
  );
  const staleNodePorts = new Set(changes.udpStaleNodePorts);
  let deleted = 0;
  for (let i = ct.next(0); i >= 0; i = ct.next(i + 1)) {
    if (ct.proto(i) !== IPPROTO_UDP) continue;
    const dst = addrPort(ct.daddr(i), ct.dport(i));
    // a VIP flow by its address and port; any other tracked flow to a NodePort by the port
    const serving = byAddr.get(dst) ?? byNodePort.get(ct.dport(i));
    const stale = serving
      ? !serving.has(addrPort(ct.baddr(i), ct.bport(i)))
      : staleAddrs.has(dst) || staleNodePorts.has(ct.dport(i));
    if (!stale) continue;
    ct.delete(i);
    deleted++;
  }
  return deleted;
}

// Stale UDP conntrack cleanup, after kube-proxy's conntrack reconciler
// (pkg/proxy/conntrack/cleanup.go, CleanStaleEntries, 1.32+): after a sync that changed the
// endpoints of a service with a UDP port, every UDP flow whose original destination is a UDP
// service frontend — service address and port, or (matched by the port alone) a NodePort — must
// have a reply source that is one of that service port's serving endpoint IPs; any other flow is
// deleted, or the client keeps sending into a backend that is gone (DNS blackholed after a
// CoreDNS restart, #59368). As in kube-proxy:
//   - a service port without any serving endpoint is left alone (its flows are not touched);
//   - the endpoint is matched by IP only (kube-proxy's filter is --reply-src), not its port;
//   - terminating endpoints that still serve keep their flows.
// One deliberate addition: flows to addresses and NodePorts the last sync removed are deleted
// too (kube-proxy before 1.32 did so; the reconciler leaves them to time out). TCP flows are never
// touched: TCP notices a dead peer by itself (RST) and deleting its entries would break live
// connections. The kernel modes of the lab run the same rule with `conntrack -D`
// (src/lab/kube-proxy-conntrack.ts).

import type { ChangeTracker, SyncChanges } from './tracker.ts';
import { serviceIPs } from './tracker.ts';
import { ipv4ToU32, u32ToIpv4 } from '../wire/addr.ts';
import { IPPROTO_UDP } from '../wire/proto.ts';
import type { ResolvedServicePort } from '../model.ts';

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

/** UDP frontends → the IPs of their serving endpoints (kube-proxy's two maps). */
export interface UdpFrontends {
  /** "ip:port" of a service address (ClusterIP, external IP, LB IP) → serving endpoint IPs */
  byAddr: Map<string, Set<string>>;
  /** NodePort → serving endpoint IPs (kube-proxy matches NodePort flows by the port alone) */
  byNodePort: Map<number, Set<string>>;
}

/** The frontends to reconcile: UDP service ports with at least one serving endpoint. */
export function udpFrontends(ports: readonly ResolvedServicePort[]): UdpFrontends {
  const byAddr = new Map<string, Set<string>>();
  const byNodePort = new Map<number, Set<string>>();
  for (const p of ports) {
    if (p.port.protocol !== 'UDP') continue;
    const serving = new Set(p.endpoints.filter((e) => e.serving).map((e) => e.ip));
    // "a Service without endpoints does not require to clean the conntrack entries associated"
    if (serving.size === 0) continue;
    for (const ip of serviceIPs(p.service)) byAddr.set(`${ip}:${p.port.port}`, serving);
    if (p.port.nodePort !== 0) byNodePort.set(p.port.nodePort, serving);
  }
  return { byAddr, byNodePort };
}

/** Whether a UDP flow (original destination, reply source) is stale for these frontends. */
export function staleUdpFlow(
  f: UdpFrontends,
  origDst: string,
  origDport: number,
  replySrc: string,
): boolean {
  const byAddr = f.byAddr.get(`${origDst}:${origDport}`);
  if (byAddr && !byAddr.has(replySrc)) return true;
  const byPort = f.byNodePort.get(origDport);
  return byPort !== undefined && !byPort.has(replySrc);
}

/** Deletes stale UDP flows; returns how many. Scans the whole table (not for the hot path). */
export function reconcileUdpConntrack(
  ct: ConntrackView,
  tracker: ChangeTracker,
  changes: SyncChanges,
): number {
  const frontends = udpFrontends(tracker.resolveAll());
  const staleAddrs = new Set(
    changes.udpStaleServiceAddrs.map((a) => addrPort(ipv4ToU32(a.ip), a.port)),
  );
  const staleNodePorts = new Set(changes.udpStaleNodePorts);
  let deleted = 0;
  for (let i = ct.next(0); i >= 0; i = ct.next(i + 1)) {
    if (ct.proto(i) !== IPPROTO_UDP) continue;
    const dst = u32ToIpv4(ct.daddr(i));
    const live =
      frontends.byAddr.has(`${dst}:${ct.dport(i)}`) || frontends.byNodePort.has(ct.dport(i));
    const stale = live
      ? staleUdpFlow(frontends, dst, ct.dport(i), u32ToIpv4(ct.baddr(i)))
      : staleAddrs.has(addrPort(ct.daddr(i), ct.dport(i))) || staleNodePorts.has(ct.dport(i));
    if (!stale) continue;
    ct.delete(i);
    deleted++;
  }
  return deleted;
}

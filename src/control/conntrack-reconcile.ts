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
// (src/lab/kube-proxy-conntrack.ts). Both families, as kube-proxy's two proxiers do: the IPv4
// table against the IPv4 addresses and endpoints, the IPv6 table (reconcileUdpConntrack6)
// against the IPv6 ones (`endpoints6`), addresses compared as canonical text.

import type { ChangeTracker, SyncChanges } from './tracker.ts';
import { serviceIPs } from './tracker.ts';
import { ipv4ToU32, u32ToIpv4 } from '../wire/addr.ts';
import { canonIpv6, wordsToIpv6 } from '../wire/addr6.ts';
import { IPPROTO_UDP } from '../wire/proto.ts';
import { familyOfIP, type IPFamily, type ResolvedServicePort } from '../model.ts';

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

/**
 * The frontends to reconcile: UDP service ports with at least one serving endpoint, of one
 * family (IPv6 addresses as canonical text, which the IPv6 table's flows are rendered in).
 */
export function udpFrontends(
  ports: readonly ResolvedServicePort[],
  family: IPFamily = 'IPv4',
): UdpFrontends {
  const byAddr = new Map<string, Set<string>>();
  const byNodePort = new Map<number, Set<string>>();
  const text = family === 'IPv4' ? (ip: string) => ip : (ip: string) => canonIpv6(ip) ?? ip;
  for (const p of ports) {
    if (p.port.protocol !== 'UDP') continue;
    const eps = family === 'IPv4' ? p.endpoints : (p.endpoints6 ?? []);
    const serving = new Set(eps.filter((e) => e.serving).map((e) => text(e.ip)));
    // "a Service without endpoints does not require to clean the conntrack entries associated"
    if (serving.size === 0) continue;
    for (const ip of serviceIPs(p.service, family))
      byAddr.set(`${text(ip)}:${p.port.port}`, serving);
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
    changes.udpStaleServiceAddrs
      .filter((a) => familyOfIP(a.ip) === 'IPv4')
      .map((a) => addrPort(ipv4ToU32(a.ip), a.port)),
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

/** The part of an IPv6 ConntrackMap (`{ ipv6: true }`) the reconciler uses. */
export interface ConntrackView6 {
  next(from: number): number;
  proto(i: number): number;
  daddrWord(i: number, k: number): number;
  dport(i: number): number;
  baddrWord(i: number, k: number): number;
  delete(i: number): void;
}

/** reconcileUdpConntrack for the IPv6 table: the same rule over the IPv6 half. */
export function reconcileUdpConntrack6(
  ct: ConntrackView6,
  tracker: ChangeTracker,
  changes: SyncChanges,
): number {
  const frontends = udpFrontends(tracker.resolveAll(), 'IPv6');
  const staleAddrs = new Set(
    changes.udpStaleServiceAddrs
      .filter((a) => familyOfIP(a.ip) === 'IPv6')
      .map((a) => `${canonIpv6(a.ip)}:${a.port}`),
  );
  const staleNodePorts = new Set(changes.udpStaleNodePorts);
  const words = (f: (k: number) => number) => wordsToIpv6([f(0), f(1), f(2), f(3)]);
  let deleted = 0;
  for (let i = ct.next(0); i >= 0; i = ct.next(i + 1)) {
    if (ct.proto(i) !== IPPROTO_UDP) continue;
    const dst = words((k) => ct.daddrWord(i, k));
    const dport = ct.dport(i);
    const live = frontends.byAddr.has(`${dst}:${dport}`) || frontends.byNodePort.has(dport);
    const stale = live
      ? staleUdpFlow(
          frontends,
          dst,
          dport,
          words((k) => ct.baddrWord(i, k)),
        )
      : staleAddrs.has(`${dst}:${dport}`) || staleNodePorts.has(dport);
    if (!stale) continue;
    ct.delete(i);
    deleted++;
  }
  return deleted;
}

// NAT stages of the program: masquerade (SNAT) of new flows where kube-proxy marks them, the
// source rewrite of later packets, the reply path back through the SNAT table, and the
// external-frontend checks (loadBalancerSourceRanges, externalTrafficPolicy: Local).
//
// When kube-proxy masquerades (KUBE-MARK-MASQ, then MASQUERADE --random-fully):
//   ClusterIP frontend ........ source outside the cluster CIDR (node itself, external client)
//   any frontend .............. hairpin: the chosen backend is the client itself
//   NodePort / externalIP / LB  policy Cluster: always (also when the backend is local);
//                               policy Local: only sources on this node (the node's own
//                               addresses); external clients keep their IP and get local
//                               endpoints only; pod sources use every endpoint, unmasqueraded
// The masquerade address is what MASQUERADE takes, the address of the outgoing interface:
// the pod gateway (node side of the veth) for a backend in this node's pod CIDR, else the
// node IP. SNAT ports come from the configured range (kept if the client's port lies in it and
// is free, else a random start and a bounded linear probe), unique per (address, backend).
//
//   new flow:   ct4Create ─▶ nat4Masq ─(masq)─▶ snat alloc ─▶ source rewrite
//   orig pkt:   ct hit ─▶ DNAT ─▶ nat4Orig (SNAT table forward lookup) ─▶ source rewrite
//   reply pkt:  ct reply miss ─▶ nat4Reply (reverse lookup) ─▶ src = VIP, dst = client
import {
  SVC_F_ETP_LOCAL,
  SVC_F_EXTERNAL,
  SVC_F_SOURCE_RANGE,
  SVC_SCOPE_LOCAL,
} from '../../maps/services.ts';
import { ipv4SetTtlWithCsum, ipv4Ttl } from '../../wire/ipv4.ts';
import {
  ipv4RewriteDst,
  ipv4RewriteSrc,
  l4RewriteDstPort,
  l4RewriteSrcPort,
} from '../../wire/rewrite.ts';
import { ctExpired } from './ct.ts';
import { natWantsMasq, SNAT_RETRIES, snatFirstPort, snatNextPort } from './nat-rules.ts';
import { CT_DIR_REPLY } from '../state/ct-state.ts';
import type { Datapath } from '../state/datapath.ts';
import type { NatState } from '../state/nat-state.ts';
import { lb4CtCreate, lbCtCreateFailed, lb4NewFlowTx, lbTrack } from './lb.ts';
import {
  DROP_ETP_NO_LOCAL_ENDPOINTS,
  DROP_NAT_NO_PORT,
  DROP_NO_BACKEND,
  DROP_SNAT_FULL,
  DROP_SOURCE_RANGE,
  R_CONTINUE,
  TX_REVSNAT,
} from '../state/reasons.ts';

/** Whether saddr is inside the cluster CIDR (a pod). */
function fromPod(nat: NatState, saddr: number): boolean {
  return nat.hasCluster === 1 && (saddr & nat.clusterMask) === nat.clusterNet;
}

/**
 * A reply of a non-masqueraded flow, reverse-NATed: the kernel routed it into the TUN
 * (src/node/steer-replies.ts), spending one TTL that kube-proxy's single pass through the node
 * does not, so it gets it back — unless it goes to this node's own address, where tc steered it
 * before routing (steering.ts). With bridged pods a reply to a local client reaches the TUN
 * before any routing too, but there the kernel would not route it at all: the TUN's write-back
 * routes it once, so giving the TTL back is right there as well.
 */
export function nat4RestoreTtl(dp: Datapath, buf: Uint8Array): void {
  const nat = dp.nat;
  if (nat.restoreTtl === 0 || fromNode(nat, dp.daddr)) return;
  const ttl = ipv4Ttl(buf, dp.ipOff);
  if (ttl === 255) return;
  ipv4SetTtlWithCsum(buf, dp.ipOff, ttl + 1);
  dp.ttlRestored = 1;
}

/** Whether saddr is one of this node's own addresses (kube-proxy's --src-type LOCAL). */
function fromNode(nat: NatState, saddr: number): boolean {
  return saddr === nat.nodeIp || saddr === nat.podGateway;
}

/**
 * External frontends, before the generic new-flow path: source ranges, and the local scope of
 * externalTrafficPolicy: Local for external clients (served here, unmasqueraded). Returns
 * R_CONTINUE to go on with master m (every endpoint), else the final verdict.
 */
export function nat4Frontend(dp: Datapath, buf: Uint8Array, m: number, bytes: number): number {
  const flags = dp.svc.flags(m);
  if ((flags & SVC_F_EXTERNAL) === 0) return R_CONTINUE;
  const nat = dp.nat;
  if ((flags & SVC_F_SOURCE_RANGE) !== 0 && !nat4InRanges(nat, dp.svc.revNat(m), dp.saddr)) {
    return DROP_SOURCE_RANGE;
  }
  if ((flags & SVC_F_ETP_LOCAL) === 0) return R_CONTINUE;
  if (fromPod(nat, dp.saddr) || fromNode(nat, dp.saddr)) return R_CONTINUE;
  return nat4LocalScope(dp, buf, m, bytes);
}

function nat4InRanges(nat: NatState, revNat: number, saddr: number): boolean {
  const start = nat.rangeStart[revNat];
  const end = start + nat.rangeCount[revNat];
  for (let k = start; k < end; k++) {
    if ((saddr & nat.rangeMask[k]) === nat.rangeNet[k]) return true;
  }
  return false;
}

/** External client, policy Local: a random local endpoint, client IP kept (no SNAT). */
function nat4LocalScope(dp: Datapath, buf: Uint8Array, m: number, bytes: number): number {
  const svc = dp.svc;
  const proto = dp.proto;
  const scoped = proto | SVC_SCOPE_LOCAL;
  const loc = svc.lookup(dp.daddr, dp.dport, scoped, 0);
  const n = loc < 0 ? 0 : svc.count(loc);
  if (n === 0) return DROP_ETP_NO_LOCAL_ENDPOINTS;
  const s = svc.lookup(dp.daddr, dp.dport, scoped, 1 + dp.rng.below(n));
  const id = s < 0 ? 0 : svc.backendId(s);
  const b = id === 0 ? -1 : dp.be.lookup(id);
  if (b < 0) return DROP_NO_BACKEND;
  const baddr = dp.be.addr(b);
  const bport = dp.be.port(b);
  const i = lb4CtCreate(dp, m, id, baddr, bport);
  if (i < 0) return lbCtCreateFailed(i);
  nat4ForgetStale(dp, baddr, bport);
  return lb4NewFlowTx(dp, buf, i, bytes);
}

/**
 * A new flow (conntrack entry i, master m, backend baddr:bport) is about to be DNATed: decide
 * whether kube-proxy would masquerade it and, if so, allocate a SNAT port and rewrite the
 * source. R_CONTINUE, or the drop reason (the conntrack entry is deleted again).
 */
export function nat4Masq(
  dp: Datapath,
  buf: Uint8Array,
  i: number,
  m: number,
  baddr: number,
  bport: number,
): number {
  const nat = dp.nat;
  const flags = dp.svc.flags(m);
  const saddr = dp.saddr;
  // each source test only where the rule reads it (natWantsMasq: pods for ClusterIPs, the
  // node for external frontends)
  const ext = (flags & SVC_F_EXTERNAL) !== 0;
  const pod = !ext && fromPod(nat, saddr);
  const masq = natWantsMasq(
    flags,
    nat.hasCluster,
    pod,
    ext && fromNode(nat, saddr),
    baddr === saddr,
  );
  if (!masq || nat.nodeIp === 0) {
    nat4ForgetStale(dp, baddr, bport);
    return R_CONTINUE;
  }
  const natAddr = (baddr & nat.podMask) === nat.podNet ? nat.podGateway : nat.nodeIp;
  const e = nat4Alloc(dp, i, natAddr, baddr, bport);
  if (e < 0) {
    dp.ct.delete(i);
    return e === -2 ? DROP_SNAT_FULL : DROP_NAT_NO_PORT;
  }
  nat4RewriteSrc(dp, buf, natAddr, nat.snat.natPort(e));
  return R_CONTINUE;
}

/** A non-masqueraded new flow: a SNAT entry left by a dead flow with the same tuple goes. */
function nat4ForgetStale(dp: Datapath, baddr: number, bport: number): void {
  const snat = dp.nat.snat;
  if (snat.size === 0) return;
  const e = snat.lookupFwd(dp.proto, dp.saddr, dp.sport, baddr, bport);
  if (e >= 0) snat.delete(e);
}

/** SNAT entry for the flow, or -1 (no port free) / -2 (table full). */
function nat4Alloc(dp: Datapath, i: number, natAddr: number, baddr: number, bport: number): number {
  const nat = dp.nat;
  const snat = nat.snat;
  const proto = dp.proto;
  const stale = snat.lookupFwd(proto, dp.saddr, dp.sport, baddr, bport);
  if (stale >= 0) snat.delete(stale);
  const min = nat.portMin;
  const span = nat.portSpan;
  let port = snatFirstPort(dp, min, span);
  for (let tries = 0; tries < SNAT_RETRIES; tries++) {
    const o = snat.lookupRev(proto, baddr, bport, natAddr, port);
    if (o >= 0 && nat4Dead(dp, o)) snat.delete(o);
    if (o < 0 || !snat.isLive(o)) {
      const e = snat.insert(proto, dp.saddr, dp.sport, baddr, bport, natAddr, port, i);
      return e < 0 ? -2 : e;
    }
    port = snatNextPort(dp, min, span, port, tries);
  }
  return -1;
}

/** Whether entry e's conntrack flow is gone (deleted, reused for another flow, or expired). */
export function nat4Dead(dp: Datapath, e: number): boolean {
  const snat = dp.nat.snat;
  const ct = dp.ct;
  const i = snat.ctIdx(e);
  return (
    !ct.isLive(i) ||
    ct.saddr(i) !== snat.saddr(e) ||
    ct.sport(i) !== snat.sport(e) ||
    ct.baddr(i) !== snat.raddr(e) ||
    ct.bport(i) !== snat.rport(e) ||
    ct.proto(i) !== snat.proto(e) ||
    ctExpired(ct, i, dp.nowSec)
  );
}

function nat4RewriteSrc(dp: Datapath, buf: Uint8Array, addr: number, port: number): void {
  ipv4RewriteSrc(buf, dp.ipOff, addr);
  if (port !== dp.sport) l4RewriteSrcPort(buf, dp.ipOff, port);
}

/** A packet of tracked flow i in the original direction, already DNATed: masquerade it too. */
export function nat4Orig(dp: Datapath, buf: Uint8Array, i: number): void {
  const snat = dp.nat.snat;
  if (snat.size === 0) return;
  const e = snat.lookupFwd(dp.proto, dp.saddr, dp.sport, dp.ct.baddr(i), dp.ct.bport(i));
  if (e < 0 || snat.ctIdx(e) !== i) return;
  nat4RewriteSrc(dp, buf, snat.natAddr(e), snat.natPort(e));
}

/**
 * A reply to a masqueraded flow (backend -> natAddr:natPort): destination back to the client,
 * source to what the client asked for (VIP:port, node IP:NodePort, ...). R_CONTINUE if the
 * packet is no such reply.
 */
export function nat4Reply(dp: Datapath, buf: Uint8Array, bytes: number): number {
  const snat = dp.nat.snat;
  if (snat.size === 0) return R_CONTINUE;
  const e = snat.lookupRev(dp.proto, dp.saddr, dp.sport, dp.daddr, dp.dport);
  if (e < 0) return R_CONTINUE;
  if (nat4Dead(dp, e)) {
    snat.delete(e);
    return R_CONTINUE;
  }
  const ct = dp.ct;
  const i = snat.ctIdx(e);
  const t = lbTrack(dp, ct, i, CT_DIR_REPLY, bytes);
  if (t !== R_CONTINUE) return t;
  ipv4RewriteSrc(buf, dp.ipOff, ct.daddr(i));
  if (ct.dport(i) !== dp.sport) l4RewriteSrcPort(buf, dp.ipOff, ct.dport(i));
  ipv4RewriteDst(buf, dp.ipOff, snat.saddr(e));
  if (snat.sport(e) !== dp.dport) l4RewriteDstPort(buf, dp.ipOff, snat.sport(e));
  return TX_REVSNAT;
}

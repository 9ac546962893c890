// NAT stages of the IPv6 program: nat.ts's masquerade, reply path and external-frontend checks
// over the IPv6 SNAT table (dp.nat.snat6) and the node's IPv6 addresses (nodeIp6, podGateway6,
// the IPv6 pod and cluster CIDRs of DatapathConfig). When to masquerade and which ports to try
// are nat-rules.ts's, shared with IPv4:
//
//   new flow:   ct6Create ─▶ nat6Masq ─(masq)─▶ snat6 alloc ─▶ source rewrite (NAT66)
//   orig pkt:   ct6 hit ─▶ DNAT ─▶ nat6Orig (snat6 forward lookup) ─▶ source rewrite
//   reply pkt:  ct6 reply miss ─▶ nat6Reply (reverse lookup) ─▶ src = VIP, dst = client
//
// The masquerade address is the pod gateway for a backend in this node's IPv6 pod CIDR, else
// the node's IPv6 address; without nodeIp6 nothing is masqueraded (as without nodeIp).
import {
  SVC_F_ETP_LOCAL,
  SVC_F_EXTERNAL,
  SVC_F_SOURCE_RANGE,
  SVC_SCOPE_LOCAL,
} from '../../maps/services.ts';
import { ipv6HopLimit, ipv6SetHopLimit } from '../../wire/ipv6.ts';
import {
  ipv6RewriteDst,
  ipv6RewriteSrc,
  l6RewriteDstPort,
  l6RewriteSrcPort,
} from '../../wire/rewrite6.ts';
import { CT_DIR_REPLY } from '../state/ct-state.ts';
import { A6_BE, A6_DST, A6_NAT, A6_SRC, type Datapath } from '../state/datapath.ts';
import type { NatState } from '../state/nat-state.ts';
import {
  DROP_ETP_NO_LOCAL_ENDPOINTS,
  DROP_NAT_NO_PORT,
  DROP_NO_BACKEND,
  DROP_SNAT_FULL,
  DROP_SOURCE_RANGE,
  R_CONTINUE,
  TX_REVSNAT,
} from '../state/reasons.ts';
import { ct6Create, ctExpired } from './ct.ts';
import { lbCtCreateFailed, lbTrack } from './lb.ts';
import { addr6Same, lb6BackendAddr, lb6NewFlowTx } from './lb6.ts';
import { natWantsMasq, SNAT_RETRIES, snatFirstPort, snatNextPort } from './nat-rules.ts';

/** Whether a[at] lies in the network (net, mask), four words each. */
function in6(a: Int32Array, at: number, net: Int32Array, mask: Int32Array): boolean {
  return (
    (a[at] & mask[0]) === net[0] &&
    (a[at + 1] & mask[1]) === net[1] &&
    (a[at + 2] & mask[2]) === net[2] &&
    (a[at + 3] & mask[3]) === net[3]
  );
}

function eq6(a: Int32Array, at: number, b: Int32Array): boolean {
  return a[at] === b[0] && a[at + 1] === b[1] && a[at + 2] === b[2] && a[at + 3] === b[3];
}

/** Whether a[at] is inside the IPv6 cluster CIDR (a pod). */
function fromPod6(nat: NatState, a: Int32Array, at: number): boolean {
  return nat.hasCluster6 === 1 && in6(a, at, nat.cluster6Net, nat.cluster6Mask);
}

/** Whether a[at] is one of this node's own IPv6 addresses (kube-proxy's --src-type LOCAL). */
function fromNode6(nat: NatState, a: Int32Array, at: number): boolean {
  return nat.hasNode6 === 1 && (eq6(a, at, nat.nodeIp6) || eq6(a, at, nat.podGateway6));
}

/** nat4RestoreTtl for IPv6: the hop limit routing into the TUN took, given back. */
export function nat6RestoreHopLimit(dp: Datapath, buf: Uint8Array): void {
  const nat = dp.nat;
  if (nat.restoreTtl === 0 || fromNode6(nat, dp.a6, A6_DST)) return;
  const h = ipv6HopLimit(buf, dp.ipOff);
  if (h === 255) return;
  ipv6SetHopLimit(buf, dp.ipOff, h + 1); // no header checksum in IPv6
  dp.ttlRestored = 1;
}

/** nat4Frontend for IPv6: source ranges, the local scope of externalTrafficPolicy: Local. */
export function nat6Frontend(dp: Datapath, buf: Uint8Array, m: number, bytes: number): number {
  const flags = dp.svc6.flags(m);
  if ((flags & SVC_F_EXTERNAL) === 0) return R_CONTINUE;
  const nat = dp.nat;
  const a6 = dp.a6;
  if ((flags & SVC_F_SOURCE_RANGE) !== 0 && !nat6InRanges(nat, dp.svc6.revNat(m), a6)) {
    return DROP_SOURCE_RANGE;
  }
  if ((flags & SVC_F_ETP_LOCAL) === 0) return R_CONTINUE;
  if (fromPod6(nat, a6, A6_SRC) || fromNode6(nat, a6, A6_SRC)) return R_CONTINUE;
  return nat6LocalScope(dp, buf, m, bytes);
}

function nat6InRanges(nat: NatState, revNat: number, a6: Int32Array): boolean {
  const start = nat.rangeStart[revNat];
  const end = start + nat.rangeCount[revNat];
  const net = nat.rangeNet6;
  const mask = nat.rangeMask6;
  for (let k = start; k < end; k++) {
    const w = k << 2;
    if (
      (a6[A6_SRC] & mask[w]) === net[w] &&
      (a6[A6_SRC + 1] & mask[w + 1]) === net[w + 1] &&
      (a6[A6_SRC + 2] & mask[w + 2]) === net[w + 2] &&
      (a6[A6_SRC + 3] & mask[w + 3]) === net[w + 3]
    ) {
      return true;
    }
  }
  return false;
}

/** External client, policy Local: a random local endpoint, client IP kept (no SNAT). */
function nat6LocalScope(dp: Datapath, buf: Uint8Array, m: number, bytes: number): number {
  const svc = dp.svc6;
  const a6 = dp.a6;
  const scoped = dp.proto | SVC_SCOPE_LOCAL;
  const loc = svc.lookup6(a6, A6_DST, dp.dport, scoped, 0);
  const n = loc < 0 ? 0 : svc.count(loc);
  if (n === 0) return DROP_ETP_NO_LOCAL_ENDPOINTS;
  const s = svc.lookup6(a6, A6_DST, dp.dport, scoped, 1 + dp.rng.below(n));
  const id = s < 0 ? 0 : svc.backendId(s);
  const b = id === 0 ? -1 : dp.be6.lookup(id);
  if (b < 0) return DROP_NO_BACKEND;
  lb6BackendAddr(dp, b);
  const bport = dp.be6.port(b);
  const i = ct6Create(dp, id, bport, svc.revNat(m));
  if (i < 0) return lbCtCreateFailed(i);
  nat6ForgetStale(dp, bport);
  return lb6NewFlowTx(dp, buf, i, bytes);
}

/**
 * nat4Masq for IPv6: new flow i of master m to the backend at dp.a6[A6_BE]:bport. R_CONTINUE,
 * or the drop reason (the conntrack entry is deleted again).
 */
export function nat6Masq(
  dp: Datapath,
  buf: Uint8Array,
  i: number,
  m: number,
  bport: number,
): number {
  const nat = dp.nat;
  const a6 = dp.a6;
  const flags = dp.svc6.flags(m);
  const ext = (flags & SVC_F_EXTERNAL) !== 0;
  const pod = !ext && fromPod6(nat, a6, A6_SRC);
  const node = ext && fromNode6(nat, a6, A6_SRC);
  const masq = natWantsMasq(flags, nat.hasCluster6, pod, node, addr6Same(a6, A6_BE, A6_SRC));
  if (!masq || nat.hasNode6 === 0) {
    nat6ForgetStale(dp, bport);
    return R_CONTINUE;
  }
  const local = nat.hasPod6 === 1 && in6(a6, A6_BE, nat.pod6Net, nat.pod6Mask);
  const natAddr = local ? nat.podGateway6 : nat.nodeIp6;
  for (let k = 0; k < 4; k++) a6[A6_NAT + k] = natAddr[k];
  const e = nat6Alloc(dp, i, bport);
  if (e < 0) {
    dp.ct6.delete(i);
    return e === -2 ? DROP_SNAT_FULL : DROP_NAT_NO_PORT;
  }
  nat6RewriteSrc(dp, buf, A6_NAT, nat.snat6.natPort(e));
  return R_CONTINUE;
}

/** A non-masqueraded new flow: a SNAT entry left by a dead flow with the same tuple goes. */
function nat6ForgetStale(dp: Datapath, bport: number): void {
  const snat = dp.nat.snat6;
  if (snat.size === 0) return;
  const e = snat.lookupFwd6(dp.proto, dp.a6, A6_SRC, dp.sport, A6_BE, bport);
  if (e >= 0) snat.delete(e);
}

/** SNAT entry for flow i (nat address at A6_NAT), or -1 (no port free) / -2 (table full). */
function nat6Alloc(dp: Datapath, i: number, bport: number): number {
  const nat = dp.nat;
  const snat = nat.snat6;
  const { proto, a6, sport } = dp;
  const stale = snat.lookupFwd6(proto, a6, A6_SRC, sport, A6_BE, bport);
  if (stale >= 0) snat.delete(stale);
  const min = nat.port6Min;
  const span = nat.port6Span;
  let port = snatFirstPort(dp, min, span);
  for (let tries = 0; tries < SNAT_RETRIES; tries++) {
    const o = snat.lookupRev6(proto, a6, A6_BE, bport, A6_NAT, port);
    if (o >= 0 && nat6Dead(dp, o)) snat.delete(o);
    if (o < 0 || !snat.isLive(o)) {
      const e = snat.insert6(proto, a6, A6_SRC, sport, A6_BE, bport, A6_NAT, port, i);
      return e < 0 ? -2 : e;
    }
    port = snatNextPort(dp, min, span, port, tries);
  }
  return -1;
}

/** Whether IPv6 SNAT entry e's conntrack flow is gone (deleted, reused, or expired). */
export function nat6Dead(dp: Datapath, e: number): boolean {
  const snat = dp.nat.snat6;
  const ct = dp.ct6;
  const i = snat.ctIdx(e);
  if (!ct.isLive(i) || ct.proto(i) !== snat.proto(e)) return true;
  if (ct.sport(i) !== snat.sport(e) || ct.bport(i) !== snat.rport(e)) return true;
  for (let k = 0; k < 4; k++) {
    if (ct.saddrWord(i, k) !== snat.saddrWord(e, k)) return true;
    if (ct.baddrWord(i, k) !== snat.raddrWord(e, k)) return true;
  }
  return ctExpired(ct, i, dp.nowSec);
}

/** Source := the address at dp.a6[at], port `port`. */
function nat6RewriteSrc(dp: Datapath, buf: Uint8Array, at: number, port: number): void {
  const a = dp.a6;
  ipv6RewriteSrc(buf, dp.ipOff, a[at], a[at + 1], a[at + 2], a[at + 3]);
  if (port !== dp.sport) l6RewriteSrcPort(buf, dp.ipOff, port);
}

/** A packet of tracked IPv6 flow i in the original direction, already DNATed: masquerade it. */
export function nat6Orig(dp: Datapath, buf: Uint8Array, i: number): void {
  const snat = dp.nat.snat6;
  if (snat.size === 0) return;
  const ct = dp.ct6;
  const a6 = dp.a6;
  for (let k = 0; k < 4; k++) a6[A6_BE + k] = ct.baddrWord(i, k);
  const e = snat.lookupFwd6(dp.proto, a6, A6_SRC, dp.sport, A6_BE, ct.bport(i));
  if (e < 0 || snat.ctIdx(e) !== i) return;
  for (let k = 0; k < 4; k++) a6[A6_NAT + k] = snat.natAddrWord(e, k);
  nat6RewriteSrc(dp, buf, A6_NAT, snat.natPort(e));
}

/**
 * nat4Reply for IPv6: a reply to a masqueraded flow (backend -> natAddr:natPort) gets the
 * client as destination and what the client asked for (VIP:port, node:NodePort) as source.
 * R_CONTINUE if the packet is no such reply.
 */
export function nat6Reply(dp: Datapath, buf: Uint8Array, bytes: number): number {
  const snat = dp.nat.snat6;
  if (snat.size === 0) return R_CONTINUE;
  const e = snat.lookupRev6(dp.proto, dp.a6, A6_SRC, dp.sport, A6_DST, dp.dport);
  if (e < 0) return R_CONTINUE;
  if (nat6Dead(dp, e)) {
    snat.delete(e);
    return R_CONTINUE;
  }
  const ct = dp.ct6;
  const i = snat.ctIdx(e);
  const t = lbTrack(dp, ct, i, CT_DIR_REPLY, bytes);
  if (t !== R_CONTINUE) return t;
  const off = dp.ipOff;
  ipv6RewriteSrc(
    buf,
    off,
    ct.daddrWord(i, 0),
    ct.daddrWord(i, 1),
    ct.daddrWord(i, 2),
    ct.daddrWord(i, 3),
  );
  if (ct.dport(i) !== dp.sport) l6RewriteSrcPort(buf, off, ct.dport(i));
  const s0 = snat.saddrWord(e, 0);
  ipv6RewriteDst(buf, off, s0, snat.saddrWord(e, 1), snat.saddrWord(e, 2), snat.saddrWord(e, 3));
  if (snat.sport(e) !== dp.dport) l6RewriteDstPort(buf, off, snat.sport(e));
  return TX_REVSNAT;
}

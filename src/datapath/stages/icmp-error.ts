// ICMP errors RELATED to a service flow (the kernel's nf_nat_icmp_reply_translation): the
// error quotes the packet that caused it, as that packet was on the wire where it failed —
// after our DNAT. Matching the quote against conntrack finds the flow, and both the outer
// header and the quote are translated back so the sender of the quoted packet recognises it
// (its socket sees EMSGSIZE / ECONNREFUSED, and PMTU discovery works through a ClusterIP).
//
//   error from the backend or a router on its path, about client -> backend:
//     outer  X -> client  ICMP type/code         quote  client:cp -> backend:bp
//     lookupReply(backend:bp -> client:cp)  ─▶  outer  VIP -> client
//                                              quote  client:cp -> VIP:vp       TX_ICMP_ERR_REVNAT
//   the same about a masqueraded flow (quote natAddr:np -> backend:bp, found in the SNAT
//   table): outer VIP -> client, quote client:cp -> VIP:vp                   TX_ICMP_ERR_REVNAT
//   error from the client, about a reply backend -> client (seen by the client as VIP -> it):
//     outer  client -> VIP                      quote  VIP:vp -> client:cp
//     lookupOrig(client:cp -> VIP:vp)       ─▶  outer  client -> backend
//                                              quote  backend:bp -> client:cp   TX_ICMP_ERR_DNAT
//
// The outer source becomes the VIP even when a router sent the error, as the kernel does: the
// client only knows the VIP. Every changed word is folded into the quoted IP and L4 checksums
// (when the quote holds them) and the ICMP checksum (rewrite.ts). The flow's lifetime is not
// refreshed: an error is not traffic of the flow.

import { read16 } from '../../wire/bytes.ts';
import { ICMP_EMBEDDED_OFF } from '../../wire/icmp.ts';
import {
  IPV4_OK,
  ipv4CheckQuoted,
  ipv4Dst,
  ipv4FragOffset,
  ipv4HeaderLen,
  ipv4Proto,
  ipv4Src,
} from '../../wire/ipv4.ts';
import { IPPROTO_TCP, IPPROTO_UDP } from '../../wire/proto.ts';
import {
  icmpErrRewriteInnerDst,
  icmpErrRewriteInnerDstPort,
  icmpErrRewriteInnerSrc,
  icmpErrRewriteInnerSrcPort,
  ipv4RewriteDst,
  ipv4RewriteSrc,
} from '../../wire/rewrite.ts';
import { ctExpired } from './ct.ts';
import type { Datapath } from '../state/datapath.ts';
import { nat4Dead, nat4RestoreTtl } from './nat.ts';
import { R_CONTINUE, TX_ICMP_ERR_DNAT, TX_ICMP_ERR_REVNAT } from '../state/reasons.ts';

/**
 * The ICMP error at dp.l4Off (icmpCheck passed, type is an error): translate it if it quotes
 * a packet of a tracked flow. R_CONTINUE when it is not about one of ours.
 */
export function icmp4RelatedError(dp: Datapath, buf: Uint8Array): number {
  if (dp.frag !== 0) return R_CONTINUE;
  const inner = dp.l4Off + ICMP_EMBEDDED_OFF;
  if (ipv4CheckQuoted(buf, inner, dp.ipEnd) !== IPV4_OK) return R_CONTINUE;
  const proto = ipv4Proto(buf, inner);
  if (proto !== IPPROTO_TCP && proto !== IPPROTO_UDP) return R_CONTINUE;
  if (ipv4FragOffset(buf, inner) !== 0) return R_CONTINUE; // quote of a later fragment: no ports
  const l4 = inner + ipv4HeaderLen(buf, inner);
  if (l4 + 4 > dp.ipEnd) return R_CONTINUE;
  const qsrc = ipv4Src(buf, inner);
  const qdst = ipv4Dst(buf, inner);
  // an error goes back to the quoted packet's sender; anything else is not a real error of it
  if (dp.daddr !== qsrc) return R_CONTINUE;
  const qsport = read16(buf, l4);
  const qdport = read16(buf, l4 + 2);
  const ct = dp.ct;
  let i = ct.lookupReply(proto, qdst, qsrc, qdport, qsport);
  if (i >= 0 && !ctExpired(ct, i, dp.nowSec)) {
    const vip = ct.daddr(i);
    icmpErrRewriteInnerDst(buf, dp.ipOff, vip);
    icmpErrRewriteInnerDstPort(buf, dp.ipOff, ct.dport(i));
    ipv4RewriteSrc(buf, dp.ipOff, vip);
    nat4RestoreTtl(dp, buf); // RELATED to a marked flow: routed into the TUN as its replies
    return icmp4Done(dp, i, TX_ICMP_ERR_REVNAT);
  }
  const m = icmp4Masqueraded(dp, buf, proto, qsrc, qdst, qsport, qdport);
  if (m !== R_CONTINUE) return m;
  i = ct.lookupOrig(proto, qdst, qsrc, qdport, qsport);
  if (i >= 0 && !ctExpired(ct, i, dp.nowSec)) {
    const baddr = ct.baddr(i);
    icmpErrRewriteInnerSrc(buf, dp.ipOff, baddr);
    icmpErrRewriteInnerSrcPort(buf, dp.ipOff, ct.bport(i));
    ipv4RewriteDst(buf, dp.ipOff, baddr);
    return icmp4Done(dp, i, TX_ICMP_ERR_DNAT);
  }
  return R_CONTINUE;
}

function icmp4Done(dp: Datapath, i: number, reason: number): number {
  dp.lastCtIdx = i;
  dp.lastBackendId = dp.ct.backendId(i);
  return reason;
}

/** The error quotes a masqueraded packet (natAddr:natPort -> backend): back to the client. */
function icmp4Masqueraded(
  dp: Datapath,
  buf: Uint8Array,
  proto: number,
  qsrc: number,
  qdst: number,
  qsport: number,
  qdport: number,
): number {
  const snat = dp.nat.snat;
  if (snat.size === 0) return R_CONTINUE;
  const e = snat.lookupRev(proto, qdst, qdport, qsrc, qsport);
  if (e < 0 || nat4Dead(dp, e)) return R_CONTINUE;
  const ct = dp.ct;
  const i = snat.ctIdx(e);
  const front = ct.daddr(i);
  icmpErrRewriteInnerSrc(buf, dp.ipOff, snat.saddr(e));
  icmpErrRewriteInnerSrcPort(buf, dp.ipOff, snat.sport(e));
  icmpErrRewriteInnerDst(buf, dp.ipOff, front);
  icmpErrRewriteInnerDstPort(buf, dp.ipOff, ct.dport(i));
  ipv4RewriteSrc(buf, dp.ipOff, front);
  ipv4RewriteDst(buf, dp.ipOff, snat.saddr(e));
  return icmp4Done(dp, i, TX_ICMP_ERR_REVNAT);
}

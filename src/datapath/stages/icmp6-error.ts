// ICMPv6 errors RELATED to a service flow (the kernel's nf_nat_icmpv6_reply_translation): the
// IPv6 twin of icmp-error.ts, same three cases, same rule — the quote is matched against
// conntrack as it was on the wire where it failed (after our DNAT), and both the outer header
// and the quote are translated back:
//
//   from the backend or a router on its path, about client -> backend    ─▶ TX_ICMP_ERR_REVNAT
//     outer src := VIP; quote dst := VIP:vport
//   the same about a masqueraded flow (quote natAddr:np -> backend, found in snat6)
//     outer src := frontend, dst := client; quote := client:cp -> frontend:vp
//   from the client, about a reply backend -> client (seen as VIP -> client) ─▶ TX_ICMP_ERR_DNAT
//     outer dst := backend; quote src := backend:bport
//
// Over IPv6 this is what makes PMTU discovery through a VIP work at all: routers never
// fragment, so a Packet Too Big (type 2) is the only way a sender learns the path MTU, and its
// socket takes it only when the quote names its own flow (the VIP). Every changed word is
// folded into the ICMPv6 checksum (which also covers the outer addresses, through the
// pseudo-header) and into the quoted TCP/UDP checksum when the quote holds it (rewrite6.ts).

import {
  IPV6_OK,
  ipv6CheckQuoted,
  ipv6DstWord,
  ipv6FragOffset,
  ipv6QuotedFragHdrOff,
  ipv6QuotedL4Off,
  ipv6QuotedL4Proto,
  ipv6SrcWord,
} from '../../wire/ipv6.ts';
import { icmpv6QuoteOff } from '../../wire/icmpv6.ts';
import { read16 } from '../../wire/bytes.ts';
import { IPPROTO_TCP, IPPROTO_UDP } from '../../wire/proto.ts';
import {
  icmpv6ErrRewriteInnerDst,
  icmpv6ErrRewriteInnerDstPort,
  icmpv6ErrRewriteInnerSrc,
  icmpv6ErrRewriteInnerSrcPort,
  ipv6RewriteDst,
  ipv6RewriteSrc,
} from '../../wire/rewrite6.ts';
import { A6_DST, A6_Q_DST, A6_Q_SRC, type Datapath } from '../state/datapath.ts';
import { R_CONTINUE, TX_ICMP_ERR_DNAT, TX_ICMP_ERR_REVNAT } from '../state/reasons.ts';
import { ctExpired } from './ct.ts';
import { addr6Same } from './lb6.ts';
import { nat6Dead, nat6RestoreHopLimit } from './nat6.ts';

/**
 * The ICMPv6 error at dp.l4Off (icmpv6Check passed, the type is an error): translate it if it
 * quotes a packet of a tracked flow. R_CONTINUE when it is not about one of ours.
 */
export function icmp6RelatedError(dp: Datapath, buf: Uint8Array): number {
  if (dp.frag !== 0) return R_CONTINUE;
  const end = dp.ipEnd;
  const inner = icmpv6QuoteOff(dp.l4Off);
  if (ipv6CheckQuoted(buf, inner, end) !== IPV6_OK) return R_CONTINUE;
  const proto = ipv6QuotedL4Proto(buf, inner, end);
  if (proto !== IPPROTO_TCP && proto !== IPPROTO_UDP) return R_CONTINUE;
  const fh = ipv6QuotedFragHdrOff(buf, inner, end);
  if (fh >= 0 && ipv6FragOffset(buf, fh) !== 0) return R_CONTINUE; // a later fragment: no ports
  const l4 = ipv6QuotedL4Off(buf, inner, end);
  if (l4 + 4 > end) return R_CONTINUE;
  const a6 = dp.a6;
  for (let k = 0; k < 4; k++) {
    a6[A6_Q_SRC + k] = ipv6SrcWord(buf, inner, k);
    a6[A6_Q_DST + k] = ipv6DstWord(buf, inner, k);
  }
  // an error goes back to the quoted packet's sender; anything else is not a real error of it
  if (!addr6Same(a6, A6_DST, A6_Q_SRC)) return R_CONTINUE;
  const qsport = read16(buf, l4);
  const qdport = read16(buf, l4 + 2);
  const ct = dp.ct6;
  const off = dp.ipOff;
  let i = ct.lookupReply6(proto, a6, A6_Q_DST, A6_Q_SRC, qdport, qsport);
  if (i >= 0 && !ctExpired(ct, i, dp.nowSec)) {
    const v0 = ct.daddrWord(i, 0);
    const v1 = ct.daddrWord(i, 1);
    const v2 = ct.daddrWord(i, 2);
    const v3 = ct.daddrWord(i, 3);
    icmpv6ErrRewriteInnerDst(buf, off, v0, v1, v2, v3);
    icmpv6ErrRewriteInnerDstPort(buf, off, ct.dport(i));
    ipv6RewriteSrc(buf, off, v0, v1, v2, v3);
    nat6RestoreHopLimit(dp, buf); // RELATED to a marked flow: routed into the TUN as its replies
    return icmp6Done(dp, i, TX_ICMP_ERR_REVNAT);
  }
  const m = icmp6Masqueraded(dp, buf, proto, qsport, qdport);
  if (m !== R_CONTINUE) return m;
  i = ct.lookupOrig6(proto, a6, A6_Q_DST, A6_Q_SRC, qdport, qsport);
  if (i >= 0 && !ctExpired(ct, i, dp.nowSec)) {
    const b0 = ct.baddrWord(i, 0);
    const b1 = ct.baddrWord(i, 1);
    const b2 = ct.baddrWord(i, 2);
    const b3 = ct.baddrWord(i, 3);
    icmpv6ErrRewriteInnerSrc(buf, off, b0, b1, b2, b3);
    icmpv6ErrRewriteInnerSrcPort(buf, off, ct.bport(i));
    ipv6RewriteDst(buf, off, b0, b1, b2, b3);
    return icmp6Done(dp, i, TX_ICMP_ERR_DNAT);
  }
  return R_CONTINUE;
}

function icmp6Done(dp: Datapath, i: number, reason: number): number {
  dp.lastCtIdx = i;
  dp.lastBackendId = dp.ct6.backendId(i);
  return reason;
}

/** The error quotes a masqueraded packet (natAddr:natPort -> backend): back to the client. */
function icmp6Masqueraded(
  dp: Datapath,
  buf: Uint8Array,
  proto: number,
  qsport: number,
  qdport: number,
): number {
  const snat = dp.nat.snat6;
  if (snat.size === 0) return R_CONTINUE;
  const e = snat.lookupRev6(proto, dp.a6, A6_Q_DST, qdport, A6_Q_SRC, qsport);
  if (e < 0 || nat6Dead(dp, e)) return R_CONTINUE;
  const ct = dp.ct6;
  const i = snat.ctIdx(e);
  const off = dp.ipOff;
  const c0 = snat.saddrWord(e, 0);
  const c1 = snat.saddrWord(e, 1);
  const c2 = snat.saddrWord(e, 2);
  const c3 = snat.saddrWord(e, 3);
  const f0 = ct.daddrWord(i, 0);
  const f1 = ct.daddrWord(i, 1);
  const f2 = ct.daddrWord(i, 2);
  const f3 = ct.daddrWord(i, 3);
  icmpv6ErrRewriteInnerSrc(buf, off, c0, c1, c2, c3);
  icmpv6ErrRewriteInnerSrcPort(buf, off, snat.sport(e));
  icmpv6ErrRewriteInnerDst(buf, off, f0, f1, f2, f3);
  icmpv6ErrRewriteInnerDstPort(buf, off, ct.dport(i));
  ipv6RewriteSrc(buf, off, f0, f1, f2, f3);
  ipv6RewriteDst(buf, off, c0, c1, c2, c3);
  return icmp6Done(dp, i, TX_ICMP_ERR_REVNAT);
}

// Fragments of NATed datagrams. The kernel reassembles before conntrack (nf_defrag_ipv4); a
// TUN program that does not want to buffer whole datagrams does what Cilium does instead:
// translate the first fragment by its flow (it has the ports), remember the address rewrite
// per datagram (src, dst, id, proto) in dp.frags, and give every later fragment the same
// rewrite. Later fragments carry no L4 header, so only the IPv4 address and header checksum
// change; the first fragment's L4 checksum already took the delta for the whole datagram.
//
//   first fragment (MF, offset 0) ── flow hit/new ─▶ DNAT/revNAT ─▶ frag4Remember(key ─▶ rewrite)
//   later fragment (offset > 0) ─▶ frag4Later ── hit ─▶ same address rewrite ─▶ TX_FRAG
//                                               miss, to a VIP ─▶ DROP_FRAG_OUT_OF_ORDER
//                                               miss, otherwise ─▶ PASS_NON_FIRST_FRAGMENT
//
// Out-of-order arrival (a later fragment before the first) is dropped and counted, not
// buffered: Linux sends a datagram's fragments in order, and pods here reach the TUN through
// a tc redirect that keeps that order. A reply-direction fragment that outruns its first
// fragment is not to a VIP and is passed untranslated (the client's reassembly then drops it).

import { FRAG_REWRITE_DST, FRAG_REWRITE_SRC, FRAG_TIMEOUT } from '../maps/frag.ts';
import { ipv4Id } from '../wire/ipv4.ts';
import { ipv4RewriteDst, ipv4RewriteSrc } from '../wire/rewrite.ts';
import type { Datapath } from './datapath.ts';
import { lb4IsVip } from './lb.ts';
import { DROP_FRAG_OUT_OF_ORDER, PASS_NON_FIRST_FRAGMENT, TX_FRAG } from './reasons.ts';
import { dpVerdict } from './result.ts';
import { V_DROP, V_PASS, V_TX } from './verdict.ts';

/**
 * After a first fragment was translated: later fragments of its datagram get `addr` as their
 * destination (FRAG_REWRITE_DST, client -> service) or source (FRAG_REWRITE_SRC, replies).
 * Keyed by the addresses as received (dp.saddr/daddr, before the rewrite).
 */
export function frag4Remember(dp: Datapath, buf: Uint8Array, addr: number, kind: number): void {
  dp.frags.insert(
    dp.saddr,
    dp.daddr,
    ipv4Id(buf, dp.ipOff),
    dp.proto,
    addr,
    kind,
    dp.nowSec + FRAG_TIMEOUT,
    dp.nowSec,
  );
}

/** A non-first fragment (dp.frag === 2): rewrite like its first fragment, or drop/pass. */
export function frag4Later(dp: Datapath, buf: Uint8Array): number {
  const f = dp.frags.lookup(dp.saddr, dp.daddr, ipv4Id(buf, dp.ipOff), dp.proto, dp.nowSec);
  if (f < 0) {
    if (lb4IsVip(dp, dp.daddr)) return dpVerdict(dp, V_DROP, DROP_FRAG_OUT_OF_ORDER);
    return dpVerdict(dp, V_PASS, PASS_NON_FIRST_FRAGMENT);
  }
  if (dp.frags.kind(f) === FRAG_REWRITE_SRC) ipv4RewriteSrc(buf, dp.ipOff, dp.frags.addr(f));
  else ipv4RewriteDst(buf, dp.ipOff, dp.frags.addr(f));
  return dpVerdict(dp, V_TX, TX_FRAG);
}

export { FRAG_REWRITE_DST, FRAG_REWRITE_SRC };

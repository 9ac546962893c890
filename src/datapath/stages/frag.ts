// Fragments of NATed datagrams. The kernel reassembles before conntrack (nf_defrag_ipv4); a
// TUN program that does not want to buffer whole datagrams does what Cilium does instead:
// translate the first fragment by its flow (it has the ports), remember per datagram (src,
// dst, id, proto) the addresses it left with, in dp.frags, and give every later fragment the
// same addresses. Later fragments carry no L4 header, so only the IPv4 addresses and header
// checksum change; the first fragment's L4 checksum already took the delta for the whole
// datagram. Remembering the final addresses (not one rewrite) covers every translation the
// program makes — DNAT, reverse NAT, masquerade and its reverse — from one place (dpProcess);
// a TTL the first fragment got back (a routed reply, nat.ts nat4RestoreTtl) every later one
// gets back too.
//
//   first fragment (MF, offset 0) ── any V_TX ─▶ frag4Remember(key ─▶ final src, dst)
//   later fragment (offset > 0) ─▶ frag4Later ── hit ─▶ same address rewrite ─▶ TX_FRAG
//                                               miss, to a VIP ─▶ DROP_FRAG_OUT_OF_ORDER
//                                               miss, otherwise ─▶ PASS_NON_FIRST_FRAGMENT
//
// Out-of-order arrival (a later fragment before the first) is dropped and counted, not
// buffered: Linux sends a datagram's fragments in order, and pods here reach the TUN through
// a tc redirect that keeps that order. A reply-direction fragment that outruns its first
// fragment is not to a VIP and is passed untranslated (the client's reassembly then drops it).

import { FRAG_TIMEOUT } from '../../maps/frag.ts';
import { ipv4Dst, ipv4Id, ipv4SetTtlWithCsum, ipv4Src, ipv4Ttl } from '../../wire/ipv4.ts';
import { ipv4RewriteDst, ipv4RewriteSrc } from '../../wire/rewrite.ts';
import type { Datapath } from '../state/datapath.ts';
import { lb4IsVip } from './lb.ts';
import { DROP_FRAG_OUT_OF_ORDER, PASS_NON_FIRST_FRAGMENT, TX_FRAG } from '../state/reasons.ts';

/**
 * After a first fragment was translated (V_TX): later fragments of its datagram get the
 * addresses it now carries. Keyed by the addresses as received (dp.saddr/daddr, parsed before
 * any rewrite).
 */
export function frag4Remember(dp: Datapath, buf: Uint8Array): void {
  const off = dp.ipOff;
  const f = dp.frags.insert(
    dp.saddr,
    dp.daddr,
    ipv4Id(buf, off),
    dp.proto,
    ipv4Src(buf, off),
    ipv4Dst(buf, off),
    dp.nowSec + FRAG_TIMEOUT,
    dp.nowSec,
  );
  dp.frags.ttlRestored[f] = dp.ttlRestored;
}

/** A non-first fragment (dp.frag === 2): rewrite like its first fragment, or drop/pass. */
export function frag4Later(dp: Datapath, buf: Uint8Array): number {
  const f = dp.frags.lookup(dp.saddr, dp.daddr, ipv4Id(buf, dp.ipOff), dp.proto, dp.nowSec);
  if (f < 0) {
    if (lb4IsVip(dp, dp.daddr)) return DROP_FRAG_OUT_OF_ORDER;
    return PASS_NON_FIRST_FRAGMENT;
  }
  ipv4RewriteSrc(buf, dp.ipOff, dp.frags.newSrc(f)); // each a no-op when unchanged
  ipv4RewriteDst(buf, dp.ipOff, dp.frags.newDst(f));
  if (dp.frags.ttlRestored[f] === 1) {
    const ttl = ipv4Ttl(buf, dp.ipOff);
    if (ttl < 255) ipv4SetTtlWithCsum(buf, dp.ipOff, ttl + 1);
  }
  return TX_FRAG;
}

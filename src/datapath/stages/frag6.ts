// Fragments of NATed IPv6 datagrams, by the Fragment header: frag.ts's scheme over dp.frags6.
// The first fragment (offset 0, M set) carries the ports and is translated like a whole packet;
// the addresses it leaves with are remembered per datagram — (source, destination, Fragment
// Identification), RFC 8200 4.5's reassembly key — and every later fragment gets the same
// addresses. IPv6 has no header checksum and a later fragment no L4 header, so only the
// addresses change (rewrite6.ts leaves the checksum alone for it).
//
//   first fragment ── any V_TX ─▶ frag6Remember(key ─▶ final src, dst, hop limit given back?)
//   later fragment ─▶ frag6Later ── hit ─▶ same addresses ─▶ TX_FRAG
//                                   miss, to a VIP ─▶ DROP_FRAG_OUT_OF_ORDER
//                                   miss, otherwise ─▶ PASS_NON_FIRST_FRAGMENT

import { FRAG_TIMEOUT } from '../../maps/frag.ts';
import { read32s } from '../../wire/bytes.ts';
import { ipv6DstWord, ipv6HopLimit, ipv6SetHopLimit, ipv6SrcWord } from '../../wire/ipv6.ts';
import { ipv6RewriteDst, ipv6RewriteSrc } from '../../wire/rewrite6.ts';
import { A6_DST, A6_Q_DST, A6_Q_SRC, A6_SRC, type Datapath } from '../state/datapath.ts';
import { DROP_FRAG_OUT_OF_ORDER, PASS_NON_FIRST_FRAGMENT, TX_FRAG } from '../state/reasons.ts';
import { lb6IsVip } from './lb6.ts';

/** After a first fragment was translated (V_TX): remember the addresses it now carries. */
export function frag6Remember(dp: Datapath, buf: Uint8Array): void {
  const off = dp.ipOff;
  const a6 = dp.a6;
  for (let k = 0; k < 4; k++) {
    a6[A6_Q_SRC + k] = ipv6SrcWord(buf, off, k);
    a6[A6_Q_DST + k] = ipv6DstWord(buf, off, k);
  }
  const id = fragId(buf, dp.fragHdr);
  const now = dp.nowSec;
  const f = dp.frags6.insert6(a6, A6_SRC, A6_DST, id, A6_Q_SRC, A6_Q_DST, now + FRAG_TIMEOUT, now);
  dp.frags6.ttlRestored[f] = dp.ttlRestored;
}

/** A later fragment (dp.frag === 2): rewrite like its first fragment, or drop/pass. */
export function frag6Later(dp: Datapath, buf: Uint8Array): number {
  const a6 = dp.a6;
  const id = fragId(buf, dp.fragHdr);
  const m = dp.frags6;
  const f = m.lookup6(a6, A6_SRC, A6_DST, id, dp.nowSec);
  if (f < 0) {
    if (lb6IsVip(dp, a6, A6_DST)) return DROP_FRAG_OUT_OF_ORDER;
    return PASS_NON_FIRST_FRAGMENT;
  }
  const off = dp.ipOff;
  ipv6RewriteSrc(
    buf,
    off,
    m.newSrcWord(f, 0),
    m.newSrcWord(f, 1),
    m.newSrcWord(f, 2),
    m.newSrcWord(f, 3),
  );
  ipv6RewriteDst(
    buf,
    off,
    m.newDstWord(f, 0),
    m.newDstWord(f, 1),
    m.newDstWord(f, 2),
    m.newDstWord(f, 3),
  );
  if (m.ttlRestored[f] === 1) {
    const h = ipv6HopLimit(buf, off);
    if (h < 255) ipv6SetHopLimit(buf, off, h + 1);
  }
  return TX_FRAG;
}

/** The Identification of the Fragment header at fh, as int32 (never a heap number). */
function fragId(buf: Uint8Array, fh: number): number {
  return read32s(buf, fh + 4);
}

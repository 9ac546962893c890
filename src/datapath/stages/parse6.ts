// Stage 1 of the IPv6 program: validate the fixed header and the extension-header chain
// (src/wire/ipv6.ts), then the L4 header (the IPv4 stage's TCP/UDP/SCTP parsers, parse.ts),
// and load the tuple: the addresses into dp.a6 (A6_SRC, A6_DST, four int32 words each), the
// rest into the same scratch fields as IPv4. After R_CONTINUE every later stage may read the
// headers at dp.ipOff / dp.l4Off without further bounds checks.
//
// Fragments go by the Fragment header: a later one (offset > 0) carries no L4 header and goes
// to frag6.ts (dp.frag = 2); a first one (M set) has its ports (dp.frag = 1); an atomic
// fragment (offset 0, M clear; RFC 8200 4.5) is a whole packet. UDP with checksum 0 is refused
// here for every packet, first fragments included: IPv6 has no "no checksum" (RFC 8200 8.1).

import { udpCsum } from '../../wire/udp.ts';
import {
  IPV6_ERR_EXT_CHAIN,
  IPV6_ERR_PAYLEN,
  IPV6_ERR_TRUNCATED,
  IPV6_ERR_VERSION,
  IPV6_OK,
  ipv6Check,
  ipv6DstWord,
  ipv6End,
  ipv6FragHdrOff,
  ipv6FragMore,
  ipv6FragOffset,
  ipv6HasExt,
  ipv6L4Off,
  ipv6L4Proto,
  ipv6SrcWord,
} from '../../wire/ipv6.ts';
import { IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from '../../wire/proto.ts';
import { A6_DST, A6_SRC, type Datapath } from '../state/datapath.ts';
import {
  DROP_BAD_EXT_HDR,
  DROP_BAD_PAYLOAD_LEN,
  DROP_BAD_VERSION,
  DROP_EXT_HDR_CHAIN,
  DROP_TRUNCATED_IPV6,
  DROP_UDP6_ZERO_CSUM,
  R_CONTINUE,
} from '../state/reasons.ts';
import { dpParseSctp, dpParseTcp, dpParseUdp } from './parse.ts';

/** Validate and parse; R_CONTINUE with dp.proto, dp.a6 addresses, (sport, dport, tcpFlags) set. */
export function dp6Parse(dp: Datapath, buf: Uint8Array, off: number, len: number): number {
  const rc = ipv6Check(buf, off, off + len);
  if (rc !== IPV6_OK) return ipv6Reason(rc);
  dp.ipv6 = 1;
  dp.ipOff = off;
  dp.ipEnd = ipv6End(buf, off);
  dp.l4Off = ipv6L4Off(buf, off);
  dp.proto = ipv6L4Proto(buf, off);
  const a6 = dp.a6;
  for (let k = 0; k < 4; k++) {
    a6[A6_SRC + k] = ipv6SrcWord(buf, off, k);
    a6[A6_DST + k] = ipv6DstWord(buf, off, k);
  }
  // the low words stand for the addresses where one word is all there is (event ring, trace)
  dp.saddr = a6[A6_SRC + 3];
  dp.daddr = a6[A6_DST + 3];
  dp.sport = 0;
  dp.dport = 0;
  dp.tcpFlags = 0;
  dp.sctpChunks = 0;
  dp.frag = 0;
  const fh = ipv6HasExt(buf, off) ? ipv6FragHdrOff(buf, off) : -1;
  dp.fragHdr = fh;
  if (fh >= 0) {
    if (ipv6FragOffset(buf, fh) !== 0) {
      dp.frag = 2; // no L4 header: frag6.ts translates it like its first fragment
      return R_CONTINUE;
    }
    dp.frag = ipv6FragMore(buf, fh) ? 1 : 0;
  }
  const proto = dp.proto;
  if (proto === IPPROTO_TCP) return dpParseTcp(dp, buf);
  if (proto === IPPROTO_UDP) {
    const r = dpParseUdp(dp, buf);
    if (r !== R_CONTINUE) return r;
    return udpCsum(buf, dp.l4Off) === 0 ? DROP_UDP6_ZERO_CSUM : R_CONTINUE;
  }
  if (proto === IPPROTO_SCTP) return dpParseSctp(dp, buf);
  // ICMPv6 is validated where it matters (program6.ts); other protocols pass or are rejected.
  return R_CONTINUE;
}

function ipv6Reason(rc: number): number {
  switch (rc) {
    case IPV6_ERR_TRUNCATED:
      return DROP_TRUNCATED_IPV6;
    case IPV6_ERR_VERSION:
      return DROP_BAD_VERSION;
    case IPV6_ERR_PAYLEN:
      return DROP_BAD_PAYLOAD_LEN;
    case IPV6_ERR_EXT_CHAIN:
      return DROP_EXT_HDR_CHAIN;
    default:
      return DROP_BAD_EXT_HDR;
  }
}

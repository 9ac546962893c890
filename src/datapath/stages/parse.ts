// Stage 1 of the program: validate the IPv4 header and the L4 header, and load the tuple into
// the Datapath's scratch fields. After R_CONTINUE every later stage may read the headers at
// dp.ipOff / dp.l4Off without further bounds checks.

import {
  IPV4_ERR_CSUM,
  IPV4_ERR_IHL,
  IPV4_ERR_TOTLEN,
  IPV4_ERR_TRUNCATED,
  IPV4_ERR_VERSION,
  IPV4_OK,
  ipv4Check,
  ipv4Dst,
  ipv4FragOffset,
  ipv4HeaderLen,
  ipv4Mf,
  ipv4Proto,
  ipv4Src,
  ipv4TotalLen,
} from '../../wire/ipv4.ts';
import { IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from '../../wire/proto.ts';
import {
  TCP_ERR_TRUNCATED,
  TCP_OK,
  tcpCheck,
  tcpDstPort,
  tcpFlags,
  tcpSrcPort,
} from '../../wire/tcp.ts';
import { UDP_ERR_TRUNCATED, UDP_OK, udpCheck, udpDstPort, udpSrcPort } from '../../wire/udp.ts';
import {
  SCTP_ERR_TRUNCATED,
  SCTP_INIT,
  SCTP_OK,
  sctpCheck,
  sctpChunks,
  sctpCrcValid,
  sctpDstPort,
  sctpFirstChunkType,
  sctpSrcPort,
  sctpVtag,
} from '../../wire/sctp.ts';
import { CT_SCTP_EV_INVALID } from './ct-sctp.ts';
import type { Datapath } from '../state/datapath.ts';
import {
  DROP_BAD_IHL,
  DROP_BAD_IP_CSUM,
  DROP_BAD_SCTP_CHUNK,
  DROP_BAD_SCTP_CSUM,
  DROP_SCTP_FRAGMENT,
  DROP_BAD_TCP_DOFF,
  DROP_BAD_TOTLEN,
  DROP_BAD_UDP_LEN,
  DROP_BAD_VERSION,
  DROP_TRUNCATED_IPV4,
  DROP_TRUNCATED_L4,
  R_CONTINUE,
} from '../state/reasons.ts';

const UDP_HDR_LEN = 8;

/** Validate and parse; R_CONTINUE with dp.proto/saddr/daddr/(sport, dport, tcpFlags) set. */
export function dp4Parse(dp: Datapath, buf: Uint8Array, off: number, len: number): number {
  const rc = ipv4Check(buf, off, off + len);
  if (rc !== IPV4_OK) return ipv4Reason(rc);
  dp.ipOff = off;
  dp.ipEnd = off + ipv4TotalLen(buf, off);
  dp.l4Off = off + ipv4HeaderLen(buf, off);
  dp.proto = ipv4Proto(buf, off);
  dp.saddr = ipv4Src(buf, off);
  dp.daddr = ipv4Dst(buf, off);
  dp.sport = 0;
  dp.dport = 0;
  dp.tcpFlags = 0;
  dp.sctpChunks = 0;
  // A non-first fragment has no L4 header: nothing to look up here; frag.ts translates it
  // like its first fragment (dp.frag = 2 sends it there).
  if (ipv4FragOffset(buf, off) !== 0) {
    dp.frag = 2;
    return R_CONTINUE;
  }
  dp.frag = ipv4Mf(buf, off) ? 1 : 0;
  if (dp.proto === IPPROTO_TCP) return dpParseTcp(dp, buf);
  if (dp.proto === IPPROTO_UDP) return dpParseUdp(dp, buf);
  if (dp.proto === IPPROTO_SCTP) return dpParseSctp(dp, buf);
  // ICMP is validated only when it is addressed to a VIP (non-service ICMP passes untouched).
  return R_CONTINUE;
}

function ipv4Reason(rc: number): number {
  switch (rc) {
    case IPV4_ERR_TRUNCATED:
      return DROP_TRUNCATED_IPV4;
    case IPV4_ERR_VERSION:
      return DROP_BAD_VERSION;
    case IPV4_ERR_IHL:
      return DROP_BAD_IHL;
    case IPV4_ERR_TOTLEN:
      return DROP_BAD_TOTLEN;
    case IPV4_ERR_CSUM:
      return DROP_BAD_IP_CSUM;
    default:
      return DROP_TRUNCATED_IPV4;
  }
}

// The L4 parsers below serve both families (parse6.ts too): they read dp.l4Off, dp.ipEnd and
// dp.frag, which each family's parse sets first.

/** TCP header at dp.l4Off: ports and flags, or the drop reason. */
export function dpParseTcp(dp: Datapath, buf: Uint8Array): number {
  const rc = tcpCheck(buf, dp.l4Off, dp.ipEnd);
  if (rc !== TCP_OK) {
    return rc === TCP_ERR_TRUNCATED ? DROP_TRUNCATED_L4 : DROP_BAD_TCP_DOFF;
  }
  dp.sport = tcpSrcPort(buf, dp.l4Off);
  dp.dport = tcpDstPort(buf, dp.l4Off);
  dp.tcpFlags = tcpFlags(buf, dp.l4Off);
  return R_CONTINUE;
}

/** UDP header at dp.l4Off: ports, or the drop reason. */
export function dpParseUdp(dp: Datapath, buf: Uint8Array): number {
  // The UDP length covers the whole datagram, longer than a first fragment: only the 8-byte
  // header must be present then.
  if (dp.frag !== 0) {
    if (dp.ipEnd - dp.l4Off < UDP_HDR_LEN) return DROP_TRUNCATED_L4;
  } else {
    const rc = udpCheck(buf, dp.l4Off, dp.ipEnd);
    if (rc !== UDP_OK) {
      return rc === UDP_ERR_TRUNCATED ? DROP_TRUNCATED_L4 : DROP_BAD_UDP_LEN;
    }
  }
  dp.sport = udpSrcPort(buf, dp.l4Off);
  dp.dport = udpDstPort(buf, dp.l4Off);
  return R_CONTINUE;
}

/**
 * SCTP: the chunks must be well formed and the CRC32c must verify — a port rewrite recomputes it
 * over the packet, which would otherwise turn a corrupt packet into a valid one (the kernel's
 * conntrack checks it too). A fragment cannot be checked or recomputed without reassembly.
 */
export function dpParseSctp(dp: Datapath, buf: Uint8Array): number {
  if (dp.frag !== 0) return DROP_SCTP_FRAGMENT;
  const l4 = dp.l4Off;
  const rc = sctpCheck(buf, l4, dp.ipEnd);
  if (rc !== SCTP_OK) return rc === SCTP_ERR_TRUNCATED ? DROP_TRUNCATED_L4 : DROP_BAD_SCTP_CHUNK;
  if (!sctpCrcValid(buf, l4, dp.ipEnd)) return DROP_BAD_SCTP_CSUM;
  dp.sport = sctpSrcPort(buf, l4);
  dp.dport = sctpDstPort(buf, l4);
  // RFC 9260 8.5.1 (A): an INIT travels with tag 0; conntrack calls any other INVALID
  const badInit = sctpFirstChunkType(buf, l4) === SCTP_INIT && sctpVtag(buf, l4) !== 0;
  dp.sctpChunks = badInit ? CT_SCTP_EV_INVALID : sctpChunks(buf, l4, dp.ipEnd);
  return R_CONTINUE;
}

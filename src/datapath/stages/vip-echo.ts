// --vip-echo: a ping to a ClusterIP answered from the ClusterIP, the IPVS behaviour. kube-proxy's
// IPVS mode binds every ClusterIP to the dummy interface kube-ipvs0 so the kernel routes VIP
// traffic as local (INPUT, where IPVS hooks); a side effect is that the node's own stack answers
// ICMP echo for those addresses. iptables and nftables modes have no such address and nobody
// answers, which is kubetun's default (DROP_ECHO_TO_VIP). Off by default; `kubetun run
// --vip-echo` turns it on. The reply is built into dp.out like a reject (V_REPLY), not rate
// limited: Linux's icmp_ratemask leaves echo replies out.

import { icmpBuildEchoReply } from '../../wire/icmp.ts';
import type { Datapath } from '../state/datapath.ts';
import { DROP_REJECT_FAILED, REPLY_ECHO_FROM_VIP } from '../state/reasons.ts';

/** Answer the echo request at dp.ipOff (a whole ICMP message to a VIP); returns the reason. */
export function lb4EchoReply(dp: Datapath, buf: Uint8Array): number {
  const n = icmpBuildEchoReply(
    dp.out,
    0,
    dp.out.length,
    buf,
    dp.ipOff,
    dp.l4Off,
    dp.ipEnd,
    dp.cfg.icmpTtl,
  );
  if (n === 0) return DROP_REJECT_FAILED;
  dp.outLen = n;
  return REPLY_ECHO_FROM_VIP;
}

// The Service port protocols the datapath balances, by their Kubernetes name. A port of any
// other protocol (SCTP today) is known to the loader — its VIP is still a Service address —
// but gets no frontend.

import { IPPROTO_TCP, IPPROTO_UDP } from '../wire/proto.ts';

export const DP_PROTO_NUM: Readonly<Record<string, number>> = { TCP: IPPROTO_TCP, UDP: IPPROTO_UDP };

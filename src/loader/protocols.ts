// The Service port protocols the datapath balances, by their Kubernetes name: every one
// Kubernetes has (core/v1 Protocol: TCP, UDP, SCTP). A port of any other protocol is known to
// the loader — its VIP is still a Service address — but gets no frontend.

import { PROTO_BY_K8S_NAME } from '../wire/proto.ts';

export const DP_PROTO_NUM: Readonly<Record<string, number>> = PROTO_BY_K8S_NAME;

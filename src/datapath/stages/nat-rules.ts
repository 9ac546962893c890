// The masquerade rules both families' NAT stages follow (nat.ts for IPv4, nat6.ts for IPv6):
// when kube-proxy marks a new flow for masquerade, and which SNAT ports are tried in what
// order. One place, so the two families cannot drift apart.
import { SVC_F_ETP_LOCAL, SVC_F_EXTERNAL } from '../../maps/services.ts';
import type { Datapath } from '../state/datapath.ts';

/** Port choices tried before a masquerade is dropped (Cilium: 32 .. 128). */
export const SNAT_RETRIES = 32;

/**
 * Whether kube-proxy masquerades a new flow (KUBE-MARK-MASQ), both families: `flags` its
 * frontend's master flags, `hasCluster` 1 when a cluster CIDR is configured, `pod` / `node`
 * the client is a pod / one of this node's addresses, `hairpin` the backend is the client.
 */
export function natWantsMasq(
  flags: number,
  hasCluster: number,
  pod: boolean,
  node: boolean,
  hairpin: boolean,
): boolean {
  if (hairpin) return true;
  if ((flags & SVC_F_EXTERNAL) !== 0) return (flags & SVC_F_ETP_LOCAL) === 0 || node;
  return hasCluster === 1 && !pod;
}

/** The first SNAT port to try: the client's own when it lies in the range, else a random one. */
export function snatFirstPort(dp: Datapath, min: number, span: number): number {
  return dp.sport - min >= 0 && dp.sport - min < span ? dp.sport : min + dp.rng.below(span);
}

/**
 * The SNAT port to try after `port` was taken at try `tries`: "--random-fully" — the client's
 * own port was taken, so restart once at a random one, then walk the range.
 */
export function snatNextPort(
  dp: Datapath,
  min: number,
  span: number,
  port: number,
  tries: number,
): number {
  return tries === 0 ? min + dp.rng.below(span) : min + ((port - min + 1) & (span - 1));
}

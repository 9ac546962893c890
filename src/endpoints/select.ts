// kube-proxy's endpoint selection, one place for every consumer that must agree with it (the
// loader, the health-check node ports): which endpoints a node sends new flows to, and how many
// ready local endpoints its health check reports. Slow world: plain arrays of the model.

import type { ResolvedEndpoint } from '../model.ts';

export interface EligibleOptions {
  /** internalTrafficPolicy Local: only this node's endpoints */
  node?: string;
  /** this node's zone: topology hints apply when usable */
  zone?: string;
  /** trafficDistribution PreferClose: endpoint zones stand in for missing hints */
  preferClose?: boolean;
}

/**
 * kube-proxy's choice (pkg/proxy/topology.go CategorizeEndpoints): Ready endpoints; when none
 * is Ready, the serving and terminating ones (so connections drain gracefully during a
 * rollout). internalTrafficPolicy Local restricts to this node first; otherwise topology
 * hints restrict to this zone when every ready endpoint has hints and one is for this zone.
 * Without an EndpointSlice controller (manifest files), PreferClose takes each endpoint's own
 * zone as its hint, which is what the controller writes when every zone has endpoints.
 */
export function eligibleEndpoints(
  eps: readonly ResolvedEndpoint[],
  o: string | EligibleOptions = {},
): { list: ResolvedEndpoint[]; terminating: boolean } {
  const opt = typeof o === 'string' ? { node: o } : o;
  let mine: readonly ResolvedEndpoint[] = eps;
  if (opt.node !== undefined) mine = eps.filter((e) => e.nodeName === opt.node);
  else if (opt.zone !== undefined) mine = topologyFilter(eps, opt.zone, opt.preferClose === true);
  const ready = mine.filter((e) => e.ready);
  if (ready.length > 0) return { list: ready, terminating: false };
  return { list: mine.filter((e) => e.serving && e.terminating), terminating: true };
}

function hintsOf(e: ResolvedEndpoint, preferClose: boolean): readonly string[] {
  if (e.hintsForZones && e.hintsForZones.length > 0) return e.hintsForZones;
  return preferClose && e.zone ? [e.zone] : [];
}

function topologyFilter(
  eps: readonly ResolvedEndpoint[],
  zone: string,
  preferClose: boolean,
): readonly ResolvedEndpoint[] {
  const ready = eps.filter((e) => e.ready);
  if (ready.length === 0) return eps;
  const explicit = ready.some((e) => e.hintsForZones && e.hintsForZones.length > 0);
  const pc = preferClose && !explicit;
  if (ready.some((e) => hintsOf(e, pc).length === 0)) return eps; // hints incomplete: ignore
  if (!ready.some((e) => hintsOf(e, pc).includes(zone))) return eps; // none for us: ignore
  return eps.filter((e) => hintsOf(e, pc).includes(zone));
}

/**
 * The health-check node port's count for externalTrafficPolicy: Local (kube-proxy's
 * LocalReadyEndpoints): this node's Ready endpoints, each address once. Terminating endpoints
 * do not count, not even as the fallback the datapath uses: a node whose only local endpoints
 * are terminating answers 503 so the load balancer drains it (Kubernetes e2e "should fail
 * health check node port if there are only terminating endpoints").
 */
export function localReadyAddresses(eps: readonly ResolvedEndpoint[], node: string): Set<string> {
  return new Set(eps.filter((e) => e.ready && e.nodeName === node).map((e) => e.ip));
}

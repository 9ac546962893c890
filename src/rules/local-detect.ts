// kube-proxy's local traffic detector (KubeProxyConfiguration detectLocalMode, flag
// --detect-local-mode): which packets count as "from a pod" when kube-proxy decides to
// masquerade. One detector decides two things:
//
//   ClusterIP     traffic NOT from a pod is masqueraded (an off-cluster client routed to the
//                 service range, or the node itself, may be answered through another node)
//   ETP Local     traffic from a pod to an external frontend gets Cluster policy (short-circuit)
//
// The four modes, as kube-proxy's server setup picks them (cmd/kube-proxy/app/server_linux.go,
// pkg/proxy/util/localdetector.go):
//
//   ClusterCIDR          source in clusterCIDR          (`-s C` / `ip saddr C`); the default when
//                        the mode is empty; no clusterCIDR = no detector (a no-op: nothing is
//                        masqueraded for being off-cluster)
//   NodeCIDR             source in the Node's spec.podCIDR; none = no detector
//   BridgeInterface      arrived on detectLocal.bridgeInterface (`-i cni0` / `iif cni0`); the
//                        name is required (kube-proxy refuses to start without it)
//   InterfaceNamePrefix  arrived on an interface named detectLocal.interfaceNamePrefix*
//                        (`-i cali+` / `iif cali*`); the prefix is required
//   anything else        refused: "unknown detect-local-mode"
//
// The rules renderers (iptables.ts, nftables.ts) write the matches above. kubetun's own datapath
// reads packets from one TUN and cannot see which device a packet entered the node on, so for
// the interface modes it uses the node's pod CIDR — the addresses behind the pod interfaces that
// steering hooks (src/node/discover.ts picks exactly the bridge's ports, or the prefixed links) —
// as the source test (localSourceCidr). docs/cluster.md states the difference.
import { UserError } from '../errors.ts';
import { IPV4, IPV6 } from './family.ts';

export const LOCAL_MODES = [
  'ClusterCIDR',
  'NodeCIDR',
  'BridgeInterface',
  'InterfaceNamePrefix',
] as const;
export type LocalMode = (typeof LOCAL_MODES)[number];

export type LocalDetector =
  | { mode: LocalMode; by: 'none'; why: string }
  | { mode: LocalMode; by: 'cidr'; cidr: string }
  | { mode: LocalMode; by: 'iface'; iface: string; prefix: boolean };

export interface LocalDetectInput {
  /** detectLocalMode; '' or undefined = ClusterCIDR */
  mode?: string;
  clusterCidr?: string;
  /** the Node's spec.podCIDR (NodeCIDR mode) */
  nodeCidr?: string;
  /** detectLocal.bridgeInterface */
  bridgeInterface?: string;
  /** detectLocal.interfaceNamePrefix */
  interfaceNamePrefix?: string;
}

/** A detect-local setting kube-proxy refuses; the message names the setting. */
export class LocalDetectError extends UserError {
  constructor(message: string) {
    super('DETECT_LOCAL', message);
  }
}

function cidr(field: string, s: string): string {
  const c = (s.includes(':') ? IPV6 : IPV4).cidr(s);
  if (c === null) throw new LocalDetectError(`${field}: "${s}" is not an IPv4 or IPv6 CIDR`);
  return c.text;
}

/** The detector kube-proxy builds for these settings (see the table at the top). */
export function localDetector(i: LocalDetectInput): LocalDetector {
  const raw = (i.mode ?? '').trim();
  const mode = (raw === '' ? 'ClusterCIDR' : raw) as LocalMode;
  if (!LOCAL_MODES.includes(mode))
    throw new LocalDetectError(
      `detectLocalMode: unknown detect-local-mode "${raw}" (one of ${LOCAL_MODES.join(', ')})`,
    );
  const text = (s: string | undefined) => (s ?? '').trim();
  switch (mode) {
    case 'ClusterCIDR':
      if (text(i.clusterCidr) === '')
        return {
          mode,
          by: 'none',
          why: 'Detect-local-mode set to ClusterCIDR, but no cluster CIDR defined',
        };
      return { mode, by: 'cidr', cidr: cidr('clusterCIDR', text(i.clusterCidr)) };
    case 'NodeCIDR':
      if (text(i.nodeCidr) === '')
        return {
          mode,
          by: 'none',
          why: 'Detect-local-mode set to NodeCIDR, but no PodCIDR defined at node',
        };
      return { mode, by: 'cidr', cidr: cidr('podCIDR', text(i.nodeCidr)) };
    case 'BridgeInterface':
      if (text(i.bridgeInterface) === '')
        throw new LocalDetectError(
          'detectLocal.bridgeInterface: required with detectLocalMode BridgeInterface',
        );
      return { mode, by: 'iface', iface: text(i.bridgeInterface), prefix: false };
    case 'InterfaceNamePrefix':
      if (text(i.interfaceNamePrefix) === '')
        throw new LocalDetectError(
          'detectLocal.interfaceNamePrefix: required with detectLocalMode InterfaceNamePrefix',
        );
      return { mode, by: 'iface', iface: text(i.interfaceNamePrefix), prefix: true };
  }
}

/** iptables matches for "from a local pod" and its negation; null = no detector. */
export function iptablesLocalMatch(
  d: LocalDetector,
): { local: string[]; notLocal: string[] } | null {
  if (d.by === 'none') return null;
  if (d.by === 'cidr') return { local: ['-s', d.cidr], notLocal: ['!', '-s', d.cidr] };
  const dev = d.prefix ? `${d.iface}+` : d.iface;
  return { local: ['-i', dev], notLocal: ['!', '-i', dev] };
}

/** nftables expressions for "from a local pod" and its negation; null = no detector. */
export function nftLocalMatch(d: LocalDetector): { local: string; notLocal: string } | null {
  if (d.by === 'none') return null;
  if (d.by === 'cidr') {
    const ip = d.cidr.includes(':') ? 'ip6' : 'ip';
    return { local: `${ip} saddr ${d.cidr}`, notLocal: `${ip} saddr != ${d.cidr}` };
  }
  const dev = d.prefix ? `"${d.iface}*"` : d.iface;
  return { local: `iif ${dev}`, notLocal: `iif != ${dev}` };
}

/**
 * The source network kubetun's datapath treats as "from a pod" ('' = none): the detector's
 * CIDR, or for the interface modes the node's pod CIDR (the TUN hides the ingress device).
 */
export function localSourceCidr(d: LocalDetector, nodeCidr: string): string {
  if (d.by === 'cidr') return d.cidr;
  if (d.by === 'iface') return nodeCidr;
  return '';
}

// Knobs of the proxier being imitated. Defaults are a stock kube-proxy on an IPv4 node
// (--masquerade-bit 14, --iptables-localhost-nodeports, nodePortAddresses unset, nf_conntrack
// not in liberal mode, iptables with --random-fully, nfacct counters available).

import type { IPFamily } from '../model.ts';
import { type LocalDetector, localDetector } from './local-detect.ts';

export interface RulesOptions {
  /**
   * The family of the proxier imitated (default IPv4): only its addresses are written, as
   * iptables-restore / ip6tables-restore input or an `ip` / `ip6` nftables table.
   */
  ipFamily?: IPFamily;
  /** Endpoints whose nodeName equals this are local (kube-proxy's --hostname-override). */
  nodeName?: string;
  /** The node's topology.kubernetes.io/zone label, for topology hints. */
  nodeZone?: string;
  /** Pod CIDR for the "local traffic" detector (--cluster-cidr); none means no detector. */
  clusterCIDR?: string;
  /**
   * The local traffic detector (--detect-local-mode and its settings, local-detect.ts); when
   * absent, ClusterCIDR mode on clusterCIDR, kube-proxy's default.
   */
  localDetector?: LocalDetector;
  /** Node IPs; the first is kube-proxy's nodeIP (LoadBalancer source-range self-check). */
  nodeIPs?: string[];
  /** --nodeport-addresses CIDRs; empty or absent means every local address. */
  nodePortAddresses?: string[];
  /** --masquerade-all */
  masqueradeAll?: boolean;
  /** --iptables-masquerade-bit (default 14). */
  masqueradeBit?: number;
  /** Mark text as written; default is Go's `%#08x` of 1<<bit, i.e. "0x00004000". */
  masqueradeMark?: string;
  /** iptables supports MASQUERADE --random-fully (default true). */
  randomFully?: boolean;
  /** --iptables-localhost-nodeports (default true). */
  localhostNodePorts?: boolean;
  /** net.netfilter.nf_conntrack_tcp_be_liberal is set: no INVALID drop rule (default false). */
  conntrackTCPLiberal?: boolean;
  /** nfacct counters could be created (default true). */
  nfacct?: boolean;
  /** PreferSameTrafficDistribution feature gate: honour node hints (default true). */
  preferSameNode?: boolean;
  /** Above this many endpoints kube-proxy drops per-endpoint comments (default 1000). */
  largeClusterEndpointsThreshold?: number;
}

export type ResolvedRulesOptions = Required<
  Omit<RulesOptions, 'nodeName' | 'nodeZone' | 'clusterCIDR' | 'localDetector'>
> &
  Pick<RulesOptions, 'nodeName' | 'nodeZone' | 'clusterCIDR' | 'localDetector'>;

/** Go's fmt.Sprintf("%#08x", v): eight zero-padded hex digits after the "0x" prefix. */
export function goHexMark(v: number): string {
  return `0x${v.toString(16).padStart(8, '0')}`;
}

/** The detector the renderers use: the one given, else ClusterCIDR mode on clusterCIDR. */
export function rulesLocalDetector(o: ResolvedRulesOptions): LocalDetector {
  if (o.localDetector) return o.localDetector;
  try {
    return localDetector({ mode: 'ClusterCIDR', clusterCidr: o.clusterCIDR });
  } catch {
    throw new RangeError(`clusterCIDR: "${o.clusterCIDR}" is not an IPv4 or IPv6 CIDR`);
  }
}

export function resolveRulesOptions(o: RulesOptions = {}): ResolvedRulesOptions {
  const bit = o.masqueradeBit ?? 14;
  if (!Number.isInteger(bit) || bit < 0 || bit > 31) {
    throw new RangeError(`masqueradeBit must be 0..31, got ${bit}`);
  }
  return {
    ipFamily: o.ipFamily ?? 'IPv4',
    nodeName: o.nodeName,
    nodeZone: o.nodeZone,
    clusterCIDR: o.clusterCIDR,
    localDetector: o.localDetector,
    nodeIPs: o.nodeIPs ?? [],
    nodePortAddresses: o.nodePortAddresses ?? [],
    masqueradeAll: o.masqueradeAll ?? false,
    masqueradeBit: bit,
    masqueradeMark: o.masqueradeMark ?? goHexMark(2 ** bit),
    randomFully: o.randomFully ?? true,
    localhostNodePorts: o.localhostNodePorts ?? true,
    conntrackTCPLiberal: o.conntrackTCPLiberal ?? false,
    nfacct: o.nfacct ?? true,
    preferSameNode: o.preferSameNode ?? true,
    largeClusterEndpointsThreshold: o.largeClusterEndpointsThreshold ?? 1000,
  };
}

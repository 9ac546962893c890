// NAT state of the datapath: the SNAT table, this node's addresses and CIDRs in the numeric
// forms the fast path compares, and the loadBalancerSourceRanges per reverse-NAT id. Read by
// the NAT stage (nat.ts), written by the loader (source ranges) and housekeeping (SNAT GC).
import type { ConntrackMap } from '../../maps/conntrack.ts';
import { SnatMap } from '../../maps/snat.ts';
import { parseCidr } from '../../wire/addr.ts';
import { ipv6ToWords, parseCidr6Words } from '../../wire/addr6.ts';
import type { DatapathConfig } from './config.ts';

/**
 * NAT configuration in the numeric forms the fast path uses, the SNAT table, source ranges.
 * Addresses, networks and masks are int32 (`| 0`), like dp.saddr/daddr and the maps' columns:
 * compared like with like, and never heap numbers (src/datapath/README.md, "Allocation").
 */
export class NatState {
  readonly snat: SnatMap;
  readonly nodeIp: number;
  readonly podGateway: number;
  readonly podNet: number;
  readonly podMask: number;
  readonly clusterNet: number;
  readonly clusterMask: number;
  /** 0 when no cluster CIDR is configured: then only hairpin and external frontends masquerade */
  readonly hasCluster: number;
  readonly portMin: number;
  readonly portSpan: number;
  /** loadBalancerSourceRanges per revNat id: rangeStart[r] .. + rangeCount[r] into net/mask */
  rangeStart: Uint32Array;
  rangeCount: Uint16Array;
  rangeNet: Int32Array;
  rangeMask: Int32Array;
  /** GC cursor of natGcStep (IPv4 table) */
  gcCursor = 0;
  /** 1: replies come routed, give their TTL back (DatapathConfig.routedReplies) */
  readonly restoreTtl: number;

  // ---- IPv6 (nat6 stages): addresses, networks and masks as four int32 words
  readonly snat6: SnatMap;
  /** 1 when nodeIp6 is configured (IPv6 NodePort frontends, IPv6 masquerade) */
  readonly hasNode6: number;
  readonly nodeIp6: Int32Array;
  readonly podGateway6: Int32Array;
  readonly hasPod6: number;
  readonly pod6Net: Int32Array;
  readonly pod6Mask: Int32Array;
  readonly hasCluster6: number;
  readonly cluster6Net: Int32Array;
  readonly cluster6Mask: Int32Array;
  readonly port6Min: number;
  readonly port6Span: number;
  /** loadBalancerSourceRanges of IPv6 revNat ids: rangeStart/rangeCount index these (4 words each) */
  rangeNet6: Int32Array;
  rangeMask6: Int32Array;
  /** GC cursor of natGcStep (IPv6 table) */
  gcCursor6 = 0;

  /** `snatBuffer`: attach the SNAT table to it (a pinned map, src/node/pin.ts) */
  constructor(
    cfg: DatapathConfig,
    revNatCapacity: number,
    snatBuffer?: ArrayBuffer,
    snat6Buffer?: ArrayBuffer,
  ) {
    this.snat = new SnatMap(cfg.snatCapacity, { shared: cfg.shared, buffer: snatBuffer });
    this.restoreTtl = cfg.routedReplies ? 1 : 0;
    this.nodeIp = cfg.nodeIp | 0;
    this.podGateway = (cfg.podGateway || cfg.nodeIp) | 0;
    const pod = cfg.podCidr ? parseCidr(cfg.podCidr) : undefined;
    this.podNet = pod ? pod.addr | 0 : 1;
    this.podMask = pod ? pod.mask | 0 : -1;
    const cl = cfg.clusterCidr ? parseCidr(cfg.clusterCidr) : undefined;
    this.hasCluster = cl ? 1 : 0;
    this.clusterNet = cl ? cl.addr | 0 : 0;
    this.clusterMask = cl ? cl.mask | 0 : 0;
    this.portMin = cfg.snatPortMin;
    this.portSpan = cfg.snatPortMax - cfg.snatPortMin + 1;
    this.rangeStart = new Uint32Array(revNatCapacity + 1);
    this.rangeCount = new Uint16Array(revNatCapacity + 1);
    this.rangeNet = new Int32Array(0);
    this.rangeMask = new Int32Array(0);
    this.snat6 = new SnatMap(cfg.snatCapacity, {
      shared: cfg.shared,
      ipv6: true,
      buffer: snat6Buffer,
    });
    this.hasNode6 = cfg.nodeIp6 ? 1 : 0;
    this.nodeIp6 = cfg.nodeIp6 ? ipv6ToWords(cfg.nodeIp6) : new Int32Array(4);
    const gw6 = cfg.podGateway6 || cfg.nodeIp6;
    this.podGateway6 = gw6 ? ipv6ToWords(gw6) : new Int32Array(4);
    const pod6 = cfg.podCidr6 ? parseCidr6Words(cfg.podCidr6) : undefined;
    this.hasPod6 = pod6 ? 1 : 0;
    this.pod6Net = pod6 ? pod6.net : new Int32Array(4);
    this.pod6Mask = pod6 ? pod6.mask : new Int32Array(4);
    const cl6 = cfg.clusterCidr6 ? parseCidr6Words(cfg.clusterCidr6) : undefined;
    this.hasCluster6 = cl6 ? 1 : 0;
    this.cluster6Net = cl6 ? cl6.net : new Int32Array(4);
    this.cluster6Mask = cl6 ? cl6.mask : new Int32Array(4);
    this.port6Min = cfg.snat6PortMin;
    this.port6Span = cfg.snat6PortMax - cfg.snat6PortMin + 1;
    this.rangeNet6 = new Int32Array(0);
    this.rangeMask6 = new Int32Array(0);
  }
}

/**
 * The SNAT entry of conntrack flow i (its nat address/port: snat.natAddr/natPort), or -1 when
 * the flow is not masqueraded. For tooling (ct listings), not the hot path.
 */
export function nat4SnatOf(ct: ConntrackMap, snat: SnatMap, i: number): number {
  if (!ct.isLive(i) || snat.size === 0) return -1;
  const e = snat.lookupFwd(ct.proto(i), ct.saddr(i), ct.sport(i), ct.baddr(i), ct.bport(i));
  return e >= 0 && snat.ctIdx(e) === i ? e : -1;
}

/** nat4SnatOf for IPv6 flow i of ct6 and the IPv6 SNAT table (tooling: it allocates). */
export function nat6SnatOf(ct: ConntrackMap, snat: SnatMap, i: number): number {
  if (!ct.isLive(i) || snat.size === 0) return -1;
  const a = new Int32Array(8);
  for (let k = 0; k < 4; k++) {
    a[k] = ct.saddrWord(i, k);
    a[4 + k] = ct.baddrWord(i, k);
  }
  const e = snat.lookupFwd6(ct.proto(i), a, 0, ct.sport(i), 4, ct.bport(i));
  return e >= 0 && snat.ctIdx(e) === i ? e : -1;
}

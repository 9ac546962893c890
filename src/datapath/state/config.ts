// Datapath configuration: map sizes, the RNG seed, and the knobs of generated ICMP errors.

import { randomInt } from 'node:crypto';
import { type CtTimeouts, DEFAULT_CT_TIMEOUTS } from './ct-state.ts';
import { checkNatConfig } from './nat-config.ts';

export interface DatapathConfig extends CtTimeouts {
  // CtTimeouts (ct.ts): ctTcpSynSent .. ctTcpClose, ctUdp, ctUdpStream, seconds
  /** drop packets conntrack classifies INVALID (kube-proxy's ctstate INVALID DROP); else pass */
  ctDropInvalid: boolean;
  /** IP fragment tracking entries (frag.ts): (src, dst, id, proto) -> translation */
  fragCapacity: number;
  /** service map entries: masters + backend slots + one wildcard per VIP */
  svcCapacity: number;
  /** backend map entries (distinct ip:port:proto) */
  beCapacity: number;
  /** largest reverse-NAT id (1..65535; one id per VIP:port:proto) */
  revNatCapacity: number;
  /** conntrack flows */
  ctCapacity: number;
  /** session-affinity entries (client, service) */
  affinityCapacity: number;
  /**
   * entry positions one inline GC step examines when a create finds conntrack full (then the
   * create is retried once); bounds the worst-case cost of that packet. 0 = never inline.
   */
  ctGcBatch: number;
  /** back the maps with SharedArrayBuffer so worker threads can share them */
  shared: boolean;
  /** seed of the backend-selection PRNG (same seed + same packets = same choices); default PROCESS_SEED */
  seed: number;
  /** source of generated ICMP errors (u32); 0 = the offending packet's destination (the VIP) */
  icmpErrorSrc: number;
  /** TTL of generated ICMP errors (Linux: net.ipv4.ip_default_ttl = 64) */
  icmpTtl: number;
  /** ICMP errors per second, token bucket (Linux net.ipv4.icmp_msgs_per_sec = 1000); 0 = off */
  icmpRatePerSec: number;
  /** bucket depth (Linux net.ipv4.icmp_msgs_burst = 50) */
  icmpBurst: number;
  /** NAT (nat.ts): this node's IP (u32; NodePort frontends, masquerade source); 0 = none */
  nodeIp: number;
  /** NAT: the node-side gateway of local pods (u32; hairpin masquerade source); 0 = nodeIp */
  podGateway: number;
  /** NAT: this node's pod CIDR ('' = none): backends in it are masqueraded to podGateway */
  podCidr: string;
  /** NAT: the cluster CIDR ('' = none): ClusterIP traffic from outside it is masqueraded */
  clusterCidr: string;
  /** NAT: SNAT port range, power-of-two aligned (steering matches it with one u32 key) */
  snatPortMin: number;
  snatPortMax: number;
  /** NAT: masqueraded flows at once (per family) */
  snatCapacity: number;
  /** NAT, IPv6: this node's IPv6 address ('' = none: no IPv6 NodePort, no IPv6 masquerade) */
  nodeIp6: string;
  /** NAT, IPv6: the node-side gateway of local pods ('' = nodeIp6) */
  podGateway6: string;
  /** NAT, IPv6: this node's IPv6 pod CIDR ('' = none) */
  podCidr6: string;
  /** NAT, IPv6: the cluster's IPv6 pod CIDR ('' = none) */
  clusterCidr6: string;
  /** NAT, IPv6: SNAT port range, power-of-two aligned like snatPortMin..snatPortMax */
  snat6PortMin: number;
  snat6PortMax: number;
  /**
   * answer ICMP echo to a VIP (vip-echo.ts), as IPVS mode does by binding every ClusterIP to
   * kube-ipvs0; false = iptables/nftables behaviour, the ping goes unanswered
   */
  vipEcho: boolean;
  /**
   * replies reach the datapath routed by the kernel into the TUN (src/node/steer-replies.ts),
   * one TTL spent on the way: a non-masqueraded reply reverse-NATed here, not to this node, gets
   * it back (nat.ts natRestoreTtl), so the client sees kube-proxy's single pass. The node agent
   * sets it; offline (replay, tests) packets arrive as captured
   */
  routedReplies: boolean;
  /** event ring slots for monitor/tap (events.ts), a power of two */
  eventRingCapacity: number;
  /** bytes of each packet the ring keeps per side for `kubetun tap` (longer ones are cut) */
  eventRingSnap: number;
}

/**
 * The backend-selection seed of this process when none is configured: drawn once per process,
 * so nodes and restarts do not all draw the same "random" backend sequence (a fixed seed made
 * every node send its first flows to the same slots). Set DatapathConfig.seed to replay or test.
 */
export const PROCESS_SEED = randomInt(0x7fffffff);

export const DEFAULT_DATAPATH_CONFIG: Readonly<DatapathConfig> = {
  svcCapacity: 65536,
  beCapacity: 65536,
  revNatCapacity: 65535,
  ctCapacity: 262144,
  affinityCapacity: 65536,
  ctGcBatch: 256,
  ...DEFAULT_CT_TIMEOUTS,
  ctDropInvalid: false,
  fragCapacity: 4096,
  shared: false,
  seed: PROCESS_SEED,
  icmpErrorSrc: 0,
  icmpTtl: 64,
  icmpRatePerSec: 1000,
  icmpBurst: 50,
  nodeIp: 0,
  podGateway: 0,
  podCidr: '',
  clusterCidr: '',
  snatPortMin: 0xf000,
  snatPortMax: 0xf3ff,
  snatCapacity: 65536,
  nodeIp6: '',
  podGateway6: '',
  podCidr6: '',
  clusterCidr6: '',
  snat6PortMin: 0xf000,
  snat6PortMax: 0xf3ff,
  vipEcho: false,
  routedReplies: false,
  eventRingCapacity: 1024,
  eventRingSnap: 1536,
};

/** Merge and validate (slow world: throws with the offending field named). */
export function resolveDatapathConfig(cfg: Partial<DatapathConfig> = {}): DatapathConfig {
  const c: DatapathConfig = { ...DEFAULT_DATAPATH_CONFIG, ...cfg };
  const positive = [
    'svcCapacity',
    'beCapacity',
    'revNatCapacity',
    'ctCapacity',
    'affinityCapacity',
    'fragCapacity',
  ] as const;
  for (const k of positive) {
    if (!Number.isInteger(c[k]) || c[k] < 1) {
      throw new Error(`datapath config: ${k} must be a positive integer, got ${c[k]}`);
    }
  }
  if (!Number.isInteger(c.ctGcBatch) || c.ctGcBatch < 0) {
    throw new Error(`datapath config: ctGcBatch must be an integer >= 0, got ${c.ctGcBatch}`);
  }
  if (!Number.isInteger(c.icmpErrorSrc) || c.icmpErrorSrc < 0 || c.icmpErrorSrc > 0xffffffff) {
    throw new Error(`datapath config: icmpErrorSrc must be a u32 address, got ${c.icmpErrorSrc}`);
  }
  if (!Number.isInteger(c.icmpTtl) || c.icmpTtl < 1 || c.icmpTtl > 255) {
    throw new Error(`datapath config: icmpTtl must be 1..255, got ${c.icmpTtl}`);
  }
  if (!(c.icmpRatePerSec >= 0) || !(c.icmpBurst >= 1)) {
    throw new Error('datapath config: icmpRatePerSec must be >= 0 and icmpBurst >= 1');
  }
  checkNatConfig(c);
  checkCtTimeouts(c);
  return c;
}

function checkCtTimeouts(c: DatapathConfig): void {
  for (const k of Object.keys(DEFAULT_CT_TIMEOUTS) as (keyof CtTimeouts)[]) {
    if (!Number.isInteger(c[k]) || c[k] < 1 || c[k] > 0x7fffffff) {
      throw new Error(`datapath config: ${k} must be a positive integer of seconds, got ${c[k]}`);
    }
  }
}

/** kube-proxy's nf_conntrack_max: max(32768 x cores, 131072) (its --conntrack-max-per-core). */
export function ctMaxDefault(cores: number): number {
  return Math.max(32768 * cores, 131072);
}

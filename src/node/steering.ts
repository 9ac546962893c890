// Steering: the hooks that make the kernel hand this node the packets that need translation —
// and only those: pod-to-pod traffic no Service touches stays in the kernel, as under
// kube-proxy, even a direct connection to an endpoint's own address and port — and the sysctls
// that let it take the written-back packets. Verified fact by fact on this kernel (DESIGN.md
// "Steering recipe"); each has a root test that switches it off and watches traffic fail
// (test/node/agent.test.ts, test/node/steer.test.ts, test/node/v6*.test.ts). The filters do not
// grow with the number of Services: the per-endpoint ones are entries of u32 hash tables
// (steer-endpoints.ts), the rest are fixed. Replies of translated flows to anyone but the node
// itself are steer-replies.ts's: the kernel's conntrack marks the flows the agent wrote into the
// TUN and routes their replies back into it. Exact commands, in install order:
//
//   sysctl net.ipv4.ip_forward=1                 written-back packets are forwarded kt0 -> veth
//   sysctl net.ipv4.conf.all.rp_filter=0         effective rp_filter is max(all, dev)
//   sysctl net.ipv4.conf.<tun>.rp_filter=0       a DNATed packet from pod A re-enters on the TUN
//                                                although the route back to A is A's veth
//   sysctl net.ipv4.conf.<tun>.accept_local=1    node -> VIP: the written-back packet's source
//                                                is the node's own address
//   tc qdisc add dev lo egress_block 7700 clsact        the pods' shared block exists from now
//                                                on; lo's egress meets its NodePort filter, so
//                                                the node reaching its own IP:NodePort is served
//   tc qdisc add dev <uplink> clsact
//   the endpoint tables (block pref 7700|7710, uplink pref 7701|7711, below)   before anything
//                                                reaches the TUN: the first translated flow's
//                                                replies to the node are steered; built off the
//                                                event loop (tens of thousands of entries)
//   ip route replace <service-cidr> dev <tun> src <node-ip>      traffic the node itself sends
//                                                to VIPs
//   tc qdisc add dev <pod-veth> ingress_block 7700 clsact   every pod veth shares the block's
//                                                filters (one set, however many pods); a veth
//                                                with a clsact of someone else's is left alone
//   sysctl net.ipv4.ip_local_reserved_ports=<prev>,61440-62463
//                                                no local socket takes a SNAT port
//   tc filter add dev <uplink> ingress pref 7702 protocol ip u32 match ip dst <node-ip>/32 \
//      match ip protocol 6|17|132 0xff match u8 0x05 0x0f at 0 match ip dport <v> <m> \
//      action mirred egress redirect dev <tun>   NodePorts 30000-32767, TCP and UDP, 5 keys
//                                                each (0x7530/fff0 0x7540/ffc0 0x7580/ff80
//                                                0x7600/fe00 0x7800/f800). u32 reads the port
//                                                at a fixed offset, hence the IHL=5 guard:
//                                                packets with IP options (and non-first
//                                                fragments) are pref 7707's.
//   tc filter add block 7700 pref 7702 ...       the same NodePort keys: pods and the node
//                                                itself reaching this node's NodePorts
//   tc filter ... pref 7704 ... match ip dst <external/LB ip>/32 ...  externalIPs and
//                                                LoadBalancer ingress IPs, on the uplink and the
//                                                block (re-synced on reload)
//   tc filter ... pref 7705 ... match ip dst <service-cidr> ...   VIPs from pods and from
//                                                outside, on the block and the uplink: taken
//                                                before the kernel routes them. Through the
//                                                route alone a forwarded packet would lose
//                                                one TTL more than under kube-proxy (routed
//                                                into the TUN, then again out of it);
//                                                `lab compare` sees the TTL.
//   tc filter ... pref 7707 ... match ip dst <local> match u16 <bit> <bit> at 6 ...
//                                                packets to the node's own addresses (and,
//                                                bridged, to the pods) whose ports u32 cannot
//                                                read: non-first fragments (offset bit set: 13
//                                                keys, u32 has no "not zero") and packets with
//                                                IP options (`match u8 <6..15> 0x0f at 0`: 10
//                                                keys) — a NodePort's or a SNAT reply's among
//                                                them —, on the block and the uplink. Packets
//                                                routed on are the kernel's to reassemble and
//                                                parse before conntrack marks them
//                                                (steer-replies.ts). Rare: all of them.
//   block 7700 pref 7700|7710: endpoint table, one guard `match ip dst <local>/32` per address
//                                                of the node (its IP, the pods' gateway, any
//                                                other) and, with bridged pods, the pod CIDR:
//                                                replies of local endpoints (and ICMP errors
//                                                from them) to the node itself — its own flows
//                                                to VIPs, masqueraded flows' SNAT ports —,
//                                                delivered locally, never routed, so the reply
//                                                steering cannot take them; bridged pods' to
//                                                local clients too (bridged, never routed)
//   uplink pref 7701|7711: endpoint table, the node's addresses as guards   replies of remote
//                                                endpoints to the node itself (SNAT ports of
//                                                flows masqueraded to the node IP)
//   steer-replies.ts: nft table inet kubetun; ip rule pref 7700 fwmark 0x2000 lookup 7700;
//      ip route replace default dev <tun> table 7700    replies of translated flows to everyone
//                                                else — pods here and on other nodes, outside
//                                                clients of eTP=Local frontends —, ICMP errors
//                                                about them (conntrack's RELATED), fragmented
//                                                ones (reassembled before conntrack)
//
// Before all of it, while the TUN is still down (quietTun): `ip link set dev <tun> multicast
// off`, addr_gen_mode=1, disable_ipv6=1.
// With --service-cidr-v6 (IPv6 ClusterIPs), after the above, in this order:
//
//   sysctl net.ipv6.conf.<tun>.disable_ipv6=1    first (quietTun's already; a link-local
//                                                address a TUN got otherwise goes)
//   sysctl net.ipv6.conf.all.forwarding=1        written-back IPv6 packets are forwarded (this
//                                                makes the node an IPv6 router: hosts' RAs are
//                                                then ignored unless accept_ra=2, as on any
//                                                IPv6 Kubernetes node)
//   sysctl net.ipv6.conf.<tun>.forwarding=0      not a router on the TUN (no all-routers
//                                                group, were it multicast); forwarding itself
//                                                is the `all` switch's
//   sysctl net.ipv6.conf.<tun>.accept_ra=0       no router traffic on the TUN
//   sysctl net.ipv6.conf.<tun>.addr_gen_mode=1   no link-local address: no DAD, no router
//                                                solicitation, no solicited-node group
//   sysctl net.ipv6.conf.<tun>.disable_ipv6=0    last: IPv6 on, with nothing to announce
//   ip -6 route replace <service-cidr-v6> dev <tun>      the node's own traffic to IPv6 VIPs
//                                                (source: the kernel's choice, the node's
//                                                IPv6 address towards the backend)
//   tc filter add block 7700|dev <uplink> ingress pref 7725 protocol ipv6 u32 \
//      match ip6 dst <service-cidr-v6> action mirred egress redirect dev <tun>
//                                                IPv6 VIPs from pods and from outside
//   block 7700 pref 7720|7730: IPv6 endpoint table, guards `match ip6 dst <local>/128` (the
//                                                node's global IPv6 addresses, --node-ip-v6;
//                                                bridged, the IPv6 pod CIDR too)   replies of
//                                                local IPv6 endpoints (and ICMPv6 errors 1-3
//                                                from them) to the node itself, by source
//                                                (steer-endpoints.ts). u32 matches the next
//                                                header and port of a bare IPv6 header: a
//                                                reply with extension headers is pref 7727's.
//   uplink pref 7721|7731: IPv6 endpoint table, the node's IPv6 addresses as guards   replies
//                                                of remote IPv6 endpoints to the node itself
//                                                (its own flows, not masqueraded without
//                                                --cluster-cidr-v6; masqueraded flows' SNAT
//                                                ports)
//   tc filter add block 7700|dev <uplink> ingress pref 7727 protocol ipv6 u32 \
//      match ip6 dst <local>/128 match ip6 protocol 44|0|43|60 0xff ...   IPv6 packets to the
//                                                node itself whose first header is an extension
//                                                header (fragment, hop-by-hop, routing,
//                                                destination options: their ports sit behind
//                                                it, the datapath walks the chain), as pref
//                                                7707. Rare: all of them.
//   (the reply steering, steer-replies.ts, is one `inet` table and an `ip -6 rule` beside the
//                                                IPv4 one)
//   tc filter ... pref 7724 protocol ipv6 u32 match ip6 dst <external/LB ip>/128 ...   IPv6
//                                                externalIPs and LoadBalancer ingress IPs, on
//                                                the uplink and the block, as pref 7704
//
// With --node-ip-v6 too (IPv6 NodePorts and masquerade: the datapath's nodeIp6), as the IPv4
// pref 7702 is for --node-ip:
//
//   sysctl net.ipv4.ip_local_reserved_ports=<prev>,61440-62463   the IPv6 SNAT range (the
//                                                datapath's snat6PortMin..Max): Linux keeps one
//                                                reserved-port list for both families (an IPv6
//                                                bind or connect checks the ipv4 sysctl), so
//                                                this is the IPv4 step's when the ranges agree
//   tc filter add dev <uplink> ingress pref 7722 protocol ipv6 u32 \
//      match ip6 dst <node-ip-v6>/128 match ip6 protocol 6|17|132 0xff match ip6 dport <v> <m> ...
//                                                IPv6 NodePorts 30000-32767, the IPv4 keys; on
//                                                the block too (pods, and the node itself
//                                                through lo's egress). u32 reads the port right
//                                                behind a bare IPv6 header: with extension
//                                                headers a packet is pref 7727's.
//   (replies to the IPv6 SNAT ports: the IPv6 endpoint tables, guarded by --node-ip-v6)
//
// No ip6tables (the reply steering's nft table is `inet`: both families) and no other sysctl: IPv6 has no rp_filter (the TUN's written-back packets,
// sources of other links, pass) and no accept_local (the node's own address as a source is
// taken on any device, as the IPv6 ClusterIP from the node already shows).
//
// Nothing of Neighbour Discovery, MLD or router traffic is steered: the VIP filter matches
// destinations in the service CIDR only, the endpoint table ICMPv6 errors only; the TUN is
// point-to-point (no ND) and has no address. Without --service-cidr-v6 the TUN stays
// IPv4-only (disable_ipv6=1): the kernel's own IPv6 chatter would reach the agent.
//
// No address on the TUN: rp_filter 0 (not loose mode 2, which drops everything arriving on an
// address-less device) is the documented choice, so there is no link-local address to pick per
// node and nothing to collide with pod or node addresses.
//
// Every change is recorded as an undo argv in an UndoLog *before* the agent moves on, so that a
// clean exit, the fail-open watchdog and a restart after a crash all remove exactly what was
// installed. Filter prefs are kubetun's own: a restart deletes stale filters by pref first.
import { existsSync } from 'node:fs';
import { canonIpv6 } from '../wire/addr6.ts';
import {
  IPV6_EXT_DSTOPTS,
  IPV6_EXT_FRAGMENT,
  IPV6_EXT_HOPOPTS,
  IPV6_EXT_ROUTING,
} from '../wire/ipv6.ts';
import { IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP } from '../wire/proto.ts';
import type { Logger } from 'pino';
import { UserError } from '../errors.ts';
import type { ResolvedServicePort } from '../model.ts';
import { sh, shBatch, shJson, shTry } from '../sh.ts';
import { EndpointSteer, EndpointTable, IHL5, type TcAt } from './steer-endpoints.ts';
import { ReplySteer } from './steer-replies.ts';
import { Sysctls } from './sysctl.ts';

/** the pods' shared tc block (every pod veth's ingress, lo's egress) and its endpoint table */
export const POD_BLOCK = 7700;
export const TC_PREF_POD = 7700;
export const TC_PREF_UPLINK = 7701;
export const TC_PREF_NODEPORT = 7702;
/** replies to SNAT ports: the endpoint tables' now (guarded by the node's addresses); kept to
 * sweep an older run's filter */
export const TC_PREF_SNAT = 7703;
export const TC_PREF_EXTERNAL = 7704;
export const TC_PREF_VIP = 7705;
/** ICMP errors to the pods from routers: conntrack's RELATED now (steer-replies.ts); kept to
 * sweep an older run's filter */
export const TC_PREF_ICMP = 7706;
export const TC_PREF_FRAG = 7707;
/** the endpoint tables' second prefs (steer-endpoints.ts rebuild alternates) */
export const TC_PREF_POD_ALT = 7710;
export const TC_PREF_UPLINK_ALT = 7711;
/** IPv6 (`protocol ipv6`: a pref holds one protocol): the endpoint table's pair, the VIPs */
export const TC_PREF_POD6 = 7720;
export const TC_PREF_POD6_ALT = 7730;
export const TC_PREF_UPLINK6 = 7721;
export const TC_PREF_UPLINK6_ALT = 7731;
/** IPv6 NodePorts, SNAT replies, external/LB IPs: the IPv4 prefs 7702-7704 plus 20 */
export const TC_PREF_NODEPORT6 = 7722;
export const TC_PREF_SNAT6 = 7723;
export const TC_PREF_EXTERNAL6 = 7724;
export const TC_PREF_VIP6 = 7725;
/** the IPv6 twin of TC_PREF_ICMP, as unused */
export const TC_PREF_ICMP6 = 7726;
export const TC_PREF_FRAG6 = 7727;
const KUBETUN_PREFS = [
  TC_PREF_POD,
  TC_PREF_UPLINK,
  TC_PREF_NODEPORT,
  TC_PREF_SNAT,
  TC_PREF_EXTERNAL,
  TC_PREF_VIP,
  TC_PREF_ICMP,
  TC_PREF_FRAG,
  TC_PREF_POD_ALT,
  TC_PREF_UPLINK_ALT,
  TC_PREF_POD6,
  TC_PREF_POD6_ALT,
  TC_PREF_UPLINK6,
  TC_PREF_UPLINK6_ALT,
  TC_PREF_NODEPORT6,
  TC_PREF_SNAT6,
  TC_PREF_EXTERNAL6,
  TC_PREF_VIP6,
  TC_PREF_ICMP6,
  TC_PREF_FRAG6,
];
const BLOCK_AT = ['block', String(POD_BLOCK)];

/** IPv4 header lengths with options (IHL 6-15 words): u32's fixed-offset ports are wrong there */
const IHL_OPTIONS = Array.from({ length: 10 }, (_, i) => i + 6);

/** One key per bit of the IPv4 fragment offset (u16 at byte 6): any set means not the first. */
const FRAG_OFFSET_BITS = Array.from({ length: 13 }, (_, i) => 1 << i);

/** 30000-32767 as u32 prefix/mask keys on the destination port. */
export const NODEPORT_KEYS: readonly [number, number][] = [
  [0x7530, 0xfff0],
  [0x7540, 0xffc0],
  [0x7580, 0xff80],
  [0x7600, 0xfe00],
  [0x7800, 0xf800],
];
/** the NodePort range the keys above cover */
export const NODEPORT_RANGE = { min: 30000, max: 32767 };
/** the protocols with ports at the same offset that Services serve (NodePorts, SNAT replies) */
const L4_PROTOS = [IPPROTO_TCP, IPPROTO_UDP, IPPROTO_SCTP].map(String);

/**
 * One u32 match per protocol and port key: to `ip` on port value/mask, TCP, UDP or SCTP. IPv4
 * (`ip`/32) with the IHL=5 guard, IPv6 (`ip6`/128) behind a bare header (see the header).
 */
function dportMatches(
  family: 'ip' | 'ip6',
  ip: string,
  keys: readonly (readonly [number, number])[],
): string[][] {
  const dst = ['match', family, 'dst', `${ip}/${family === 'ip' ? 32 : 128}`];
  const bare = family === 'ip' ? IHL5 : [];
  return L4_PROTOS.flatMap((p) =>
    keys.map(([v, m]) => [
      ...dst,
      ...['match', family, 'protocol', p, '0xff', ...bare],
      ...['match', family, 'dport', hex(v), hex(m)],
    ]),
  );
}

export interface SteeringConfig {
  tun: string;
  uplink: string;
  nodeIp: string;
  podCidr: string;
  serviceCidr: string;
  /** the IPv6 ClusterIP range (--service-cidr-v6); absent = the TUN stays IPv4-only */
  serviceCidrV6?: string;
  /** this node's IPv6 pod CIDR (--pod-cidr-v6): the guard of the uplink's IPv6 endpoint table */
  podCidrV6?: string;
  /** SNAT port range (power-of-two aligned), reserved and steered; absent = no NAT steering */
  snatPorts?: { min: number; max: number };
  /** this node's IPv6 address (--node-ip-v6, with serviceCidrV6): IPv6 NodePorts, SNAT replies */
  nodeIp6?: string;
  /** the IPv6 SNAT port range (the datapath's snat6PortMin..Max), steered to nodeIp6 */
  snatPorts6?: { min: number; max: number };
  /** steer NodePorts 30000-32767 on the node IP into the TUN */
  nodePorts?: boolean;
  /** where the host's /proc/sys/net is (--proc-sys-net; default /proc/sys/net) */
  procSysNet?: string;
  /**
   * the node's own addresses, each family (node IP, pod gateway, any other global address):
   * replies to them are delivered locally, never routed into the TUN, so the endpoint tables
   * steer them (guarded by these destinations); the rest is steer-replies.ts's
   */
  locals4: readonly string[];
  locals6: readonly string[];
  /**
   * the pods sit on a bridge (discover.ts): a reply from a local backend to a local client is
   * bridged, never routed, so the endpoint tables take replies to the pod CIDR too
   */
  bridged?: boolean;
}

/** Undo steps (argv lists) in install order; listeners persist them as they come. */
export class UndoLog {
  readonly steps: string[][] = [];
  private readonly listeners: ((argv: string[]) => void)[] = [];

  onAdd(cb: (argv: string[]) => void): void {
    this.listeners.push(cb);
  }

  add(argv: string[]): void {
    this.steps.push(argv);
    for (const l of this.listeners) l(argv);
  }

  /**
   * Runs all steps, last first; returns the failures (things already gone are expected).
   * Consecutive `tc` or `ip` steps run as one batch (shBatch: one fork, not one per step).
   */
  unwind(): string[] {
    const failed: string[] = [];
    const steps = this.steps.splice(0).reverse();
    for (let i = 0; i < steps.length; ) {
      const tool = steps[i]![0];
      // `tc …` / `ip …` with no option before the subcommand: the words after the tool are one
      // batch line as they are
      const batchable = (s: string[]) =>
        s[0] === tool && (tool === 'tc' || tool === 'ip') && !s[1]?.startsWith('-');
      let j = i + 1;
      if (batchable(steps[i]!)) while (j < steps.length && batchable(steps[j]!)) j++;
      if (j - i > 1) {
        const lines = steps.slice(i, j).map((argv) => argv.slice(1));
        failed.push(...shBatch([tool!], lines, { force: true }));
      } else {
        const r = shTry(steps[i]!);
        if (!r.ok) failed.push(`${steps[i]!.join(' ')}: ${r.err.trim()}`);
      }
      i = j;
    }
    return failed;
  }
}

export interface SysctlChange {
  key: string;
  prev: string;
  value: string;
}

export class Steering {
  readonly hooked = new Set<string>();
  readonly sysctls: SysctlChange[] = [];
  /**
   * the commands install() ran, for the "steering installed" log line; later ones (a new pod's
   * hook, external IPs) are not kept: a long-lived agent's list would grow with every change
   */
  readonly applied: string[] = [];
  private installed = false;
  /** replies of translated flows, by their source endpoint (steer-endpoints.ts) */
  readonly endpoints: EndpointSteer;
  /** replies of translated flows to anyone but the node itself (steer-replies.ts) */
  readonly replies: ReplySteer;
  private readonly cfg: SteeringConfig;
  private readonly undo: UndoLog;
  private readonly log: Logger;
  private externalKey = '';
  private readonly sysctl: Sysctls;
  /** devices seen with a clsact qdisc (hook asks the kernel once per device) */
  private readonly clsact = new Set<string>();

  constructor(cfg: SteeringConfig, undo: UndoLog, log: Logger, endpoints = new EndpointSteer()) {
    this.cfg = cfg;
    this.sysctl = new Sysctls(cfg.procSysNet);
    this.undo = undo;
    this.log = log;
    this.endpoints = endpoints;
    const { tun, uplink } = cfg;
    const up = ['dev', uplink, 'ingress'];
    const prefs = (a: number, b: number): [number, number] => [a, b];
    const [guards4, guards6] = [this.localGuards('ip'), this.localGuards('ip6')];
    const [block4, block6] = [this.podGuards('ip'), this.podGuards('ip6')];
    const t = this.endpoints.tables;
    t.push(new EndpointTable(BLOCK_AT, prefs(TC_PREF_POD, TC_PREF_POD_ALT), block4, tun, log));
    t.push(new EndpointTable(up, prefs(TC_PREF_UPLINK, TC_PREF_UPLINK_ALT), guards4, tun, log));
    if (cfg.serviceCidrV6) {
      const pair = prefs(TC_PREF_POD6, TC_PREF_POD6_ALT);
      if (block6.length > 0) t.push(new EndpointTable(BLOCK_AT, pair, block6, tun, log, 6));
      const pair6 = prefs(TC_PREF_UPLINK6, TC_PREF_UPLINK6_ALT);
      if (guards6.length > 0) t.push(new EndpointTable(up, pair6, guards6, tun, log, 6));
    }
    const ports = [...(cfg.snatPorts ? [cfg.snatPorts] : []), NODEPORT_RANGE];
    if (cfg.snatPorts6) ports.push(cfg.snatPorts6);
    const replyCfg = { tun, serviceCidr: cfg.serviceCidr, serviceCidrV6: cfg.serviceCidrV6 };
    const locals = { locals4: cfg.locals4, locals6: cfg.locals6, replyPorts: ports };
    this.replies = new ReplySteer({ ...replyCfg, ...locals }, undo, log, (l) => this.record(l));
  }

  /** `match <family> dst <addr>` of each of the node's own addresses of the family. */
  private localGuards(family: 'ip' | 'ip6'): string[][] {
    const [addrs, len] = family === 'ip' ? [this.cfg.locals4, 32] : [this.cfg.locals6, 128];
    return addrs.map((a) => ['match', family, 'dst', `${a}/${len}`]);
  }

  /** The pods' block: the node's own addresses, and with bridged pods their CIDR too. */
  private podGuards(family: 'ip' | 'ip6'): string[][] {
    const cidr = family === 'ip' ? this.cfg.podCidr : this.cfg.podCidrV6;
    const pods = this.cfg.bridged && cidr ? [['match', family, 'dst', cidr]] : [];
    return [...this.localGuards(family), ...pods];
  }

  async install(podIfaces: readonly string[]): Promise<void> {
    this.setSysctls();
    const { serviceCidr, tun, nodeIp } = this.cfg;
    // lo's egress first: the block exists from then on, pods or not (node -> own NodePort)
    this.bindBlock('lo', 'egress_block');
    this.ensureClsact(this.cfg.uplink);
    // The endpoint tables before anything reaches the TUN, so the first translated flow's
    // replies to the node are steered; built off the event loop (steer-endpoints.ts).
    for (const t of this.endpoints.tables) for (const u of t.undoSteps()) this.undo.add(u);
    await this.endpoints.rebuild();
    this.undo.add(['ip', 'route', 'del', serviceCidr, 'dev', tun]);
    this.exec(['ip', 'route', 'replace', serviceCidr, 'dev', tun, 'src', nodeIp]);
    for (const dev of podIfaces) this.hookPod(dev);
    this.installNat();
    // VIPs forwarded for pods and outside clients: before routing, so one TTL is spent, as the
    // kernel's own DNAT path spends (see the header, pref 7705)
    const vip = [['match', 'ip', 'dst', serviceCidr]];
    this.hook(BLOCK_AT, TC_PREF_VIP, vip);
    this.hook(['dev', this.cfg.uplink, 'ingress'], TC_PREF_VIP, vip);
    // non-first fragments: no port for the endpoint tables, so every one to the node's own
    // addresses (and, bridged, to the pods) goes (pref 7707); fragments routed on are the
    // kernel's to reassemble before conntrack marks them (steer-replies.ts)
    // and packets with IP options (IHL 6-15): u32 reads ports at fixed offsets (pref 7707)
    const frags = FRAG_OFFSET_BITS.map((b) => ['match', 'u16', hex(b), hex(b), 'at', '6']);
    const options = IHL_OPTIONS.map((ihl) => ['match', 'u8', hex(ihl), '0x0f', 'at', '0']);
    const unreadable = [...frags, ...options];
    const guarded = (guards: string[][]) =>
      guards.flatMap((g) => unreadable.map((f) => [...g, ...f]));
    this.hook(BLOCK_AT, TC_PREF_FRAG, guarded(this.podGuards('ip')));
    this.hook(['dev', this.cfg.uplink, 'ingress'], TC_PREF_FRAG, guarded(this.localGuards('ip')));
    this.installV6();
    this.replies.install();
    this.installed = true;
  }

  /**
   * A restart's takeover: the dead run's filters are adopted as they are, its reply ruleset
   * replaced by ours in one transaction (a no-op unless it changed).
   */
  adopt(): void {
    this.replies.install();
    this.installed = true;
  }

  private record(line: string): void {
    if (!this.installed) this.applied.push(line);
  }

  /**
   * The IPv6 service CIDR's route and VIP filters, and with nodeIp6 the IPv6 NodePorts and SNAT
   * replies (see the header); none without an IPv6 service CIDR.
   */
  private installV6(): void {
    const { serviceCidrV6: cidr, tun, uplink, nodeIp6 } = this.cfg;
    if (!cidr) return;
    if (nodeIp6) {
      this.installNatOf('ip6', nodeIp6, this.cfg.snatPorts6, TC_PREF_NODEPORT6);
    }
    this.undo.add(['ip', '-6', 'route', 'del', cidr, 'dev', tun]);
    this.exec(['ip', '-6', 'route', 'replace', cidr, 'dev', tun]);
    const vip = [['match', 'ip6', 'dst', cidr]];
    this.hook(BLOCK_AT, TC_PREF_VIP6, vip, 'ipv6');
    this.hook(['dev', uplink, 'ingress'], TC_PREF_VIP6, vip, 'ipv6');
    // fragments and other extension headers: no port where u32 reads it, the first fragment's
    // behind its Fragment header (pref 7727, guarded as pref 7707)
    const exts = [IPV6_EXT_FRAGMENT, IPV6_EXT_HOPOPTS, IPV6_EXT_ROUTING, IPV6_EXT_DSTOPTS];
    const first = exts.map((x) => ['match', 'ip6', 'protocol', String(x), '0xff']);
    const at6 = (guards: string[][]) => guards.flatMap((g) => first.map((x) => [...g, ...x]));
    const block = at6(this.podGuards('ip6'));
    if (block.length > 0) this.hook(BLOCK_AT, TC_PREF_FRAG6, block, 'ipv6');
    const up = at6(this.localGuards('ip6'));
    if (up.length > 0) this.hook(['dev', uplink, 'ingress'], TC_PREF_FRAG6, up, 'ipv6');
  }

  /** NodePorts on the uplink and the block, and the reserved SNAT ports (see the header). */
  private installNat(): void {
    const { nodeIp, snatPorts } = this.cfg;
    this.installNatOf('ip', nodeIp, snatPorts, TC_PREF_NODEPORT);
  }

  /** installNat for one family: `nodePortPref` its NodePort filters' pref. */
  private installNatOf(
    family: 'ip' | 'ip6',
    ip: string,
    snatPorts: { min: number; max: number } | undefined,
    nodePortPref: number,
  ): void {
    const up = ['dev', this.cfg.uplink, 'ingress'];
    const protocol = family === 'ip' ? 'ip' : 'ipv6';
    // replies to the SNAT ports come from endpoints to the node's own address: the endpoint
    // tables (guarded by those addresses) steer them; the ports must only never be a socket's
    if (snatPorts) this.reservePorts(snatPorts.min, snatPorts.max);
    if (this.cfg.nodePorts) {
      const matches = dportMatches(family, ip, NODEPORT_KEYS);
      // from outside, from the node's pods, and from the node itself (lo's egress, the block)
      this.hook(up, nodePortPref, matches, protocol);
      this.hook(BLOCK_AT, nodePortPref, matches, protocol);
    }
  }

  /**
   * externalIPs and LoadBalancer ingress IPs arriving on the uplink or from a pod go to the TUN
   * (the client routes them to a node). Replaces the previous set; an empty set removes them.
   * IPv6 ones (pref 7724) only with an IPv6 service CIDR: else the TUN is IPv4-only.
   */
  setExternalAddrs(addrs: readonly string[]): void {
    const v6 = this.cfg.serviceCidrV6 ? addrs.filter((a) => a.includes(':')) : [];
    const v4 = addrs.filter((a) => !a.includes(':'));
    const key = [...v4, ...v6].sort().join(',');
    if (key === this.externalKey) return;
    this.externalKey = key;
    this.hookExternal(v4, 'ip', TC_PREF_EXTERNAL);
    this.hookExternal(v6, 'ip6', TC_PREF_EXTERNAL6);
    this.replies.setFrontends([...v4, ...v6]);
  }

  private hookExternal(addrs: readonly string[], family: 'ip' | 'ip6', pref: number): void {
    const len = family === 'ip' ? 32 : 128;
    for (const at of [['dev', this.cfg.uplink, 'ingress'], BLOCK_AT]) {
      if (addrs.length === 0) {
        shTry(['tc', 'filter', 'del', ...at, 'pref', String(pref)]);
        continue;
      }
      const matches = addrs.map((a) => ['match', family, 'dst', `${a}/${len}`]);
      this.hook(at, pref, matches, family === 'ip' ? 'ip' : 'ipv6');
    }
  }

  private reservePorts(min: number, max: number): void {
    const key = 'net/ipv4/ip_local_reserved_ports';
    const prev = this.sysctl.read(key);
    const range = `${min}-${max}`;
    if (prev.split(',').includes(range)) return;
    const value = prev ? `${prev},${range}` : range;
    this.undo.add(this.sysctl.writeArgv(key, prev));
    this.sysctl.write(key, value);
    this.sysctls.push({ key, prev, value });
    this.record(`sysctl ${key}=${value} (was ${prev || '""'})`);
  }

  /**
   * Binds one pod veth's ingress to the pods' shared block (idempotent): its packets meet the
   * block's filters — to a NodePort or external IP of this node, or from an endpoint — and
   * nothing else of theirs reaches the TUN. False (logged) when the veth has a clsact qdisc
   * with filters of its own, which kubetun does not take over.
   */
  hookPod(dev: string): boolean {
    const ok = this.bindBlock(dev, 'ingress_block');
    if (ok) this.hooked.add(dev);
    return ok;
  }

  /** A clsact qdisc on `dev` (ours, added, when it has none), asked of the kernel once. */
  private ensureClsact(dev: string): void {
    if (this.clsact.has(dev)) return;
    const qdiscs = shJson<{ kind: string }>(['tc', '-j', 'qdisc', 'show', 'dev', dev]);
    if (!qdiscs.some((q) => q.kind === 'clsact')) {
      this.undo.add(['tc', 'qdisc', 'del', 'dev', dev, 'clsact']);
      this.exec(['tc', 'qdisc', 'add', 'dev', dev, 'clsact']);
    }
    this.clsact.add(dev);
  }

  /** `tc qdisc add dev <dev> <kind> 7700 clsact`, replacing an empty clsact of someone else. */
  private bindBlock(dev: string, kind: 'ingress_block' | 'egress_block'): boolean {
    type Q = { kind: string; ingress_block?: number; egress_block?: number };
    const q = shJson<Q>(['tc', '-j', 'qdisc', 'show', 'dev', dev]).find((x) => x.kind === 'clsact');
    if (q?.[kind] === POD_BLOCK) return true;
    if (q) {
      const filters = ['ingress', 'egress'].flatMap((d) =>
        shJson<unknown>(['tc', '-j', 'filter', 'show', 'dev', dev, d]),
      );
      if (filters.length > 0) {
        this.log.warn(
          { dev },
          `${dev} has a clsact qdisc with filters of its own: not bound to kubetun's tc block ${POD_BLOCK}, its Service traffic is not steered`,
        );
        return false;
      }
      shTry(['tc', 'qdisc', 'del', 'dev', dev, 'clsact']);
    }
    this.undo.add(['tc', 'qdisc', 'del', 'dev', dev, kind, String(POD_BLOCK), 'clsact']);
    this.exec(['tc', 'qdisc', 'add', 'dev', dev, kind, String(POD_BLOCK), 'clsact']);
    return true;
  }

  /** One filter per match list, all at `pref` of `at` (replacing what was there), one batch. */
  private hook(at: TcAt, pref: number, matches: string[][], protocol = 'ip'): void {
    if (at[0] === 'dev') this.ensureClsact(at[1]);
    const del = ['tc', 'filter', 'del', ...at, 'pref', String(pref)];
    shTry(del); // a stale filter of a crashed run
    this.undo.add(del);
    const action = ['action', 'mirred', 'egress', 'redirect', 'dev', this.cfg.tun];
    const filter = ['filter', 'add', ...at, 'pref', String(pref)];
    const adds = matches.map((match) => [
      ...filter,
      'protocol',
      protocol,
      'u32',
      ...match,
      ...action,
    ]);
    shBatch(['tc'], adds);
    for (const a of adds) this.record(`tc ${a.join(' ')}`);
    this.log.debug({ at: at.join(' '), pref, filters: adds.length }, 'tc redirects installed');
  }

  private exec(argv: string[]): void {
    sh(argv);
    this.record(argv.join(' '));
  }

  private setSysctls(): void {
    const tun = this.cfg.tun;
    const wanted: [string, string, boolean][] = [
      ['net/ipv4/ip_forward', '1', true],
      ['net/ipv4/conf/all/rp_filter', '0', true],
      // The TUN's own settings vanish with the device: nothing to restore.
      [`net/ipv4/conf/${tun}/rp_filter`, '0', false],
      [`net/ipv4/conf/${tun}/accept_local`, '1', false],
    ];
    if (existsSync(this.sysctl.path(`net/ipv6/conf/${tun}/disable_ipv6`))) {
      const v6 = `net/ipv6/conf/${tun}`;
      if (this.cfg.serviceCidrV6) {
        // IPv6 on with nothing to announce: the order matters (see the header). Off first: a
        // TUN made while IPv6 was on may hold a link-local address, which going off removes.
        wanted.push([`${v6}/disable_ipv6`, '1', false]);
        wanted.push(['net/ipv6/conf/all/forwarding', '1', true]);
        wanted.push([`${v6}/forwarding`, '0', false], [`${v6}/accept_ra`, '0', false]);
        wanted.push([`${v6}/addr_gen_mode`, '1', false], [`${v6}/disable_ipv6`, '0', false]);
      } else {
        // The kernel's own IPv6 chatter (router solicitations, MLD) out of the TUN would only
        // be read and dropped: keep the TUN IPv4-only.
        wanted.push([`${v6}/disable_ipv6`, '1', false]);
      }
    }
    for (const [key, value, restore] of wanted) {
      const prev = this.sysctl.read(key);
      this.sysctls.push({ key, prev, value });
      if (prev === value) continue;
      if (restore) this.undo.add(this.sysctl.writeArgv(key, prev));
      this.sysctl.write(key, value);
      this.record(`sysctl ${key}=${value} (was ${prev})`);
    }
  }
}

/**
 * Before the TUN goes up (agent.ts openTun): not multicast, no link-local address, IPv6 off. A
 * TUN that comes up with IPv6 on gets a random link-local address and, with a reader attached,
 * at once sends a router solicitation and MLD reports into the agent (seen on this kernel:
 * ICMPv6 133 and 143); and net.ipv6.conf.all.forwarding=1 (steering, IPv6) makes every
 * multicast device join all-routers, whose MLD report (or its leave, after the TUN's own
 * forwarding=0) goes out once IPv6 is on. Without IFF_MULTICAST the TUN joins no group and
 * reports none; it needs none (point-to-point, no ND). Steering turns IPv6 on later when there
 * is an IPv6 service CIDR. The settings go with the device: nothing to undo.
 */
export function quietTun(tun: string, procSysNet?: string): void {
  sh(['ip', 'link', 'set', 'dev', tun, 'multicast', 'off']);
  const sysctl = new Sysctls(procSysNet);
  const v6 = `net/ipv6/conf/${tun}`;
  if (!existsSync(sysctl.path(`${v6}/disable_ipv6`))) return; // no IPv6 in this kernel
  try {
    sysctl.write(`${v6}/addr_gen_mode`, '1');
    sysctl.write(`${v6}/disable_ipv6`, '1');
  } catch (err) {
    // a read-only /proc/sys (sysctl.ts's UserError): steering's first write, net.ipv4.ip_forward,
    // stops the agent with the one line that names it and --proc-sys-net, before any steering
    if (!(err instanceof UserError)) throw err;
  }
}

/**
 * Removes kubetun filters left by a run that died without cleaning up (and whose watchdog died
 * too): a stale redirect to a TUN that no longer exists black-holes the pod's traffic.
 */
export function sweepStaleFilters(): string[] {
  type Q = { kind: string; dev: string; ingress_block?: number; egress_block?: number };
  const qdiscs = shJson<Q>(['tc', '-j', 'qdisc', 'show']);
  const swept: string[] = [];
  for (const q of qdiscs) {
    if (q.kind !== 'clsact') continue;
    if (q.ingress_block === POD_BLOCK || q.egress_block === POD_BLOCK) {
      // the block's filters go with its last qdisc
      shTry(['tc', 'qdisc', 'del', 'dev', q.dev, 'clsact']);
      swept.push(`${q.dev}/block ${POD_BLOCK}`);
      continue;
    }
    for (const dir of ['ingress', 'egress']) {
      const filters = shJson<{ pref?: number }>(['tc', '-j', 'filter', 'show', 'dev', q.dev, dir]);
      for (const pref of KUBETUN_PREFS) {
        if (!filters.some((f) => f.pref === pref)) continue;
        shTry(['tc', 'filter', 'del', 'dev', q.dev, dir, 'pref', String(pref)]);
        swept.push(`${q.dev}/${dir} pref ${pref}`);
      }
    }
  }
  return swept;
}

function hex(n: number): string {
  return `0x${n.toString(16)}`;
}

/**
 * externalIPs and LoadBalancer ingress IPs of the services, both families (IPv6 ones in
 * canonical text: a tc match), for setExternalAddrs. IPv6 text that does not parse is left out
 * (the loader refuses the Service, naming the field).
 */
export function externalAddrs(ports: readonly ResolvedServicePort[]): string[] {
  const out = new Set<string>();
  for (const { service: s } of ports) {
    const lb = s.type === 'LoadBalancer' ? s.loadBalancerIPs : [];
    for (const ip of [...s.externalIPs, ...lb]) {
      const a = ip.includes(':') ? canonIpv6(ip) : ip;
      if (a !== null) out.add(a);
    }
  }
  return [...out].sort();
}

// Replies of translated flows, steered by the kernel's own conntrack: only the flows this node
// translated send their replies into the TUN, so a direct connection between pods — even to an
// endpoint's address and port — never crosses it, as under kube-proxy.
//
// tc sees a packet before netfilter, so it can only tell a reply by its address and port, and a
// reply of a translated flow looks exactly like one of a direct connection to the same endpoint
// (issue 15: those crossed both nodes' TUNs). The kernel's conntrack can tell them apart: every
// flow this node translated entered the kernel from the TUN, already DNATed. So
//
//   raw   (prerouting, priority raw)   packets the agent wrote, forwarded on (not to this node),
//         that need no kernel entry: replies already translated (source a frontend: a VIP, an
//         external or LB IP, a node address with a NodePort as source port) and masqueraded
//         flows (a node address with a SNAT port: tc steers their replies, steering.ts) are not
//         tracked (notrack) — an entry the kernel picked up from them would only wait out its
//         timeout (5 days for an ESTABLISHED TCP one). Packets to the node itself stay tracked:
//         they are replies of the node's own connections, whose entries a host firewall may
//         rely on (`ct state established`)
//   mark  (prerouting, priority mangle, after conntrack)
//         iifname <tun> ct state new  ct mark |= MARK     a flow the agent translated
//         ct direction reply, ct mark & MARK  meta mark |= MARK   its replies, and the ICMP
//                                                          errors related to it (RELATED)
//   ip rule add pref 7700 fwmark MARK/MARK lookup 7700;  ip route replace default dev <tun>
//         table 7700 (and the same with `ip -6` with an IPv6 service CIDR)
//
// so a marked reply is routed into the TUN. Routing happens only for destinations that are not
// local (the `local` table's rule comes first): replies to the node's own addresses — masqueraded
// flows' SNAT ports, the node's own traffic to VIPs — keep their tc filters (steering.ts). The
// kernel's defragmentation runs before conntrack, so a fragmented reply is marked whole and
// fragments again on its way into the TUN. A marked reply is forwarded into the TUN and, once
// reverse-NATed, forwarded again out of it: the datapath gives it back the TTL the first pass
// took (DatapathConfig.routedReplies), so the client sees what kube-proxy's single pass gives.
//
//   filter (forward): TCP packets conntrack calls INVALID are dropped, not from the TUN —
//         kube-proxy's own rule (KUBE-FORWARD, kubernetes#74839): an out-of-window reply of a
//         translated flow is not marked, so it would reach the client untranslated and draw an
//         RST that kills the connection
//
// MARK is one bit kube-proxy (0x4000 masquerade, 0x8000 drop) and Cilium (0x0f00) do not use.
// Everything goes into one table, `inet kubetun`, replaced in one `nft -f` transaction (a
// restart's takeover re-applies it while the dead run's keeps steering until then).
import type { Logger } from 'pino';
import { sh, shTry } from '../sh.ts';

/** the conntrack / packet mark bit of a flow the agent translated */
export const REPLY_MARK = 0x2000;
/** the routing table the marked replies look up, and its rule's pref */
export const REPLY_TABLE = 7700;
/** the nftables table (family inet: both address families in one) */
export const NFT_TABLE = 'kubetun';

/** where each install step's undo goes first (steering.ts UndoLog) */
export interface UndoSink {
  add(argv: string[]): void;
}

export interface ReplySteerConfig {
  tun: string;
  serviceCidr: string;
  serviceCidrV6?: string;
  /** the node's own IPv4 / IPv6 addresses: a source in them with these source ports is a reply */
  locals4: readonly string[];
  locals6: readonly string[];
  /** source ports of replies from the node's addresses: NodePorts and the SNAT ranges */
  replyPorts: readonly { min: number; max: number }[];
}

const hex = (n: number) => `0x${n.toString(16)}`;
const list = (xs: readonly string[]) => `{ ${xs.join(', ')} }`;

/**
 * The whole table as `nft -f` input, made and replaced in one transaction. `frontends`: the
 * externalIPs and LB ingress IPs of the Services (steering.ts externalAddrs), both families.
 */
export function replyRuleset(cfg: ReplySteerConfig, frontends: readonly string[]): string {
  const tun = JSON.stringify(cfg.tun);
  const v6 = cfg.serviceCidrV6 !== undefined;
  const fe4 = [cfg.serviceCidr, ...frontends.filter((a) => !a.includes(':'))];
  const fe6 = v6 ? [cfg.serviceCidrV6!, ...frontends.filter((a) => a.includes(':'))] : [];
  const ports = list(cfg.replyPorts.map((p) => `${p.min}-${p.max}`));
  const l4 = 'meta l4proto { tcp, udp, sctp }';
  // cheapest first: nft stops a rule at its first mismatch, and the packets the agent writes
  // most — DNATed originals, source a pod — fail the source set; only replies pay the FIB
  const fwd = 'fib daddr type != local notrack';
  const fromTun = `iifname ${tun}`;
  const raw = [
    `${fromTun} ip saddr ${list(fe4)} ${fwd}`,
    ...(fe6.length > 0 ? [`${fromTun} ip6 saddr ${list(fe6)} ${fwd}`] : []),
    ...(cfg.locals4.length > 0
      ? [`${fromTun} ip saddr ${list(cfg.locals4)} ${l4} th sport ${ports} ${fwd}`]
      : []),
    ...(v6 && cfg.locals6.length > 0
      ? [`${fromTun} ip6 saddr ${list(cfg.locals6)} ${l4} th sport ${ports} ${fwd}`]
      : []),
  ];
  const m = hex(REPLY_MARK);
  const chain = (name: string, hook: string, prio: string, rules: string[]) =>
    [
      `  chain ${name} {`,
      `    type filter hook ${hook} priority ${prio}; policy accept;`,
      ...rules.map((r) => `    ${r}`),
      '  }',
    ].join('\n');
  return [
    `table inet ${NFT_TABLE} {}`,
    `delete table inet ${NFT_TABLE}`,
    `table inet ${NFT_TABLE} {`,
    chain('raw-prerouting', 'prerouting', 'raw', raw),
    chain('mark-replies', 'prerouting', 'mangle', [
      `iifname ${tun} ct state new ct mark set ct mark or ${m}`,
      `ct direction reply ct mark and ${m} == ${m} meta mark set meta mark or ${m}`,
    ]),
    chain('drop-invalid', 'forward', 'filter', [
      `iifname != ${tun} meta l4proto tcp ct state invalid drop`,
    ]),
    '}',
    '',
  ].join('\n');
}

/** The `ip rule` of one family (`-4` / `-6`), as installed and as deleted. */
function ruleArgv(family: '-4' | '-6', verb: 'add' | 'del'): string[] {
  const mark = `${hex(REPLY_MARK)}/${hex(REPLY_MARK)}`;
  const pref = String(REPLY_TABLE);
  return ['ip', family, 'rule', verb, 'pref', pref, 'fwmark', mark, 'lookup', pref];
}

/**
 * The conntrack-marked reply steering of one node (see the header): install() once, then
 * setFrontends() as the Services' external addresses change. Every step is in the UndoLog
 * before it runs.
 */
export class ReplySteer {
  private frontends: readonly string[] = [];
  constructor(
    private readonly cfg: ReplySteerConfig,
    private readonly undo: UndoSink,
    private readonly log: Logger,
    /** notes each command run (Steering's log of its install) */
    private readonly record: (line: string) => void,
  ) {}

  install(): void {
    // Undone last: the kernel's entries of flows the agent translated go once nothing marks
    // new ones. Left, a kernel data plane after this one (kube-proxy, a `lab mode` switch)
    // would meet them: its own DNAT entry for a client port reused within their timeout
    // would have the same reply tuple and be dropped as a clash. A restart (SIGUSR2) keeps
    // them: they are how its replies go on being steered.
    this.undo.add(['conntrack', '-D', '--mark', `${hex(REPLY_MARK)}/${hex(REPLY_MARK)}`]);
    this.undo.add(['nft', 'delete', 'table', 'inet', NFT_TABLE]);
    this.apply();
    const families: ('-4' | '-6')[] = this.cfg.serviceCidrV6 ? ['-4', '-6'] : ['-4'];
    for (const f of families) {
      const table = ['table', String(REPLY_TABLE)];
      this.undo.add(['ip', f, 'route', 'flush', ...table]);
      this.exec(['ip', f, 'route', 'replace', 'default', 'dev', this.cfg.tun, ...table]);
      this.undo.add(ruleArgv(f, 'del'));
      // a restart finds the dead run's rule: the kernel refuses a second one as EEXIST
      const r = shTry(ruleArgv(f, 'add'));
      if (!r.ok && !/File exists/.test(r.err)) sh(ruleArgv(f, 'add'));
      this.record(ruleArgv(f, 'add').join(' '));
    }
  }

  /** The Services' externalIPs and LB ingress IPs (both families) as untracked sources. */
  setFrontends(addrs: readonly string[]): void {
    if (addrs.join(',') === this.frontends.join(',')) return;
    this.frontends = [...addrs];
    this.apply();
  }

  private apply(): void {
    const text = replyRuleset(this.cfg, this.frontends);
    sh(['nft', '-f', '-'], { input: text });
    this.record(`nft -f - (table inet ${NFT_TABLE}: ${this.frontends.length} external)`);
    this.log.debug({ frontends: this.frontends.length }, 'reply steering ruleset applied');
  }

  private exec(argv: string[]): void {
    sh(argv);
    this.record(argv.join(' '));
  }
}

/** What `kubetun cleanup` removes of it when no state file knew (both families). */
export function sweepReplySteer(): string[] {
  const swept: string[] = [];
  if (shTry(['nft', 'delete', 'table', 'inet', NFT_TABLE]).ok)
    swept.push(`nft table inet ${NFT_TABLE}`);
  for (const f of ['-4', '-6'] as const) {
    while (shTry(ruleArgv(f, 'del')).ok) swept.push(`ip ${f} rule pref ${REPLY_TABLE}`);
    shTry(['ip', f, 'route', 'flush', 'table', String(REPLY_TABLE)]);
  }
  return swept;
}

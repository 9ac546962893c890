// Steering: the hooks that make the kernel hand this node's pod traffic to the TUN, and the
// sysctls that let it take the written-back packets. Verified fact by fact on this kernel
// (DESIGN.md "Steering recipe"); each has a root test that switches it off and watches traffic
// fail (test/node/agent.test.ts). Exact commands, in install order:
//
//   sysctl net.ipv4.ip_forward=1                 written-back packets are forwarded kt0 -> veth
//   sysctl net.ipv4.conf.all.rp_filter=0         effective rp_filter is max(all, dev)
//   sysctl net.ipv4.conf.<tun>.rp_filter=0       a DNATed packet from pod A re-enters on the TUN
//                                                although the route back to A is A's veth
//   sysctl net.ipv4.conf.<tun>.accept_local=1    node -> VIP: the written-back packet's source
//                                                is the node's own address
//   ip route replace <service-cidr> dev <tun> src <node-ip>      node-originated traffic to VIPs
//   tc qdisc add dev <pod-veth> clsact           (only if missing; then removed again on exit)
//   tc filter add dev <pod-veth> ingress pref 7700 protocol ip u32 match u32 0 0 \
//      action mirred egress redirect dev <tun>   everything IPv4 a pod sends, so replies of local
//                                                backends are reverse-NATed (`protocol ip`: ARP
//                                                must stay on the veth)
//   tc filter add dev <uplink> ingress pref 7701 protocol ip u32 match ip dst <pod-cidr> \
//      action mirred egress redirect dev <tun>   replies of remote backends to local clients
//
// No address on the TUN: rp_filter 0 (not loose mode 2, which drops everything arriving on an
// address-less device) is the documented choice, so there is no link-local address to pick per
// node and nothing to collide with pod or node addresses.
//
// Every change is recorded as an undo argv in an UndoLog *before* the agent moves on, so that a
// clean exit, the fail-open watchdog and a restart after a crash all remove exactly what was
// installed. Filter prefs are kubetun's own: a restart deletes stale filters by pref first.
import { existsSync } from 'node:fs';
import type { Logger } from 'pino';
import { run, runJson, tryRun } from './sh.ts';
import { sysctlPath, sysctlRead, sysctlWrite, sysctlWriteArgv } from './sysctl.ts';

export const TC_PREF_POD = 7700;
export const TC_PREF_UPLINK = 7701;

export interface SteeringConfig {
  tun: string;
  uplink: string;
  nodeIp: string;
  podCidr: string;
  serviceCidr: string;
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

  /** Runs all steps, last first; returns the failures (things already gone are expected). */
  unwind(): string[] {
    const failed: string[] = [];
    while (this.steps.length > 0) {
      const r = tryRun(this.steps.pop()!);
      if (!r.ok) failed.push(r.err);
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
  /** the commands run, for the "steering installed" log line */
  readonly applied: string[] = [];
  private readonly cfg: SteeringConfig;
  private readonly undo: UndoLog;
  private readonly log: Logger;

  constructor(cfg: SteeringConfig, undo: UndoLog, log: Logger) {
    this.cfg = cfg;
    this.undo = undo;
    this.log = log;
  }

  install(podIfaces: readonly string[]): void {
    this.setSysctls();
    const { serviceCidr, tun, nodeIp } = this.cfg;
    this.undo.add(['ip', 'route', 'del', serviceCidr, 'dev', tun]);
    this.exec(['ip', 'route', 'replace', serviceCidr, 'dev', tun, 'src', nodeIp]);
    for (const dev of podIfaces) this.hookPod(dev);
    this.hook(this.cfg.uplink, TC_PREF_UPLINK, ['match', 'ip', 'dst', this.cfg.podCidr]);
  }

  /** Redirects everything IPv4 from one pod veth into the TUN (idempotent). */
  hookPod(dev: string): void {
    this.hook(dev, TC_PREF_POD, ['match', 'u32', '0', '0']);
    this.hooked.add(dev);
  }

  private hook(dev: string, pref: number, match: string[]): void {
    const qdiscs = runJson<{ kind: string }>(['tc', '-j', 'qdisc', 'show', 'dev', dev]);
    if (!qdiscs.some((q) => q.kind === 'clsact')) {
      this.undo.add(['tc', 'qdisc', 'del', 'dev', dev, 'clsact']);
      this.exec(['tc', 'qdisc', 'add', 'dev', dev, 'clsact']);
    }
    const del = ['tc', 'filter', 'del', 'dev', dev, 'ingress', 'pref', String(pref)];
    tryRun(del); // a stale filter of a crashed run
    this.undo.add(del);
    const action = ['action', 'mirred', 'egress', 'redirect', 'dev', this.cfg.tun];
    const filter = ['tc', 'filter', 'add', 'dev', dev, 'ingress', 'pref', String(pref)];
    this.exec([...filter, 'protocol', 'ip', 'u32', ...match, ...action]);
    this.log.debug({ dev, pref, match: match.join(' ') }, 'tc redirect installed');
  }

  private exec(argv: string[]): void {
    run(argv);
    this.applied.push(argv.join(' '));
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
    // The kernel's own IPv6 chatter (router solicitations, MLD) out of the TUN would only be
    // read and dropped as DROP_BAD_VERSION: keep the TUN IPv4-only.
    if (existsSync(sysctlPath(`net/ipv6/conf/${tun}/disable_ipv6`))) {
      wanted.push([`net/ipv6/conf/${tun}/disable_ipv6`, '1', false]);
    }
    for (const [key, value, restore] of wanted) {
      const prev = sysctlRead(key);
      this.sysctls.push({ key, prev, value });
      if (prev === value) continue;
      if (restore) this.undo.add(sysctlWriteArgv(key, prev));
      sysctlWrite(key, value);
      this.applied.push(`sysctl ${key}=${value} (was ${prev})`);
    }
  }
}

/**
 * Removes kubetun filters left by a run that died without cleaning up (and whose watchdog died
 * too): a stale redirect to a TUN that no longer exists black-holes the pod's traffic.
 */
export function sweepStaleFilters(): string[] {
  const qdiscs = runJson<{ kind: string; dev: string }>(['tc', '-j', 'qdisc', 'show']);
  const swept: string[] = [];
  for (const q of qdiscs) {
    if (q.kind !== 'clsact') continue;
    const filters = runJson<{ pref?: number }>([
      'tc',
      '-j',
      'filter',
      'show',
      'dev',
      q.dev,
      'ingress',
    ]);
    for (const pref of [TC_PREF_POD, TC_PREF_UPLINK]) {
      if (!filters.some((f) => f.pref === pref)) continue;
      tryRun(['tc', 'filter', 'del', 'dev', q.dev, 'ingress', 'pref', String(pref)]);
      swept.push(`${q.dev}/pref ${pref}`);
    }
  }
  return swept;
}

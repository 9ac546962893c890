// Replies of translated flows to the node itself, steered by their source: every endpoint's
// (address, protocol, port) — and ICMP errors (types 3 and 11) from every endpoint address — as
// entries of a tc u32 hash table, guarded by the node's own addresses (steering.ts). Replies to
// anyone else are routed by the kernel's conntrack (steer-replies.ts); replies to the node are
// delivered locally, never routed, so they need this table: the node's own flows to VIPs and the
// SNAT ports of masqueraded flows. Pods on a bridge add the pod CIDR to the guards: a local
// backend's reply to a local client is bridged, never routed.
//
//   tc filter add <at> pref P protocol ip handle 71: u32 divisor 256
//   tc filter add <at> pref P protocol ip u32 <guard> \
//      hashkey mask 0x000000ff at 12 link 71:        bucket = last octet of the source address
//   tc filter add <at> pref P protocol ip handle 71:<bkt>:<n> u32 ht 71:<bkt>: \
//      match ip src <ep>/32 match ip protocol <p> 0xff match u8 0x05 0x0f at 0 \
//      match ip sport <port> 0xffff action mirred egress redirect dev <tun>
//
// <at> is the pods' shared block (one table for every pod veth) or the uplink, each with one
// root filter per guard (`match ip dst <node address>/32 ... link 71:`). A packet
// costs one hash and a walk of its bucket — endpoints/256 entries, independent of the number of
// Services — and the table follows the Services incrementally: each sync adds the new entries
// and deletes the gone ones in one `tc -batch` (endpointSteerSync in agent.ts runs it before the
// maps are written, so a new endpoint's first reply is already steered).
//
// IPv6 endpoints (a Service's IPv6 EndpointSlices) have a table of their own on the block
// (steering.ts, with --service-cidr-v6): another pref pair and hash table ids 73:/74: (u32
// handles are shared by every pref of a block), the same shape, `protocol ipv6`:
//
//   tc filter add <at> pref P protocol ipv6 u32 <guard> \
//      hashkey mask 0x000000ff at 20 link 73:        bucket = last byte of the source address
//   tc filter add <at> pref P protocol ipv6 handle 73:<bkt>:<n> u32 ht 73:<bkt>: \
//      match ip6 src <ep>/128 match ip6 protocol <p> 0xff match ip6 sport <port> 0xffff ...
//
// and ICMPv6 errors (types 1, 2, 3: `match u8 <type> 0xff at 40`) from every endpoint address.
// u32 reads the next header and the port at the fixed offsets of a bare IPv6 header: a packet
// with extension headers is not matched here; steering.ts pref 7727 takes those (to the node
// itself), as pref 7707 takes IPv4 packets with options. Neighbour Discovery and MLD from a pod
// (ICMPv6 types 130-143) never match.
//
// A table is built whole in one of two prefs and the other is deleted after (rebuild): a
// taking-over agent, which does not know the handles of the dead run's entries, builds its own
// next to them and then removes theirs — replies are steered throughout. The build never holds
// the event loop: its lines are made a step at a time and every tc runs in a child nobody waits
// on (at 10k Services a table is 90k entries: the synchronous build held the agent's thread ~7 s
// at its start, and at a takeover while it was already forwarding — issue 18).
import type { Logger } from 'pino';
import type { ProxierOptions } from '../control/proxier.ts';
import { CHECKOUT_STEP, inSteps } from '../control/turns.ts';
import type { ResolvedServicePort } from '../model.ts';
import { ipv6Groups } from '../wire/addr6.ts';
import {
  ICMPV6_DEST_UNREACH,
  ICMPV6_PACKET_TOO_BIG,
  ICMPV6_TIME_EXCEEDED,
} from '../wire/icmpv6.ts';
import { IPPROTO_ICMP, IPPROTO_ICMPV6, PROTO_BY_K8S_NAME } from '../wire/proto.ts';
import { shBatchAsync, shHasOutput } from '../sh.ts';

/**
 * The hash table's id per pref of the pair: u32 handles are shared by every pref of one qdisc
 * or block, so the two must differ (and the link goes into this pref's root: no `ht 800::`,
 * which names whichever pref took 800 first).
 */
const HT_IDS = ['71', '72'];
/** the IPv6 tables' ids (same block, other prefs: ids of their own) */
const HT_IDS6 = ['73', '74'];
const BUCKETS = 256;
/** Keys a rebuild turns into lines between two turns of the event loop (turns.ts). */
const REBUILD_STEP = 1024;
const MAX_ITEM = 0xfff;
/** 32-bit words of one bucket's used items (0..MAX_ITEM) */
const ITEM_WORDS = (MAX_ITEM + 1) / 32;
/** ICMP errors about a translated flow: destination unreachable, time exceeded */
export const ICMP_ERRORS = [3, 11];
/** ICMPv6 errors about a translated flow: destination unreachable, packet too big, time exceeded */
export const ICMPV6_ERRORS = [ICMPV6_DEST_UNREACH, ICMPV6_PACKET_TOO_BIG, ICMPV6_TIME_EXCEEDED];
/** IPv4 header length 5 words: u32's fixed-offset port matches are only right then. */
export const IHL5 = ['match', 'u8', '0x05', '0x0f', 'at', '0'];

/** Where a table lives: `['block', '7700']` or `['dev', <uplink>, 'ingress']`. */
export type TcAt = readonly string[];

/**
 * "ip/proto/port" (port = the ICMP type for IPPROTO_ICMP and IPPROTO_ICMPV6) of every endpoint
 * of the ports, IPv4 and IPv6 (`endpoints6`, the IPv6 EndpointSlices'; an IPv6 key's address
 * has colons: isKey6).
 */
export function endpointKeys(rsp: ResolvedServicePort): string[] {
  const proto = PROTO_BY_K8S_NAME[rsp.port.protocol];
  if (proto === undefined) return [];
  const out: string[] = [];
  for (const ep of [...rsp.endpoints, ...(rsp.endpoints6 ?? [])]) {
    // joined, not a template: a template of 13 characters or more is a rope, and the Maps
    // that key on it keep the rope's head beside its flattened text (~32 B more per key)
    out.push([ep.ip, proto, ep.port].join('/'));
    if (isKey6(ep.ip))
      for (const t of ICMPV6_ERRORS) out.push([ep.ip, IPPROTO_ICMPV6, t].join('/'));
    else for (const t of ICMP_ERRORS) out.push([ep.ip, IPPROTO_ICMP, t].join('/'));
  }
  return out;
}

/** An IPv6 endpoint's key (or address). */
export function isKey6(key: string): boolean {
  return key.includes(':');
}

/** The u32 matches of one key's packets (`protocol ip` or, for an IPv6 key, `protocol ipv6`). */
export function keyMatch(key: string): string[] {
  const [ip, proto, port] = key.split('/');
  if (isKey6(ip)) {
    const m = ['match', 'ip6', 'src', `${ip}/128`, 'match', 'ip6', 'protocol', proto, '0xff'];
    if (Number(proto) === IPPROTO_ICMPV6) return [...m, 'match', 'u8', port, '0xff', 'at', '40'];
    return [...m, 'match', 'ip6', 'sport', port, '0xffff'];
  }
  const m = ['match', 'ip', 'src', `${ip}/32`, 'match', 'ip', 'protocol', proto, '0xff', ...IHL5];
  if (Number(proto) === IPPROTO_ICMP) return [...m, 'match', 'u8', port, '0xff', 'at', '20'];
  return [...m, 'match', 'ip', 'sport', port, '0xffff'];
}

/** A key's bucket: the last byte of its address (what the table's hashkey reads). */
function keyBucket(key: string): number {
  const ip = key.split('/')[0];
  if (!isKey6(ip)) return Number(ip.split('.')[3]);
  const g = ipv6Groups(ip);
  return g ? g[7] & 0xff : 0;
}

/**
 * One endpoint table at one place, two prefs [a, b] (rebuild alternates). Keeps the handle of
 * every entry it installed; never throws into the control plane (a failed batch is logged and
 * the next rebuild starts clean).
 */
export class EndpointTable {
  private pref: number;
  private readonly ids: readonly string[];
  private ht: string;
  private installed = false;
  /**
   * each entry's place, bucket << 12 | item (its handle is `<ht>:<bucket>:<item>`, hex): a
   * number, not the handle's text — at 10k Services a table holds 90k entries (issue 18's RSS)
   */
  private readonly handles = new Map<string, number>();
  /** the items in use, a bit each, ITEM_WORDS words per bucket (a Set per bucket was ~2.5 MiB) */
  private readonly used = new Uint32Array(BUCKETS * ITEM_WORDS);

  constructor(
    private readonly at: TcAt,
    private readonly prefs: readonly [number, number],
    /** one match list per destination the table serves (each a root filter linking to it) */
    private readonly guards: readonly (readonly string[])[],
    private readonly tun: string,
    private readonly log: Logger,
    /** 6: the IPv6 endpoints' table (`protocol ipv6`, ids 73/74); 4: the IPv4 one */
    private readonly family: 4 | 6 = 4,
  ) {
    this.pref = prefs[0];
    this.ids = family === 6 ? HT_IDS6 : HT_IDS;
    this.ht = this.ids[0];
  }

  /** whether a key is this table's family */
  private mine(key: string): boolean {
    return isKey6(key) === (this.family === 6);
  }

  /** the undo steps: both prefs deleted (whichever holds the table) */
  undoSteps(): string[][] {
    return this.prefs.map((p) => ['tc', 'filter', 'del', ...this.at, 'pref', String(p)]);
  }

  /**
   * Builds the table with `keys` in the pref not in use, then deletes the other one, without
   * holding the event loop (see the header). Until it is in, change() does nothing: the owner
   * applies what changed meanwhile (EndpointSteer.rebuild).
   */
  async rebuild(keys: readonly string[], step = REBUILD_STEP): Promise<void> {
    this.installed = false;
    const [a, b] = this.prefs;
    const show = (p: number) =>
      shHasOutput(['tc', 'filter', 'show', ...this.at, 'pref', String(p)]);
    const [busyA, busyB] = await Promise.all([show(a), show(b)]);
    const next = busyA && !busyB ? b : a;
    const busyOld = next === a ? busyB : busyA;
    this.handles.clear();
    this.used.fill(0);
    this.pref = next;
    this.ht = this.ids[next === a ? 0 : 1];
    await this.delPref(next);
    const hashkey = ['hashkey', 'mask', '0x000000ff', 'at', this.family === 6 ? '20' : '12'];
    const lines = [
      this.filter('add', ['handle', `${this.ht}:`, 'u32', 'divisor', String(BUCKETS)]),
      ...this.guards.map((g) =>
        this.filter('add', ['u32', ...g, ...hashkey, 'link', `${this.ht}:`]),
      ),
    ];
    await inSteps(keys, step, (k) => {
      if (this.mine(k)) lines.push(this.addLine(k));
    });
    this.installed = await this.batch(lines);
    if (busyOld) await this.delPref(next === a ? b : a);
  }

  /** Every filter of one pref of this place deleted (none there: nothing to do). */
  private async delPref(pref: number): Promise<void> {
    await shBatchAsync(['tc'], [['filter', 'del', ...this.at, 'pref', String(pref)]]);
  }

  /**
   * Adds and deletes entries (a no-op before the table is built), `tc -batch` in a child the
   * event loop does not wait on: the packet loop shares the thread (issue 18's stall test).
   */
  async change(add: readonly string[], del: readonly string[]): Promise<void> {
    if (!this.installed || (add.length === 0 && del.length === 0)) return;
    const lines: string[] = [];
    for (const k of add) if (this.mine(k) && !this.handles.has(k)) lines.push(this.addLine(k));
    for (const k of del) {
      const place = this.handles.get(k);
      if (place === undefined) continue;
      this.handles.delete(k);
      const item = place & MAX_ITEM;
      this.used[(place >> 12) * ITEM_WORDS + (item >> 5)] &= ~(1 << (item & 31));
      lines.push(this.filter('del', ['handle', this.handle(place >> 12, place & MAX_ITEM), 'u32']));
    }
    if (lines.length === 0) return;
    const failed = await shBatchAsync(['tc'], lines);
    if (failed.length > 0) this.warn(failed);
    if (failed.length > 0) this.installed = false;
  }

  get size(): number {
    return this.handles.size;
  }

  /** One entry's line, made as one string: a table's build makes tens of thousands. */
  private addLine(key: string): string {
    const bkt = keyBucket(key);
    const item = this.takeItem(bkt);
    this.handles.set(key, (bkt << 12) | item);
    const match = keyMatch(key).join(' ');
    const ht = `${this.ht}:${bkt.toString(16)}:`;
    return `${this.filter('add')} handle ${this.handle(bkt, item)} u32 ht ${ht} ${match} action mirred egress redirect dev ${this.tun}`;
  }

  /** The bucket's lowest free item from 1 (all taken: MAX_ITEM again), marked used. */
  private takeItem(bkt: number): number {
    const base = bkt * ITEM_WORDS;
    for (let w = 0; w < ITEM_WORDS; w++) {
      // item 0 is not a u32 handle's: its bit is never free
      const taken = this.used[base + w] | (w === 0 ? 1 : 0);
      if (taken === -1) continue;
      const bit = 31 - Math.clz32(~taken & (taken + 1)); // the lowest clear bit
      const item = (w << 5) | bit;
      if (item > MAX_ITEM) break;
      this.used[base + w] = taken | (1 << bit);
      return item;
    }
    return MAX_ITEM;
  }

  /** The u32 handle of the entry at (bucket, item) of this table. */
  private handle(bkt: number, item: number): string {
    return `${this.ht}:${bkt.toString(16)}:${item.toString(16)}`;
  }

  /** `filter <verb> <at> pref <pref> protocol ip|ipv6`, and `rest` after it. */
  private filter(verb: string, rest: readonly string[] = []): string {
    const protocol = this.family === 6 ? 'ipv6' : 'ip';
    const head = `filter ${verb} ${this.at.join(' ')} pref ${this.pref} protocol ${protocol}`;
    return rest.length === 0 ? head : `${head} ${rest.join(' ')}`;
  }

  /** Runs tc lines in one process; false (logged, each failed line) when any failed. */
  private async batch(lines: string[]): Promise<boolean> {
    const failed = await shBatchAsync(['tc'], lines);
    if (failed.length === 0) return true;
    this.warn(failed);
    return false;
  }

  private warn(failed: string[]): void {
    this.log.warn(
      { at: this.at.join(' '), failed },
      'endpoint steering not fully applied; rebuilt on the next full sync',
    );
  }
}

type ProgramRequest = Parameters<ProxierOptions['program']>[0];

/**
 * The endpoint keys of every service port, counted (two Services may share an endpoint), and
 * the tables that steer them. `sync` runs in the Proxier's program, before the maps change.
 */
export class EndpointSteer {
  private readonly bySpn = new Map<string, string[]>();
  private readonly count = new Map<string, number>();
  /** syncs applied so far (a rebuild catches up only when one came while it built) */
  private applied = 0;
  readonly tables: EndpointTable[] = [];

  /**
   * Follows one sync — a full one recounts everything, a partial one only what changed — `step`
   * service ports at a time with a turn of the event loop between two (every port of a 10k-Service node
   * at once, or the 5,000 a removal changes, held the packet loop: issue 18), then changes the
   * tables without waiting on tc (EndpointTable.change).
   */
  async sync({ full, changes, tracker }: ProgramRequest, step = CHECKOUT_STEP): Promise<void> {
    const next = new Map<string, string[]>();
    if (full) {
      const put = (rsp: ResolvedServicePort) => next.set(rsp.servicePortName, endpointKeys(rsp));
      await inSteps(tracker.resolveAll(), step, put);
    } else {
      const spns = [...changes.changedServicePorts, ...changes.deletedServicePorts];
      await inSteps(spns, step, (spn) => {
        const rsp = tracker.resolve(spn);
        next.set(spn, rsp ? endpointKeys(rsp) : []);
      });
    }
    await this.apply(next, full);
  }

  /** The counts and tables after `next` (a full one: every port absent from it is gone). */
  private async apply(next: Map<string, string[]>, full: boolean): Promise<void> {
    if (full) for (const spn of this.bySpn.keys()) if (!next.has(spn)) next.set(spn, []);
    const add: string[] = [];
    const del: string[] = [];
    for (const [spn, keys] of next) {
      // unchanged (a full sync's nearly every port): its counted keys stay, not a copy of them
      if (sameKeys(this.bySpn.get(spn), keys)) continue;
      for (const k of keys) if (this.bump(k, 1) === 1) add.push(k);
      for (const k of this.bySpn.get(spn) ?? []) if (this.bump(k, -1) === 0) del.push(k);
      if (keys.length > 0) this.bySpn.set(spn, keys);
      else this.bySpn.delete(spn);
    }
    this.applied++;
    // a key both added and deleted in this sync (moved between service ports) stays
    const gone = del.filter((k) => this.count.has(k) === false);
    await Promise.all(this.tables.map((t) => t.change(add, gone)));
  }

  /** Every key now steered, for a (re)build. */
  keys(): string[] {
    return [...this.count.keys()];
  }

  /**
   * Builds (or rebuilds beside the old one) every table with the current keys, off the event
   * loop (EndpointTable.rebuild); then what the syncs changed meanwhile.
   */
  async rebuild(): Promise<void> {
    const keys = this.keys();
    const applied = this.applied;
    await Promise.all(this.tables.map((t) => t.rebuild(keys)));
    if (this.applied === applied) return; // no sync meanwhile: nothing to catch up on
    const was = new Set(keys);
    const add = this.keys().filter((k) => !was.has(k));
    const gone = keys.filter((k) => !this.count.has(k));
    await Promise.all(this.tables.map((t) => t.change(add, gone)));
  }

  private bump(k: string, d: number): number {
    const n = (this.count.get(k) ?? 0) + d;
    if (n <= 0) this.count.delete(k);
    else this.count.set(k, n);
    return n;
  }
}

/** The same keys in the same order (a port whose endpoints did not change). */
function sameKeys(a: readonly string[] | undefined, b: readonly string[]): boolean {
  if (a === undefined) return b.length === 0;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

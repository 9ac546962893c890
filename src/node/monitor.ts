// The agent's side of `kubetun monitor` and `kubetun tap`: each stream is one subscriber of the
// datapath's event ring (src/datapath/state/events.ts) with its filter, and a timer drains the
// ring into the streams' sockets as JSON lines (MonitorEvent, src/inspect/monitor.ts).
//
// The agent never waits for a reader: the ring overwrites what nobody read in time, and a
// socket whose unsent output passes HIGH_WATER gets no more lines until it drains — what it
// misses either way is counted (`lost` in every line, a status line each second, and the
// kubetun_monitor_lost_events_total metric). A client that goes (Ctrl-C, EPIPE, a crash)
// unsubscribes; with the last one gone the ring is off and dpProcess back on its one branch.
import type net from 'node:net';
import type { Datapath } from '../datapath/state/datapath.ts';
import {
  EV_A_DADDR,
  EV_A_PORTS,
  EV_A_SADDR,
  EV_BACKEND,
  EV_CAP_AFTER,
  EV_CAP_BEFORE,
  EV_CT,
  EV_DADDR,
  EV_F_IPV6,
  EV_FLAGS,
  EV_LEN,
  EV_MASK,
  EV_PORTS,
  EV_REASON,
  EV_SADDR,
  EV_SERVICE,
  EV_WORDS,
  type EventFilter,
  FILTER_DROPS,
  FILTER_TRACES,
  RingCursor,
  STAGE_NAMES,
} from '../datapath/state/events.ts';
import { REASON_NAMES } from '../datapath/state/reasons.ts';
import { V_DROP } from '../datapath/state/verdict.ts';
import type { MonitorEvent, MonitorFilterReq, MonitorStatus } from '../inspect/monitor.ts';
import { ipv4ToU32, u32ToIpv4 } from '../wire/addr.ts';
import { wordsToIpv6 } from '../wire/addr6.ts';
import { protoName } from '../wire/proto.ts';
import { CtlStream } from './ctl.ts';

/** How often the ring is drained while a stream is open. */
const DRAIN_MS = 20;
/** Unsent bytes past which a stream's socket gets no more events until it drains. */
const HIGH_WATER = 1 << 20;
/** The most events one drain hands one stream (the rest wait for the next tick, or are lost). */
const DRAIN_MAX = 8192;
const STATUS_MS = 1000;
const VERDICTS = ['PASS', 'TX', 'REPLY', 'DROP'] as const;

interface Stream {
  readonly k: number;
  readonly cursor: RingCursor;
  readonly sock: net.Socket;
  readonly capture: boolean;
  /** events the socket could not take (its reader fell behind) */
  skipped: number;
  events: number;
  lastStatus: number;
}

/** ServicePortName of a revNat id, as the agent's loaded ports name it (inspect.ts). */
export type ServiceNamer = (revNat: number, proto: number) => string | undefined;

export class MonitorHub {
  private readonly streams = new Set<Stream>();
  private timer: NodeJS.Timeout | undefined;
  private readonly words = new Int32Array(EV_WORDS);
  /** events lost by streams already closed (the metric adds the open ones) */
  private lostClosed = 0;

  /** names a flow's service in the events (the agent sets it once its ports are known) */
  nameOf: ServiceNamer = () => undefined;

  constructor(
    private readonly dp: Datapath,
    private readonly node: string,
  ) {}

  /** Events lost so far by every stream, open or closed (ring overwrites + slow readers). */
  get lost(): number {
    let n = this.lostClosed;
    for (const s of this.streams) n += s.cursor.lost + s.skipped;
    return n;
  }

  /** Events the ring has taken since the agent started (u32: wraps at 2^32). */
  get emitted(): number {
    return this.dp.events.head;
  }

  get open(): number {
    return this.streams.size;
  }

  /** The ctl answer to {"cmd":"monitor"}: a stream, or an error naming what is wrong. */
  request(req: Record<string, unknown>): CtlStream | { error: string } {
    let filter: EventFilter;
    try {
      filter = ringFilter((req.filter ?? {}) as MonitorFilterReq);
    } catch (err) {
      return { error: (err as Error).message };
    }
    const capture = req.capture === true;
    const ring = this.dp.events;
    const k = ring.subscribe(filter, capture);
    if (k < 0) return { error: 'every monitor slot is taken (8 streams at once); close one' };
    const cursor = new RingCursor(ring);
    return new CtlStream((sock) => this.attach(k, cursor, sock, capture));
  }

  private attach(k: number, cursor: RingCursor, sock: net.Socket, capture: boolean): void {
    const s: Stream = { k, cursor, sock, capture, skipped: 0, events: 0, lastStatus: Date.now() };
    this.streams.add(s);
    const done = () => this.close(s);
    sock.once('close', done);
    sock.once('error', done);
    sock.once('end', done);
    this.timer ??= setInterval(() => this.drain(), DRAIN_MS);
    this.timer.unref();
    this.status(s);
  }

  private close(s: Stream): void {
    if (!this.streams.delete(s)) return;
    this.dp.events.unsubscribe(s.k);
    this.lostClosed += s.cursor.lost + s.skipped;
    if (!s.sock.destroyed) s.sock.destroy();
    if (this.streams.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** Stops every stream (agent shutdown): each client gets a last status line. */
  stopAll(): void {
    for (const s of [...this.streams]) {
      this.drainOne(s);
      this.status(s);
      s.sock.end();
      this.close(s);
    }
  }

  private drain(): void {
    for (const s of this.streams) this.drainOne(s);
  }

  private drainOne(s: Stream): void {
    const bit = 1 << s.k;
    const lines: string[] = [];
    const full = s.sock.writableLength > HIGH_WATER;
    s.cursor.drain(
      this.words,
      (seq, t, w) => {
        if ((w[EV_MASK] & bit) === 0) return;
        if (full) {
          s.skipped++;
          return;
        }
        s.events++;
        lines.push(JSON.stringify(this.event(s, seq, t, w)));
      },
      DRAIN_MAX,
    );
    if (lines.length > 0 && !s.sock.destroyed) s.sock.write(`${lines.join('\n')}\n`);
    if (Date.now() - s.lastStatus >= STATUS_MS) this.status(s);
  }

  private status(s: Stream): void {
    s.lastStatus = Date.now();
    const st: MonitorStatus = { type: 'status', lost: s.cursor.lost + s.skipped, events: s.events };
    if (!s.sock.destroyed && !s.sock.writableEnded) s.sock.write(`${JSON.stringify(st)}\n`);
  }

  /** One ring event as the JSON line the CLI reads (slow world: allocates freely). */
  private event(s: Stream, seq: number, time: number, w: Int32Array): MonitorEvent {
    const flags = w[EV_FLAGS];
    const verdict = flags & 0xff;
    const protoNum = (flags >>> 16) & 0xff;
    const stagesBits = (flags >>> 8) & 0xff;
    const backendId = w[EV_BACKEND] >>> 0;
    const serviceId = w[EV_SERVICE];
    const e: MonitorEvent = {
      type: verdict === V_DROP ? 'drop' : 'trace',
      seq,
      time,
      node: this.node,
      reason: REASON_NAMES[w[EV_REASON]] ?? `reason-${w[EV_REASON]}`,
      verdict: VERDICTS[verdict] ?? 'PASS',
      proto: protoName(protoNum).toLowerCase(),
      stages: STAGE_NAMES.filter((_, i) => (stagesBits & (1 << i)) !== 0),
      before: tuple(w[EV_SADDR], w[EV_DADDR], w[EV_PORTS], flags),
      after: tuple(w[EV_A_SADDR], w[EV_A_DADDR], w[EV_A_PORTS], flags),
      backendId,
      ct: w[EV_CT],
      ctNew: ((flags >>> 24) & 1) === 1,
      serviceId,
      len: w[EV_LEN],
      lost: s.cursor.lost + s.skipped,
    };
    const v6 = (flags & EV_F_IPV6) !== 0;
    const be = v6 ? this.dp.be6 : this.dp.be;
    const b = backendId ? be.lookup(backendId) : -1;
    if (b >= 0) e.backend = v6 ? backend6(be, b) : `${u32ToIpv4(be.addr(b))}:${be.port(b)}`;
    const name = serviceId ? this.nameOf(serviceId, protoNum) : undefined;
    if (name) e.service = name;
    if (s.capture) {
      const [before, after] = this.dp.events.capturedBytes(seq, w[EV_CAP_BEFORE], w[EV_CAP_AFTER]);
      e.pkt = { in: Buffer.from(before).toString('base64'), snap: this.dp.events.snap };
      if (verdict !== V_DROP) e.pkt.out = Buffer.from(after).toString('base64');
    }
    return e;
  }
}

/**
 * The tuple of an event. The ring keeps one word per address: for IPv6 its low 32 bits, shown
 * as "…:xxxx:xxxx" so no one mistakes them for the whole address (the backend field is whole).
 */
function tuple(s: number, d: number, ports: number, flags: number) {
  const addr = (flags & EV_F_IPV6) !== 0 ? low32v6 : (a: number) => u32ToIpv4(a >>> 0);
  return { src: addr(s), dst: addr(d), sport: ports >>> 16, dport: ports & 0xffff };
}

function low32v6(a: number): string {
  return `…:${((a >>> 16) & 0xffff).toString(16)}:${(a & 0xffff).toString(16)}`;
}

function backend6(be: Datapath['be6'], b: number): string {
  const w = [0, 1, 2, 3].map((k) => be.addrWord(b, k));
  return `[${wordsToIpv6(w)}]:${be.port(b)}`;
}

/** The CLI's filter (names, dotted addresses) in the ring's numbers; throws naming the field. */
export function ringFilter(f: MonitorFilterReq): EventFilter {
  const out: EventFilter = {};
  if (f.type === 'drop') out.type = FILTER_DROPS;
  else if (f.type === 'trace') out.type = FILTER_TRACES;
  else if (f.type !== undefined)
    throw new Error(`filter.type: ${JSON.stringify(f.type)}: drop or trace`);
  if (f.proto !== undefined) out.proto = Number(f.proto);
  if (f.addr !== undefined) out.addr = ipv4ToU32(String(f.addr)) | 0;
  if (f.port !== undefined) out.port = Number(f.port);
  if (f.reasons !== undefined) {
    out.reasons = f.reasons.map((n) => {
      const r = REASON_NAMES.indexOf(n);
      if (r < 0) throw new Error(`filter.reasons: ${JSON.stringify(n)} is not a reason`);
      return r;
    });
  }
  return out;
}

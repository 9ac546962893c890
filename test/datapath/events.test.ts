// The event ring (state/events.ts) and the observed path of dpProcess (stages/observe.ts):
// wraparound and loss counting, filters applied before emission, what one event says about a
// DNAT, a drop and a reject, the captured bytes before/after, and that nothing is emitted (nor
// the program's result changed) with nobody listening.
import { describe, expect, it } from 'vitest';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import {
  EV_A_DADDR,
  EV_A_PORTS,
  EV_BACKEND,
  EV_CAP_AFTER,
  EV_CAP_BEFORE,
  EV_CT,
  EV_DADDR,
  EV_FLAGS,
  EV_MASK,
  EV_PORTS,
  EV_REASON,
  EV_SADDR,
  EV_SERVICE,
  EV_WORDS,
  EventRing,
  FILTER_DROPS,
  FILTER_TRACES,
  RingCursor,
  ST_CT,
  ST_LB,
  SUBSCRIBERS_MAX,
} from '../../src/datapath/state/events.ts';
import {
  DROP_ECHO_TO_VIP,
  REPLY_REJECT_UNKNOWN_PORT,
  TX_DNAT,
  TX_DNAT_NEW,
  TX_REVNAT,
} from '../../src/datapath/state/reasons.ts';
import { V_DROP, V_TX } from '../../src/datapath/state/verdict.ts';
import {
  ACK,
  buildIcmpEcho,
  buildTcp,
  endpoint,
  ip,
  loaderOf,
  run,
  SYN,
  service,
  servicePort,
  TCP,
} from './harness.ts';

const VIP = '10.96.0.10';
const CLIENT = '10.244.1.10';
const BE = '10.244.2.5';

function emitN(ring: EventRing, n: number, reason = 2): void {
  for (let i = 0; i < n; i++) {
    const m = ring.match(reason, 0, 6, i, 2, 0x00500050, i, 3, 0x00500050);
    if (m !== 0) ring.emit(m, i, reason, 0, i, 2, 0, i, 3, 0, 0, -1, 0, 40, 0, 0);
  }
}

function drainAll(c: RingCursor): number[] {
  const w = new Int32Array(EV_WORDS);
  const seen: number[] = [];
  c.drain(w, (_s, _t, ev) => seen.push(ev[EV_SADDR]));
  return seen;
}

describe('EventRing', () => {
  it('keeps the newest `capacity` events and counts the overwritten ones as lost', () => {
    const ring = new EventRing({ capacity: 8, snap: 0 });
    ring.subscribe();
    const c = new RingCursor(ring);
    emitN(ring, 5);
    expect(drainAll(c)).toEqual([0, 1, 2, 3, 4]);
    expect(c.lost).toBe(0);
    emitN(ring, 20); // saddr 0..19 again; the ring holds the last 8
    expect(drainAll(c)).toEqual([12, 13, 14, 15, 16, 17, 18, 19]);
    expect(c.lost).toBe(12);
    expect(ring.head).toBe(25);
  });

  it('is off with no subscriber and on with one; a full set of subscribers refuses the next', () => {
    const ring = new EventRing({ capacity: 4, snap: 0 });
    expect(ring.on).toBe(0);
    const ks = Array.from({ length: SUBSCRIBERS_MAX }, () => ring.subscribe());
    expect(ring.on).toBe(1);
    expect(ring.subscribe()).toBe(-1);
    for (const k of ks) ring.unsubscribe(k);
    expect([ring.on, ring.subscribers]).toEqual([0, 0]);
  });

  it('filters before emission: an event nobody wants takes no slot; mask names who wants it', () => {
    const ring = new EventRing({ capacity: 16, snap: 0 });
    const drops = ring.subscribe({ type: FILTER_DROPS });
    const port = ring.subscribe({ port: 8080 });
    const addr = ring.subscribe({ addr: ip('10.0.0.9') });
    const reason = ring.subscribe({ reasons: [TX_REVNAT] });
    const traces = ring.subscribe({ type: FILTER_TRACES, proto: 17 });
    const m = (r: number, drop: number, proto: number, s: string, ports: number, aports: number) =>
      ring.match(r, drop, proto, ip(s), ip('10.96.0.1'), ports, ip(s), ip('10.96.0.1'), aports);
    expect(m(TX_DNAT, 1, 6, '10.0.0.1', 0x10000050, 0x10000050)).toBe(1 << drops);
    expect(m(TX_DNAT, 0, 6, '10.0.0.1', 0x10000050, 0x10001f90)).toBe(1 << port); // after: 8080
    expect(m(TX_DNAT, 0, 6, '10.0.0.9', 0, 0)).toBe(1 << addr);
    expect(m(TX_REVNAT, 0, 6, '10.0.0.1', 0, 0)).toBe(1 << reason);
    expect(m(TX_DNAT, 0, 17, '10.0.0.1', 0, 0)).toBe(1 << traces);
    expect(m(TX_DNAT, 0, 6, '10.0.0.1', 0, 0)).toBe(0);
    ring.unsubscribe(port);
    expect(m(TX_DNAT, 0, 6, '10.0.0.1', 0x10000050, 0x10001f90)).toBe(0);
    emitN(ring, 3, TX_DNAT); // tuples nobody asked for
    expect(ring.head).toBe(0);
  });

  it('the reader sees an event overwritten during its copy as lost, not as garbage', () => {
    const ring = new EventRing({ capacity: 2, snap: 0 });
    ring.subscribe();
    emitN(ring, 1);
    const w = new Int32Array(EV_WORDS);
    expect(ring.read(0, w)).toBeGreaterThanOrEqual(0);
    emitN(ring, 2); // slot of event 0 now holds event 2
    expect(ring.read(0, w)).toBe(-1);
  });
});

function dpWeb() {
  const dp = createDatapath({ seed: 1 });
  loaderOf(dp).load([servicePort(service('web', VIP), 80, 'TCP', [endpoint(`${BE}:8080`)])]);
  return dp;
}

describe('the observed path of dpProcess', () => {
  it('with nobody listening nothing is written, and listening changes no verdict', () => {
    const a = dpWeb();
    const b = dpWeb();
    b.events.subscribe({}, true);
    const syn = buildTcp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, flags: SYN });
    const ra = run(a, syn);
    const rb = run(b, syn);
    expect(a.events.head).toBe(0);
    expect(b.events.head).toBe(1);
    expect([rb.verdict, rb.reason, [...rb.pkt]]).toEqual([ra.verdict, ra.reason, [...ra.pkt]]);
  });

  it('a new flow: DNAT tuple before and after, backend, conntrack entry, service, stages', () => {
    const dp = dpWeb();
    dp.events.subscribe();
    const c = new RingCursor(dp.events);
    run(dp, buildTcp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, flags: SYN }));
    run(dp, buildTcp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, flags: ACK }));
    const evs: Int32Array[] = [];
    c.drain(new Int32Array(EV_WORDS), (_s, _t, w) => evs.push(w.slice()));
    expect(evs.map((e) => e[EV_REASON])).toEqual([TX_DNAT_NEW, TX_DNAT]);
    const e = evs[0]!;
    expect([e[EV_SADDR], e[EV_DADDR], e[EV_PORTS] >>> 0]).toEqual([
      ip(CLIENT),
      ip(VIP),
      ((40000 << 16) | 80) >>> 0,
    ]);
    expect([e[EV_A_DADDR], e[EV_A_PORTS] & 0xffff]).toEqual([ip(BE), 8080]);
    expect(e[EV_FLAGS] & 0xff).toBe(V_TX);
    expect((e[EV_FLAGS] >>> 16) & 0xff).toBe(TCP);
    expect((e[EV_FLAGS] >>> 24) & 1).toBe(1); // created its conntrack entry
    expect(e[EV_BACKEND]).not.toBe(0);
    expect(e[EV_CT]).toBeGreaterThanOrEqual(0);
    expect(e[EV_SERVICE]).toBe(dp.ct.revNat(e[EV_CT]));
    expect((e[EV_FLAGS] >>> 8) & 0xff & (ST_CT | ST_LB)).toBe(ST_CT | ST_LB);
    expect((evs[1]![EV_FLAGS] >>> 24) & 1).toBe(0); // the ACK used the entry
    expect(evs[1]![EV_MASK]).toBe(1);
  });

  it('a ping to the VIP is one drop event with its reason; --drops sees it, not the DNAT', () => {
    const dp = dpWeb();
    dp.events.subscribe({ type: FILTER_DROPS });
    const c = new RingCursor(dp.events);
    run(dp, buildTcp({ src: CLIENT, dst: VIP, sport: 40001, dport: 80, flags: SYN }));
    run(dp, buildIcmpEcho({ src: CLIENT, dst: VIP, ident: 1, seq: 1 }));
    const evs: Int32Array[] = [];
    c.drain(new Int32Array(EV_WORDS), (_s, _t, w) => evs.push(w.slice()));
    expect(evs.map((e) => [e[EV_REASON], e[EV_FLAGS] & 0xff])).toEqual([
      [DROP_ECHO_TO_VIP, V_DROP],
    ]);
    expect(evs[0]![EV_A_DADDR]).toBe(ip(VIP)); // not rewritten
  });

  it('capture keeps the bytes as received and as written (a reject: the generated reply)', () => {
    const dp = dpWeb();
    dp.events.subscribe({}, true);
    const c = new RingCursor(dp.events);
    const syn = buildTcp({ src: CLIENT, dst: VIP, sport: 40002, dport: 80, flags: SYN });
    const r1 = run(dp, syn);
    const bad = buildTcp({ src: CLIENT, dst: VIP, sport: 40003, dport: 81, flags: SYN });
    const r2 = run(dp, bad);
    const got: [number, Uint8Array, Uint8Array][] = [];
    c.drain(new Int32Array(EV_WORDS), (seq, _t, w) => {
      const [b, a] = dp.events.capturedBytes(seq, w[EV_CAP_BEFORE], w[EV_CAP_AFTER]);
      got.push([w[EV_REASON], b, a]);
    });
    expect(got[0]![0]).toBe(TX_DNAT_NEW);
    expect([...got[0]![1]]).toEqual([...syn]);
    expect([...got[0]![2]]).toEqual([...r1.pkt]);
    expect(got[1]![0]).toBe(REPLY_REJECT_UNKNOWN_PORT);
    expect([...got[1]![1]]).toEqual([...bad]);
    expect([...got[1]![2]]).toEqual([...r2.out]);
  });
});

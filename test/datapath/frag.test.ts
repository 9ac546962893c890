// Fragmented datagrams through a VIP (offline): the first fragment is matched to its flow by its
// ports and DNATed / reverse-NATed; the later fragments (no L4 header) get the same address
// rewrite from the frag map. Expected fragments are cut from the datagram the harness builds
// already translated, so byte equality covers the UDP checksum over the whole datagram.

import { beforeEach, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { DROP_FRAG_OUT_OF_ORDER } from '../../src/datapath/state/reasons.ts';
import { V_DROP, V_TX } from '../../src/datapath/state/verdict.ts';
import { FragMap } from '../../src/maps/frag.ts';
import {
  buildIpv4,
  buildUdp,
  endpoint,
  run,
  service,
  servicePort,
  UDP,
  loaderOf,
} from './harness.ts';

const CLIENT = '10.244.1.10';
const VIP = '10.96.0.10';
const BACKEND = '10.244.2.5';
const T0 = 4_000_000;
const BIG = Array.from({ length: 4000 }, (_, i) => String.fromCharCode(97 + (i % 26))).join('');

/** Split an unfragmented IPv4 datagram (20-byte header) into fragments of `chunk` payload bytes. */
function fragment(whole: Uint8Array, src: string, dst: string, id: number, chunk = 1480) {
  const payload = whole.subarray(20);
  const out: Uint8Array[] = [];
  for (let off = 0; off < payload.length; off += chunk) {
    const part = payload.subarray(off, Math.min(off + chunk, payload.length));
    const mf = off + chunk < payload.length;
    out.push(buildIpv4({ src, dst, id, mf, fragOffset: off / 8 }, UDP, part));
  }
  return out;
}

function setup(): Datapath {
  const dp = createDatapath({ seed: 11 });
  const echo = service('echo', VIP);
  loaderOf(dp).load([servicePort(echo, 7, 'UDP', [endpoint(`${BACKEND}:7007`)], 'echo')]);
  return dp;
}

const req = (dst: string, dport: number) =>
  buildUdp({ src: CLIENT, dst, sport: 33000, dport, data: BIG, id: 0x1111 });
const rep = (src: string, sport: number) =>
  buildUdp({ src, dst: CLIENT, sport, dport: 33000, data: BIG, id: 0x2222 });

describe('fragmented UDP through a ClusterIP', () => {
  let dp: Datapath;
  beforeEach(() => {
    dp = setup();
  });

  it('DNATs every fragment of a 4000-byte request and reverse-NATs every fragment of the reply', () => {
    const sent = fragment(req(VIP, 7), CLIENT, VIP, 0x1111);
    const want = fragment(req(BACKEND, 7007), CLIENT, BACKEND, 0x1111);
    expect(sent.length).toBe(3);
    const reasons = sent.map((f, k) => {
      const r = run(dp, f, T0 + k);
      expect(r.verdict).toBe(V_TX);
      expect(r.pkt).toEqual(want[k]);
      return r.reason;
    });
    expect(reasons).toEqual(['TX_DNAT_NEW', 'TX_FRAG', 'TX_FRAG']);
    const flow = dp.ct.lookupOrig(UDP, 0x0af4010a, 0x0a60000a, 33000, 7);
    const back = fragment(rep(BACKEND, 7007), BACKEND, CLIENT, 0x2222);
    const seen = fragment(rep(VIP, 7), VIP, CLIENT, 0x2222);
    back.forEach((f, k) => {
      const r = run(dp, f, T0 + 100);
      expect(r.reason).toBe(k === 0 ? 'TX_REVNAT' : 'TX_FRAG');
      expect(r.pkt).toEqual(seen[k]);
    });
    expect([dp.ct.pktsOrig(flow), dp.ct.pktsReply(flow)]).toEqual([1, 1]); // per datagram
  });

  it('keeps two datagrams of one flow apart by IP id', () => {
    const a = fragment(req(VIP, 7), CLIENT, VIP, 0x1111);
    const b = fragment(
      buildUdp({ src: CLIENT, dst: VIP, sport: 33000, dport: 7, data: BIG, id: 0x1112 }),
      CLIENT,
      VIP,
      0x1112,
    );
    run(dp, a[0], T0);
    run(dp, b[0], T0);
    expect(run(dp, b[2], T0).reason).toBe('TX_FRAG');
    expect(run(dp, a[1], T0).reason).toBe('TX_FRAG');
  });

  it('drops a later fragment to a VIP that outran its first fragment, counted', () => {
    const sent = fragment(req(VIP, 7), CLIENT, VIP, 0x1111);
    const r = run(dp, sent[1], T0);
    expect([r.verdict, r.reason]).toEqual([V_DROP, 'DROP_FRAG_OUT_OF_ORDER']);
    expect(dp.counters[DROP_FRAG_OUT_OF_ORDER]).toBe(1);
    expect(run(dp, sent[0], T0).reason).toBe('TX_DNAT_NEW');
    expect(run(dp, sent[2], T0).reason).toBe('TX_FRAG');
  });

  it('forgets a datagram after the reassembly time (30 s)', () => {
    const sent = fragment(req(VIP, 7), CLIENT, VIP, 0x1111);
    run(dp, sent[0], T0);
    expect(run(dp, sent[1], T0 + 29_999).reason).toBe('TX_FRAG');
    expect(run(dp, sent[2], T0 + 30_000).reason).toBe('DROP_FRAG_OUT_OF_ORDER');
  });
});

describe('fragments of a masqueraded flow (NodePort from outside, backend on another node)', () => {
  it('gives every fragment both the DNAT and the SNAT addresses, both ways', () => {
    const NODE = '172.30.0.11';
    const EXT = '172.30.0.100';
    const POD = '10.244.2.2';
    const dp = createDatapath({
      seed: 11,
      nodeIp: ipU32(NODE),
      podCidr: '10.244.1.0/24',
      clusterCidr: '10.244.0.0/16',
    });
    const svc = service('echo', VIP, { type: 'NodePort' });
    const rsp = servicePort(svc, 7, 'UDP', [endpoint(`${POD}:7007`, { nodeName: 'node2' })], 'e');
    rsp.port.nodePort = 30007;
    loaderOf(dp).load([rsp], { nodeName: 'node1' });
    const out = { src: EXT, dst: NODE, sport: 33000, dport: 30007, data: BIG, id: 0x3333 };
    const sent = fragment(buildUdp(out), EXT, NODE, 0x3333);
    const r0 = run(dp, sent[0], T0);
    expect(r0.reason).toBe('TX_DNAT_NEW');
    const snatPort = (r0.pkt[20] << 8) | r0.pkt[21];
    const want = fragment(
      buildUdp({ ...out, src: NODE, sport: snatPort, dst: POD, dport: 7007 }),
      NODE,
      POD,
      0x3333,
    );
    expect(r0.pkt).toEqual(want[0]);
    for (const k of [1, 2]) expect(run(dp, sent[k], T0).pkt).toEqual(want[k]);
    const back = { src: POD, dst: NODE, sport: 7007, dport: snatPort, data: BIG, id: 0x4444 };
    const seen = { ...back, src: NODE, sport: 30007, dst: EXT, dport: 33000 };
    const bf = fragment(buildUdp(back), POD, NODE, 0x4444);
    const sf = fragment(buildUdp(seen), NODE, EXT, 0x4444);
    bf.forEach((f, k) => {
      const r = run(dp, f, T0);
      expect(r.verdict).toBe(V_TX);
      expect(r.pkt).toEqual(sf[k]);
    });
  });
});

function ipU32(s: string): number {
  return s.split('.').reduce((a, x) => ((a << 8) | Number(x)) >>> 0, 0);
}

describe('FragMap', () => {
  it('refreshes a key in place, and evicts the soonest-expiring way of a full bucket (counted)', () => {
    const m = new FragMap(4); // one bucket of 4 ways
    for (let id = 1; id <= 4; id++) m.insert(1, 2, id, UDP, 100 + id, 200 + id, 10 + id, 0);
    expect(m.countLive(0)).toBe(4);
    m.insert(1, 2, 3, UDP, 999, 998, 50, 0); // same key: refreshed, no eviction
    expect(m.evictions).toBe(0);
    expect(m.newSrc(m.lookup(1, 2, 3, UDP, 0))).toBe(999);
    expect(m.newDst(m.lookup(1, 2, 3, UDP, 0))).toBe(998);
    m.insert(1, 2, 9, UDP, 909, 908, 60, 0); // full: id 1 (expires 11) goes
    expect(m.evictions).toBe(1);
    expect(m.lookup(1, 2, 1, UDP, 0)).toBe(-1);
    expect(m.newSrc(m.lookup(1, 2, 9, UDP, 0))).toBe(909);
    expect(m.lookup(1, 2, 2, UDP, 12)).toBe(-1); // expired at 12
    m.insert(1, 2, 10, UDP, 1010, 1011, 70, 13); // takes an expired way: no eviction
    expect(m.evictions).toBe(1);
  });
});

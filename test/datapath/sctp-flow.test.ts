// An SCTP association through a ClusterIP, chunk by chunk, with nf_conntrack_sctp's states and
// lifetimes, and the packets conntrack calls INVALID.
//
//   client 10.244.1.10:40000 ──▶ 10.96.0.50:9000 ──DNAT──▶ 10.244.2.7:9900 (backend)
//   client 10.244.1.10:40000 ◀── 10.96.0.50:9000 ◀─revNAT─ 10.244.2.7:9900
//
//   INIT ▶ CLOSED · INIT ACK ◀ COOKIE_WAIT · COOKIE ECHO ▶ COOKIE_ECHOED · COOKIE ACK ◀
//   ESTABLISHED · DATA ▶ / SACK ◀ (no change) · SHUTDOWN ▶ SHUTDOWN_SENT · SHUTDOWN ACK ◀
//   SHUTDOWN_ACK_SENT · SHUTDOWN COMPLETE ▶ CLOSED
//
// Every rewritten packet must equal one built independently (harness CRC32c, bit by bit), so a
// stale CRC after the port change fails byte for byte.

import { beforeEach, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { V_DROP, V_REPLY, V_TX } from '../../src/datapath/state/verdict.ts';
import { ctAssured, ctStateName } from '../../src/inspect/ct-state.ts';
import { ipv4SetTtlWithCsum } from '../../src/wire/ipv4.ts';
import { SCTP_INIT_FROM_LINUX, SCTP_INIT_TO_VIP } from '../wire/golden.ts';
import {
  buildSctp,
  endpoint,
  ip,
  loaderOf,
  refillIpCsum,
  run,
  SCTP,
  type SctpChunk,
  type SctpOpts,
  sctpCrcVerifies,
  service,
  servicePort,
} from './harness.ts';

const CLIENT = '10.244.1.10';
const VIP = '10.96.0.50';
const BE = '10.244.2.7';
const T0 = 5_000_000;
const SEC = Math.floor(T0 / 1000);
const TAG_C = 0x1a2b3c4d; // the client's initiate tag: the backend's packets carry it
const TAG_B = 0x55667788;

const INIT: SctpChunk = [
  1,
  0,
  [0x1a, 0x2b, 0x3c, 0x4d, 0, 1, 0xa0, 0, 0, 10, 0xff, 0xff, 0, 0, 0, 1],
];
const INIT_ACK: SctpChunk = [
  2,
  0,
  [0x55, 0x66, 0x77, 0x88, 0, 1, 0xa0, 0, 0, 10, 0, 10, 0, 0, 0, 9, 0, 7, 0, 8, 1, 2, 3, 4],
];
const COOKIE_ECHO: SctpChunk = [10, 0, [1, 2, 3, 4]];
const COOKIE_ACK: SctpChunk = [11, 0, []];
const DATA: SctpChunk = [0, 3, [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 104, 105]];
const SACK: SctpChunk = [3, 0, [0, 0, 0, 1, 0, 1, 0xa0, 0, 0, 0, 0, 0]];
const SHUTDOWN: SctpChunk = [7, 0, [0, 0, 0, 9]];
const SHUTDOWN_ACK: SctpChunk = [8, 0, []];
const SHUTDOWN_COMPLETE: SctpChunk = [14, 0, []];
const ABORT: SctpChunk = [6, 0, []];
const HEARTBEAT: SctpChunk = [4, 0, [0, 1, 0, 8, 1, 2, 3, 4]];

function toVip(chunks: SctpChunk[], over: Partial<SctpOpts> = {}): SctpOpts {
  return { src: CLIENT, dst: VIP, sport: 40000, dport: 9000, vtag: TAG_B, chunks, ...over };
}
function fromBe(chunks: SctpChunk[], over: Partial<SctpOpts> = {}): SctpOpts {
  return { src: BE, dst: CLIENT, sport: 9900, dport: 40000, vtag: TAG_C, chunks, ...over };
}
const dnatted = (o: SctpOpts) => buildSctp({ ...o, dst: BE, dport: 9900 });
const revnatted = (o: SctpOpts) => buildSctp({ ...o, src: VIP, sport: 9000 });

function flow(dp: Datapath) {
  const i = dp.ct.lookupOrig(SCTP, ip(CLIENT), ip(VIP), 40000, 9000);
  const f = dp.ct.flags(i);
  return {
    i,
    state: ctStateName(SCTP, f),
    ttl: dp.ct.expires(i) - SEC,
    assured: ctAssured(SCTP, f),
  };
}

describe('SCTP through a ClusterIP', () => {
  let dp: Datapath;
  beforeEach(() => {
    dp = createDatapath({ seed: 3 });
    loaderOf(dp).load([servicePort(service('sctp', VIP), 9000, 'SCTP', [endpoint(`${BE}:9900`)])]);
  });

  it('translates a whole association byte for byte, through the kernel SCTP states and lifetimes', () => {
    const steps: [SctpOpts, 'orig' | 'reply', string, number][] = [
      [toVip([INIT], { vtag: 0 }), 'orig', 'CLOSED', 10],
      [fromBe([INIT_ACK]), 'reply', 'COOKIE_WAIT', 3],
      [toVip([COOKIE_ECHO, DATA]), 'orig', 'COOKIE_ECHOED', 3],
      [fromBe([COOKIE_ACK, SACK]), 'reply', 'ESTABLISHED', 210],
      [toVip([DATA]), 'orig', 'ESTABLISHED', 210],
      [fromBe([SACK]), 'reply', 'ESTABLISHED', 210],
      [toVip([SHUTDOWN]), 'orig', 'SHUTDOWN_SENT', 3],
      [fromBe([SHUTDOWN_ACK]), 'reply', 'SHUTDOWN_ACK_SENT', 3],
      [toVip([SHUTDOWN_COMPLETE]), 'orig', 'CLOSED', 10],
    ];
    for (const [k, [o, dir, state, ttl]] of steps.entries()) {
      const r = run(dp, buildSctp(o), T0);
      const want = dir === 'orig' ? dnatted(o) : revnatted(o);
      const reason = k === 0 ? 'TX_DNAT_NEW' : dir === 'orig' ? 'TX_DNAT' : 'TX_REVNAT';
      expect([r.verdict, r.reason, r.pkt], state).toEqual([V_TX, reason, want]);
      expect(sctpCrcVerifies(r.pkt)).toBe(true);
      expect({ state: flow(dp).state, ttl: flow(dp).ttl }).toEqual({ state, ttl });
    }
    expect(flow(dp).assured).toBe(true); // stays set once ESTABLISHED, as IPS_ASSURED does
  });

  it("gives Linux's bytes for the INIT Linux translated (golden: kernel DNAT + CRC32c)", () => {
    const d2 = createDatapath({ seed: 1 });
    const svc = service('golden', '10.96.0.50');
    loaderOf(d2).load([servicePort(svc, 9000, 'SCTP', [endpoint('10.99.1.2:9900')])]);
    const r = run(d2, SCTP_INIT_TO_VIP, T0);
    expect(r.reason).toBe('TX_DNAT_NEW');
    ipv4SetTtlWithCsum(r.pkt, 0, r.pkt[8] - 1); // the kernel forwards what kubetun writes back
    expect([...r.pkt]).toEqual([...SCTP_INIT_FROM_LINUX]);
  });

  it('is ESTABLISHED by a HEARTBEAT ACK answering a HEARTBEAT that opened the flow', () => {
    expect(run(dp, buildSctp(toVip([HEARTBEAT])), T0).reason).toBe('TX_DNAT_NEW');
    expect(flow(dp)).toMatchObject({ state: 'HEARTBEAT_SENT', ttl: 30, assured: false });
    expect(run(dp, buildSctp(fromBe([[5, 0, HEARTBEAT[2]]])), T0).reason).toBe('TX_REVNAT');
    expect(flow(dp)).toMatchObject({ state: 'ESTABLISHED', ttl: 210, assured: true });
  });

  it('ABORT from either side closes the flow', () => {
    run(dp, buildSctp(toVip([INIT], { vtag: 0 })), T0);
    run(dp, buildSctp(fromBe([INIT_ACK])), T0);
    expect(run(dp, buildSctp(fromBe([ABORT])), T0).reason).toBe('TX_REVNAT');
    expect(flow(dp)).toMatchObject({ state: 'CLOSED', ttl: 10 });
  });

  it('does not renew a CLOSED flow on a retransmitted INIT (port reuse through a NAT)', () => {
    const init = buildSctp(toVip([INIT], { vtag: 0 }));
    run(dp, init, T0);
    expect(run(dp, init, T0 + 4000).reason).toBe('TX_DNAT'); // let through…
    expect(flow(dp).ttl).toBe(10); // …but still expiring 10 s after the first
  });
});

describe('SCTP packets conntrack calls INVALID, and malformed ones', () => {
  let dp: Datapath;
  beforeEach(() => {
    dp = createDatapath({ seed: 3 });
    loaderOf(dp).load([servicePort(service('sctp', VIP), 9000, 'SCTP', [endpoint(`${BE}:9900`)])]);
  });
  const drop = (o: SctpOpts) => {
    const r = run(dp, buildSctp(o), T0);
    return [r.verdict, r.reason];
  };

  it('opens no flow from DATA, COOKIE ACK, ABORT, SHUTDOWN COMPLETE, a tagged INIT or a bundled INIT', () => {
    for (const o of [
      toVip([DATA]),
      toVip([COOKIE_ACK]),
      toVip([ABORT]),
      toVip([SHUTDOWN_COMPLETE]),
      toVip([INIT]), // verification tag must be 0 (RFC 9260 8.5.1 A)
      toVip([INIT, DATA], { vtag: 0 }), // INIT must be alone
      toVip([COOKIE_ECHO, DATA]), // opens nothing either: DATA leads out of no state
    ]) {
      expect(drop(o)).toEqual([V_DROP, 'DROP_CT_INVALID']);
    }
    expect(dp.ctInvalid).toBe(7);
    expect(dp.ct.size).toBe(0);
  });

  it('changes nothing for an INVALID packet of a flow (COOKIE ECHO not first; INIT in reply to HEARTBEAT)', () => {
    run(dp, buildSctp(toVip([INIT], { vtag: 0 })), T0);
    run(dp, buildSctp(fromBe([INIT_ACK])), T0);
    const before = flow(dp);
    run(dp, buildSctp(toVip([DATA, COOKIE_ECHO])), T0);
    expect(flow(dp)).toEqual(before);
    expect(dp.ctInvalid).toBe(1);
    const d2 = createDatapath({ seed: 3, ctDropInvalid: true });
    loaderOf(d2).load([servicePort(service('sctp', VIP), 9000, 'SCTP', [endpoint(`${BE}:9900`)])]);
    run(d2, buildSctp(toVip([HEARTBEAT])), T0);
    expect(run(d2, buildSctp(fromBe([INIT], { vtag: 0 })), T0).reason).toBe('DROP_CT_INVALID');
  });

  it('drops a bad CRC32c, a zero-length chunk, a packet with no chunk, and IP fragments', () => {
    expect(drop(toVip([INIT], { vtag: 0, badCrc: true }))).toEqual([V_DROP, 'DROP_BAD_SCTP_CSUM']);
    const zero = buildSctp(toVip([COOKIE_ACK]));
    zero[20 + 12 + 3] = 0; // chunk length 0
    expect(run(dp, zero, T0).reason).toBe('DROP_BAD_SCTP_CHUNK');
    expect(drop(toVip([]))).toEqual([V_DROP, 'DROP_BAD_SCTP_CHUNK']);
    expect(drop(toVip([INIT], { vtag: 0, mf: true }))).toEqual([V_DROP, 'DROP_SCTP_FRAGMENT']);
    const short = buildSctp(toVip([INIT], { vtag: 0 })).slice(0, 28);
    short[3] = 28;
    short[10] = short[11] = 0;
    expect(run(dp, refillIpCsum(short), T0).reason).toBe('DROP_TRUNCATED_L4');
  });

  it('rejects SCTP to a service with no endpoints (ICMP port unreachable, as kube-proxy REJECTs)', () => {
    const d2 = createDatapath({ seed: 3 });
    loaderOf(d2).load([servicePort(service('none', VIP), 9000, 'SCTP', [])]);
    const r = run(d2, buildSctp(toVip([INIT], { vtag: 0 })), T0);
    expect([r.verdict, r.reason]).toEqual([V_REPLY, 'REPLY_REJECT_NO_ENDPOINTS']);
    expect([r.out[9], r.out[20], r.out[21]]).toEqual([1, 3, 3]);
  });
});

// A TCP connection through a ClusterIP, both directions, handshake to close.
//
//   client 10.244.1.10:40000          kubetun dpProcess                 backend 10.244.2.5:8080
//   ─────────────────────────────────────────────────────────────────────────────────────────
//   SYN      c:40000 > 10.96.0.10:80  ──DNAT (new, ct create)──▶  c:40000 > 10.244.2.5:8080
//   SYN-ACK  c:40000 < 10.96.0.10:80  ◀──revNAT (ct reply hit)──  c:40000 < 10.244.2.5:8080
//   ACK, data, FIN  ──DNAT (ct orig hit)──▶    ◀── data, FIN-ACK revNAT ──   ACK ──DNAT──▶
//
// Every rewritten packet must equal, byte for byte, the packet built from scratch with the
// translated tuple (so the incremental checksums equal a full recompute).

import { beforeEach, describe, expect, it } from 'vitest';
import {
  CT_F_CLOSING,
  CT_F_SEEN_NON_SYN,
  CT_F_SEEN_REPLY,
  CT_STATE_SHIFT,
  CT_TCP_SYN_SENT,
  CT_TIMEOUT_TCP_CLOSE,
  CT_TIMEOUT_TCP_ESTABLISHED,
  CT_TIMEOUT_TCP_FIN_WAIT,
  CT_TIMEOUT_TCP_LAST_ACK,
  CT_TIMEOUT_TCP_SYN_RECV,
  CT_TIMEOUT_TCP_SYN_SENT,
} from '../../src/datapath/state/ct-state.ts';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { TX_DNAT, TX_DNAT_NEW, TX_REVNAT } from '../../src/datapath/state/reasons.ts';
import { V_TX } from '../../src/datapath/state/verdict.ts';
import {
  ACK,
  buildTcp,
  checksumsVerify,
  endpoint,
  FIN,
  PSH,
  run,
  SYN,
  service,
  servicePort,
  type TcpOpts,
  loaderOf,
} from './harness.ts';

const CLIENT = '10.244.1.10';
const VIP = '10.96.0.10';
const BACKEND = '10.244.2.5';
const T0 = 5_000_000; // ms

function setup(): Datapath {
  const dp = createDatapath({ seed: 1 });
  const web = service('web', VIP);
  loaderOf(dp).load([servicePort(web, 80, 'TCP', [endpoint(`${BACKEND}:8080`)], 'http')]);
  return dp;
}

/** client -> VIP as sent, and the same segment client -> backend as it must leave. */
function fromClient(flags: number, seq: number, ack: number, data = ''): [Uint8Array, Uint8Array] {
  const o: TcpOpts = { src: CLIENT, dst: VIP, sport: 40000, dport: 80, flags, seq, ack, data };
  return [buildTcp(o), buildTcp({ ...o, dst: BACKEND, dport: 8080 })];
}

/** backend -> client as sent, and the same segment VIP -> client as it must leave. */
function fromBackend(flags: number, seq: number, ack: number, data = ''): [Uint8Array, Uint8Array] {
  const o: TcpOpts = {
    src: BACKEND,
    dst: CLIENT,
    sport: 8080,
    dport: 40000,
    flags,
    seq,
    ack,
    data,
  };
  return [buildTcp(o), buildTcp({ ...o, src: VIP, sport: 80 })];
}

describe('TCP through a ClusterIP', () => {
  let dp: Datapath;
  beforeEach(() => {
    dp = setup();
  });

  it('translates the handshake, data and close in both directions, byte-exact', () => {
    const steps: [Uint8Array, Uint8Array, string, number][] = [
      [...fromClient(SYN, 1000, 0), 'TX_DNAT_NEW', 0],
      [...fromBackend(SYN | ACK, 7000, 1001), 'TX_REVNAT', 1],
      [...fromClient(ACK, 1001, 7001), 'TX_DNAT', 2],
      [...fromClient(PSH | ACK, 1001, 7001, 'GET / HTTP/1.1\r\n\r\n'), 'TX_DNAT', 3],
      [...fromBackend(PSH | ACK, 7001, 1019, 'HTTP/1.1 200 OK\r\n\r\nhello'), 'TX_REVNAT', 4],
      [...fromClient(FIN | ACK, 1019, 7025), 'TX_DNAT', 5],
      [...fromBackend(FIN | ACK, 7025, 1020), 'TX_REVNAT', 6],
      [...fromClient(ACK, 1020, 7026), 'TX_DNAT', 7],
    ];
    let ct = -1;
    for (const [sent, expected, reason, step] of steps) {
      const r = run(dp, sent, T0 + step);
      expect({ step, reason: r.reason, verdict: r.verdict }).toEqual({
        step,
        reason,
        verdict: V_TX,
      });
      expect(r.pkt).toEqual(expected);
      expect(checksumsVerify(r.pkt)).toBe(true);
      if (step === 0) ct = dp.lastCtIdx;
      expect(dp.lastCtIdx).toBe(ct);
      expect(dp.lastCtNew).toBe(step === 0 ? 1 : 0);
    }
    expect(dp.counters[TX_DNAT_NEW]).toBe(1);
    expect(dp.counters[TX_DNAT]).toBe(4);
    expect(dp.counters[TX_REVNAT]).toBe(3);
    expect(dp.ct.pktsOrig(ct)).toBe(5);
    expect(dp.ct.pktsReply(ct)).toBe(3);
    const bytes = (reason: string) =>
      steps.filter((s) => s[2] !== reason).reduce((n, s) => n + s[0].length, 0);
    expect(dp.ct.bytesOrig(ct)).toBe(bytes('TX_REVNAT'));
    expect(dp.ct.bytesReply(ct)).toBe(
      steps.reduce((n, s) => n + s[0].length, 0) - bytes('TX_REVNAT'),
    );
  });

  it('gives an unanswered mid-stream pickup 60 s, not the established day', () => {
    run(dp, fromClient(ACK, 1001, 7001)[0], T0);
    expect(dp.lastCtNew).toBe(1);
    expect(dp.ct.expires(dp.lastCtIdx)).toBe(Math.floor(T0 / 1000) + CT_TIMEOUT_TCP_SYN_RECV);
    run(dp, fromBackend(ACK, 7001, 1001)[0], T0);
    expect(dp.ct.expires(dp.lastCtIdx)).toBe(Math.floor(T0 / 1000) + CT_TIMEOUT_TCP_ESTABLISHED);
  });

  it('sets the flow lifetime from its TCP state: syn_sent, syn_recv, established, fin_wait, last_ack', () => {
    const sec = Math.floor(T0 / 1000);
    run(dp, fromClient(SYN, 1000, 0)[0], T0);
    const ct = dp.lastCtIdx;
    expect(dp.ct.expires(ct)).toBe(sec + CT_TIMEOUT_TCP_SYN_SENT);
    run(dp, fromBackend(SYN | ACK, 7000, 1001)[0], T0);
    expect(dp.ct.expires(ct)).toBe(sec + CT_TIMEOUT_TCP_SYN_RECV);
    expect(dp.ct.flags(ct) & CT_F_SEEN_REPLY).toBe(CT_F_SEEN_REPLY);
    run(dp, fromClient(ACK, 1001, 7001)[0], T0);
    expect(dp.ct.flags(ct) & CT_F_SEEN_NON_SYN).toBe(CT_F_SEEN_NON_SYN);
    expect(dp.ct.expires(ct)).toBe(sec + CT_TIMEOUT_TCP_ESTABLISHED);
    run(dp, fromClient(FIN | ACK, 1001, 7001)[0], T0);
    expect(dp.ct.expires(ct)).toBe(sec + CT_TIMEOUT_TCP_FIN_WAIT); // one side closing only
    run(dp, fromBackend(FIN | ACK, 7001, 1002)[0], T0);
    expect(dp.ct.flags(ct) & CT_F_CLOSING).toBe(CT_F_CLOSING);
    expect(dp.ct.expires(ct)).toBe(sec + CT_TIMEOUT_TCP_LAST_ACK);
  });

  it('lets an unanswered SYN flow expire after 120 s: the next SYN is a new flow', () => {
    run(dp, fromClient(SYN, 1000, 0)[0], T0);
    expect(run(dp, fromClient(SYN, 1000, 0)[0], T0 + 119_999).reason).toBe('TX_DNAT');
    expect(run(dp, fromClient(SYN, 1000, 0)[0], T0 + 119_999 + 120_000).reason).toBe('TX_DNAT_NEW');
    expect(dp.ct.size).toBe(1);
  });

  it('reopens a closed connection when a new SYN reuses the client port', () => {
    run(dp, fromClient(SYN, 1000, 0)[0], T0);
    run(dp, fromBackend(SYN | ACK, 7000, 1001)[0], T0);
    run(dp, fromClient(FIN | ACK, 1001, 7001)[0], T0);
    run(dp, fromBackend(FIN | ACK, 7001, 1002)[0], T0);
    run(dp, fromClient(ACK, 1002, 7002)[0], T0); // TIME_WAIT
    // Still in TIME_WAIT: a pure SYN starts over instead of riding the old entry.
    const r = run(dp, fromClient(SYN, 5000, 0)[0], T0 + 1000);
    expect(r.reason).toBe('TX_DNAT_NEW');
    expect(dp.ct.flags(dp.lastCtIdx)).toBe(CT_TCP_SYN_SENT << CT_STATE_SHIFT); // nothing else seen
    expect(dp.ct.size).toBe(1);
  });

  it('treats an RST as closing both directions', () => {
    run(dp, fromClient(SYN, 1000, 0)[0], T0);
    run(dp, fromBackend(4 /* RST */ | ACK, 0, 1001)[0], T0);
    expect(dp.ct.expires(dp.lastCtIdx)).toBe(Math.floor(T0 / 1000) + CT_TIMEOUT_TCP_CLOSE);
  });
});

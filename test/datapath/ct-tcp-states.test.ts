// nf_conntrack's TCP states through the real program, with an injected clock: every state a
// connection passes through, the lifetime each state gets (kube-proxy's settings, and
// configured ones), INVALID packets counted and dropped when configured, RST, and a SYN on a
// TIME_WAIT/CLOSE entry starting a new flow that may pick another backend.

import { describe, expect, it } from 'vitest';
import {
  CT_TCP_CLOSE,
  CT_TCP_CLOSE_WAIT,
  CT_TCP_ESTABLISHED,
  CT_TCP_FIN_WAIT,
  CT_TCP_LAST_ACK,
  CT_TCP_LAST_ACK_R,
  CT_TCP_SYN_SENT,
  CT_TCP_TIME_WAIT,
  ctTcpState,
} from '../../src/datapath/state/ct-state.ts';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import type { DatapathConfig } from '../../src/datapath/state/config.ts';
import { DROP_CT_INVALID } from '../../src/datapath/state/reasons.ts';
import { V_DROP, V_TX } from '../../src/datapath/state/verdict.ts';
import { ctStateName } from '../../src/inspect/ct-state.ts';
import {
  ACK,
  buildTcp,
  endpoint,
  FIN,
  RST,
  run,
  SYN,
  service,
  servicePort,
  TCP,
  loaderOf,
} from './harness.ts';

const CLIENT = '10.244.1.10';
const VIP = '10.96.0.10';
const T0 = 7_000_000; // ms
const SEC = T0 / 1000;

function setup(cfg: Partial<DatapathConfig> = {}, backends = ['10.244.2.5:8080']): Datapath {
  const dp = createDatapath({ seed: 3, ...cfg });
  const web = service('web', VIP);
  loaderOf(dp).load([
    servicePort(
      web,
      80,
      'TCP',
      backends.map((b) => endpoint(b)),
      'http',
    ),
  ]);
  return dp;
}

const c = (flags: number, sport = 40000) =>
  buildTcp({ src: CLIENT, dst: VIP, sport, dport: 80, flags });
function b(dp: Datapath, flags: number, sport = 40000): Uint8Array {
  const i = dp.ct.lookupOrig(TCP, ipU32(CLIENT), ipU32(VIP), sport, 80);
  const be = dp.ct.baddr(i);
  const src = `${be >>> 24}.${(be >>> 16) & 255}.${(be >>> 8) & 255}.${be & 255}`;
  return buildTcp({ src, dst: CLIENT, sport: dp.ct.bport(i), dport: sport, flags });
}
/** The same backend packet with other flags. */
function b2(pkt: Uint8Array, flags: number): Uint8Array {
  const ip = (o: number) => [...pkt.subarray(o, o + 4)].join('.');
  const port = (o: number) => (pkt[o] << 8) | pkt[o + 1];
  return buildTcp({ src: ip(12), dst: ip(16), sport: port(20), dport: port(22), flags });
}
function ipU32(s: string): number {
  return s.split('.').reduce((a, x) => ((a << 8) | Number(x)) >>> 0, 0);
}
function entry(dp: Datapath, sport = 40000): number {
  return dp.ct.lookupOrig(TCP, ipU32(CLIENT), ipU32(VIP), sport, 80);
}
function state(dp: Datapath): [string, number] {
  const i = entry(dp);
  return [ctStateName(TCP, dp.ct.flags(i)), dp.ct.expires(i) - SEC];
}

describe('conntrack TCP states', () => {
  it('walks handshake and active close: SYN_SENT SYN_RECV ESTABLISHED FIN_WAIT CLOSE_WAIT LAST_ACK TIME_WAIT', () => {
    const dp = setup();
    const seen: [string, number][] = [];
    run(dp, c(SYN), T0);
    seen.push(state(dp));
    run(dp, b(dp, SYN | ACK), T0);
    seen.push(state(dp));
    run(dp, c(ACK), T0);
    seen.push(state(dp));
    run(dp, c(FIN | ACK), T0);
    seen.push(state(dp));
    run(dp, b(dp, ACK), T0);
    seen.push(state(dp));
    run(dp, b(dp, FIN | ACK), T0);
    seen.push(state(dp));
    run(dp, c(ACK), T0);
    seen.push(state(dp));
    expect(seen).toEqual([
      ['SYN_SENT', 120],
      ['SYN_RECV', 60],
      ['ESTABLISHED', 86400],
      ['FIN_WAIT', 120],
      ['CLOSE_WAIT', 3600],
      ['LAST_ACK', 30],
      ['TIME_WAIT', 120],
    ]);
    expect(dp.ctInvalid).toBe(0);
  });

  it('passive close from the backend: its FIN, the client ACK, the client FIN, the backend ACK', () => {
    const dp = setup();
    run(dp, c(SYN), T0);
    run(dp, b(dp, SYN | ACK), T0);
    run(dp, c(ACK), T0);
    run(dp, b(dp, FIN | ACK), T0);
    expect(ctTcpState(dp.ct.flags(entry(dp)))).toBe(CT_TCP_FIN_WAIT);
    run(dp, b(dp, ACK), T0); // the FIN sender's own ACK does not acknowledge its FIN
    expect(ctTcpState(dp.ct.flags(entry(dp)))).toBe(CT_TCP_FIN_WAIT);
    run(dp, c(ACK), T0);
    expect(ctTcpState(dp.ct.flags(entry(dp)))).toBe(CT_TCP_CLOSE_WAIT);
    run(dp, c(FIN | ACK), T0);
    expect(ctTcpState(dp.ct.flags(entry(dp)))).toBe(CT_TCP_LAST_ACK);
    run(dp, c(ACK), T0); // the last FIN's own side: still waiting
    expect(ctTcpState(dp.ct.flags(entry(dp)))).toBe(CT_TCP_LAST_ACK);
    run(dp, b(dp, ACK), T0);
    expect(ctTcpState(dp.ct.flags(entry(dp)))).toBe(CT_TCP_TIME_WAIT);
  });

  it('simultaneous close: FIN from both sides before any ACK of them', () => {
    const dp = setup();
    run(dp, c(SYN), T0);
    run(dp, b(dp, SYN | ACK), T0);
    run(dp, c(ACK), T0);
    run(dp, c(FIN | ACK), T0);
    run(dp, b(dp, FIN | ACK), T0);
    expect(ctTcpState(dp.ct.flags(entry(dp)))).toBe(CT_TCP_LAST_ACK_R);
    expect(state(dp)[0]).toBe('LAST_ACK');
    run(dp, c(ACK), T0);
    expect(ctTcpState(dp.ct.flags(entry(dp)))).toBe(CT_TCP_TIME_WAIT);
  });

  it('RST closes any state with the close lifetime (10 s)', () => {
    for (const steps of [[SYN], [SYN, -1], [SYN, -1, ACK]]) {
      const dp = setup();
      for (const f of steps) run(dp, f === -1 ? b(dp, SYN | ACK) : c(f), T0);
      run(dp, b(dp, RST | ACK), T0);
      expect(state(dp)).toEqual(['CLOSE', 10]);
      expect(ctTcpState(dp.ct.flags(entry(dp)))).toBe(CT_TCP_CLOSE);
    }
  });

  it('expires each state after its lifetime, not before (injected clock)', () => {
    const cases: [number[], number][] = [
      [[SYN], 120],
      [[SYN, -1], 60],
      [[SYN, -1, ACK, FIN | ACK], 120],
      [[SYN, -1, ACK, FIN | ACK, -2, -3], 30],
    ];
    for (const [steps, life] of cases) {
      const dp = setup();
      for (const f of steps) {
        if (f === -1) run(dp, b(dp, SYN | ACK), T0);
        else if (f === -2) run(dp, b(dp, ACK), T0);
        else if (f === -3) run(dp, b(dp, FIN | ACK), T0);
        else run(dp, c(f), T0);
      }
      // a reply is still translated 1 ms before the end, and is an unknown packet after it
      expect(run(dp, b(dp, ACK), T0 + life * 1000 - 1).reason).toBe('TX_REVNAT');
      const i = entry(dp);
      const later = T0 + (dp.ct.expires(i) - SEC) * 1000;
      const r = run(dp, c(ACK), later);
      expect(r.reason).not.toBe('TX_DNAT');
    }
  });

  it('takes its lifetimes from the config (kernel defaults here)', () => {
    const dp = setup({ ctTcpEstablished: 432000, ctTcpCloseWait: 60, ctTcpSynSent: 7 });
    run(dp, c(SYN), T0);
    expect(state(dp)).toEqual(['SYN_SENT', 7]);
    run(dp, b(dp, SYN | ACK), T0);
    run(dp, c(ACK), T0);
    expect(state(dp)).toEqual(['ESTABLISHED', 432000]);
    run(dp, b(dp, FIN | ACK), T0);
    run(dp, c(ACK), T0);
    expect(state(dp)).toEqual(['CLOSE_WAIT', 60]);
  });

  it('rejects a bad timeout with the field named', () => {
    expect(() => createDatapath({ ctTcpTimeWait: 0 })).toThrow(/ctTcpTimeWait/);
  });

  it('counts a non-SYN first packet INVALID but picks it up when not dropping', () => {
    const dp = setup();
    const r = run(dp, c(ACK), T0);
    expect([r.verdict, r.reason]).toEqual([V_TX, 'TX_DNAT_NEW']);
    expect(dp.ctInvalid).toBe(1);
    expect(state(dp)).toEqual(['ESTABLISHED', 60]); // syn_recv lifetime until a reply is seen
  });

  it('drops INVALID packets with --ct-drop-invalid: no entry for a stray ACK', () => {
    const dp = setup({ ctDropInvalid: true });
    const r = run(dp, c(ACK | FIN), T0);
    expect([r.verdict, r.reason]).toEqual([V_DROP, 'DROP_CT_INVALID']);
    expect(dp.counters[DROP_CT_INVALID]).toBe(1);
    expect(dp.ct.size).toBe(0);
    // an ACK before the SYN-ACK (SYN_SENT) is INVALID too, and changes nothing
    run(dp, c(SYN), T0);
    expect(run(dp, c(ACK), T0 + 5000).reason).toBe('DROP_CT_INVALID');
    expect(state(dp)).toEqual(['SYN_SENT', 120]);
    expect(dp.ctInvalid).toBe(2);
  });

  it('passes INVALID packets of a known flow unchanged in state when not dropping', () => {
    const dp = setup();
    run(dp, c(SYN), T0);
    expect(run(dp, b(dp, ACK), T0 + 2000).reason).toBe('TX_REVNAT');
    expect(state(dp)).toEqual(['SYN_SENT', 120]);
    expect(dp.ctInvalid).toBe(1);
  });

  it('always drops a first packet whose flags conntrack never tracks (SYN|FIN, none, FIN alone)', () => {
    const dp = setup();
    for (const flags of [SYN | FIN, 0, FIN, SYN | RST]) {
      const r = run(dp, c(flags), T0);
      expect([flags, r.verdict, r.reason]).toEqual([flags, V_DROP, 'DROP_CT_INVALID']);
    }
    expect([dp.ct.size, dp.ctInvalid]).toEqual([0, 4]);
    // PSH, ECE and CWR change nothing: SYN|ECE|CWR (an ECN setup) and SYN|URG open a flow
    expect(run(dp, c(SYN | 0x40 | 0x80), T0).reason).toBe('TX_DNAT_NEW');
    expect(run(dp, c(SYN | 0x20, 40001), T0).reason).toBe('TX_DNAT_NEW');
  });

  it('always drops an RST for no flow (nothing to reset; counted INVALID)', () => {
    const dp = setup();
    const r = run(dp, c(RST), T0);
    expect([r.verdict, r.reason]).toEqual([V_DROP, 'DROP_CT_INVALID']);
    expect([dp.ct.size, dp.ctInvalid]).toEqual([0, 1]);
  });

  it('starts a new flow on a SYN in TIME_WAIT or CLOSE, which may go to another backend', () => {
    const backends = ['10.244.2.5:8080', '10.244.3.5:8080', '10.244.4.5:8080', '10.244.5.5:8080'];
    const dp = setup({}, backends);
    const chosen = new Set<number>();
    for (let k = 0; k < 12; k++) {
      const r = run(dp, c(SYN), T0 + k);
      expect(r.reason).toBe('TX_DNAT_NEW'); // never rides the closed entry
      chosen.add(dp.ct.baddr(entry(dp)));
      expect(ctTcpState(dp.ct.flags(entry(dp)))).toBe(CT_TCP_SYN_SENT);
      run(dp, b(dp, SYN | ACK), T0 + k);
      if (k % 2 === 0) {
        run(dp, b(dp, RST), T0 + k); // CLOSE
      } else {
        run(dp, c(ACK), T0 + k);
        run(dp, c(FIN | ACK), T0 + k);
        run(dp, b(dp, FIN | ACK), T0 + k);
        run(dp, c(ACK), T0 + k); // TIME_WAIT
      }
      expect([CT_TCP_CLOSE, CT_TCP_TIME_WAIT]).toContain(ctTcpState(dp.ct.flags(entry(dp))));
    }
    expect(dp.ct.size).toBe(1);
    expect(chosen.size).toBeGreaterThan(1);
  });

  it('passes a SYN-ACK to a closed flow untranslated: it answers a direct connection from the same port', () => {
    // bench:e2e lost 18 of 2,000 direct pod->pod connections: the client's port had carried a
    // VIP flow to the same backend moments before, and the backend's SYN-ACK to the direct
    // connection was reverse-NATed to come from the VIP
    for (const close of ['rst', 'fin'] as const) {
      const dp = setup();
      run(dp, c(SYN), T0);
      const synAck = b(dp, SYN | ACK);
      run(dp, synAck, T0);
      run(dp, c(ACK), T0);
      if (close === 'rst') run(dp, c(RST | ACK), T0);
      else {
        run(dp, c(FIN | ACK), T0);
        run(dp, b(dp, FIN | ACK), T0);
        run(dp, c(ACK), T0);
      }
      expect([CT_TCP_CLOSE, CT_TCP_TIME_WAIT]).toContain(ctTcpState(dp.ct.flags(entry(dp))));
      const r = run(dp, synAck, T0 + 1000);
      expect(r.reason, close).toBe('PASS_NOT_SERVICE');
      expect(r.pkt).toEqual(synAck); // from the backend's own address, as the client expects
      expect(entry(dp)).toBe(-1); // and the stale flow is gone: the rest passes too
      expect(run(dp, b2(synAck, ACK), T0 + 1000).reason).toBe('PASS_NOT_SERVICE');
    }
  });

  it('still translates a SYN-ACK while the flow is opening (a retransmitted one in SYN_RECV)', () => {
    const dp = setup();
    run(dp, c(SYN), T0);
    expect(run(dp, b(dp, SYN | ACK), T0).reason).toBe('TX_REVNAT');
    expect(run(dp, b(dp, SYN | ACK), T0 + 500).reason).toBe('TX_REVNAT');
  });

  it('keeps riding the entry on a retransmitted SYN in SYN_SENT and ignores a SYN when established', () => {
    const dp = setup();
    run(dp, c(SYN), T0);
    expect(run(dp, c(SYN), T0 + 1000).reason).toBe('TX_DNAT');
    run(dp, b(dp, SYN | ACK), T0);
    run(dp, c(ACK), T0);
    expect(run(dp, c(SYN), T0 + 2000).reason).toBe('TX_DNAT');
    expect(ctTcpState(dp.ct.flags(entry(dp)))).toBe(CT_TCP_ESTABLISHED);
  });
});

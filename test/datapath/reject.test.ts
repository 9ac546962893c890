// Rejecting: a service port with no endpoints, and an unused port of a known VIP, answer the
// client at once with ICMP port unreachable (kube-proxy's REJECT / nftables mode), quoting the
// offending packet, from the VIP.
//
//   client 10.244.1.10:41000 ── SYN ──▶ 10.96.0.20:80 (no ready endpoints)
//   client ◀── 10.96.0.20 > 10.244.1.10 ICMP 3/3 [ 10.244.1.10:41000 > 10.96.0.20:80 SYN ... ]
//
//   client ── SYN ──▶ 10.96.0.20:443 (VIP known, port not served) ──▶ the same reject

import { beforeEach, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import type { DatapathConfig } from '../../src/datapath/state/config.ts';
import {
  DROP_ICMP_RATELIMIT,
  REPLY_REJECT_NO_ENDPOINTS,
} from '../../src/datapath/state/reasons.ts';
import { V_DROP, V_PASS, V_REPLY } from '../../src/datapath/state/verdict.ts';
import {
  buildIcmp,
  buildIpv4,
  buildTcp,
  buildUdp,
  checksumsVerify,
  endpoint,
  ip,
  refSum,
  run,
  SYN,
  service,
  servicePort,
  loaderOf,
} from './harness.ts';

const CLIENT = '10.244.1.10';
const VIP = '10.96.0.20';

function setup(cfg: Partial<DatapathConfig> = {}): Datapath {
  const dp = createDatapath({ seed: 3, ...cfg });
  const svc = service('idle', VIP);
  // Not ready and not terminating: not eligible, so the port has no endpoints.
  const down = endpoint('10.244.2.9:8080', { ready: false, serving: false });
  loaderOf(dp).load([
    servicePort(svc, 80, 'TCP', [down], 'http'),
    servicePort(svc, 53, 'UDP', [down], 'dns'),
  ]);
  return dp;
}

/** What Linux icmp_send emits for `orig`: TOS 0xc0 | (tos & 0x1e), id 0, DF clear, TTL 64. */
function expectedUnreach(orig: Uint8Array, from: string, tos = 0): Uint8Array {
  const quote = orig.subarray(0, Math.min(orig.length, 576 - 28));
  return buildIpv4(
    { src: from, dst: CLIENT, ttl: 64, id: 0, tos: 0xc0 | (tos & 0x1e) },
    1,
    icmp33(quote),
  );
}

function icmp33(quote: Uint8Array): Uint8Array {
  const full = buildIcmp({ src: '0.0.0.0', dst: '0.0.0.0' }, 3, 3, 0, quote);
  return full.subarray(20);
}

describe('reject', () => {
  let dp: Datapath;
  beforeEach(() => {
    dp = setup();
  });

  it('answers a SYN to a service without endpoints with the exact ICMP port unreachable', () => {
    const syn = buildTcp({ src: CLIENT, dst: VIP, sport: 41000, dport: 80, flags: SYN, tos: 0x10 });
    const r = run(dp, syn);
    expect([r.verdict, r.reason]).toEqual([V_REPLY, 'REPLY_REJECT_NO_ENDPOINTS']);
    expect(r.out).toEqual(expectedUnreach(syn, VIP, 0x10));
    expect(r.out.subarray(28)).toEqual(syn); // the quote is the offending packet, untouched
    expect(checksumsVerify(r.out)).toBe(true);
    expect(refSum(r.out, 20, r.out.length)).toBe(0xffff);
    expect(dp.ct.size).toBe(0);
    expect(dp.counters[REPLY_REJECT_NO_ENDPOINTS]).toBe(1);
  });

  it('rejects UDP the same way, and cuts the quote so the error is at most 576 bytes', () => {
    const big = buildUdp({ src: CLIENT, dst: VIP, sport: 5000, dport: 53, data: 'x'.repeat(1400) });
    const r = run(dp, big);
    expect(r.reason).toBe('REPLY_REJECT_NO_ENDPOINTS');
    expect(r.out.length).toBe(576);
    expect(r.out).toEqual(expectedUnreach(big, VIP));
  });

  it('rejects an unused port of a known VIP with its own reason', () => {
    const syn = buildTcp({ src: CLIENT, dst: VIP, sport: 41001, dport: 443, flags: SYN });
    const r = run(dp, syn);
    expect([r.verdict, r.reason]).toEqual([V_REPLY, 'REPLY_REJECT_UNKNOWN_PORT']);
    expect(r.out).toEqual(expectedUnreach(syn, VIP));
    const udp = buildUdp({ src: CLIENT, dst: VIP, sport: 5000, dport: 80 }); // 80 is TCP only
    expect(run(dp, udp).reason).toBe('REPLY_REJECT_UNKNOWN_PORT');
  });

  it('rejects other L4 protocols to a VIP, and passes them to anything else', () => {
    const gre = buildIpv4({ src: CLIENT, dst: VIP }, 47, new Uint8Array(12));
    const r = run(dp, gre);
    expect([r.verdict, r.reason]).toEqual([V_REPLY, 'REPLY_REJECT_UNKNOWN_PROTO']);
    expect(r.out).toEqual(expectedUnreach(gre, VIP));
    const elsewhere = buildIpv4({ src: CLIENT, dst: '10.244.7.7' }, 47, new Uint8Array(12));
    expect(run(dp, elsewhere).verdict).toBe(V_PASS);
  });

  it('sends from DatapathConfig.icmpErrorSrc when set', () => {
    dp = setup({ icmpErrorSrc: ip('10.0.0.1') });
    const syn = buildTcp({ src: CLIENT, dst: VIP, sport: 41000, dport: 80, flags: SYN });
    expect(run(dp, syn).out).toEqual(expectedUnreach(syn, '10.0.0.1'));
  });

  it('never answers a source that is not a single host (RFC 1122 3.2.2): martians, dropped first', () => {
    const why: Record<string, string> = {
      '0.0.0.0': 'DROP_MARTIAN_ZERONET',
      '224.0.0.5': 'DROP_MARTIAN_MULTICAST',
      '255.255.255.255': 'DROP_MARTIAN_BROADCAST',
    };
    for (const [src, reason] of Object.entries(why)) {
      const r = run(dp, buildUdp({ src, dst: VIP, sport: 68, dport: 53 }));
      expect([src, r.verdict, r.reason]).toEqual([src, V_DROP, reason]);
      expect(dp.outLen).toBe(0);
    }
  });

  it('rate-limits errors with a token bucket on the packet clock', () => {
    dp = setup({ icmpRatePerSec: 2, icmpBurst: 2 });
    const syn = buildTcp({ src: CLIENT, dst: VIP, sport: 41000, dport: 80, flags: SYN });
    const t = 50_000;
    expect(run(dp, syn, t).verdict).toBe(V_REPLY);
    expect(run(dp, syn, t).verdict).toBe(V_REPLY);
    expect(run(dp, syn, t).reason).toBe('DROP_ICMP_RATELIMIT');
    expect(run(dp, syn, t + 499).reason).toBe('DROP_ICMP_RATELIMIT');
    expect(run(dp, syn, t + 500).verdict).toBe(V_REPLY); // one token per 500 ms
    expect(dp.counters[DROP_ICMP_RATELIMIT]).toBe(2);
  });

  it('drops, not rejects, when internalTrafficPolicy Local leaves no local endpoint', () => {
    dp = createDatapath();
    const svc = service('local', VIP, { internalTrafficPolicy: 'Local' });
    const elsewhere = endpoint('10.244.2.9:8080', { nodeName: 'node-b' });
    loaderOf(dp).load([servicePort(svc, 80, 'TCP', [elsewhere])], { nodeName: 'node-a' });
    const r = run(dp, buildTcp({ src: CLIENT, dst: VIP, sport: 41000, dport: 80, flags: SYN }));
    expect([r.verdict, r.reason]).toEqual([V_DROP, 'DROP_NO_LOCAL_ENDPOINTS']);
  });
});

// ICMP errors RELATED to a DNATed flow, translated like the kernel's
// nf_nat_icmp_reply_translation. Expected packets are built from scratch by the harness (its own
// RFC 1071 checksums), so byte equality means every checksum — outer IP, ICMP, quoted IP, quoted
// UDP — equals a full recompute.
//
//   client 10.244.1.10:40000 ─▶ VIP 10.96.0.10:80 ──DNAT──▶ backend 10.244.2.5:8080
//   router 10.244.9.1 on the backend's path: "need to frag, mtu 1400", quoting client -> backend
//   ─▶ the client gets VIP -> client "need to frag, mtu 1400", quoting client -> VIP:80

import { beforeEach, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { V_PASS, V_TX } from '../../src/datapath/state/verdict.ts';
import {
  buildIcmp,
  buildTcp,
  buildUdp,
  endpoint,
  run,
  SYN,
  service,
  servicePort,
  loaderOf,
} from './harness.ts';

const CLIENT = '10.244.1.10';
const VIP = '10.96.0.10';
const BACKEND = '10.244.2.5';
const ROUTER = '10.244.9.1';
const T0 = 3_000_000;
const DATA = 'x'.repeat(200);

function setup(): Datapath {
  const dp = createDatapath({ seed: 9 });
  const web = service('web', VIP);
  loaderOf(dp).load([
    servicePort(web, 80, 'UDP', [endpoint(`${BACKEND}:8080`)], 'u'),
    servicePort(web, 80, 'TCP', [endpoint(`${BACKEND}:8080`)], 't'),
  ]);
  return dp;
}

const udpToVip = () =>
  buildUdp({ src: CLIENT, dst: VIP, sport: 40000, dport: 80, data: DATA, id: 0x4242 });
const udpToBackend = () =>
  buildUdp({ src: CLIENT, dst: BACKEND, sport: 40000, dport: 8080, data: DATA, id: 0x4242 });

describe('ICMP errors about DNATed flows', () => {
  let dp: Datapath;
  beforeEach(() => {
    dp = setup();
    expect(run(dp, udpToVip(), T0).reason).toBe('TX_DNAT_NEW');
  });

  it('frag-needed from a router: outer source and quoted destination become VIP:port, byte-exact', () => {
    for (const quoteLen of [28, 28 + 40, udpToBackend().length]) {
      const err = buildIcmp(
        { src: ROUTER, dst: CLIENT, id: 7 },
        3,
        4,
        1400,
        udpToBackend().slice(0, quoteLen),
      );
      const want = buildIcmp(
        { src: VIP, dst: CLIENT, id: 7 },
        3,
        4,
        1400,
        udpToVip().slice(0, quoteLen),
      );
      const r = run(dp, err, T0 + 10);
      expect([r.verdict, r.reason]).toEqual([V_TX, 'TX_ICMP_ERR_REVNAT']);
      expect(Buffer.from(r.pkt).toString('hex')).toBe(Buffer.from(want).toString('hex'));
    }
  });

  it('port unreachable from the backend itself, about a TCP SYN (8 quoted bytes: no L4 checksum)', () => {
    const syn = { src: CLIENT, sport: 41000, flags: SYN, seq: 77 };
    expect(run(dp, buildTcp({ ...syn, dst: VIP, dport: 80 }), T0).reason).toBe('TX_DNAT_NEW');
    const sent = buildTcp({ ...syn, dst: BACKEND, dport: 8080 });
    const err = buildIcmp({ src: BACKEND, dst: CLIENT }, 3, 3, 0, sent.slice(0, 28));
    const want = buildIcmp(
      { src: VIP, dst: CLIENT },
      3,
      3,
      0,
      buildTcp({ ...syn, dst: VIP, dport: 80 }).slice(0, 28),
    );
    const r = run(dp, err, T0 + 10);
    expect(r.reason).toBe('TX_ICMP_ERR_REVNAT');
    expect(r.pkt).toEqual(want);
  });

  it('time exceeded is translated the same way', () => {
    const err = buildIcmp({ src: ROUTER, dst: CLIENT }, 11, 0, 0, udpToBackend().slice(0, 48));
    const want = buildIcmp({ src: VIP, dst: CLIENT }, 11, 0, 0, udpToVip().slice(0, 48));
    expect(run(dp, err, T0).pkt).toEqual(want);
  });

  it('an error from the client about a reply goes to the backend, quoting the reply as the backend sent it', () => {
    const fromB = { src: BACKEND, dst: CLIENT, sport: 8080, dport: 40000, data: 'r', id: 9 };
    expect(run(dp, buildUdp(fromB), T0).reason).toBe('TX_REVNAT');
    const seen = buildUdp({ ...fromB, src: VIP, sport: 80 });
    const err = buildIcmp({ src: CLIENT, dst: VIP }, 3, 3, 0, seen);
    const want = buildIcmp({ src: CLIENT, dst: BACKEND }, 3, 3, 0, buildUdp(fromB));
    const r = run(dp, err, T0 + 10);
    expect(r.reason).toBe('TX_ICMP_ERR_DNAT');
    expect(r.pkt).toEqual(want);
  });

  it('leaves errors about no tracked flow, or sent to someone else, alone', () => {
    const other = buildUdp({ src: CLIENT, dst: BACKEND, sport: 40001, dport: 8080, data: 'z' });
    const e1 = buildIcmp({ src: ROUTER, dst: CLIENT }, 3, 4, 1400, other.slice(0, 28));
    expect([run(dp, e1).verdict, run(dp, e1).reason]).toEqual([V_PASS, 'PASS_NOT_SERVICE']);
    const e2 = buildIcmp(
      { src: ROUTER, dst: '10.244.1.99' },
      3,
      4,
      1400,
      udpToBackend().slice(0, 28),
    );
    const r2 = run(dp, e2, T0);
    expect([r2.reason, r2.pkt]).toEqual(['PASS_NOT_SERVICE', e2]);
    // a truncated quote (no ports) is not matched either
    const e3 = buildIcmp({ src: ROUTER, dst: CLIENT }, 3, 4, 1400, udpToBackend().slice(0, 22));
    expect(run(dp, e3, T0).reason).toBe('PASS_NOT_SERVICE');
  });

  it('does not treat the error as traffic of the flow (lifetime and counters unchanged)', () => {
    const i = dp.lastCtIdx;
    const [exp, pk] = [dp.ct.expires(i), dp.ct.pktsReply(i)];
    run(
      dp,
      buildIcmp({ src: ROUTER, dst: CLIENT }, 3, 4, 1400, udpToBackend().slice(0, 28)),
      T0 + 20_000,
    );
    expect([dp.ct.expires(i), dp.ct.pktsReply(i)]).toEqual([exp, pk]);
  });
});

describe('ICMP errors about masqueraded flows', () => {
  it('frag-needed quoting node:snatPort -> backend reaches the external client quoting it -> NodePort', () => {
    const NODE = '172.30.0.11';
    const EXT = '172.30.0.100';
    const POD = '10.244.2.2';
    const dp = createDatapath({
      seed: 13,
      nodeIp: ipU32(NODE),
      podCidr: '10.244.1.0/24',
      clusterCidr: '10.244.0.0/16',
    });
    const svc = service('np', VIP, { type: 'NodePort' });
    const rsp = servicePort(svc, 80, 'UDP', [endpoint(`${POD}:8080`, { nodeName: 'node2' })], 'u');
    rsp.port.nodePort = 30080;
    loaderOf(dp).load([rsp], { nodeName: 'node1' });
    const out = { src: EXT, dst: NODE, sport: 40000, dport: 30080, data: DATA, id: 5 };
    const r0 = run(dp, buildUdp(out), T0);
    expect(r0.reason).toBe('TX_DNAT_NEW');
    const err = buildIcmp({ src: ROUTER, dst: NODE }, 3, 4, 1400, r0.pkt.slice(0, 48));
    const want = buildIcmp({ src: NODE, dst: EXT }, 3, 4, 1400, buildUdp(out).slice(0, 48));
    const r = run(dp, err, T0 + 5);
    expect(r.reason).toBe('TX_ICMP_ERR_REVNAT');
    expect(r.pkt).toEqual(want);
  });
});

function ipU32(s: string): number {
  return s.split('.').reduce((a, x) => ((a << 8) | Number(x)) >>> 0, 0);
}

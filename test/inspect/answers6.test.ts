// The agent's inspect answers for IPv6 flows and services, beside IPv4 ones in one datapath:
//
//   client 10.244.1.10:40000        ─SYN─▶ web  10.96.0.10:80          ─▶ 10.244.2.5:8080
//   client [fd00:10:244:1::10]:41000 ─SYN/SYN-ACK/ACK─▶ web6 [fd00:10:96::a]:80 ─▶ [fd00:10:244:2::5]:8080
//   client [2001:db8:7::100]:50000  ─UDP─▶ node [fd00:172:30::11]:30053 (NodePort of web6 UDP,
//                                          masqueraded to the node) ─▶ [fd00:10:244:2::6]:53
import { beforeEach, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { formatCtEntry } from '../../src/inspect/ct-format.ts';
import { ctFilterFromFlags } from '../../src/inspect/flags.ts';
import { formatSvcReport } from '../../src/inspect/svc-format.ts';
import type { CtEntry, SvcReport } from '../../src/inspect/types.ts';
import { inspectAnswer } from '../../src/node/inspect.ts';
import type { ResolvedServicePort } from '../../src/model.ts';
import {
  ACK,
  buildTcp,
  endpoint,
  loaderOf,
  run,
  SYN,
  service,
  servicePort,
} from '../datapath/harness.ts';
import { buildTcp6, buildUdp6, servicePort6 } from '../datapath/harness6.ts';

const T0 = 1_000_000;
const NOW = 1000;
const NODE = 'fd00:172:30::11';
const C6 = 'fd00:10:244:1::10';
const VIP6 = 'fd00:10:96::a';
const BE6 = 'fd00:10:244:2::5';
const DNS6 = 'fd00:10:244:2::6';
const OUTSIDE = '2001:db8:7::100';

let dp: Datapath;
let ports: ResolvedServicePort[];
let natPort: number;

const ask = <T>(req: Record<string, unknown>) => inspectAnswer(dp, req, NOW, ports) as T;
const list = (filter?: Record<string, unknown>) =>
  ask<{ entries: CtEntry[]; total: number }>({ cmd: 'ct', filter });

beforeEach(() => {
  dp = createDatapath({
    seed: 3,
    nodeIp6: NODE,
    podGateway6: 'fd00:10:244:1::1',
    podCidr6: 'fd00:10:244:1::/64',
    clusterCidr6: 'fd00:10:244::/56',
  });
  const web = servicePort(
    service('web', '10.96.0.10'),
    80,
    'TCP',
    [endpoint('10.244.2.5:8080')],
    'http',
  );
  const web6 = servicePort6('web6', VIP6, 80, 'TCP', [`[${BE6}]:8080`]);
  const dns6 = servicePort6('dns6', VIP6, 53, 'UDP', [`[${DNS6}]:53`], { type: 'NodePort' });
  dns6.port.nodePort = 30053;
  ports = [web, web6, dns6];
  loaderOf(dp).load(ports, { nodeName: 'node1' });

  run(
    dp,
    buildTcp({ src: '10.244.1.10', dst: '10.96.0.10', sport: 40000, dport: 80, flags: SYN }),
    T0,
  );
  const c = { src: C6, dst: VIP6, sport: 41000, dport: 80 };
  expect(run(dp, buildTcp6({ ...c, flags: SYN }), T0).reason).toBe('TX_DNAT_NEW');
  const back = { src: BE6, dst: C6, sport: 8080, dport: 41000, flags: SYN | ACK };
  expect(run(dp, buildTcp6(back), T0).reason).toBe('TX_REVNAT');
  run(dp, buildTcp6({ ...c, flags: ACK }), T0);
  const q = run(
    dp,
    buildUdp6({ src: OUTSIDE, dst: NODE, sport: 50000, dport: 30053, data: 'q' }),
    T0,
  );
  expect(q.reason).toBe('TX_DNAT_NEW');
  natPort = (q.pkt[40] << 8) | q.pkt[41];
});

describe('ct, IPv6', () => {
  it('lists IPv6 flows after the IPv4 ones, addresses as text, masquerade in the reply tuple', () => {
    const { entries, total } = list();
    expect(total).toBe(3);
    expect(entries.map((e) => [e.family ?? 'ipv4', e.orig.dst])).toEqual([
      ['ipv4', '10.96.0.10'],
      ['ipv6', VIP6],
      ['ipv6', NODE],
    ]);
    const tcp = entries[1]!;
    expect(tcp).toMatchObject({
      proto: 'TCP',
      state: 'ESTABLISHED',
      orig: { src: C6, dst: VIP6, sport: 41000, dport: 80, packets: 2 },
      reply: { src: BE6, dst: C6, sport: 8080, dport: 41000, packets: 1 },
      seenReply: true,
    });
    expect(tcp.snat).toBeUndefined();
    expect(entries[2]).toMatchObject({
      proto: 'UDP',
      orig: { src: OUTSIDE, dst: NODE, sport: 50000, dport: 30053 },
      reply: { src: DNS6, dst: NODE, sport: 53, dport: natPort },
      snat: { addr: NODE, port: natPort },
      seenReply: false,
    });
    expect(formatCtEntry(tcp)).toBe(
      `tcp      6 ${tcp.expiresInSec} ESTABLISHED src=${C6} dst=${VIP6} sport=41000 dport=80 ` +
        `packets=2 bytes=${tcp.orig.bytes} src=${BE6} dst=${C6} sport=8080 dport=41000 ` +
        `packets=1 bytes=${tcp.reply.bytes} [ASSURED] mark=0 use=1`,
    );
  });

  it('filters by family, by IPv6 address or prefix, and never matches across families', () => {
    const orig = (f: Record<string, unknown>) => list(f).entries.map((e) => e.orig.src);
    expect(orig({ family: 'ipv6' })).toEqual([C6, OUTSIDE]);
    expect(orig({ family: 'ipv4' })).toEqual(['10.244.1.10']);
    expect(orig({ src: C6 })).toEqual([C6]);
    expect(orig({ src: 'fd00:10:244::/48' })).toEqual([C6]);
    expect(orig({ src: '0.0.0.0/0' })).toEqual(['10.244.1.10']);
    expect(orig({ src: '::/0' })).toEqual([C6, OUTSIDE]);
    expect(orig({ replySrc: `${DNS6}/128` })).toEqual([OUTSIDE]);
    // the reply of the masqueraded flow goes to the node, not to the client
    expect(orig({ replyDst: NODE })).toEqual([OUTSIDE]);
    expect(orig({ replyDst: OUTSIDE })).toEqual([]);
    expect(orig({ replyDst: C6, dport: 80 })).toEqual([C6]);
  });

  it('refuses a family it does not know and an address of the other family, naming the flag', () => {
    expect(() => ctFilterFromFlags({ family: 'inet6' })).toThrow(
      '--family: "inet6" is not ipv4 or ipv6',
    );
    expect(() => ctFilterFromFlags({ family: 'ipv4', src: C6 })).toThrow(
      '--src: an IPv6 address with --family ipv4',
    );
    expect(() => ctFilterFromFlags({ dst: 'fd00::1/129' })).toThrow(/^--dst: invalid IPv6 CIDR/);
  });

  it('counts and flushes IPv6 flows; the flushed flow is new on its next packet', () => {
    expect(ask({ cmd: 'ct-count', filter: { family: 'ipv6' } })).toEqual({
      count: 2,
      max: dp.ct.capacity,
      max6: dp.ct6.capacity,
    });
    expect(ask({ cmd: 'ct-flush', filter: { dst: VIP6 } })).toEqual({ deleted: 1 });
    expect(list().entries.map((e) => e.orig.dst)).toEqual(['10.96.0.10', NODE]);
    const ack = { src: C6, dst: VIP6, sport: 41000, dport: 80, flags: ACK };
    expect(run(dp, buildTcp6(ack), T0).reason).toBe('TX_DNAT_NEW');
  });
});

describe('svc, IPv6', () => {
  it('lists IPv6 frontends as [addr]:port after the IPv4 ones, with backends, counts and names', () => {
    const r = ask<SvcReport>({ cmd: 'svc' });
    const rows = r.services.map((s) => `${s.proto} ${s.vip}:${s.port} ${s.name ?? '-'}`);
    expect(rows).toEqual([
      'TCP 10.96.0.10:80 default/web:http',
      `TCP [${VIP6}]:80 default/web6:p`,
      `UDP [${VIP6}]:53 default/dns6:p`,
      `UDP [${NODE}]:30053 default/dns6:p`,
    ]);
    const web6 = r.services[1]!;
    expect(web6.backends).toMatchObject([{ addr: `[${BE6}]`, port: 8080, active: 1, inactive: 0 }]);
    const nodePort = r.services[3]!;
    expect(nodePort.flags).toContain('nodeport');
    expect(nodePort.backends).toMatchObject([{ addr: `[${DNS6}]`, active: 0, inactive: 1 }]);
    const text = formatSvcReport(r);
    expect(text.find((l) => l.startsWith(`TCP  [${VIP6}]:80 random `))).toMatch(/default\/web6:p$/);
    expect(text.find((l) => l.includes(`[${BE6}]:8080`))).toMatch(
      new RegExp(`^  -> \\[${BE6}\\]:8080 +Masq    1      1 +0 +$`),
    );
  });
});

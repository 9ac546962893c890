// The agent's inspect answers (src/node/inspect.ts) on a real datapath fed real packets:
//
//   client 10.244.1.10:40000 ─SYN/SYN-ACK/ACK─▶ web 10.96.0.10:80  ─▶ 10.244.2.5|6:8080  (ESTABLISHED)
//   client 10.244.1.10:40001 ─SYN────────────▶ web 10.96.0.10:80  ─▶ one of them     (SYN_SENT)
//   client 10.244.1.11:5353  ─UDP────────────▶ dns 10.96.0.53:53  ─▶ 10.244.2.7:53   (UNREPLIED)
//   empty  10.96.0.20:80 has no endpoints.
import { beforeEach, describe, expect, it } from 'vitest';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { formatCtEntry } from '../../src/inspect/ct-format.ts';
import { formatSvcReport } from '../../src/inspect/svc-format.ts';
import type { CtEntry, SvcReport } from '../../src/inspect/types.ts';
import { inspectAnswer } from '../../src/node/inspect.ts';
import { ipv4ToU32 } from '../../src/wire/addr.ts';
import type { ResolvedServicePort } from '../../src/model.ts';
import {
  ACK,
  buildTcp,
  buildUdp,
  endpoint,
  get16,
  get32,
  ipStr,
  run,
  SYN,
  service,
  servicePort,
  loaderOf,
} from '../datapath/harness.ts';

const CLIENT = '10.244.1.10';
const VIP = '10.96.0.10';
const T0 = 1_000_000; // ms: conntrack time 1000 s
const NOW = 1000;

let dp: Datapath;
let ports: ResolvedServicePort[];
/** backend address each flow was sent to, read off the rewritten packet */
let est: string;
let synOnly: string;

function dstOf(pkt: Uint8Array): string {
  return ipStr(get32(pkt, 16));
}

function ask<T>(req: Record<string, unknown>, now = NOW): T {
  return inspectAnswer(dp, req, now, ports) as T;
}

beforeEach(() => {
  dp = createDatapath({ seed: 7 });
  const web = servicePort(
    service('web', VIP),
    80,
    'TCP',
    [endpoint('10.244.2.5:8080'), endpoint('10.244.2.6:8080')],
    'http',
  );
  const empty = servicePort(service('empty', '10.96.0.20'), 80, 'TCP', [], 'http');
  const dnsSvc = service('dns', '10.96.0.53', { sessionAffinity: 'ClientIP' });
  const dns = servicePort(dnsSvc, 53, 'UDP', [endpoint('10.244.2.7:53')], 'dns');
  ports = [web, empty, dns];
  loaderOf(dp).load(ports);

  const c = { src: CLIENT, dst: VIP, sport: 40000, dport: 80 };
  est = dstOf(run(dp, buildTcp({ ...c, flags: SYN }), T0).pkt);
  const back = { src: est, dst: CLIENT, sport: 8080, dport: 40000 };
  expect(run(dp, buildTcp({ ...back, flags: SYN | ACK }), T0).reason).toBe('TX_REVNAT');
  run(dp, buildTcp({ ...c, flags: ACK }), T0);
  synOnly = dstOf(run(dp, buildTcp({ ...c, sport: 40001, flags: SYN }), T0).pkt);
  const q = { src: '10.244.1.11', dst: '10.96.0.53', sport: 5353, dport: 53, data: 'q' };
  expect(get16(run(dp, buildUdp(q), T0).pkt, 22)).toBe(53);
});

describe('ct', () => {
  it('lists every live flow with both tuples and per-direction counters', () => {
    const { entries, total } = ask<{ entries: CtEntry[]; total: number }>({ cmd: 'ct' });
    expect(total).toBe(3);
    const e = entries.find((x) => x.orig.sport === 40000);
    expect(e).toMatchObject({
      proto: 'TCP',
      protoNum: 6,
      state: 'ESTABLISHED',
      expiresInSec: 86400,
      orig: { src: CLIENT, dst: VIP, sport: 40000, dport: 80, packets: 2, bytes: 80 },
      reply: { src: est, dst: CLIENT, sport: 8080, dport: 40000, packets: 1, bytes: 40 },
      seenReply: true,
      assured: true,
    });
    expect(formatCtEntry(e as CtEntry)).toBe(
      `tcp      6 86400 ESTABLISHED src=${CLIENT} dst=${VIP} sport=40000 dport=80 packets=2 ` +
        `bytes=80 src=${est} dst=${CLIENT} sport=8080 dport=40000 packets=1 bytes=40 ` +
        '[ASSURED] mark=0 use=1',
    );
    const syn = entries.find((x) => x.orig.sport === 40001) as CtEntry;
    expect(formatCtEntry(syn)).toBe(
      `tcp      6 120 SYN_SENT src=${CLIENT} dst=${VIP} sport=40001 dport=80 packets=1 bytes=40 ` +
        `[UNREPLIED] src=${synOnly} dst=${CLIENT} sport=8080 dport=40001 packets=0 bytes=0 ` +
        'mark=0 use=1',
    );
  });

  it('filters like conntrack -L: protocol, state, original source/ports, reply source', () => {
    const sports = (filter: Record<string, unknown>) =>
      ask<{ entries: CtEntry[] }>({ cmd: 'ct', filter })
        .entries.map((x) => x.orig.sport)
        .sort();
    expect(sports({ proto: 'udp' })).toEqual([5353]);
    expect(sports({ proto: 'tcp', state: 'syn_sent' })).toEqual([40001]);
    expect(sports({ src: '10.244.1.0/24', dport: 80 })).toEqual([40000, 40001]);
    expect(sports({ src: '10.244.1.11' })).toEqual([5353]);
    expect(sports({ dst: '10.96.0.53', replySrc: '10.244.2.7', replyDst: '10.244.1.11' })).toEqual([
      5353,
    ]);
    expect(sports({ replySrc: est, sport: 40000 })).toEqual([40000]);
    expect(sports({ proto: 'icmp' })).toEqual([]);
  });

  it('answers at most `limit` entries, with the total that matched', () => {
    const r = ask<{ entries: CtEntry[]; total: number }>({ cmd: 'ct', limit: 1 });
    expect([r.entries.length, r.total]).toEqual([1, 3]);
    expect(() => ask({ cmd: 'ct', limit: -1 })).toThrow(/limit must be an integer/);
  });

  it('leaves out expired flows (SYN_SENT lives 120 s, unreplied UDP 30 s)', () => {
    const { entries } = ask<{ entries: CtEntry[] }>({ cmd: 'ct' }, NOW + 121);
    expect(entries.map((x) => x.orig.sport)).toEqual([40000]);
    expect(ask({ cmd: 'ct-count' }, NOW + 121)).toEqual({
      count: 1,
      max: dp.ct.capacity,
      max6: dp.ct6.capacity,
    });
  });

  it('refuses a bad filter naming the field, and flushes nothing', () => {
    expect(() => ask({ cmd: 'ct-flush', filter: { src: '10.244.1' } })).toThrow(
      /ct-flush: filter\.src: invalid IPv4 address "10\.244\.1"/,
    );
    expect(() => ask({ cmd: 'ct-flush', filter: { source: CLIENT } })).toThrow(
      /filter\.source: unknown filter/,
    );
    expect(() => ask({ cmd: 'ct', filter: { proto: 'sctpx' } })).toThrow(/filter\.proto/);
    expect(() => ask({ cmd: 'ct', filter: { state: 'LISTEN' } })).toThrow(/filter\.state/);
    expect(ask<{ count: number }>({ cmd: 'ct-count' }).count).toBe(3);
  });

  it('flushes the flows a filter matches, then all of them', () => {
    expect(ask({ cmd: 'ct-count', filter: { proto: 'tcp' } })).toMatchObject({ count: 2 });
    expect(ask({ cmd: 'ct-flush', filter: { proto: 'tcp' } })).toEqual({ deleted: 2 });
    expect(ask<{ entries: CtEntry[] }>({ cmd: 'ct' }).entries.map((x) => x.proto)).toEqual(['UDP']);
    expect(ask({ cmd: 'ct-flush' })).toEqual({ deleted: 1 });
    expect(dp.ct.size).toBe(0);
  });
});

describe('svc', () => {
  it('shows each service port with its backends and connections counted from conntrack', () => {
    const r = ask<SvcReport>({ cmd: 'svc' });
    const conns = (addr: string) => ({
      active: addr === est ? 1 : 0,
      inactive: addr === synOnly ? 1 : 0,
    });
    expect(r.connTableSize).toBe(dp.ct.capacity);
    expect(r.services.map((s) => `${s.proto} ${s.vip}:${s.port} ${s.name}`)).toEqual([
      'TCP 10.96.0.10:80 default/web:http',
      'TCP 10.96.0.20:80 default/empty:http',
      'UDP 10.96.0.53:53 default/dns:dns',
    ]);
    const [web, empty, dns] = r.services;
    expect(web).toMatchObject({ scheduler: 'random', flags: [], affinityTimeoutSec: 0 });
    expect(web.backends).toEqual([
      expect.objectContaining({ addr: '10.244.2.5', port: 8080, weight: 1, state: 'active' }),
      expect.objectContaining({ addr: '10.244.2.6', port: 8080, weight: 1, state: 'active' }),
    ]);
    for (const b of web.backends) expect(b).toMatchObject(conns(b.addr));
    expect(empty.backends).toEqual([]);
    expect(dns).toMatchObject({ flags: ['affinity'], affinityTimeoutSec: 10800 });
    expect(dns.backends).toEqual([
      expect.objectContaining({ addr: '10.244.2.7', port: 53, active: 0, inactive: 1 }),
    ]);
    expect(web).toMatchObject({ namespace: 'default', service: 'web' });
    const text = formatSvcReport(r);
    expect(text.slice(3)).toEqual([
      'TCP  10.96.0.10:80 random                   default/web:http',
      ...web.backends.map(
        (b) =>
          `  -> ${b.addr}:8080              Masq    1      ${b.active}          ${b.inactive}         `,
      ),
      'TCP  10.96.0.20:80 random                   default/empty:http',
      'UDP  10.96.0.53:53 random persistent 10800  default/dns:dns',
      '  -> 10.244.2.7:53                Masq    1      0          1         ',
    ]);
  });

  it('counts a flow only under the service it came through (a backend shared by two)', () => {
    const same = [endpoint('10.244.2.5:8080'), endpoint('10.244.2.6:8080')];
    const web2 = servicePort(service('web2', '10.96.0.11'), 80, 'TCP', same, 'http');
    loaderOf(dp).load([...ports, web2]);
    const r = ask<SvcReport>({ cmd: 'svc' });
    const byVip = (vip: string) => r.services.find((s) => s.vip === vip)?.backends ?? [];
    expect(byVip('10.96.0.11').map((b) => b.id)).toEqual(byVip(VIP).map((b) => b.id));
    for (const b of byVip('10.96.0.11')) expect(b).toMatchObject({ active: 0, inactive: 0 });
    const total = byVip(VIP).reduce((n, b) => n + b.active + b.inactive, 0);
    expect(total).toBe(2);
  });

  it('names a service on a VIP >= 2^31 and shows its backends >= 2^31 (int32 in the maps)', () => {
    const hi = servicePort(
      service('hi', '172.30.0.10'),
      80,
      'TCP',
      [endpoint('192.168.2.5:8080')],
      'http',
    );
    ports = [...ports, hi];
    loaderOf(dp).load(ports);
    const r = ask<SvcReport>({ cmd: 'svc' });
    const s = r.services.find((x) => x.vip === '172.30.0.10');
    expect(s?.name).toBe('default/hi:http');
    expect(s?.backends.map((b) => `${b.addr}:${b.port}`)).toEqual(['192.168.2.5:8080']);
  });

  it('stops counting a flushed flow', () => {
    ask({ cmd: 'ct-flush', filter: { proto: 'tcp' } });
    const web = ask<SvcReport>({ cmd: 'svc' }).services[0];
    for (const b of web.backends) expect(b).toMatchObject({ active: 0, inactive: 0 });
  });
});

describe('svc on an externalTrafficPolicy: Local NodePort (regression: protocol printed as 134)', () => {
  it('names the protocol TCP, marks the local-scope entry and names its Service', () => {
    const node = '172.30.0.11';
    const d = createDatapath({
      nodeIp: ipv4ToU32(node),
      podGateway: ipv4ToU32('10.244.1.1'),
      podCidr: '10.244.1.0/24',
      clusterCidr: '10.244.0.0/16',
    });
    const svc = service('web-local', '10.96.0.81', {
      type: 'NodePort',
      externalTrafficPolicy: 'Local',
    });
    const rsp = servicePort(svc, 80, 'TCP', [endpoint('10.244.1.2:8080', { nodeName: 'n1' })], '');
    rsp.port.nodePort = 30081;
    loaderOf(d).load([rsp], { nodeName: 'n1' });
    const r = inspectAnswer(d, { cmd: 'svc' }, NOW, [rsp]) as SvcReport;
    const np = r.services.filter((s) => s.vip === node && s.port === 30081);
    expect(np.map((s) => [s.proto, s.protoNum])).toEqual([
      ['TCP', 6],
      ['TCP', 6],
    ]);
    expect(np.map((s) => s.flags.includes('local-scope'))).toEqual([false, true]);
    for (const s of np) expect(s).toMatchObject({ namespace: 'default', service: 'web-local' });
    const text = formatSvcReport(r).join('\n');
    expect(text).not.toMatch(/^134 /m);
    expect(text).toMatch(
      /^TCP {2}172\.30\.0\.11:30081 random +default\/web-local \(local endpoints\)$/m,
    );
  });
});

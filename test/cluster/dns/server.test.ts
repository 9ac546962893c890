// The cluster DNS server on real UDP and TCP sockets on 127.0.0.1, answering from the YAML
// fixtures in test/fixtures/cluster-dns (one Service of each kind the Kubernetes DNS
// specification names) — every record kind, negative answers, truncation, forwarding.
import { join } from 'node:path';
import dnsPacket from 'dns-packet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RCODE } from '../../../src/cluster/dns/responder.ts';
import { ClusterDnsServer } from '../../../src/cluster/dns/server.ts';
import { readView } from '../../../src/cluster/dns/view.ts';
import { ask, data, exchange, startUpstream, type Upstream } from './dns-client.ts';

const FIXTURES = join(import.meta.dirname, '../../fixtures/cluster-dns');
const D = 'cluster.local';

let server: ClusterDnsServer;
let port: number;

beforeAll(async () => {
  server = new ClusterDnsServer({ domain: D });
  server.setView(readView(FIXTURES));
  port = (await server.listen('127.0.0.1', 0)).port;
});
afterAll(() => server.close());

describe.each([['udp'], ['tcp']])('over %s', (transport) => {
  const tcp = transport === 'tcp';

  it('ClusterIP Service: A is the ClusterIP, authoritative, owner spelled as asked', async () => {
    const r = await ask(port, 'Web.Default.svc.Cluster.Local', 'A', { tcp });
    expect(r.rcode).toBe(RCODE.NOERROR);
    expect(r.reply.flag_aa).toBe(true);
    expect(r.reply.answers).toEqual([
      expect.objectContaining({
        type: 'A',
        name: 'Web.Default.svc.Cluster.Local',
        ttl: 5,
        data: '10.96.0.10',
      }),
    ]);
  });

  it('ClusterIP SRV: per named port, target the Service name, its A in additionals', async () => {
    const r = await ask(port, `_http._tcp.web.default.svc.${D}`, 'SRV', { tcp });
    expect(data(r.reply.answers, 'SRV')).toEqual([
      { priority: 0, weight: 100, port: 80, target: `web.default.svc.${D}` },
    ]);
    expect(data(r.reply.additionals, 'A')).toEqual(['10.96.0.10']);
    const udp = await ask(port, `_dns-udp._udp.web.default.svc.${D}`, 'SRV', { tcp });
    expect(data(udp.reply.answers, 'SRV')).toEqual([
      { priority: 0, weight: 100, port: 5353, target: `web.default.svc.${D}` },
    ]);
    // the port is UDP: no _tcp record, and the name does not exist
    expect((await ask(port, `_dns-udp._tcp.web.default.svc.${D}`, 'SRV', { tcp })).rcode).toBe(
      RCODE.NXDOMAIN,
    );
  });

  it('headless Service: A records of the ready endpoints only, and one name per endpoint', async () => {
    const r = await ask(port, `db.default.svc.${D}`, 'A', { tcp });
    expect(data(r.reply.answers, 'A').sort()).toEqual(['10.244.1.7', '10.244.2.7']);
    const named = await ask(port, `db-0.db.default.svc.${D}`, 'A', { tcp });
    expect(data(named.reply.answers, 'A')).toEqual(['10.244.1.7']);
    const unnamed = await ask(port, `10-244-2-7.db.default.svc.${D}`, 'A', { tcp });
    expect(data(unnamed.reply.answers, 'A')).toEqual(['10.244.2.7']);
    // db-2 is not ready and db does not publish not-ready addresses
    expect((await ask(port, `db-2.db.default.svc.${D}`, 'A', { tcp })).rcode).toBe(RCODE.NXDOMAIN);
  });

  it('headless SRV: one per ready endpoint, targeting its hostname, port of the slice', async () => {
    const r = await ask(port, `_pg._tcp.db.default.svc.${D}`, 'SRV', { tcp });
    const srv = data(r.reply.answers, 'SRV') as { target: string; port: number; weight: number }[];
    expect(srv.map((s) => s.target).sort()).toEqual([
      `10-244-2-7.db.default.svc.${D}`,
      `db-0.db.default.svc.${D}`,
    ]);
    expect(srv.every((s) => s.port === 5432 && s.weight === 50)).toBe(true);
    expect(data(r.reply.additionals, 'A').sort()).toEqual(['10.244.1.7', '10.244.2.7']);
  });

  it('publishNotReadyAddresses publishes a not-ready endpoint', async () => {
    const r = await ask(port, `lazy.default.svc.${D}`, 'A', { tcp });
    expect(data(r.reply.answers, 'A')).toEqual(['10.244.1.9']);
    const srv = await ask(port, `_http._tcp.lazy.default.svc.${D}`, 'SRV', { tcp });
    expect(data(srv.reply.answers, 'SRV')).toEqual([
      { priority: 0, weight: 100, port: 8080, target: `10-244-1-9.lazy.default.svc.${D}` },
    ]);
  });

  it('headless Service without a published endpoint: NXDOMAIN with the SOA', async () => {
    const r = await ask(port, `gone.default.svc.${D}`, 'A', { tcp });
    expect(r.rcode).toBe(RCODE.NXDOMAIN);
    expect(r.reply.authorities).toEqual([expect.objectContaining({ type: 'SOA', name: D })]);
  });

  it('ExternalName: CNAME to spec.externalName, for A and any other type', async () => {
    for (const type of ['A', 'AAAA', 'TXT'] as const) {
      const r = await ask(port, `search.default.svc.${D}`, type, { tcp });
      expect(r.rcode).toBe(RCODE.NOERROR);
      expect(r.reply.answers).toEqual([
        expect.objectContaining({ type: 'CNAME', data: 'www.example.com' }),
      ]);
    }
  });

  it('ExternalName to a cluster name: the CNAME and then the target A, in one answer', async () => {
    const r = await ask(port, `alias.default.svc.${D}`, 'A', { tcp });
    expect(r.reply.answers?.map((a) => [a.type, a.name, (a as { data: unknown }).data])).toEqual([
      ['CNAME', `alias.default.svc.${D}`, `web.default.svc.${D}`],
      ['A', `web.default.svc.${D}`, '10.96.0.10'],
    ]);
  });

  it('PTR: a ClusterIP names its Service, a headless endpoint its hostname', async () => {
    const svc = await ask(port, '10.0.96.10.in-addr.arpa', 'PTR', { tcp });
    expect(data(svc.reply.answers, 'PTR')).toEqual([`web.default.svc.${D}`]);
    const ep = await ask(port, '7.1.244.10.in-addr.arpa', 'PTR', { tcp });
    expect(data(ep.reply.answers, 'PTR')).toEqual([`db-0.db.default.svc.${D}`]);
    // a not-ready endpoint has no reverse name; not ours, and no upstream: REFUSED
    expect((await ask(port, '8.2.244.10.in-addr.arpa', 'PTR', { tcp })).rcode).toBe(RCODE.REFUSED);
  });

  it('a name that does not exist: NXDOMAIN, authoritative, the SOA in authority', async () => {
    for (const name of [
      `nope.default.svc.${D}`,
      `web.nons.svc.${D}`,
      `example.com.default.svc.${D}`,
      `x.${D}`,
    ]) {
      const r = await ask(port, name, 'A', { tcp });
      expect([name, r.rcode]).toEqual([name, RCODE.NXDOMAIN]);
      expect(r.reply.flag_aa).toBe(true);
      expect(r.reply.answers).toEqual([]);
      expect(r.reply.authorities).toEqual([
        expect.objectContaining({
          type: 'SOA',
          name: D,
          data: expect.objectContaining({ mname: `ns.dns.${D}`, minimum: 5 }),
        }),
      ]);
    }
  });

  it('an existing name asked for another type: NOERROR, no answer, the SOA (NODATA)', async () => {
    const cases: [string, 'AAAA' | 'MX' | 'A'][] = [
      [`web.default.svc.${D}`, 'AAAA'],
      [`web.default.svc.${D}`, 'MX'],
      [`default.svc.${D}`, 'A'], // an empty non-terminal: the namespace
      [`empty-ns.svc.${D}`, 'A'], // a Namespace object with no Services
      [`svc.${D}`, 'A'],
    ];
    for (const [name, type] of cases) {
      const r = await ask(port, name, type, { tcp });
      expect([name, type, r.rcode, r.reply.answers]).toEqual([name, type, RCODE.NOERROR, []]);
      expect(r.reply.authorities?.[0]?.type).toBe('SOA');
    }
  });

  it('zone apex, schema version and the deprecated pod records', async () => {
    const ns = await ask(port, D, 'NS', { tcp });
    expect(data(ns.reply.answers, 'NS')).toEqual([`ns.dns.${D}`]);
    const nsA = await ask(port, `ns.dns.${D}`, 'A', { tcp });
    expect(data(nsA.reply.answers, 'A')).toEqual(['10.96.0.53']); // the kube-dns ClusterIP
    const txt = await ask(port, `dns-version.${D}`, 'TXT', { tcp });
    expect(data(txt.reply.answers, 'TXT')).toEqual([[Buffer.from('1.1.0')]]);
    const pod = await ask(port, `10-244-1-2.default.pod.${D}`, 'A', { tcp });
    expect(data(pod.reply.answers, 'A')).toEqual(['10.244.1.2']);
    expect((await ask(port, `10-244-1-256.default.pod.${D}`, 'A', { tcp })).rcode).toBe(
      RCODE.NXDOMAIN,
    );
  });

  it('a name outside the cluster domain without an upstream: REFUSED, no recursion offered', async () => {
    const r = await ask(port, 'example.com', 'A', { tcp });
    expect(r.rcode).toBe(RCODE.REFUSED);
    expect([r.reply.flag_aa, r.reply.flag_ra]).toEqual([false, false]);
    expect(r.reply.questions).toEqual([expect.objectContaining({ name: 'example.com' })]);
  });
});

describe('malformed and unsupported messages', () => {
  it('FORMERR for a message that does not decode, NOTIMP for another opcode; id kept', async () => {
    const junk = Buffer.from([0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0x3f]);
    const r = await exchange(port, junk, false);
    expect([r.readUInt16BE(0), r.readUInt16BE(2) & 0x800f]).toEqual([
      0x1234,
      0x8000 | RCODE.FORMERR,
    ]);
    const status = Buffer.from([0xab, 0xcd, 0x10, 0x00, 0, 0, 0, 0, 0, 0, 0, 0]); // opcode 2
    const s = await exchange(port, status, true);
    expect([s.readUInt16BE(0), s.readUInt16BE(2) & 0xf]).toEqual([0xabcd, RCODE.NOTIMP]);
  });

  it('a cluster name asked in class CHAOS is not answered from the zone: REFUSED', async () => {
    const q = dnsPacket.encode({
      type: 'query',
      id: 77,
      questions: [{ type: 'A', name: `web.default.svc.${D}`, class: 'CH' }],
    });
    const r = await exchange(port, q, false);
    expect(r.readUInt16BE(2) & 0xf).toBe(RCODE.REFUSED);
  });

  it('TCP: two queries on one connection, each answered', async () => {
    const a = await ask(port, `web.default.svc.${D}`, 'A', { tcp: true });
    const b = await ask(port, `db.default.svc.${D}`, 'A', { tcp: true });
    expect([a.reply.answers?.length, b.reply.answers?.length]).toEqual([1, 2]);
  });
});

describe('forwarding to an upstream (on loopback)', () => {
  let up: Upstream;
  let fwd: ClusterDnsServer;
  let fwdPort: number;
  beforeAll(async () => {
    up = await startUpstream({ 'example.com': '192.0.2.10' });
    fwd = new ClusterDnsServer({ domain: D, upstream: { host: '127.0.0.1', port: up.port } });
    fwd.setView(readView(FIXTURES));
    fwdPort = (await fwd.listen('127.0.0.1', 0)).port;
  });
  afterAll(async () => {
    await fwd.close();
    await up.close();
  });

  it.each([['udp'], ['tcp']])(
    'relays the upstream answer over %s; cluster names stay local',
    async (t) => {
      const tcp = t === 'tcp';
      const before = up.asked.length;
      const r = await ask(fwdPort, 'example.com', 'A', { tcp });
      expect(data(r.reply.answers, 'A')).toEqual(['192.0.2.10']);
      expect(r.reply.flag_ra).toBe(true);
      const local = await ask(fwdPort, `web.default.svc.${D}`, 'A', { tcp });
      expect([local.reply.flag_aa, local.reply.flag_ra]).toEqual([true, true]);
      expect(up.asked.slice(before)).toEqual(['example.com A']);
    },
  );

  it('SERVFAIL when the upstream does not answer', async () => {
    const dead = new ClusterDnsServer({ domain: D, upstream: { host: '127.0.0.1', port: 9 } });
    const p = (await dead.listen('127.0.0.1', 0)).port;
    try {
      const r = await ask(p, 'example.com', 'A', { timeoutMs: 5000 });
      expect(r.rcode).toBe(RCODE.SERVFAIL);
    } finally {
      await dead.close();
    }
  });
});

describe('--delay-ms: a slow DNS Pod', () => {
  it('holds every reply back at least that long, zone answers and NXDOMAIN alike', async () => {
    const slow = new ClusterDnsServer({ domain: D, delayMs: 150 });
    slow.setView(readView(FIXTURES));
    const p = (await slow.listen('127.0.0.1', 0)).port;
    try {
      for (const name of [`web.default.svc.${D}`, `nothing.default.svc.${D}`]) {
        const t0 = performance.now();
        const r = await ask(p, name, 'A', { timeoutMs: 5000 });
        expect(performance.now() - t0).toBeGreaterThanOrEqual(145);
        expect(r.reply.flag_aa).toBe(true);
      }
    } finally {
      await slow.close();
    }
  });
});

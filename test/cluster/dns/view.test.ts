// The server and its view directory: kubectl-generated Services, a headless Service large enough
// to need truncation over UDP, the reload when a file changes, and a bad file that keeps the last
// good zone and is reported naming file, object and field.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments, stringify } from 'yaml';
import { RCODE } from '../../../src/cluster/dns/responder.ts';
import { ClusterDnsServer } from '../../../src/cluster/dns/server.ts';
import { readView, ViewError, watchView } from '../../../src/cluster/dns/view.ts';
import { ask, data } from './dns-client.ts';

const KUBECTL = join(import.meta.dirname, '../../fixtures/cluster-dns-kubectl/services.yaml');
const D = 'cluster.local';

function slice(service: string, ips: string[], extra: Record<string, unknown> = {}): string {
  return stringify({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `${service}-x`,
      namespace: 'default',
      labels: { 'kubernetes.io/service-name': service },
    },
    addressType: 'IPv4',
    ports: [{ name: extra.portName ?? 'http', port: 8080, protocol: 'TCP' }],
    endpoints: ips.map((ip, i) => ({
      addresses: [ip],
      conditions: { ready: true },
      hostname: extra.hostnames ? `${service}-${i}` : undefined,
    })),
  });
}

let dir: string;
let server: ClusterDnsServer;
let port: number;
let errors: string[] = [];
let views = 0;
let unwatch: () => void;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kd-dns-view-'));
  // kubectl's output as is, but for the clusterIP the apiserver would have allocated to web2
  const docs = parseAllDocuments(readFileSync(KUBECTL, 'utf8')).map((d) => d.toJS());
  docs[0].spec.clusterIP = '10.96.7.7';
  writeFileSync(join(dir, 'kubectl.yaml'), docs.map((d) => stringify(d)).join('---\n'));
  writeFileSync(
    join(dir, 'pets-slice.yaml'),
    slice('pets', ['10.244.1.20', '10.244.2.21'], { portName: '5432-5432', hostnames: true }),
  );
  const big = Array.from({ length: 20 }, (_, i) => `10.244.3.${i + 2}`);
  writeFileSync(
    join(dir, 'big.yaml'),
    `${stringify({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'big', namespace: 'default' }, spec: { clusterIP: 'None', ports: [{ name: 'http', port: 80 }] } })}---\n${slice('big', big)}`,
  );
  server = new ClusterDnsServer({ domain: D });
  unwatch = watchView(
    dir,
    (v) => {
      views++;
      server.setView(v);
    },
    (e) => errors.push(e.message),
  );
  port = (await server.listen('127.0.0.1', 0)).port;
});
afterAll(async () => {
  unwatch();
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

async function eventually<T>(f: () => Promise<T>, ok: (t: T) => boolean, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const t = await f();
    if (ok(t) || Date.now() > end) return t;
    await sleep(50);
  }
}

describe('kubectl create service output', () => {
  it('clusterip: A, and SRV for the port kubectl names "80-8080"', async () => {
    const a = await ask(port, `web2.default.svc.${D}`, 'A');
    expect(data(a.reply.answers)).toEqual(['10.96.7.7']);
    const srv = await ask(port, `_80-8080._tcp.web2.default.svc.${D}`, 'SRV');
    expect(data(srv.reply.answers)).toEqual([
      { priority: 0, weight: 100, port: 80, target: `web2.default.svc.${D}` },
    ]);
  });

  it('clusterip --clusterip=None: the endpoints and their hostnames', async () => {
    const a = await ask(port, `pets.default.svc.${D}`, 'A', { tcp: true });
    expect(data(a.reply.answers).sort()).toEqual(['10.244.1.20', '10.244.2.21']);
    const one = await ask(port, `pets-1.pets.default.svc.${D}`, 'A');
    expect(data(one.reply.answers)).toEqual(['10.244.2.21']);
  });

  it('externalname: CNAME', async () => {
    const r = await ask(port, `ext.default.svc.${D}`, 'A');
    expect(r.reply.answers).toEqual([
      expect.objectContaining({ type: 'CNAME', data: 'db.example.org' }),
    ]);
  });
});

describe('truncation', () => {
  it('UDP without EDNS: over 512 bytes is sent empty with TC; TCP has all 20 records', async () => {
    const udp = await ask(port, `big.default.svc.${D}`, 'A');
    expect(udp.reply.flag_tc).toBe(true);
    expect(udp.reply.answers).toEqual([]);
    expect(udp.bytes).toBeLessThanOrEqual(512);
    const tcp = await ask(port, `big.default.svc.${D}`, 'A', { tcp: true });
    expect(tcp.reply.flag_tc).toBe(false);
    expect(tcp.reply.answers).toHaveLength(20);
    expect(tcp.bytes).toBeGreaterThan(512);
  });

  it('UDP with EDNS 1232: the whole answer fits and comes back with an OPT record', async () => {
    const r = await ask(port, `big.default.svc.${D}`, 'A', { edns: 1232 });
    expect(r.reply.flag_tc).toBe(false);
    expect(r.reply.answers).toHaveLength(20);
    expect(r.reply.additionals?.some((a) => a.type === 'OPT')).toBe(true);
  });

  it('a small answer over UDP is not truncated', async () => {
    const r = await ask(port, `pets.default.svc.${D}`, 'A');
    expect([r.reply.flag_tc, r.reply.answers?.length]).toEqual([false, 2]);
  });
});

describe('reload', () => {
  it('a new Service answers after its file appears; a removed one is NXDOMAIN again', async () => {
    const name = `late.default.svc.${D}`;
    expect((await ask(port, name, 'A')).rcode).toBe(RCODE.NXDOMAIN);
    const file = join(dir, 'late.yaml');
    writeFileSync(
      file,
      stringify({
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'late' },
        spec: { clusterIP: '10.96.9.9' },
      }),
    );
    const r = await eventually(
      () => ask(port, name, 'A'),
      (x) => x.rcode === RCODE.NOERROR,
    );
    expect(data(r.reply.answers)).toEqual(['10.96.9.9']);
    rmSync(file);
    const gone = await eventually(
      () => ask(port, name, 'A'),
      (x) => x.rcode === RCODE.NXDOMAIN,
    );
    expect(gone.rcode).toBe(RCODE.NXDOMAIN);
  });

  it('a bad file keeps the last good zone and is reported with file, object and field', async () => {
    const file = join(dir, 'zz-bad.yaml');
    const before = views;
    errors = [];
    writeFileSync(
      file,
      stringify({
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'bad', namespace: 'default' },
        spec: { clusterIP: '10.96.300.1' },
      }),
    );
    await eventually(
      async () => errors.length,
      (n) => n > 0,
    );
    expect(errors[0]).toBe(
      `${file}: Service default/bad: spec.clusterIPs[0]: not an IP: 10.96.300.1`,
    );
    expect(views).toBe(before);
    expect((await ask(port, `web2.default.svc.${D}`, 'A')).rcode).toBe(RCODE.NOERROR);
    rmSync(file);
    await eventually(
      async () => views,
      (n) => n > before,
    );
  });
});

describe('readView', () => {
  it('names the field of a slice without its Service label', () => {
    const d = mkdtempSync(join(tmpdir(), 'kd-dns-bad-'));
    try {
      writeFileSync(
        join(d, 's.yaml'),
        'apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s1}\nendpoints: []\n',
      );
      expect(() => readView(d)).toThrow(ViewError);
      expect(() => readView(d)).toThrow(
        `${join(d, 's.yaml')}: EndpointSlice default/s1: metadata.labels[kubernetes.io/service-name]: missing`,
      );
    } finally {
      rmSync(d, { recursive: true });
    }
  });

  it('skips kinds DNS has no use for and reads List items', () => {
    const d = mkdtempSync(join(tmpdir(), 'kd-dns-list-'));
    try {
      writeFileSync(
        join(d, 'l.yaml'),
        'apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Service, metadata: {name: a}, spec: {clusterIP: 10.96.1.1}}\n- {apiVersion: apps/v1, kind: Deployment, metadata: {name: a}}\n',
      );
      const v = readView(d);
      expect(v.services.map((s) => [s.name, s.clusterIPs])).toEqual([['a', ['10.96.1.1']]]);
    } finally {
      rmSync(d, { recursive: true });
    }
  });
});

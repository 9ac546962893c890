// `kubetun replay` through the npm bin shim, as a user runs it.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadManifests, resolveServicePorts } from '../../src/manifests/index.ts';
import { replayFiles } from '../../src/cli/replay.ts';
import { replayPcap } from '../../src/pcap/replay.ts';
import { PACKETS, scenarioPcap, T0 } from './scenario.ts';
import { craftPcap } from '../fixtures/pcap-craft.ts';

let dir = '';
const kubetun = (...args: string[]) =>
  spawnSync('node', ['bin/kubetun.mjs', ...args], { encoding: 'utf8' });

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'kubetun-replay-cli-'));
  writeFileSync(join(dir, 'in.pcap'), scenarioPcap());
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('kubetun replay', () => {
  it('writes the same capture as the replay core and traces one line per packet', () => {
    const out = join(dir, 'out.pcap');
    const r = kubetun(
      'replay',
      '--manifests',
      'test/fixtures/cluster',
      '--in',
      join(dir, 'in.pcap'),
      '--out',
      out,
      '--trace',
    );
    expect(r.status).toBe(0);
    const core = replayPcap(
      resolveServicePorts(loadManifests('test/fixtures/cluster')),
      scenarioPcap(),
    );
    expect(new Uint8Array(readFileSync(out))).toEqual(core.pcap);
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines.length).toBe(PACKETS.filter((p) => p.data).length);
    expect(lines[0]).toMatch(
      /^1 22:13:20\.000001 TCP 10\.244\.0\.5\.40000 > 10\.96\.0\.10\.80 \[S\] .* TX_DNAT_NEW ct=new backend=web-5@10\.244\.1\.5:8080 /,
    );
    expect(r.stderr).toContain(
      'replay: 14 packets in, 12 out (PASS 1, TX 10, REPLY 1, DROP 2), 1 non-IPv4 records skipped',
    );
  });

  it('traces as JSON lines with --json', () => {
    const args = [
      '--manifests',
      'test/fixtures/cluster',
      '--in',
      join(dir, 'in.pcap'),
      '--out',
      join(dir, 'j.pcap'),
    ];
    const r = kubetun('replay', ...args, '--trace', '--json');
    expect(r.status).toBe(0);
    const first = JSON.parse(r.stdout.split('\n')[0]);
    expect(first).toMatchObject({
      n: 1,
      tsSec: 1700000000,
      tsNsec: 1000,
      verdictName: 'TX',
      reasonName: 'TX_DNAT_NEW',
      ct: 'new',
      backend: '10.244.1.5:8080',
      output: 'TCP 10.244.0.5.40000 > 10.244.1.5.8080 [S] len 0',
    });
  });

  it('prints no trace without --trace', () => {
    const r = kubetun(
      'replay',
      '--manifests',
      'test/fixtures/cluster',
      '--in',
      join(dir, 'in.pcap'),
      '--out',
      join(dir, 'quiet.pcap'),
    );
    expect([r.status, r.stdout]).toEqual([0, '']);
  });

  it('fails with the located manifest error, no stack trace, exit status 2', () => {
    const bad = join(dir, 'bad');
    mkdirSync(bad);
    writeFileSync(
      join(bad, 'svc.yaml'),
      'apiVersion: v1\nkind: Service\nmetadata: { name: web }\nspec: { clusterIP: 10.96.0.1, ports: [ { port: 0 } ] }\n',
    );
    const r = kubetun(
      'replay',
      '--manifests',
      bad,
      '--in',
      join(dir, 'in.pcap'),
      '--out',
      join(dir, 'x.pcap'),
    );
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(
      `kubetun replay: ${join(bad, 'svc.yaml')}: Service default/web: spec.ports[0].port: port 0 is out of range 1-65535\n`,
    );
  });

  it('fails on an input that is not a pcap file', () => {
    writeFileSync(join(dir, 'junk.pcap'), 'this is not a capture, just some text');
    const r = kubetun(
      'replay',
      '--manifests',
      'test/fixtures/cluster',
      '--in',
      join(dir, 'junk.pcap'),
      '--out',
      join(dir, 'y.pcap'),
    );
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^kubetun replay: .*junk\.pcap: not a pcap file/);
  });

  it('says where to capture when the input holds replies captured on the backend pod’s side', () => {
    // only the backend's half of the web flow: what tcpdump on the backend pod's veth sees
    const reply = PACKETS.filter((p) => p.what === 'SYN-ACK' || p.what === 'response');
    const pcap = craftPcap({
      bigEndian: false,
      nanos: false,
      linkType: 101,
      records: reply.map((p, i) => ({ tsSec: T0 + i, frac: 0, data: p.data! })),
    });
    writeFileSync(join(dir, 'podside.pcap'), pcap);
    const lines: string[] = [];
    const r = replayFiles({
      manifests: 'test/fixtures/cluster',
      input: join(dir, 'podside.pcap'),
      output: join(dir, 'podside-out.pcap'),
      trace: true,
      print: (l) => lines.push(l),
    });
    expect(r.podSideReplies).toBe(2);
    expect(lines[0]).toMatch(/^1 22:13:20\.000000 TCP 10\.244\.1\.5\.8080 > .* PASS_NOT_SERVICE /);
    const r2 = kubetun(
      'replay',
      '--manifests',
      'test/fixtures/cluster',
      '--in',
      join(dir, 'podside.pcap'),
      '--out',
      join(dir, 'p2.pcap'),
    );
    expect(r2.stderr).toMatch(
      /2 packets from service endpoints passed as PASS_NOT_SERVICE: capture .* client pod's node-side veth/,
    );
    // the whole scenario (client side) draws no such hint
    expect(
      kubetun(
        'replay',
        '--manifests',
        'test/fixtures/cluster',
        '--in',
        join(dir, 'in.pcap'),
        '--out',
        join(dir, 'p3.pcap'),
      ).stderr,
    ).not.toContain('node-side veth');
  });
});

// End to end: manifests → resolve → datapath → pcap, checked by tcpdump, an independent parser
// that verifies every IP, TCP and UDP checksum of what the datapath wrote.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { V_DROP, V_PASS, V_REPLY, V_TX } from '../../src/datapath/state/verdict.ts';
import { loadManifests, resolveServicePorts } from '../../src/manifests/index.ts';
import { readPcap } from '../../src/pcap/reader.ts';
import {
  formatReplayEntry,
  type ReplayEntry,
  type ReplayResult,
  replayPcap,
} from '../../src/pcap/replay.ts';
import { PACKETS, scenarioPcap, tsOf } from './scenario.ts';

let dir = '';
let input: Uint8Array;
let inputCopy: Uint8Array;
let result: ReplayResult;
const entries: ReplayEntry[] = [];

/** tcpdump's output, one string per packet (a packet starts with its epoch timestamp). */
function tcpdump(file: string): string[] {
  const out = execFileSync('tcpdump', ['-tt', '-vv', '-n', '-r', file], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return out.split(/\n(?=\d{10}\.\d{6} )/).filter((b) => b.trim() !== '');
}

const BAD_CSUM = /bad cksum|incorrect|wrong|bad udp cksum/i;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'kubetun-replay-'));
  input = scenarioPcap();
  inputCopy = new Uint8Array(input);
  const ports = resolveServicePorts(loadManifests('test/fixtures/cluster'));
  result = replayPcap(ports, input, { onPacket: (e) => entries.push(e) });
  writeFileSync(join(dir, 'out.pcap'), result.pcap);
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const byWhat = (what: string) =>
  entries[PACKETS.filter((p) => p.data).findIndex((p) => p.what === what)];

describe('replay: what the datapath decided', () => {
  it('processes every IPv4 record and skips the ARP frame', () => {
    expect(result.packetsIn).toBe(PACKETS.filter((p) => p.data).length);
    expect(result.skipped).toBe(1);
    expect(entries.map((e) => e.n)).toEqual(PACKETS.flatMap((p, i) => (p.data ? [i + 1] : [])));
  });

  it('tracks the TCP flow: new, then reply/established, always the same backend', () => {
    const flow = [
      'SYN',
      'SYN-ACK',
      'ACK',
      'request',
      'response',
      'client FIN',
      'server FIN',
      'last ACK',
    ].map(byWhat);
    expect(flow.map((e) => e.ct)).toEqual([
      'new',
      'reply',
      'established',
      'established',
      'reply',
      'established',
      'reply',
      'established',
    ]);
    expect(new Set(flow.map((e) => e.backend))).toEqual(new Set(['10.244.1.5:8080']));
    expect(flow.map((e) => e.verdict)).toEqual(Array(8).fill(V_TX));
  });

  it('tracks the UDP exchange and passes, rejects and drops the rest', () => {
    expect([byWhat('DNS query').ct, byWhat('DNS query').backend, byWhat('DNS answer').ct]).toEqual([
      'new',
      '10.244.2.7:5353',
      'reply',
    ]);
    expect(byWhat('SYN to empty').verdict).toBe(V_REPLY);
    expect(byWhat('pod to pod').verdict).toBe(V_PASS);
    expect(byWhat('truncated').verdict).toBe(V_DROP);
    expect(byWhat('ping VIP').verdict).toBe(V_DROP); // iptables mode neither translates nor answers
    expect(result.verdicts).toEqual([1, 10, 1, 2]);
  });

  it('writes one trace line per packet with index, time, packet, verdict, reason, ct state and backend', () => {
    // tcpdump's time of day (T0 is 2023-11-14 22:13:20 UTC), not epoch seconds
    expect(formatReplayEntry(byWhat('SYN'))).toBe(
      `1 22:13:20.000001 TCP 10.244.0.5.40000 > 10.96.0.10.80 [S] len 0 TX TX_DNAT_NEW ct=new backend=10.244.1.5:8080` +
        ' => TCP 10.244.0.5.40000 > 10.244.1.5.8080 [S] len 0',
    );
    expect(formatReplayEntry(byWhat('truncated'))).toBe(
      `15 22:13:34.014001 IPv4 truncated (12 bytes) DROP DROP_TRUNCATED_IPV4 ct=- backend=-`,
    );
    expect(formatReplayEntry(byWhat('pod to pod'))).toMatch(
      / PASS PASS_NOT_SERVICE ct=- backend=-$/,
    );
    // the backend by the Pod its endpoint names (targetRef), when known
    expect(formatReplayEntry(byWhat('SYN'), new Map([['10.244.1.5:8080', 'web-5']]))).toContain(
      ' backend=web-5@10.244.1.5:8080 => ',
    );
  });

  it('leaves the input capture untouched', () => {
    expect(input).toEqual(inputCopy);
  });
});

describe('replay: what the datapath wrote, read back by tcpdump', () => {
  let blocks: string[] = [];
  beforeAll(() => {
    blocks = tcpdump(join(dir, 'out.pcap'));
  });

  it('wrote PASS/TX packets and REPLY packets, nothing for drops, stamped with the input times', () => {
    const written = PACKETS.flatMap((p, i) =>
      p.data && !['ping VIP', 'truncated'].includes(p.what) ? [i] : [],
    );
    expect(blocks.length).toBe(written.length);
    const stamp = (i: number) => `${tsOf(i).tsSec}.${String(tsOf(i).frac).padStart(6, '0')}`;
    expect(blocks.map((b) => b.slice(0, 17))).toEqual(written.map(stamp));
    expect(blocks.join('\n')).not.toContain('echo request');
  });

  it('reports every IP, TCP and UDP checksum correct', () => {
    for (const b of blocks) expect(b).not.toMatch(BAD_CSUM);
    // the outer header is the first line (an ICMP error quotes a TCP header further down)
    const outer = (proto: string) => blocks.filter((b) => b.split('\n')[0].includes(proto));
    const tcp = outer('proto TCP (6)');
    const udp = outer('proto UDP (17)');
    expect([tcp.length, udp.length, outer('proto ICMP (1)').length]).toEqual([8, 3, 1]);
    for (const b of tcp) expect(b).toMatch(/Flags \[[^\]]*\], cksum 0x[0-9a-f]{4} \(correct\)/);
    for (const b of udp) expect(b).toContain('[udp sum ok]');
  });

  it('sent the client packets to the backends and the replies from the VIPs', () => {
    const lines = blocks.map((b) => b.split('\n')[1].trim());
    expect(lines).toEqual([
      expect.stringMatching(/^10\.244\.0\.5\.40000 > 10\.244\.1\.5\.8080: Flags \[S\]/),
      expect.stringMatching(/^10\.96\.0\.10\.80 > 10\.244\.0\.5\.40000: Flags \[S\.\]/),
      expect.stringMatching(/^10\.244\.0\.5\.40000 > 10\.244\.1\.5\.8080: Flags \[\.\]/),
      expect.stringMatching(/^10\.244\.0\.5\.40000 > 10\.244\.1\.5\.8080: Flags \[P\.\]/),
      expect.stringMatching(/^10\.96\.0\.10\.80 > 10\.244\.0\.5\.40000: Flags \[P\.\]/),
      expect.stringMatching(/^10\.244\.0\.5\.40000 > 10\.244\.1\.5\.8080: Flags \[F\.\]/),
      expect.stringMatching(/^10\.96\.0\.10\.80 > 10\.244\.0\.5\.40000: Flags \[F\.\]/),
      expect.stringMatching(/^10\.244\.0\.5\.40000 > 10\.244\.1\.5\.8080: Flags \[\.\]/),
      expect.stringMatching(/^10\.244\.0\.5\.53000 > 10\.244\.2\.7\.5353: \[udp sum ok\]/),
      expect.stringMatching(/^10\.96\.0\.53\.53 > 10\.244\.0\.5\.53000: \[udp sum ok\]/),
      '10.96.0.99 > 10.244.0.5: ICMP 10.96.0.99 tcp port 80 unreachable, length 48',
      expect.stringMatching(/^10\.244\.0\.5\.7000 > 10\.244\.3\.3\.7000: \[udp sum ok\]/),
    ]);
  });

  it('writes the pod-to-pod packet byte for byte as it came in', () => {
    const out = readPcap(result.pcap).packets;
    const pass = PACKETS.find((p) => p.what === 'pod to pod')!.data!;
    expect(out.at(-1)!.data).toEqual(pass);
  });

  // Control: the checks above would see a broken checksum of each kind.
  it('tcpdump flags a corrupted IP, TCP, UDP or ICMP checksum (the check above can fail)', () => {
    const out = readPcap(result.pcap).packets;
    const cases: [number, number][] = [
      [0, 10], // IP header checksum of the SYN
      [0, 36], // TCP checksum of the SYN
      [8, 26], // UDP checksum of the DNS query
      [10, 22], // ICMP checksum of the reject
    ];
    for (const [pkt, byte] of cases) {
      const copy = new Uint8Array(result.pcap);
      const at = out[pkt].data.byteOffset - result.pcap.byteOffset + byte;
      copy[at] ^= 0x5a;
      const f = join(dir, `corrupt-${pkt}-${byte}.pcap`);
      writeFileSync(f, copy);
      expect(tcpdump(f)[pkt]).toMatch(BAD_CSUM);
    }
  });
});

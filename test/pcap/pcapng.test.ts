// The pcapng writer (src/pcap/pcapng.ts): the blocks laid out as the format says, and tshark —
// a reader we did not write — reads the file back: both interfaces, every packet, the
// timestamps, the cut length, the comments.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  PCAPNG_EPB,
  PCAPNG_IDB,
  PCAPNG_SHB,
  PcapngWriter,
  pcapngBlocks,
} from '../../src/pcap/pcapng.ts';
import { buildIcmpEcho, buildTcp, SYN } from '../datapath/harness.ts';

const dir = mkdtempSync(join(tmpdir(), 'kubetun-pcapng-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function sample(): Uint8Array {
  const chunks: Uint8Array[] = [];
  const w = new PcapngWriter((c) => chunks.push(c));
  const a = w.addInterface({ name: 'node1:in', description: 'as received', snaplen: 1536 });
  const b = w.addInterface({ name: 'node1:out', description: 'as written' });
  const syn = buildTcp({
    src: '10.244.1.10',
    dst: '10.96.0.10',
    sport: 40000,
    dport: 80,
    flags: SYN,
  });
  const dnat = buildTcp({
    src: '10.244.1.10',
    dst: '10.244.2.5',
    sport: 40000,
    dport: 8080,
    flags: SYN,
  });
  w.packet(a, 1_700_000_000_123_456, syn, syn.length, 'TX TX_DNAT_NEW; svc default/web:http');
  w.packet(b, 1_700_000_000_123_456, dnat, dnat.length, 'TX TX_DNAT_NEW; svc default/web:http');
  const ping = buildIcmpEcho({ src: '10.244.1.10', dst: '10.96.0.10', ident: 9, seq: 1 });
  expect(ping.length).toBe(44);
  w.packet(a, 1_700_000_001_000_000, ping.subarray(0, 30), ping.length, 'DROP DROP_ECHO_TO_VIP'); // cut
  expect(w.count).toBe(3);
  return Buffer.concat(chunks);
}

describe('pcapng writer', () => {
  it('blocks: SHB, one IDB per interface, one EPB per packet, lengths at both ends', () => {
    const blocks = pcapngBlocks(sample());
    expect(blocks.map((b) => b.type)).toEqual([
      PCAPNG_SHB,
      PCAPNG_IDB,
      PCAPNG_IDB,
      PCAPNG_EPB,
      PCAPNG_EPB,
      PCAPNG_EPB,
    ]);
    const shb = new DataView(blocks[0]!.body.buffer, blocks[0]!.body.byteOffset);
    expect(shb.getUint32(0, true)).toBe(0x1a2b3c4d);
    const epb = new DataView(blocks[5]!.body.buffer, blocks[5]!.body.byteOffset);
    expect([epb.getUint32(0, true), epb.getUint32(12, true), epb.getUint32(16, true)]).toEqual([
      0, 30, 44,
    ]); // interface, captured, on the wire
  });

  it('tshark reads it back: interfaces, packets, times, lengths, comments', () => {
    expect(
      existsSync('/usr/bin/tshark'),
      'tshark missing: run bash scripts/bootstrap.sh --test',
    ).toBe(true);
    const f = join(dir, 'sample.pcapng');
    writeFileSync(f, sample());
    const fields = [
      'frame.interface_name',
      'frame.time_epoch',
      'frame.len',
      'frame.cap_len',
      'ip.dst',
      'tcp.dstport',
      'frame.comment',
    ];
    const text = execFileSync(
      'tshark',
      ['-r', f, '-T', 'fields', '-E', 'separator=|', ...fields.flatMap((x) => ['-e', x])],
      {
        encoding: 'utf8',
        env: { ...process.env, HOME: dir }, // tshark wants a writable profile directory
      },
    );
    const rows = text
      .trim()
      .split('\n')
      .map((l) => l.split('|'));
    expect(rows.map((r) => [r[0], r[2], r[3], r[4], r[5]])).toEqual([
      ['node1:in', '40', '40', '10.96.0.10', '80'],
      ['node1:out', '40', '40', '10.244.2.5', '8080'],
      ['node1:in', '44', '30', '10.96.0.10', ''], // cut to 30 of 44 bytes
    ]);
    expect(rows[0]![1]).toMatch(/^1700000000\.123456/);
    expect(rows[0]![6]).toContain('TX_DNAT_NEW');
    expect(rows[2]![6]).toContain('DROP_ECHO_TO_VIP');
  });
});

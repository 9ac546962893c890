// Root test: TUN offloads against the real kernel, inside a network namespace of its own.
//
//   test/tun/fixtures/tun-offload.ts, under `ip netns exec <prefix>tunoff-<pid>`:
//     python3 UDP_SEGMENT send, 10 x 1000 B ──▶ route into the TUN ──▶ ONE read (UDP_L4 GSO)
//     that super-packet, DNATed to a local address ──▶ written back whole ──▶ 10 datagrams
//     a step tun.c refuses (USO4 without USO6) ──▶ skipped; the send arrives in 10 reads
import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB_PREFIX } from '../../src/lab/topology.ts';
import {
  VNET_F_NEEDS_CSUM,
  VNET_GSO_NONE,
  VNET_GSO_UDP_L4,
  VNET_HDR_LEN,
  VNET_OK,
  vnetCheck,
  vnetParse,
} from '../../src/wire/virtio.ts';

const NS = `${LAB_PREFIX}tunoff-${process.pid}`;
const FIXTURE = fileURLToPath(new URL('./fixtures/tun-offload.ts', import.meta.url));

interface Read {
  bytes: number[];
  len: number;
}
interface Offload {
  flags: number;
  enabled: string[];
  refused: { name: string; errno: number }[];
}
interface Result {
  offloaded: {
    offload: Offload;
    reads: Read[];
    delivered: number[];
    seedOk: boolean;
    einvalForGsoSize0: number;
  };
  fallback: { offload: Offload; reads: Read[] };
}

let result: Result;

beforeAll(() => {
  execFileSync('ip', ['netns', 'add', NS]);
  const r = spawnSync('ip', ['netns', 'exec', NS, process.execPath, '--import', 'tsx', FIXTURE], {
    timeout: 30_000,
  });
  if (r.status !== 0) throw new Error(`fixture failed (${r.status}): ${r.stderr}`);
  result = JSON.parse(r.stdout.toString()) as Result;
});

afterAll(() => {
  spawnSync('ip', ['netns', 'del', NS]);
});

describe('TUN offloads in a network namespace', () => {
  it('takes every default step on this kernel', () => {
    expect(result.offloaded.offload.enabled).toEqual(['csum', 'tso4', 'uso4']);
    expect(result.offloaded.offload.refused).toEqual([]);
  });

  it('hands one UDP_SEGMENT send over as one UDP_L4 super-packet with a partial checksum', () => {
    const reads = result.offloaded.reads;
    expect(reads.length).toBe(1);
    const b = Uint8Array.from(reads[0].bytes);
    expect(reads[0].len).toBe(VNET_HDR_LEN + 20 + 8 + 10 * 1000);
    expect(vnetParse(b, 0)).toEqual({
      flags: VNET_F_NEEDS_CSUM,
      gsoType: VNET_GSO_UDP_L4,
      hdrLen: 28,
      gsoSize: 1000,
      csumStart: 20,
      csumOffset: 6,
    });
  });

  it('re-derives the partial seed of the DNATed super-packet as the kernel computes it', () => {
    expect(result.offloaded.seedOk).toBe(true);
  });

  it('takes the super-packet back whole after a DNAT, and delivers every segment intact', () => {
    expect(result.offloaded.delivered.sort((x, y) => x - y)).toEqual([
      0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
    ]);
  });

  it('refuses a GSO header with gso_size 0, as vnetCheck does', () => {
    expect(result.offloaded.einvalForGsoSize0).toBe(1);
  });

  it('skips a refused step, keeps the others, and the traffic arrives segmented instead', () => {
    const f = result.fallback;
    expect(f.offload.enabled).toEqual(['csum', 'tso4']);
    expect(f.offload.refused).toEqual([{ name: 'uso4-alone', errno: 22 }]);
    expect(f.reads.length).toBe(10);
    for (const r of f.reads) {
      expect(r.len).toBe(VNET_HDR_LEN + 20 + 8 + 1000);
      const b = Uint8Array.from(r.bytes);
      expect(vnetParse(b, 0).gsoType).toBe(VNET_GSO_NONE);
    }
  });

  it('every header the kernel gave passes vnetCheck', () => {
    const r = result.offloaded.reads[0];
    // the read's first 38 bytes, the rest of its length as payload
    const p = new Uint8Array(r.len);
    p.set(r.bytes);
    expect(vnetCheck(p, 0, p.length)).toBe(VNET_OK);
  });
});

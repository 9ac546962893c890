// Root test: the TUN addon against the real kernel, inside a network namespace of its own.
//
//   test/tun/fixtures/tun-roundtrip.ts, run under `ip netns exec <lab prefix>tuntest-<pid>`:
//     TUN kttest0 10.99.0.1/24 ──(100 ICMP echo requests + 1 garbage, one writeBatch)──▶ kernel
//     kernel ──(100 echo replies, UDP to 10.99.0.7:9999 routed via kttest0)──▶ onBatch
import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB_PREFIX } from '../../src/lab/prefix.ts';
import { TunDevice } from '../../src/tun/tun.ts';

// The lab prefix (KUBETUN_LAB_PREFIX) keeps this namespace apart from every other lab's.
const NS = `${LAB_PREFIX}tuntest-${process.pid}`;
const FIXTURE = fileURLToPath(new URL('./fixtures/tun-roundtrip.ts', import.meta.url));
const N = 100;
const BATCH = 16;

interface Result {
  mtu: number;
  txqlen: number;
  written: number;
  badSlice: number;
  replies: number[];
  batchSizes: number[];
  udp?: { dst: string; dport: number; payload: string };
  stats: Record<string, number>;
  linkGone: boolean;
  queues: { multiQueue: number; singleQueueSecond: string };
}

let result: Result;
let status: number | null;

beforeAll(() => {
  execFileSync('ip', ['netns', 'add', NS]);
  const r = spawnSync('ip', ['netns', 'exec', NS, process.execPath, '--import', 'tsx', FIXTURE], {
    env: { ...process.env, KT_N: String(N), KT_BATCH: String(BATCH) },
    timeout: 30_000,
  });
  status = r.status;
  if (r.status !== 0) throw new Error(`fixture failed (${r.status}): ${r.stderr}`);
  result = JSON.parse(r.stdout.toString()) as Result;
});

afterAll(() => {
  spawnSync('ip', ['netns', 'del', NS]);
});

describe('TunDevice in a network namespace', () => {
  it('writes a batch into the kernel and reads every echo reply back', () => {
    expect(result.written).toBe(N);
    expect(result.replies).toEqual(Array.from({ length: N }, (_, i) => i));
  });

  it('counts the kernel refusing a non-IP packet (EINVAL) instead of failing the batch', () => {
    expect(result.stats.txEinval).toBe(1);
    expect(result.stats.txErrors).toBe(1);
    expect(result.stats.txPackets).toBe(N);
  });

  it('refuses a slice outside the buffer and counts it', () => {
    expect(result.badSlice).toBe(0);
    expect(result.stats.txBadSlice).toBe(1);
  });

  it('delivers reads in batches bounded by the batch limit, one call per batch', () => {
    const total = result.batchSizes.reduce((a, b) => a + b, 0);
    expect(total).toBe(result.stats.rxPackets);
    expect(result.batchSizes.length).toBe(result.stats.rxBatches);
    expect(Math.max(...result.batchSizes)).toBe(BATCH);
    expect(result.batchSizes.every((n) => n >= 1 && n <= BATCH)).toBe(true);
  });

  it('reads a UDP datagram the kernel routes into the TUN', () => {
    expect(result.udp).toEqual({ dst: '10.99.0.7', dport: 9999, payload: 'hello-tun' });
  });

  it('sets the MTU and the queue length by ioctl', () => {
    expect(result.mtu).toBe(1400);
    expect(result.txqlen).toBe(4321);
  });

  it('close() deletes the device and lets the process exit on its own', () => {
    expect(result.linkGone).toBe(true);
    expect(status).toBe(0);
  });

  it('opens several queues of one device with multiQueue, and only one without', () => {
    expect(result.queues).toEqual({ multiQueue: 2, singleQueueSecond: 'EBUSY' });
  });

  it('rejects an over-long interface name before touching the kernel', () => {
    expect(() => TunDevice.open('x'.repeat(20))).toThrow(/interface name too long: x{20}/);
  });
});

// Root test: the TUN addon against the real kernel, inside a network namespace of its own.
//
//   test/tun/fixtures/tun-roundtrip.ts, run under `ip netns exec <lab prefix>tuntest-<pid>-<k>`:
//     TUN kttest0 10.99.0.1/24 ──(300 ICMP echo requests + 1 garbage, one writeBatch)──▶ kernel
//     kernel ──(300 echo replies, UDP to 10.99.0.7:9999 routed via kttest0)──▶ onBatch
// Twice: with the addon's io_uring writes (when it was built with liburing) and with the plain
// write() per packet (KUBETUN_TUN_URING=0): the same packets must arrive either way.
import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB_PREFIX } from '../../src/lab/prefix.ts';
import { loadTunAddon, type TxPath, TunDevice } from '../../src/tun/tun.ts';

const FIXTURE = fileURLToPath(new URL('./fixtures/tun-roundtrip.ts', import.meta.url));
// more than one ring's worth (tun.cc kRingEntries 256): the io_uring path takes two enters
const N = 300;
const BATCH = 16;
const RING_ENTRIES = 256;

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
  txPath: TxPath;
}

const uringBuilt = loadTunAddon().uringBuilt;
const PATHS = [
  { path: 'io_uring', uringEnv: '1', k: 0 },
  { path: 'write() per packet', uringEnv: '0', k: 1 },
];

describe.each(PATHS)('TunDevice in a network namespace, writes by $path', ({ uringEnv, k }) => {
  // The lab prefix (KUBETUN_LAB_PREFIX) keeps this namespace apart from every other lab's.
  const NS = `${LAB_PREFIX}tuntest-${process.pid}-${k}`;
  let result: Result;
  let status: number | null;

  beforeAll(() => {
    execFileSync('ip', ['netns', 'add', NS]);
    const r = spawnSync('ip', ['netns', 'exec', NS, process.execPath, '--import', 'tsx', FIXTURE], {
      env: {
        ...process.env,
        KT_N: String(N),
        KT_BATCH: String(BATCH),
        KUBETUN_TUN_URING: uringEnv,
      },
      timeout: 30_000,
    });
    status = r.status;
    if (r.status !== 0) throw new Error(`fixture failed (${r.status}): ${r.stderr}`);
    result = JSON.parse(r.stdout.toString()) as Result;
  });

  afterAll(() => {
    spawnSync('ip', ['netns', 'del', NS]);
  });

  it('takes the write path asked for, and as many syscalls as that path needs', () => {
    // the batch of N + 1 (the garbage one is a write too); the bad slice is never written
    if (uringEnv === '1' && uringBuilt) {
      expect(result.txPath).toEqual({ uring: true, why: 'io_uring' });
      expect(result.stats.txSyscalls).toBe(Math.ceil((N + 1) / RING_ENTRIES));
    } else {
      expect(result.txPath.uring).toBe(false);
      expect(result.txPath.why).toMatch(uringBuilt ? /not asked for/ : /without liburing/);
      expect(result.stats.txSyscalls).toBe(N + 1);
    }
  });

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
});

describe('TunDevice.open', () => {
  it('rejects an over-long interface name before touching the kernel', () => {
    expect(() => TunDevice.open('x'.repeat(20))).toThrow(/interface name too long: x{20}/);
  });
});

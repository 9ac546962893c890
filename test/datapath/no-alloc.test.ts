// The per-packet path allocates nothing: after a warm-up (JIT, maps and pools at their steady
// size) a million mixed packets — new flows, established and reply traffic, rejects with a
// generated ICMP reply, malformed headers, NodePort/LoadBalancer with SNAT and
// externalTrafficPolicy: Local, ICMP errors about service flows, fragments, a full conntrack
// table — go through dpProcess (V8 tuned as the agent tunes it, dpTuneV8). Memory assertions,
// not timing ones:
//   - nothing is retained: the heap after a full GC grows by < 1 MB (a retained 16 bytes per
//     packet would be 16 MB);
//   - nothing is allocated at all: not one young-generation GC runs while the packets go
//     through (garbage would fill the 1-16 MB nursery many times over 1M packets).
// Both for addresses below 2^31 (LOW_ADDRS) and for the usual ones (HIGH_ADDRS: 172.30/16,
// 192.0.2/24), which as u32 values would be heap numbers wherever they crossed a call V8 did
// not inline: the fast path carries addresses as int32 (src/datapath/README.md, "Allocation").
// And for IPv6 (mixed-traffic6.ts): the same conversations over dual-stack Services — NAT66,
// the IPv6 SNAT table, ICMPv6 errors and rejects, Fragment headers, ND — alone, against a
// full IPv6 conntrack table, and interleaved with IPv4 on one datapath.

import { constants, PerformanceObserver } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import type { Datapath } from '../../src/datapath/state/datapath.ts';
import { dpProcess } from '../../src/datapath/program.ts';
import { FILTER_DROPS } from '../../src/datapath/state/events.ts';
import { dpTuneV8 } from '../../src/datapath/tune.ts';
import { V_DROP, V_TX } from '../../src/datapath/state/verdict.ts';
import { createPacketLoop } from '../../src/node/loop.ts';
import type { TunDevice } from '../../src/tun/tun.ts';
import { parseCidr } from '../../src/wire/addr.ts';
import { VNET_HDR_LEN, vnetWrite } from '../../src/wire/virtio.ts';
import {
  clockMs,
  type ExtAddrs,
  HIGH_ADDRS,
  LOW_ADDRS,
  MixedTraffic,
  mixedDatapath,
  OFF,
} from './mixed-traffic.ts';
import { dualDatapath, MixedTraffic6 } from './mixed-traffic6.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
dpTuneV8();

const MB = 1024 * 1024;

/** Packets k0..k1 of the stream through dp. */
function drive(dp: Datapath, t: MixedTraffic, k0: number, k1: number): void {
  const buf = t.buf;
  for (let k = k0; k < k1; k++) {
    const n = t.next(k);
    t.after(dpProcess(dp, buf, OFF, n, clockMs(k)));
  }
}

interface Growth {
  /** heap growth after a full GC, bytes */
  retained: number;
  /** young-generation GCs while the measured packets went through */
  minorGcs: number;
  /** packets run in all: warm-up, settling and measured */
  packets: number;
}

/** Warm up with `warm` packets, then measure n packets. */
function measure(dp: Datapath, addrs: ExtAddrs, warm: number, n: number): Promise<Growth> {
  const t = new MixedTraffic(addrs);
  return measureRun((k0, k1) => drive(dp, t, k0, k1), warm, n);
}

/** Young-generation GCs while run() went through, the GC entries given time to arrive. */
async function minorGcsOf(run: () => void): Promise<number> {
  let minorGcs = 0;
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      if (
        (e as unknown as { detail?: { kind?: number } }).detail?.kind ===
        constants.NODE_PERFORMANCE_GC_MINOR
      )
        minorGcs++;
    }
  });
  obs.observe({ entryTypes: ['gc'] });
  run();
  // entries are delivered asynchronously: let them arrive before the forced GCs that follow
  await new Promise((r) => setTimeout(r, 50));
  obs.disconnect();
  return minorGcs;
}

/** Settling chunks at most, each warm/4 packets: see measureRun. */
const SETTLE_CHUNKS = 4;

/**
 * run(0, warm) untimed; then chunks of warm/4 packets until one runs with no young GC (at
 * most SETTLE_CHUNKS: optimized code can land late on a busy machine, and code that is not
 * yet optimized boxes numbers — that is the JIT's warm-up, not the program's allocation);
 * then n packets with the GC observed. Code that allocates per packet collects in every
 * chunk and in the measured run alike.
 */
async function measureRun(
  run: (k0: number, k1: number) => void,
  warm: number,
  n: number,
): Promise<Growth> {
  run(0, warm);
  let k = warm;
  const chunk = warm >> 2;
  for (let i = 0; i < SETTLE_CHUNKS; i++) {
    const k0 = k;
    k += chunk;
    if ((await minorGcsOf(() => run(k0, k0 + chunk))) === 0) break;
  }
  gc();
  gc();
  const before = process.memoryUsage().heapUsed;
  const k0 = k;
  const minorGcs = await minorGcsOf(() => run(k0, k0 + n));
  gc();
  gc();
  return { retained: process.memoryUsage().heapUsed - before, minorGcs, packets: k0 + n };
}

function total(dp: Datapath): number {
  return dp.counters.reduce((a, b) => a + b, 0);
}

describe('dpProcess allocates nothing per packet', () => {
  it('1M mixed packets, addresses below 2^31: no GC at all, heap growth < 1 MB', async () => {
    const dp = mixedDatapath(1, 2048, LOW_ADDRS);
    const g = await measure(dp, LOW_ADDRS, 200_000, 1_000_000);
    expect(g.minorGcs).toBe(0);
    expect(g.retained).toBeLessThan(MB);
    expect(total(dp)).toBe(g.packets);
  }, 120_000);

  it('400k packets against a full conntrack table (inline GC, CT_FULL): no GC at all', async () => {
    const dp = mixedDatapath(2, 256, LOW_ADDRS);
    const g = await measure(dp, LOW_ADDRS, 100_000, 400_000);
    expect(g.minorGcs).toBe(0);
    expect(g.retained).toBeLessThan(MB);
  }, 120_000);

  it('1M mixed packets with the usual (>= 2^31) addresses: no GC at all, growth < 1 MB', async () => {
    const dp = mixedDatapath(3, 2048, HIGH_ADDRS);
    const g = await measure(dp, HIGH_ADDRS, 200_000, 1_000_000);
    expect(g.minorGcs).toBe(0);
    expect(g.retained).toBeLessThan(MB);
    expect(total(dp)).toBe(g.packets);
  }, 120_000);

  it('1M mixed packets with the event ring on (monitor filters + tap capture): no GC at all', async () => {
    const dp = mixedDatapath(5, 2048, HIGH_ADDRS);
    dp.events.subscribe({}, true); // every event, bytes before and after
    dp.events.subscribe({ type: FILTER_DROPS, port: 80 });
    const g = await measure(dp, HIGH_ADDRS, 200_000, 1_000_000);
    expect(g.minorGcs).toBe(0);
    expect(g.retained).toBeLessThan(MB);
    expect(dp.events.head).toBe(g.packets);
  }, 120_000);

  it('400k packets, >= 2^31 addresses, full conntrack table: no GC at all', async () => {
    const dp = mixedDatapath(4, 256, HIGH_ADDRS);
    const g = await measure(dp, HIGH_ADDRS, 100_000, 400_000);
    expect(g.minorGcs).toBe(0);
    expect(g.retained).toBeLessThan(MB);
  }, 120_000);
});

describe('dpProcess allocates nothing per IPv6 packet', () => {
  /** IPv6 packets k0..k1 through dp; with `v4`, IPv4 ones between them (every other packet). */
  function drive6(
    dp: Datapath,
    t6: MixedTraffic6,
    t4: MixedTraffic | null,
    k0: number,
    k1: number,
  ) {
    for (let k = k0; k < k1; k++) {
      if (t4 !== null && (k & 1) === 1) {
        const n = t4.next(k >> 1);
        t4.after(dpProcess(dp, t4.buf, OFF, n, clockMs(k)));
        continue;
      }
      const j = t4 === null ? k : k >> 1;
      const n = t6.next(j);
      t6.after(dpProcess(dp, t6.buf, OFF, n, clockMs(k)));
    }
  }

  it('1M mixed IPv6 packets on dual-stack services: no GC at all, heap growth < 1 MB', async () => {
    const dp = dualDatapath(6, 2048);
    const t = new MixedTraffic6();
    const g = await measureRun((k0, k1) => drive6(dp, t, null, k0, k1), 200_000, 1_000_000);
    expect(g.minorGcs).toBe(0);
    expect(g.retained).toBeLessThan(MB);
    expect(total(dp)).toBe(g.packets);
    expect(dp.ct6.size).toBeGreaterThan(0); // the IPv6 table did the work
  }, 120_000);

  it('400k IPv6 packets against a full IPv6 conntrack table: no GC at all', async () => {
    const dp = dualDatapath(7, 256);
    const t = new MixedTraffic6();
    const g = await measureRun((k0, k1) => drive6(dp, t, null, k0, k1), 100_000, 400_000);
    expect(g.minorGcs).toBe(0);
    expect(g.retained).toBeLessThan(MB);
    expect(dp.ct6Gc.insertFailures).toBeGreaterThan(0);
  }, 120_000);

  it('1M packets, IPv4 and IPv6 interleaved on one datapath: no GC at all', async () => {
    const dp = dualDatapath(8, 2048);
    const t6 = new MixedTraffic6();
    const t4 = new MixedTraffic(HIGH_ADDRS);
    const g = await measureRun((k0, k1) => drive6(dp, t6, t4, k0, k1), 200_000, 1_000_000);
    expect(g.minorGcs).toBe(0);
    expect(g.retained).toBeLessThan(MB);
    expect(dp.ct.size).toBeGreaterThan(0);
    expect(dp.ct6.size).toBeGreaterThan(0);
  }, 120_000);
});

// ---- the packet loop with offloads (src/node/loop.ts): virtio_net_hdr in front of every read
//
// The same stream, each packet behind a header: most with a partial checksum (the seed
// re-derived after NAT), a TCP packet in four with a GSO header (gso_size 16: a "super-packet"
// of a few segments), one in sixteen malformed (unknown gso_type: dropped by the loop). The
// loop writes into a fake TUN that only counts.

/** Header + packet k of the stream in vbuf at VOFF; returns the read's length. */
function vnetPacket(t: MixedTraffic, k: number, vbuf: Uint8Array): number {
  const n = t.next(k);
  const src = t.buf;
  for (let j = 0; j < n; j++) vbuf[VOFF + VNET_HDR_LEN + j] = src[OFF + j];
  const ip = VOFF + VNET_HDR_LEN;
  const proto = vbuf[ip + 9];
  const ihl = (vbuf[ip] & 15) << 2;
  if (k % 16 === 5) {
    vnetWrite(vbuf, VOFF, 0, 9, 0, 0, 0, 0);
  } else if ((proto === 6 || proto === 17) && k % 3 !== 0) {
    // partial checksum: the seed is the folded pseudo-header sum
    const at = ip + ihl + (proto === 6 ? 16 : 6);
    vbuf[at] = 0;
    vbuf[at + 1] = 0;
    const gso = proto === 6 && k % 4 === 1 ? 1 : 0;
    vnetWrite(vbuf, VOFF, 1, gso, 0, gso ? 16 : 0, ihl, proto === 6 ? 16 : 6);
  } else {
    vnetWrite(vbuf, VOFF, 0, 0, 0, 0, 0, 0);
  }
  return VNET_HDR_LEN + n;
}

async function measureLoop(
  dp: Datapath,
  warm: number,
  n: number,
): Promise<Growth & { written: number }> {
  const t = new MixedTraffic(HIGH_ADDRS);
  const vbuf = new Uint8Array(4096);
  const offs = Uint32Array.of(VOFF);
  const lens = new Uint32Array(1);
  let written = 0;
  const fake = {
    writeBatch: (_b: Uint8Array, _o: Uint32Array, _l: Uint32Array, m: number) => {
      written += m;
      return m;
    },
    write: () => {
      written++;
      return true;
    },
  } as unknown as TunDevice;
  let now = 0;
  const loop = createPacketLoop(dp, fake, parseCidr('10.96.0.0/12'), 1, () => now, { vnet: true });
  const drive = (k0: number, k1: number) => {
    for (let k = k0; k < k1; k++) {
      lens[0] = vnetPacket(t, k, vbuf);
      now = clockMs(k);
      const w = written;
      loop.handle(vbuf, offs, lens, 1);
      // the stream learns the translated tuple from packet 0 of a conversation, in t.buf
      for (let j = 0; j < 24; j++) t.buf[OFF + j] = vbuf[VOFF + VNET_HDR_LEN + j];
      t.after(written > w ? V_TX : V_DROP);
    }
  };
  return { ...(await measureRun(drive, warm, n)), written };
}

const VOFF = 5;

describe('the packet loop with virtio headers allocates nothing per packet', () => {
  it('500k packets behind vnet headers (partial checksums, GSO, malformed): no GC at all', async () => {
    const dp = mixedDatapath(5, 2048, HIGH_ADDRS);
    const g = await measureLoop(dp, 100_000, 500_000);
    expect(g.minorGcs).toBe(0);
    expect(g.retained).toBeLessThan(MB);
    expect(g.written).toBeGreaterThan(250_000);
  }, 120_000);
});

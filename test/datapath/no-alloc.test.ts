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

import { constants, PerformanceObserver } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import type { Datapath } from '../../src/datapath/state/datapath.ts';
import { dpProcess } from '../../src/datapath/program.ts';
import { dpTuneV8 } from '../../src/datapath/tune.ts';
import {
  clockMs,
  type ExtAddrs,
  HIGH_ADDRS,
  LOW_ADDRS,
  MixedTraffic,
  mixedDatapath,
  OFF,
} from './mixed-traffic.ts';

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
}

/** Warm up with `warm` packets, then measure packets [warm, warm + n). */
async function measure(dp: Datapath, addrs: ExtAddrs, warm: number, n: number): Promise<Growth> {
  const t = new MixedTraffic(addrs);
  drive(dp, t, 0, warm);
  gc();
  gc();
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
  const before = process.memoryUsage().heapUsed;
  drive(dp, t, warm, warm + n);
  // entries are delivered asynchronously: let them arrive before the forced GCs below
  await new Promise((r) => setTimeout(r, 50));
  obs.disconnect();
  gc();
  gc();
  return { retained: process.memoryUsage().heapUsed - before, minorGcs };
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
    expect(total(dp)).toBe(1_200_000);
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
    expect(total(dp)).toBe(1_200_000);
  }, 120_000);

  it('400k packets, >= 2^31 addresses, full conntrack table: no GC at all', async () => {
    const dp = mixedDatapath(4, 256, HIGH_ADDRS);
    const g = await measure(dp, HIGH_ADDRS, 100_000, 400_000);
    expect(g.minorGcs).toBe(0);
    expect(g.retained).toBeLessThan(MB);
  }, 120_000);
});

// Benchmark of the backend schedulers: ns per pick through SchedulerTable.pick for 3, 100 and
// 1000 backends, plus the control-plane build time of each kind's state; then the cost of a
// whole new flow through the datapath (dpProcess of a SYN to the VIP: service lookup, the
// scheduler (or affinity), conntrack create, DNAT) per scheduler, the service chosen by its
// kubetun.io/scheduler annotation as in production. Figures only, nothing asserted.
// Run: npx tsx scripts/bench-sched.ts [--quick]
//
// Expect random, rr, sh, dh and maglev to stay flat as backends grow (O(1) per pick), wrr to
// stay near-flat (it steps forward from its position; long scans only with skewed weights), and
// lc/wlc/sed to grow linearly (they scan every candidate, as the kernel does; nq stops at the
// first idle one).
// The heap line shows whether picking allocates: a one-off JIT cost (~1 MiB) is normal; it must
// not grow with the number of picks (16 B per pick would be 32 MiB at 2M).
// Contention skews the figures: run on an idle machine (the first run here had loadavg 9 on 2
// CPUs, where even an empty loop cost 3 ns/iteration).

import { loadavg } from 'node:os';
import { createDatapath } from '../src/datapath/state/datapath.ts';
import { DpLoader } from '../src/loader/load.ts';
import { dpProcess } from '../src/datapath/program.ts';
import { TX_DNAT_NEW } from '../src/datapath/state/reasons.ts';
import { Rng } from '../src/datapath/state/rng.ts';
import { dpTuneV8 } from '../src/datapath/tune.ts';
import type { ResolvedServicePort } from '../src/model.ts';
import { ipv4FillCsum } from '../src/wire/ipv4.ts';
import { SCHED_MAGLEV, SCHED_NAMES, SCHED_NQ } from '../src/sched/kinds.ts';
import { type SchedBackend, SchedulerTable } from '../src/sched/table.ts';
import { makeDefaultService, makeReadyEndpoint } from '../test/fixtures/model.ts';

const QUICK = process.argv.includes('--quick');
const PICKS = QUICK ? 200_000 : 2_000_000;
const SIZES = [3, 100, 1000];
const TCP = 6;

function backends(n: number): SchedBackend[] {
  return Array.from({ length: n }, (_, i) => ({
    id: i + 1,
    weight: 1 + (i % 4),
    addr: ((10 << 24) | (244 << 16) | i) >>> 0,
    port: 8080,
    proto: TCP,
  }));
}

/** Flow tuples drawn up front so the loop measures the pick, not the input generation. */
const FLOWS = 4096;
const saddr = new Uint32Array(FLOWS);
const sport = new Uint16Array(FLOWS);
{
  const r = new Rng(99);
  for (let i = 0; i < FLOWS; i++) {
    saddr[i] = r.nextU32();
    sport[i] = 1024 + r.below(60000);
  }
}

function benchPick(t: SchedulerTable, rev: number, rng: Rng): number {
  let sink = 0;
  for (let i = 0; i < PICKS / 10; i++)
    sink += t.pick(rev, saddr[i & 4095], 1, sport[i & 4095], 80, TCP, rng);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < PICKS; i++) {
    const f = i & (FLOWS - 1);
    sink += t.pick(rev, saddr[f], 0x0a60000a, sport[f], 80, TCP, rng);
  }
  const ns = Number(process.hrtime.bigint() - t0) / PICKS;
  if (sink === 0.5) console.log('unreachable');
  return ns;
}

function main(): void {
  const rng = new Rng(1);
  const t = new SchedulerTable({ capacity: 4096 });
  console.log(`ns/pick (${PICKS} picks; build ms in brackets)`);
  console.log(
    `${'scheduler'.padEnd(10)}${SIZES.map((n) => `${n} backends`.padStart(24)).join('')}`,
  );
  let rev = 1;
  for (let kind = 0; kind <= SCHED_MAGLEV; kind++) {
    const cells: string[] = [];
    for (const n of SIZES) {
      const b0 = process.hrtime.bigint();
      t.set(rev, kind, backends(n));
      const buildMs = Number(process.hrtime.bigint() - b0) / 1e6;
      if (kind >= 3 && kind <= SCHED_NQ) seedCounts(t, rev, n);
      const ns = benchPick(t, rev, rng);
      cells.push(`${ns.toFixed(1)} [${buildMs.toFixed(2)}]`.padStart(24));
      rev++;
    }
    console.log(SCHED_NAMES[kind].padEnd(10) + cells.join(''));
  }
  heapCheck(t);
  newFlows();
}

/** Uneven connection counts so least-connection picks are not all ties. */
function seedCounts(t: SchedulerTable, rev: number, n: number): void {
  for (let i = 0; i < n; i++) t.connAdjust(rev, i + 1, (i * 7) % 13, (i * 5) % 11);
}

function heapCheck(t: SchedulerTable): void {
  const rng = new Rng(3);
  t.set(4000, SCHED_MAGLEV, backends(100));
  globalThis.gc?.();
  const before = process.memoryUsage().heapUsed;
  let sink = 0;
  for (let i = 0; i < PICKS; i++)
    sink += t.pick(4000, saddr[i & 4095], 1, sport[i & 4095], 80, TCP, rng);
  const after = process.memoryUsage().heapUsed;
  const note = globalThis.gc ? '' : ' (run with node --expose-gc for a cleaner figure)';
  console.log(
    `heap delta over ${PICKS} maglev picks: ${((after - before) / 1024).toFixed(0)} KiB${note}`,
  );
  if (sink === 0.5) console.log('unreachable');
}

// ---- new flows through the datapath ------------------------------------------------------------

const NEW_FLOWS = QUICK ? 50_000 : 200_000;
const PKT = 40; // IPv4 + TCP, no options, no payload

/** NEW_FLOWS SYNs to 10.96.0.10:80 from distinct (client, port), in one buffer. */
function synBuffer(): Uint8Array {
  const b = new Uint8Array(NEW_FLOWS * PKT);
  const r = new Rng(7);
  for (let k = 0; k < NEW_FLOWS; k++) {
    const o = k * PKT;
    b.set([0x45, 0, 0, PKT, 0, 0, 0x40, 0, 64, TCP, 0, 0], o);
    const src = (0x0af40000 | (k >>> 8)) >>> 0; // 10.244.x.y
    const v = new DataView(b.buffer, o);
    v.setUint32(12, src);
    v.setUint32(16, 0x0a60000a);
    v.setUint16(20, 1024 + (k & 0xff) * 200 + r.below(200));
    v.setUint16(22, 80);
    v.setUint32(24, r.nextU32());
    b[o + 32] = 0x50;
    b[o + 33] = 0x02; // SYN
    v.setUint16(34, 65535);
    ipv4FillCsum(b, o);
  }
  return b;
}

function service(kind: string, n: number): ResolvedServicePort {
  const port = { name: 'http', protocol: 'TCP' as const, port: 80, targetPort: 8080, nodePort: 0 };
  return {
    service: makeDefaultService('web', {
      namespace: 'bench',
      clusterIPs: ['10.96.0.10'],
      ports: [port],
      annotations: { 'kubetun.io/scheduler': kind },
    }),
    port,
    servicePortName: 'bench/web:http',
    endpoints: Array.from({ length: n }, (_, i) =>
      makeReadyEndpoint(`10.245.${i >> 8}.${i & 255}`, 8080),
    ),
  };
}

function newFlows(): void {
  dpTuneV8();
  const template = synBuffer();
  const run = (kind: number, n: number, flows: number): string => {
    const dp = createDatapath({ ctCapacity: NEW_FLOWS * 2 });
    new DpLoader(dp).load([service(SCHED_NAMES[kind], n)]);
    const buf = template.slice();
    const t0 = process.hrtime.bigint();
    let ok = 0;
    for (let k = 0; k < flows; k++) {
      dpProcess(dp, buf, k * PKT, PKT, 1_000_000);
      if (dp.lastReason === TX_DNAT_NEW) ok++;
    }
    const ns = Number(process.hrtime.bigint() - t0) / flows;
    return ok === flows ? ns.toFixed(0) : `${ns.toFixed(0)} (${flows - ok} not new)`;
  };
  for (let kind = 0; kind <= SCHED_MAGLEV; kind++) run(kind, 100, NEW_FLOWS / 10); // JIT warm-up
  console.log(
    `\nns per new flow through dpProcess (${NEW_FLOWS} SYNs, distinct flows; conntrack create ` +
      `included; loadavg ${loadavg()[0].toFixed(1)})`,
  );
  console.log(
    `${'scheduler'.padEnd(10)}${SIZES.map((n) => `${n} backends`.padStart(16)).join('')}`,
  );
  for (let kind = 0; kind <= SCHED_MAGLEV; kind++) {
    const cells = SIZES.map((n) => run(kind, n, NEW_FLOWS).padStart(16));
    console.log(SCHED_NAMES[kind].padEnd(10) + cells.join(''));
  }
}

main();

// Benchmark of the typed-array maps: lookups per second for the services and conntrack maps at
// several table sizes, and the cost of a full 1M-flow conntrack (bytes per flow, RSS).
// Prints figures only; nothing here is asserted. Run: npx tsx scripts/bench-maps.ts [--quick]

import { ConntrackMap } from '../src/maps/conntrack.ts';
import { ServiceMap } from '../src/maps/services.ts';

const QUICK = process.argv.includes('--quick');
const LOOKUPS = QUICK ? 1_000_000 : 5_000_000;
const TCP = 6;

function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (t ^ (t >>> 14)) >>> 0;
  };
}

function mib(bytes: number): string {
  return (bytes / 1048576).toFixed(1) + ' MiB';
}

function rate(ops: number, ns: bigint): string {
  const perSec = ops / (Number(ns) / 1e9);
  return (perSec / 1e6).toFixed(2).padStart(7) + ' M/s';
}

/** Random lookup order over n keys, so the timing is not a sequential cache walk. */
function order(n: number, r: () => number): Uint32Array {
  const o = new Uint32Array(LOOKUPS);
  for (let i = 0; i < LOOKUPS; i++) o[i] = r() % n;
  return o;
}

function benchServices(n: number): void {
  const r = rng(n);
  const m = new ServiceMap(n);
  const vip = new Uint32Array(n);
  const port = new Uint16Array(n);
  for (let i = 0; i < n; i++) {
    do {
      vip[i] = (0x0a600000 | (r() & 0xfffff)) >>> 0;
      port[i] = 1 + (r() % 65535);
    } while (m.lookup(vip[i], port[i], TCP, 0) >= 0);
    m.upsertMaster(vip[i], port[i], TCP, 1, 1, 0, 0, 0);
  }
  const o = order(n, r);
  let found = 0;
  let t0 = process.hrtime.bigint();
  for (let k = 0; k < LOOKUPS; k++) {
    const i = o[k];
    if (m.lookup(vip[i], port[i], TCP, 0) >= 0) found++;
  }
  const hit = process.hrtime.bigint() - t0;
  t0 = process.hrtime.bigint();
  for (let k = 0; k < LOOKUPS; k++) {
    const i = o[k];
    if (m.lookup(vip[i], port[i], 17, 0) >= 0) found++; // UDP: never present
  }
  const miss = process.hrtime.bigint() - t0;
  console.log(
    `services   ${String(n).padStart(7)} entries  hit ${rate(LOOKUPS, hit)}  miss ${rate(LOOKUPS, miss)}` +
      `  (found ${found}, ${mib(m.buffer.byteLength)})`,
  );
}

interface Flows {
  ct: ConntrackMap;
  saddr: Uint32Array;
  sport: Uint16Array;
  baddr: Uint32Array;
}

const VIP = 0x0a60000a;
const BPORT = 8080;

function fillConntrack(n: number, r: () => number): Flows {
  const ct = new ConntrackMap(n);
  const saddr = new Uint32Array(n);
  const sport = new Uint16Array(n);
  const baddr = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    let e: number;
    do {
      saddr[i] = (0x0af40000 | (r() & 0xffff)) >>> 0;
      sport[i] = 1024 + (r() % 64000);
      baddr[i] = (0x0af50000 | (r() & 0xff)) >>> 0;
      e = ct.create(TCP, saddr[i], VIP, sport[i], 80, baddr[i], BPORT, 1, 1, 1000);
    } while (e < 0);
  }
  return { ct, saddr, sport, baddr };
}

function benchConntrack(n: number): void {
  const r = rng(n + 1);
  const t0 = process.hrtime.bigint();
  const f = fillConntrack(n, r);
  const fill = process.hrtime.bigint() - t0;
  const { ct, saddr, sport, baddr } = f;
  const o = order(n, r);
  let found = 0;
  let t1 = process.hrtime.bigint();
  for (let k = 0; k < LOOKUPS; k++) {
    const i = o[k];
    if (ct.lookupOrig(TCP, saddr[i], VIP, sport[i], 80) >= 0) found++;
  }
  const orig = process.hrtime.bigint() - t1;
  t1 = process.hrtime.bigint();
  for (let k = 0; k < LOOKUPS; k++) {
    const i = o[k];
    if (ct.lookupReply(TCP, baddr[i], saddr[i], BPORT, sport[i]) >= 0) found++;
  }
  const reply = process.hrtime.bigint() - t1;
  console.log(
    `conntrack  ${String(n).padStart(7)} flows    orig ${rate(LOOKUPS, orig)}  reply ${rate(LOOKUPS, reply)}` +
      `  create ${rate(n, fill)}  (found ${found})`,
  );
}

function benchMillion(): void {
  const n = 1 << 20;
  const before = process.memoryUsage();
  const r = rng(42);
  const t0 = process.hrtime.bigint();
  const f = fillConntrack(n, r);
  const fill = process.hrtime.bigint() - t0;
  const after = process.memoryUsage();
  const { ct } = f;
  const o = order(n, r);
  let found = 0;
  const tl = process.hrtime.bigint();
  for (let k = 0; k < LOOKUPS; k++) {
    const i = o[k];
    if (ct.lookupOrig(TCP, f.saddr[i], VIP, f.sport[i], 80) >= 0) found++;
    if (ct.lookupReply(TCP, f.baddr[i], f.saddr[i], BPORT, f.sport[i]) >= 0) found++;
  }
  const lookups = process.hrtime.bigint() - tl;
  // churn: delete and re-create 10% of the flows, so probe chains see backward shifts
  const t1 = process.hrtime.bigint();
  let churned = 0;
  for (let i = 0; i < n; i += 10) {
    const e = ct.lookupOrig(TCP, f.saddr[i], VIP, f.sport[i], 80);
    ct.delete(e);
    if (ct.create(TCP, f.saddr[i], VIP, f.sport[i], 80, f.baddr[i], BPORT, 2, 1, 2000) >= 0)
      churned++;
  }
  const churn = process.hrtime.bigint() - t1;
  const live = ct.size;
  const t2 = process.hrtime.bigint();
  let cursor = 0;
  let expired = 0;
  do cursor = ct.scan(cursor, 65536, 1500, () => expired++);
  while (cursor !== 0);
  const scan = process.hrtime.bigint() - t2;
  console.log(`conntrack 1M flows (capacity ${ct.capacity}, ${live} live before GC)`);
  console.log(`  bytes per flow       ${ct.bytesPerFlow().toFixed(3)} (typed arrays / capacity)`);
  console.log(`  backing buffer       ${mib(ct.buffer.byteLength)}`);
  console.log(
    `  RSS                  ${mib(before.rss)} -> ${mib(after.rss)} (+${mib(after.rss - before.rss)}, key arrays of this script included)`,
  );
  console.log(`  create               ${rate(n, fill)}`);
  console.log(`  lookups orig+reply   ${rate(2 * LOOKUPS, lookups)} (found ${found})`);
  console.log(`  delete+create churn  ${rate(churned, churn)}`);
  console.log(
    `  GC scan              ${(Number(scan) / 1e6).toFixed(1)} ms, ${expired} expired of ${n}`,
  );
}

console.log(`maps benchmark: ${LOOKUPS} lookups per figure, node ${process.version}`);
// the 1M table first, so its RSS growth is not hidden by memory freed from the smaller runs
benchMillion();
console.log('(create rates of the small tables are dominated by JIT warm-up)');
for (const n of [10, 1000, 10_000, 100_000]) benchServices(n);
for (const n of [10, 1000, 10_000, 100_000]) benchConntrack(n);

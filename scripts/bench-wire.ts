// Benchmark: DNAT of one TCP packet with a full checksum recompute vs the RFC 1624 incremental
// update (src/wire/rewrite.ts), at a few packet sizes. Prints ns/op; asserts nothing.
//   npx tsx scripts/bench-wire.ts [iterations]

import { ipv4HeaderChecksum, l4FillCsum } from '../src/wire/checksum.ts';
import { ipv4FillCsum, ipv4SetDst } from '../src/wire/ipv4.ts';
import { ipv4RewriteDst, l4RewriteDstPort } from '../src/wire/rewrite.ts';
import { tcpSetDstPort } from '../src/wire/tcp.ts';

const ITER = Number(process.argv[2] ?? 2_000_000);
const BACKENDS = [0x0af40207, 0x0af40308];
const PORTS = [8080, 8443];

function makeTcp(total: number): Uint8Array {
  const b = new Uint8Array(total + 16).subarray(3, 3 + total);
  for (let i = 0; i < total; i++) b[i] = (i * 131) & 0xff;
  b.set([0x45, 0, total >>> 8, total & 0xff, 0, 1, 0x40, 0, 64, 6, 0, 0]);
  b.set([10, 244, 1, 5, 10, 96, 0, 10], 12);
  b[32] = 0x50;
  ipv4FillCsum(b, 0);
  l4FillCsum(b, 0);
  return b;
}

function full(b: Uint8Array, n: number): void {
  for (let i = 0; i < n; i++) {
    ipv4SetDst(b, 0, BACKENDS[i & 1]);
    tcpSetDstPort(b, 20, PORTS[i & 1]);
    ipv4FillCsum(b, 0);
    l4FillCsum(b, 0);
  }
}

function incremental(b: Uint8Array, n: number): void {
  for (let i = 0; i < n; i++) {
    ipv4RewriteDst(b, 0, BACKENDS[i & 1]);
    l4RewriteDstPort(b, 0, PORTS[i & 1]);
  }
}

function headerOnly(b: Uint8Array, n: number): number {
  let x = 0;
  for (let i = 0; i < n; i++) x ^= ipv4HeaderChecksum(b, 0);
  return x;
}

function time(fn: (b: Uint8Array, n: number) => unknown, b: Uint8Array, n: number): number {
  fn(b, Math.min(n, 100_000)); // warm up (JIT)
  const t0 = process.hrtime.bigint();
  fn(b, n);
  return Number(process.hrtime.bigint() - t0) / n;
}

console.log(`iterations per case: ${ITER}`);
console.log('size  full-recompute  incremental  speedup  (ns/op, DNAT dst addr+port)');
for (const size of [40, 64, 576, 1500, 9000]) {
  const n = size > 2000 ? Math.max(1, ITER >> 3) : ITER;
  const f = time(full, makeTcp(size), n);
  const inc = time(incremental, makeTcp(size), n);
  const pad = (v: number, w: number) => v.toFixed(1).padStart(w);
  console.log(`${String(size).padStart(4)}  ${pad(f, 14)}  ${pad(inc, 11)}  ${pad(f / inc, 6)}x`);
}
console.log(`IPv4 header checksum alone: ${time(headerOnly, makeTcp(64), ITER).toFixed(1)} ns/op`);

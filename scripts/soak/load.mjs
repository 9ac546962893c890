#!/usr/bin/env node
// `npm run soak`'s load, run inside a pod's namespace: CONNS workers, each sending HTTP GETs on a
// new connection one after another (Connection: close) for SECONDS seconds. Prints one JSON
// line: requests, errors (by code), latency p50/p99/max in ms, and this process's own
// event-loop delay (p99/max, ms): one process runs every worker, and on a loaded machine it can
// fall seconds behind its sockets — a connection the kernel accepted at once then carries its
// request seconds later, which a Pod that exits at the end of its preStop resets (the churn).
// Plain JavaScript, no dependencies: it starts in milliseconds in a namespace.
// Usage: node load.mjs URL CONNS SECONDS
import http from 'node:http';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';

const [url, conns = '100', seconds = '10'] = process.argv.slice(2);
if (!url) {
  console.error('usage: load.mjs URL CONNS SECONDS');
  process.exit(2);
}
const agent = new http.Agent({ keepAlive: false, maxSockets: Number.POSITIVE_INFINITY });
const lat = [];
const kinds = {};
let errors = 0;
const end = Date.now() + Number(seconds) * 1000;

function get() {
  return new Promise((resolve, reject) => {
    const q = http.get(url, { agent, timeout: 10_000 }, (res) => {
      res.resume();
      res.on('end', () =>
        res.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${res.statusCode}`)),
      );
      res.on('error', reject);
    });
    q.on('timeout', () => q.destroy(Object.assign(new Error('timeout'), { code: 'TIMEOUT' })));
    q.on('error', reject);
  });
}

async function worker() {
  while (Date.now() < end) {
    const t = performance.now();
    try {
      await get();
      lat.push(performance.now() - t);
    } catch (e) {
      errors++;
      const k = e.code ?? e.message;
      kinds[k] = (kinds[k] ?? 0) + 1;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

const loop = monitorEventLoopDelay({ resolution: 20 });
loop.enable();
await Promise.all(Array.from({ length: Number(conns) }, worker));
loop.disable();
lat.sort((a, b) => a - b);
const at = (q) =>
  lat.length ? Math.round(lat[Math.min(lat.length - 1, Math.floor(q * lat.length))]) : 0;
console.log(
  JSON.stringify({
    requests: lat.length + errors,
    errors,
    kinds,
    p50: at(0.5),
    p99: at(0.99),
    max: at(1),
    loopDelayP99: Math.round(loop.percentile(99) / 1e6),
    loopDelayMax: Math.round(loop.max / 1e6),
  }),
);

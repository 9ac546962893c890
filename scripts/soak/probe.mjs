#!/usr/bin/env node
// `npm run soak`'s dark-time probe, inside a pod's namespace: an HTTP GET on a new connection
// every INTERVAL ms (each with a 1 s timeout) until SIGTERM; then one JSON line: probes, failed,
// and the longest time between two answered probes (ms) — how long the VIP was dark.
// Usage: node probe.mjs URL INTERVAL_MS
import http from 'node:http';

const [url, interval = '50'] = process.argv.slice(2);
let probes = 0;
let failed = 0;
let last = Date.now();
let dark = 0;
const agent = new http.Agent({ keepAlive: false });
function one() {
  probes++;
  const q = http.get(url, { agent, timeout: 1000 }, (res) => {
    res.resume();
    res.on('end', () => {
      const now = Date.now();
      dark = Math.max(dark, now - last);
      last = now;
    });
  });
  q.on('timeout', () => q.destroy(new Error('timeout')));
  q.on('error', () => failed++);
}
const timer = setInterval(one, Number(interval));
process.on('SIGTERM', () => {
  clearInterval(timer);
  dark = Math.max(dark, Date.now() - last);
  console.log(JSON.stringify({ probes, failed, darkMs: dark }));
  process.exit(0);
});

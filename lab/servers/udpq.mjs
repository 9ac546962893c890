#!/usr/bin/env node
// A UDP query client for the lab: sends N one-datagram queries, each from a new socket (so a new
// source port, a new flow for the service load balancer), and prints each reply on its own line,
// or "timeout" when none came within the deadline. Exit status 1 if any query timed out.
// Usage: node udpq.mjs IP PORT [COUNT] [TIMEOUT_MS]
import { createSocket } from 'node:dgram';

const [ip, port, count = '1', timeoutMs = '2000'] = process.argv.slice(2);
if (!ip || !port) {
  console.error('usage: udpq.mjs IP PORT [COUNT] [TIMEOUT_MS]');
  process.exit(2);
}

function query() {
  return new Promise((resolve) => {
    const s = createSocket('udp4');
    const timer = setTimeout(() => {
      s.close();
      resolve('timeout');
    }, Number(timeoutMs));
    s.once('message', (msg) => {
      clearTimeout(timer);
      s.close();
      resolve(msg.toString());
    });
    s.send('who?', Number(port), ip);
  });
}

let failed = false;
for (let i = 0; i < Number(count); i++) {
  const r = await query();
  if (r === 'timeout') failed = true;
  console.log(r);
}
process.exit(failed ? 1 : 0);

#!/usr/bin/env node
// A long-lived UDP client with one socket and one source port for its whole life, as a metrics
// agent or a resolver library keeps one: sends "whoami" to HOST:PORT every MS milliseconds and
// logs each answer ("<time> <pod> <ip> <peer>") or "<time> timeout". Prints "ready" first.
// Usage: node udpsend.mjs HOST PORT [MS] [SOURCE_PORT]
import { createSocket } from 'node:dgram';

const [host, port, ms = '300', sport = '0'] = process.argv.slice(2);
if (!host || !port) {
  console.error('usage: udpsend.mjs HOST PORT [MS] [SOURCE_PORT]');
  process.exit(2);
}
const s = createSocket('udp4');
let answered = true;
// A connected socket reports an ICMP port unreachable as ECONNREFUSED on the next send.
s.on('error', (e) => console.log(`${new Date().toISOString()} error ${e.code ?? e.message}`));
s.on('message', (m) => {
  answered = true;
  console.log(`${new Date().toISOString()} ${m.toString().trim()}`);
});
s.bind(Number(sport), () => {
  s.connect(Number(port), host, () => {
    console.log(`ready from port ${s.address().port}`);
    setInterval(() => {
      if (!answered) console.log(`${new Date().toISOString()} timeout`);
      answered = false;
      s.send('whoami');
    }, Number(ms));
  });
});

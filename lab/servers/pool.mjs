#!/usr/bin/env node
// A connection pool, as an application keeps one: N TCP connections to HOST:PORT, each sending
// a keep-alive HTTP request every 2 s (under the servers' 5 s idle timeout, so the connection,
// and its conntrack entry, lives as long as the pool). A connection that closes or fails is
// reopened after a second. Prints "ready N" once N are open (or after 10 s with how many are),
// then one line per reopen.
// Usage: node pool.mjs HOST PORT N
import { connect } from 'node:net';

const [host, port, n = '10'] = process.argv.slice(2);
if (!host || !port) {
  console.error('usage: pool.mjs HOST PORT N');
  process.exit(2);
}
const want = Number(n);
let open = 0;
let said = false;

function say() {
  if (said) return;
  said = true;
  console.log(`ready ${open}/${want} connections open to ${host}:${port}`);
}

function one() {
  const s = connect({ host, port: Number(port) });
  let counted = false;
  s.setTimeout(5000, () => s.destroy());
  let timer;
  const ask = () => s.write(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: keep-alive\r\n\r\n`);
  s.on('connect', () => {
    s.setTimeout(0);
    ask();
    timer = setInterval(ask, 2000);
    counted = true;
    if (++open >= want) say();
  });
  s.on('data', () => {});
  s.on('error', () => {});
  s.on('close', () => {
    clearInterval(timer);
    if (counted) open--;
    if (said) console.log(`reopening (${open}/${want} open)`);
    setTimeout(one, 1000);
  });
}

for (let i = 0; i < want; i++) setTimeout(one, i * 10);
setTimeout(say, 10_000);

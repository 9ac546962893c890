#!/usr/bin/env node
// An "external" DNS resolver for the lab, standing in for the datacenter's or the cloud's: UDP
// on HOST:53 (or HOST:PORT), answering A for the names it is given and NXDOMAIN for everything
// else (NODATA for other types of a known name), recursion available, each reply after MS ms
// (a resolver some distance away). The cluster DNS forwards names outside cluster.local to it
// when started with --upstream. One line per query: "<client> <name> <type> <rcode>".
// Prints "ready" once it listens.
// Usage: node resolver.mjs HOST[:PORT] [--delay-ms MS] NAME=IP...
import { createSocket } from 'node:dgram';
import dnsPacket from 'dns-packet';

const args = process.argv.slice(2);
const listen = args.shift();
let delay = 0;
const table = new Map();
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--delay-ms') delay = Number(args[++i]);
  else {
    const [name, ip] = args[i].split('=');
    table.set(name.toLowerCase().replace(/\.$/, ''), ip);
  }
}
if (!listen || !Number.isFinite(delay) || [...table.values()].some((ip) => !ip)) {
  console.error('usage: resolver.mjs HOST[:PORT] [--delay-ms MS] NAME=IP...');
  process.exit(2);
}
const [host, port = '53'] = listen.split(':');
const NXDOMAIN = 3;

function answer(q) {
  const question = q.questions?.[0];
  const name = (question?.name ?? '').toLowerCase().replace(/\.$/, '');
  const ip = table.get(name);
  const rcode = question && ip === undefined ? NXDOMAIN : 0;
  const answers =
    ip && question.type === 'A' ? [{ type: 'A', name: question.name, ttl: 30, data: ip }] : [];
  const flags =
    dnsPacket.RECURSION_AVAILABLE | ((q.flags ?? 0) & dnsPacket.RECURSION_DESIRED) | rcode;
  const bytes = dnsPacket.encode({
    type: 'response',
    id: q.id,
    flags,
    questions: q.questions,
    answers,
  });
  return { bytes, line: `${name || '?'} ${question?.type ?? '?'} rcode=${rcode}` };
}

const s = createSocket('udp4');
s.on('message', (msg, from) => {
  let q;
  try {
    q = dnsPacket.decode(msg);
  } catch {
    return;
  }
  if (q.type === 'response') return;
  const r = answer(q);
  setTimeout(() => {
    s.send(r.bytes, from.port, from.address);
    console.log(`${from.address} ${r.line}`);
  }, delay);
});
s.bind(Number(port), host, () => {
  console.log(`ready on ${host}:${port}, ${table.size} names, replies after ${delay} ms`);
});

#!/usr/bin/env node
// The lab's pod server: says who answered, so every curl through a ClusterIP shows the backend.
//   HTTP  GET /            -> "<pod> <ip>\n"
//         GET /bytes?n=N   -> N bytes of the deterministic pattern (big-transfer checksum test)
//         GET /whoami      -> "<pod> <ip> <peer ip>\n": the source address the pod saw
//                             (masqueraded NodePort traffic shows a node address)
//   UDP   any datagram     -> "<pod> <ip>"; the datagram "whoami" -> "<pod> <ip> <peer ip>"
//         >= 1024 bytes    -> "<pod> <ip>\n" + the datagram itself (fragmentation tests)
// Plain JavaScript with no dependencies so it starts in milliseconds inside a pod namespace.
// Usage: node echo.mjs --name pod-a --ip 10.244.1.2 [--http 8080] [--udp 5353]
import { createSocket } from 'node:dgram';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { fillPattern, patternState } from './pattern.mjs';

const { values } = parseArgs({
  options: {
    name: { type: 'string' },
    ip: { type: 'string' },
    http: { type: 'string', default: '8080' },
    udp: { type: 'string', default: '5353' },
  },
});
if (!values.name || !values.ip) {
  console.error('usage: echo.mjs --name POD --ip IP [--http PORT] [--udp PORT]');
  process.exit(2);
}
const ident = `${values.name} ${values.ip}`;
const MAX_BYTES = 2 ** 40;
const CHUNK = 256 * 1024;

function streamBytes(res, n) {
  res.writeHead(200, {
    'content-type': 'application/octet-stream',
    'content-length': n,
    'x-pod': values.name,
  });
  const state = patternState();
  let left = n;
  const pump = () => {
    while (left > 0) {
      const buf = new Uint8Array(CHUNK);
      fillPattern(state, buf);
      const take = Math.min(left, CHUNK);
      left -= take;
      const more = res.write(take === CHUNK ? buf : buf.subarray(0, take));
      if (!more) return void res.once('drain', pump);
    }
    res.end();
  };
  pump();
}

const http = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://pod');
  if (url.pathname === '/') {
    res.writeHead(200, { 'content-type': 'text/plain', 'x-pod': values.name });
    res.end(`${ident}\n`);
  } else if (url.pathname === '/whoami') {
    res.writeHead(200, { 'content-type': 'text/plain', 'x-pod': values.name });
    res.end(`${ident} ${req.socket.remoteAddress}\n`);
  } else if (url.pathname === '/bytes') {
    const n = Number(url.searchParams.get('n'));
    if (!Number.isSafeInteger(n) || n < 0 || n > MAX_BYTES) {
      res.writeHead(400, { 'content-type': 'text/plain' });
      res.end('n must be an integer 0..2^40\n');
    } else {
      streamBytes(res, n);
    }
  } else {
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found\n');
  }
});
http.keepAliveTimeout = 1000;

const udp = createSocket('udp4');
udp.on('message', (msg, rinfo) => {
  // A big datagram comes back whole, after the answer line (fragmented both ways on a 1500 MTU).
  if (msg.length >= 1024)
    return void udp.send([Buffer.from(`${ident}\n`), msg], rinfo.port, rinfo.address);
  const who = msg.toString() === 'whoami' ? `${ident} ${rinfo.address}` : ident;
  udp.send(who, rinfo.port, rinfo.address);
});

let pending = 2;
const ready = () => {
  if (--pending === 0) console.log(`ready ${ident} http=${values.http} udp=${values.udp}`);
};
http.listen(Number(values.http), '0.0.0.0', ready);
udp.bind(Number(values.udp), '0.0.0.0', ready);
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0));

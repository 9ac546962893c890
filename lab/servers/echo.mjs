#!/usr/bin/env node
// The lab's pod server: says who answered, so every curl through a ClusterIP shows the backend.
//   HTTP  GET /            -> "<pod> <ip>\n"
//         GET /bytes?n=N   -> N bytes of the deterministic pattern (big-transfer checksum test)
//         GET /whoami      -> "<pod> <ip> <peer ip>\n": the source address the pod saw
//                             (masqueraded NodePort traffic shows a node address)
//         GET /ready       -> 200 "ready" or 503 "not ready": what a readinessProbe httpGet asks
//         GET /unready     -> from now on /ready answers 503 (lab exercises: make a pod unready)
//         GET /make-ready  -> /ready answers 200 again
//   UDP   any datagram     -> "<pod> <ip>"; the datagram "whoami" -> "<pod> <ip> <peer ip>"
//         >= 1024 bytes    -> "<pod> <ip>\n" + the datagram itself (fragmentation tests)
// --ready-after S: /ready answers 503 for the first S seconds (a slow-starting application).
// --http and --udp may be given more than once (a Pod's containers declare several ports).
// --ip6 ADDR (a dual-stack Pod): every port is served on IPv6 too, by sockets of their own
// (IPv6-only, so IPv4 peers still show as a.b.c.d), answering "<pod> <ip6>".
// Plain JavaScript with no dependencies so it starts in milliseconds inside a pod namespace.
// Usage: node echo.mjs --name pod-a --ip 10.244.1.2 [--ip6 ADDR] [--http 8080]... [--udp 5353]... [--ready-after S]
import { createSocket } from 'node:dgram';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { fillPattern, patternState } from './pattern.mjs';

const { values } = parseArgs({
  options: {
    name: { type: 'string' },
    ip: { type: 'string' },
    ip6: { type: 'string' },
    http: { type: 'string', multiple: true },
    udp: { type: 'string', multiple: true },
    'ready-after': { type: 'string', default: '0' },
  },
});
const httpPorts = values.http ?? (values.udp ? [] : ['8080']);
const udpPorts = values.udp ?? (values.http ? [] : ['5353']);
const readyAt = Date.now() + Number(values['ready-after']) * 1000;
let unready = false;
if (!values.name || !values.ip) {
  console.error('usage: echo.mjs --name POD --ip IP [--http PORT] [--udp PORT]');
  process.exit(2);
}
const ident4 = `${values.name} ${values.ip}`;
const ident6 = `${values.name} ${values.ip6}`;
/** who answers a peer: the pod and its address of the peer's family */
const identFor = (addr) => (addr?.includes(':') ? ident6 : ident4);
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
      if (res.destroyed) return; // the client went away mid-download
      const more = res.write(take === CHUNK ? buf : buf.subarray(0, take));
      if (!more) return void res.once('drain', pump);
    }
    res.end();
  };
  pump();
}

function text(res, status, body) {
  res.writeHead(status, { 'content-type': 'text/plain', 'x-pod': values.name });
  res.end(body);
}

const handle = (req, res) => {
  const ident = identFor(req.socket.localAddress);
  const url = new URL(req.url ?? '/', 'http://pod');
  if (url.pathname === '/ready') {
    const ok = !unready && Date.now() >= readyAt;
    text(res, ok ? 200 : 503, ok ? 'ready\n' : 'not ready\n');
  } else if (url.pathname === '/unready' || url.pathname === '/make-ready') {
    unready = url.pathname === '/unready';
    text(res, 200, `${ident} ${unready ? 'unready' : 'ready'}\n`);
  } else if (url.pathname === '/') {
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
};

const onDatagram = (udp, ident) => (msg, rinfo) => {
  // A big datagram comes back whole, after the answer line (fragmented both ways on a 1500 MTU).
  if (msg.length >= 1024)
    return void udp.send([Buffer.from(`${ident}\n`), msg], rinfo.port, rinfo.address);
  const who = msg.toString() === 'whoami' ? `${ident} ${rinfo.address}` : ident;
  udp.send(who, rinfo.port, rinfo.address);
};

const families = values.ip6 ? ['0.0.0.0', '::'] : ['0.0.0.0'];
let pending = (httpPorts.length + udpPorts.length) * families.length;
const ready = () => {
  const v6 = values.ip6 ? ` ip6=${values.ip6}` : '';
  if (--pending === 0) console.log(`ready ${ident4} http=${httpPorts} udp=${udpPorts}${v6}`);
};
for (const host of families) {
  for (const port of httpPorts) {
    const http = createServer(handle);
    http.keepAliveTimeout = 1000;
    http.listen({ port: Number(port), host, ipv6Only: host === '::' }, ready);
  }
  for (const port of udpPorts) {
    const v6 = host === '::';
    const udp = createSocket({ type: v6 ? 'udp6' : 'udp4', ipv6Only: v6 });
    udp.on('message', onDatagram(udp, v6 ? ident6 : ident4));
    // A reply that cannot be sent (no route while a test takes a node's data plane or routes
    // away) is the client's loss, not the Pod's: without a handler it would end the server.
    udp.on('error', (err) => console.error(`udp ${port}: ${err.message}`));
    udp.bind(Number(port), host, ready);
  }
}
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0));

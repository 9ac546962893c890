#!/usr/bin/env node
// `npm run soak`'s injector, inside a pod's namespace: reads "NAME HEX" lines (whole IPv4
// packets) on stdin and sends each COUNT times through a raw IPPROTO_RAW socket of the
// `raw-socket` package (the header as given; the kernel fills in its checksum and total length).
// Prints "sent N, errors E". CommonJS: raw-socket is a CommonJS addon.
// Usage: node inject.cjs COUNT < packets
const raw = require('raw-socket');

const count = Number(process.argv[2] ?? '100');
let input = '';
process.stdin.on('data', (b) => {
  input += b;
});
process.stdin.on('end', async () => {
  const socket = raw.createSocket({ protocol: 255 }); // IPPROTO_RAW: IP_HDRINCL implied
  let sent = 0;
  let errors = 0;
  const one = (buf, dst) =>
    new Promise((resolve) => {
      socket.send(buf, 0, buf.length, dst, (err) => {
        if (err) errors++;
        else sent++;
        resolve();
      });
    });
  for (const line of input.split('\n')) {
    const [, hex] = line.split(' ');
    if (!hex) continue;
    const buf = Buffer.from(hex, 'hex');
    const dst = `${buf[16]}.${buf[17]}.${buf[18]}.${buf[19]}`;
    for (let i = 0; i < count; i++) {
      await one(buf, dst);
      // paced (1 ms): a burst would overflow the TUN's queue and measure that instead
      await new Promise((r) => setTimeout(r, 1));
    }
  }
  socket.close();
  console.log(`sent ${sent}, errors ${errors}`);
});

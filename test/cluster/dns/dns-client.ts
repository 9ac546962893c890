// Test side of the wire: a DNS client and a stand-in upstream resolver, both on real sockets and
// both speaking dns-packet, so the server is checked by an encoder/decoder it does not share code
// paths with beyond the library.
//
// Run the upstream alone (the root test starts it inside a namespace):
//   node --import tsx test/cluster/dns/dns-client.ts upstream HOST PORT NAME=IP...
import { createSocket } from 'node:dgram';
import { connect } from 'node:net';
import { pathToFileURL } from 'node:url';
import dnsPacket, { type Answer, type DecodedPacket, type RecordType } from 'dns-packet';
import { listenPair } from '../../../src/cluster/dns/listen.ts';

export interface AskOptions {
  tcp?: boolean;
  /** Advertise EDNS with this UDP payload size. */
  edns?: number;
  timeoutMs?: number;
}

export interface Asked {
  reply: DecodedPacket;
  rcode: number;
  bytes: number;
}

/** The data of the records of one type (or all but OPT), in order. */
export function data(answers: Answer[] | undefined, type?: string): unknown[] {
  return (answers ?? [])
    .filter((a) => (type ? a.type === type : a.type !== 'OPT'))
    .map((a) => (a as { data: unknown }).data);
}

let nextId = 1;

export function query(name: string, type: RecordType, edns?: number): Buffer {
  const additionals: Answer[] =
    edns === undefined
      ? []
      : [
          {
            type: 'OPT',
            name: '.',
            udpPayloadSize: edns,
            flags: 0,
            options: [],
          } as unknown as Answer,
        ];
  nextId = (nextId % 65535) + 1;
  return dnsPacket.encode({
    type: 'query',
    id: nextId,
    flags: dnsPacket.RECURSION_DESIRED,
    questions: [{ type, name, class: 'IN' }],
    additionals,
  });
}

export async function ask(
  port: number,
  name: string,
  type: RecordType,
  o: AskOptions = {},
): Promise<Asked> {
  const raw = await exchange(port, query(name, type, o.edns), o.tcp === true, o.timeoutMs);
  return { reply: dnsPacket.decode(raw), rcode: raw.readUInt16BE(2) & 0xf, bytes: raw.length };
}

/** Sends raw bytes, resolves with the raw reply (TCP: without the length prefix). */
export function exchange(
  port: number,
  msg: Buffer,
  tcp: boolean,
  timeoutMs = 5000,
  host = '127.0.0.1',
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => finish(new Error(`no reply in ${timeoutMs} ms`)), timeoutMs);
    let close = () => {};
    const finish = (e: Error | null, b?: Buffer) => {
      clearTimeout(timer);
      close();
      if (e) reject(e);
      else resolve(b!);
    };
    if (!tcp) {
      const s = createSocket('udp4');
      close = () => s.close();
      s.on('message', (m) => finish(null, m));
      s.on('error', (e) => finish(e));
      s.send(msg, port, host);
      return;
    }
    const s = connect(port, host);
    close = () => s.destroy();
    let got = Buffer.alloc(0);
    s.on('error', (e) => finish(e));
    s.on('data', (c) => {
      got = Buffer.concat([got, c]);
      if (got.length >= 2 && got.length >= 2 + got.readUInt16BE(0))
        finish(null, got.subarray(2, 2 + got.readUInt16BE(0)));
    });
    const len = Buffer.alloc(2);
    len.writeUInt16BE(msg.length);
    s.write(Buffer.concat([len, msg]));
  });
}

export interface Upstream {
  port: number;
  /** Every question it was asked, "name type". */
  asked: string[];
  close(): Promise<void>;
}

/** A recursive resolver stand-in: A records from `names`, NXDOMAIN for the rest, UDP and TCP. */
export async function startUpstream(
  names: Record<string, string>,
  host = '127.0.0.1',
  port = 0,
): Promise<Upstream> {
  const asked: string[] = [];
  const answer = (msg: Buffer): Buffer => {
    const q = dnsPacket.decode(msg);
    const question = q.questions![0]!;
    asked.push(`${question.name} ${question.type}`);
    const ip = names[question.name.toLowerCase()];
    const answers: Answer[] =
      ip && question.type === 'A' ? [{ type: 'A', name: question.name, ttl: 60, data: ip }] : [];
    const rcode = ip ? 0 : 3;
    const flags = dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | rcode;
    return dnsPacket.encode({ type: 'response', id: q.id, flags, questions: q.questions, answers });
  };
  const {
    udp,
    tcp,
    port: bound,
  } = await listenPair(
    host,
    port,
    (sock, m, r) => sock.send(answer(m), r.port, r.address),
    (s) => {
      let got = Buffer.alloc(0);
      s.on('error', () => s.destroy());
      s.on('data', (c) => {
        got = Buffer.concat([got, c]);
        if (got.length < 2 || got.length < 2 + got.readUInt16BE(0)) return;
        const out = answer(got.subarray(2, 2 + got.readUInt16BE(0)));
        const len = Buffer.alloc(2);
        len.writeUInt16BE(out.length);
        s.end(Buffer.concat([len, out]));
      });
    },
  );
  return {
    port: bound,
    asked,
    close: () =>
      new Promise<void>((res) => {
        udp.close();
        tcp.close(() => res());
      }),
  };
}

if (
  process.argv[1] &&
  import.meta.url === pathToFileURL(process.argv[1]).href &&
  process.argv[2] === 'upstream'
) {
  const [host, port, ...pairs] = process.argv.slice(3);
  const names = Object.fromEntries(pairs.map((p) => p.split('=') as [string, string]));
  const up = await startUpstream(names, host, Number(port));
  process.stdout.write(`upstream on ${host}:${up.port}\n`);
  process.on('SIGTERM', () => void up.close().then(() => process.exit(0)));
}

// The cluster DNS server: UDP and TCP on one address (port 53 in a DNS Pod), answering from the
// view directory's Services and EndpointSlices and re-reading it on every change, as CoreDNS's
// kubernetes plugin follows the API. Run it (the lab's kubelet does, in the DNS Pod's namespace):
//
//   node --import tsx src/cluster/dns/server.ts --dir VIEW_DIR --listen 10.244.1.5:53 \
//        [--domain cluster.local] [--upstream IP:PORT] [--ttl 5] [--log] [--delay-ms N]
//
// --delay-ms holds every reply back N ms: a DNS Pod on a loaded node or in another zone, as the
// lab's exercises need one (the sandbox has no netem to delay its links instead).
//
// A view that does not read (bad YAML, a bad field) is reported in one line naming file, object
// and field, and the last good zone keeps being served. SIGTERM/SIGINT close both sockets.
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { connect, isIP, type Server, type Socket } from 'node:net';
import { statSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { Command, InvalidArgumentError } from 'commander';
import { UsageError, UserError } from '../../errors.ts';
import { listenPair } from './listen.ts';
import { type Forwarder, respond, type Reply, type Transport } from './responder.ts';
import { buildZone, DEFAULT_TTL, type Zone } from './zone.ts';
import { type View, watchView } from './view.ts';

export interface HostPort {
  host: string;
  port: number;
}

export interface DnsServerOptions {
  domain: string;
  ttl?: number;
  upstream?: HostPort;
  /** One line per query (client, name, type, rcode) — CoreDNS's `log` plugin. */
  logQuery?: (line: string) => void;
  /** Every reply waits this long (ms) before it is sent: a slow or distant DNS Pod. */
  delayMs?: number;
}

/** How long the upstream gets to answer before the client is told SERVFAIL. */
const FORWARD_TIMEOUT_MS = 2000;
/** An idle TCP client is closed after this (RFC 7766 6.2.3 suggests seconds, not minutes). */
const TCP_IDLE_MS = 10_000;
const TCP_MAX_MESSAGE = 65535;

export class ClusterDnsServer {
  private zone: Zone;
  private udp?: UdpSocket;
  private tcp?: Server;
  private readonly forward?: Forwarder;

  constructor(private readonly opts: DnsServerOptions) {
    this.zone = buildZone({ services: [], slices: [], namespaces: [] }, opts.domain, opts.ttl);
    if (opts.upstream) this.forward = forwarder(opts.upstream);
  }

  setView(view: View): void {
    this.zone = buildZone(view, this.opts.domain, this.opts.ttl ?? DEFAULT_TTL);
  }

  /** Binds UDP and TCP on host:port (port 0: any free port, the same for both where possible). */
  async listen(host: string, port: number): Promise<HostPort> {
    const pair = await listenPair(
      host,
      port,
      (udp, msg, rinfo) => {
        void this.handle(msg, 'udp', rinfo.address).then((r) => {
          if (r) udp.send(r.bytes, rinfo.port, rinfo.address);
        });
      },
      (s) => this.serveTcp(s),
    );
    pair.udp.on('error', (e) => process.stderr.write(`cluster-dns: udp: ${e.message}\n`));
    this.udp = pair.udp;
    this.tcp = pair.tcp;
    return { host, port: pair.port };
  }

  async close(): Promise<void> {
    this.udp?.close();
    await new Promise<void>((res) => (this.tcp ? this.tcp.close(() => res()) : res()));
  }

  private async handle(msg: Buffer, transport: Transport, client: string): Promise<Reply | null> {
    const r = await respond(this.zone, msg, transport, this.forward);
    if (r && this.opts.delayMs) await sleep(this.opts.delayMs);
    if (r && this.opts.logQuery)
      this.opts.logQuery(`${client} ${transport} ${r.qname} ${r.qtype} rcode=${r.rcode}`);
    return r;
  }

  /** RFC 1035 4.2.2 / RFC 7766: each message behind a 2-byte length; several per connection. */
  private serveTcp(s: Socket): void {
    let pending = Buffer.alloc(0);
    s.setTimeout(TCP_IDLE_MS, () => s.destroy());
    s.on('error', () => s.destroy());
    s.on('data', (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 2 && pending.length >= 2 + pending.readUInt16BE(0)) {
        const msg = pending.subarray(2, 2 + pending.readUInt16BE(0));
        pending = pending.subarray(2 + msg.length);
        void this.handle(Buffer.from(msg), 'tcp', s.remoteAddress ?? '').then((r) => {
          if (!r || s.destroyed) return;
          const len = Buffer.alloc(2);
          len.writeUInt16BE(Math.min(r.bytes.length, TCP_MAX_MESSAGE));
          s.write(Buffer.concat([len, r.bytes]));
        });
      }
    });
  }
}

/** Relays a query to the upstream over the client's transport, one fresh socket per query. */
export function forwarder(up: HostPort): Forwarder {
  return (query, transport) =>
    new Promise<Buffer>((resolve, reject) => {
      const fail = (e: Error) => {
        clearTimeout(timer);
        done();
        reject(e);
      };
      const ok = (b: Buffer) => {
        clearTimeout(timer);
        done();
        resolve(b);
      };
      const timer = setTimeout(() => fail(new Error('upstream timeout')), FORWARD_TIMEOUT_MS);
      let done = () => {};
      if (transport === 'udp') {
        const sock = createSocket(isIP(up.host) === 6 ? 'udp6' : 'udp4');
        done = () => sock.close();
        sock.on('error', fail);
        // Only the upstream's reply to this query (same address and id) ends the wait.
        sock.on('message', (m, from) => {
          if (
            from.address === up.host &&
            m.length >= 2 &&
            m.readUInt16BE(0) === query.readUInt16BE(0)
          )
            ok(m);
        });
        sock.send(query, up.port, up.host);
        return;
      }
      const sock = connect(up.port, up.host);
      done = () => sock.destroy();
      let got = Buffer.alloc(0);
      sock.on('error', fail);
      sock.on('data', (c) => {
        got = Buffer.concat([got, c]);
        if (got.length >= 2 && got.length >= 2 + got.readUInt16BE(0))
          ok(got.subarray(2, 2 + got.readUInt16BE(0)));
      });
      const len = Buffer.alloc(2);
      len.writeUInt16BE(query.length);
      sock.write(Buffer.concat([len, query]));
    });
}

export function parseHostPort(value: string, defaultPort = 53): HostPort {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+))(?::(\d+))?$/.exec(value);
  const host = m?.[1] ?? m?.[2];
  const port = m?.[3] === undefined ? defaultPort : Number(m[3]);
  if (!host || isIP(host) === 0 || port > 65535)
    throw new InvalidArgumentError(`expected IP[:PORT] (e.g. 10.244.1.5:53), got ${value}`);
  return { host, port };
}

async function main(argv: string[]): Promise<void> {
  const cmd = new Command('cluster-dns')
    .description('Kubernetes cluster DNS from a directory of Service and EndpointSlice YAML')
    .requiredOption('--dir <dir>', 'the view directory (Services, EndpointSlices, Namespaces)')
    .option(
      '--listen <ip:port>',
      'address for UDP and TCP',
      (v) => parseHostPort(v),
      parseHostPort('0.0.0.0:53'),
    )
    .option('--domain <domain>', 'the cluster domain', 'cluster.local')
    .option(
      '--upstream <ip:port>',
      'forward names outside the cluster domain here (else REFUSED)',
      (v) => parseHostPort(v),
    )
    .option('--ttl <seconds>', 'TTL of every record', (v) => Number(v), DEFAULT_TTL)
    .option('--log', 'one line per query on stdout')
    .option('--delay-ms <ms>', 'hold every reply back this long (a slow DNS Pod)', (v) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0 || n > 10_000)
        throw new InvalidArgumentError(`expected milliseconds 0..10000, got ${v}`);
      return n;
    })
    .parse(argv);
  const o = cmd.opts<{
    dir: string;
    listen: HostPort;
    domain: string;
    upstream?: HostPort;
    ttl: number;
    log?: boolean;
    delayMs?: number;
  }>();
  const say = (line: string) => process.stdout.write(`${line}\n`);
  if (!isDirectory(o.dir))
    throw new UsageError(`--dir ${o.dir}: not a directory (the view directory to read)`);
  const server = new ClusterDnsServer({
    domain: o.domain,
    ttl: o.ttl,
    upstream: o.upstream,
    logQuery: o.log ? say : undefined,
    delayMs: o.delayMs,
  });
  const unwatch = watchView(
    o.dir,
    (view) => {
      server.setView(view);
      say(
        `cluster-dns: view ${o.dir}: ${view.services.length} services, ${view.slices.length} endpointslices`,
      );
    },
    (e) => process.stderr.write(`cluster-dns: ${e.message} (still serving the last good view)\n`),
  );
  const at = await server.listen(o.listen.host, o.listen.port);
  say(
    `cluster-dns: serving ${o.domain} on ${at.host}:${at.port} udp+tcp${o.upstream ? `, forwarding to ${o.upstream.host}:${o.upstream.port}` : ', other names REFUSED'}${o.delayMs ? `, every reply ${o.delayMs} ms late` : ''}`,
  );
  const stop = () => {
    unwatch();
    void server.close().then(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

function isDirectory(dir: string): boolean {
  try {
    return statSync(dir).isDirectory();
  } catch {
    return false;
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv).catch((e: Error) => {
    process.stderr.write(`cluster-dns: ${e.message}\n`);
    process.exit(e instanceof UserError ? 2 : 1);
  });
}

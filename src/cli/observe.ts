// `kubetun monitor`, `kubetun trace`, `kubetun tap`: seeing inside a running data plane over
// its control socket (src/node/monitor.ts, src/node/trace.ts). monitor prints one line per
// packet event (cilium monitor's style, src/inspect/monitor.ts), tap writes each packet as
// received and as written into a pcapng file of two interfaces (src/pcap/pcapng.ts), trace
// explains what the data plane would do with one packet now, changing nothing.
import { closeSync, openSync, writeSync } from 'node:fs';
import type { Command } from 'commander';
import { fromErrno, UsageError } from '../errors.ts';
import { inspectRequest } from '../inspect/client.ts';
import {
  formatMonitorEvent,
  formatTuple,
  hostPort,
  type MonitorEvent,
  type MonitorStatus,
  monitorFilterFromFlags,
} from '../inspect/monitor.ts';
import { ctlStream } from '../inspect/stream.ts';
import type { TraceReport } from '../node/trace.ts';
import { PcapngWriter } from '../pcap/pcapng.ts';
import { socketOf, socketOptions } from './inspect.ts';

type Flags = Record<string, unknown>;
const out = (s: string) => process.stdout.write(`${s}\n`);
const err = (s: string) => process.stderr.write(`${s}\n`);
function withFilters(c: Command): Command {
  return c
    .option('--drops', 'drops only (the same as --type drop)')
    .option('--type <type>', 'drop: drops only; trace: everything but drops')
    .option('--reason <names>', 'only these reasons, comma-separated (docs/reasons.md)')
    .option('--addr <ip>', 'source or destination, before or after translation')
    .option('--port <port>', 'source or destination port, before or after translation')
    .option('--proto <proto>', 'tcp, udp or icmp')
    .option('-c, --count <n>', 'stop after n events');
}

function countOf(o: Flags): number {
  if (o.count === undefined) return Number.POSITIVE_INFINITY;
  const n = Number(o.count);
  if (!Number.isInteger(n) || n < 1)
    throw new UsageError(`--count: ${JSON.stringify(o.count)} is not a positive integer`);
  return n;
}

async function monitor(o: Flags): Promise<void> {
  const filter = monitorFilterFromFlags(o);
  const max = countOf(o);
  const socket = socketOf(o);
  let events = 0;
  let lost = 0;
  let lostShown = 0;
  if (!o.json) err(`listening for events on ${socket} (Ctrl-C to stop)`);
  const end = await ctlStream(socket, { cmd: 'monitor', filter }, (msg) => {
    if (msg.type === 'status') {
      lost = (msg as unknown as MonitorStatus).lost;
      if (lost > lostShown && !o.json)
        err(`... ${lost - lostShown} events lost (the reader fell behind)`);
      lostShown = Math.max(lostShown, lost);
      if (o.json) out(JSON.stringify(msg));
      return true;
    }
    const e = msg as unknown as MonitorEvent;
    lost = e.lost;
    out(o.json ? JSON.stringify(e) : formatMonitorEvent(e));
    return ++events < max;
  });
  if (!o.json)
    err(
      `${events} events shown, ${lost} lost${end.by === 'agent' ? ' (the agent ended the stream)' : ''}`,
    );
}

async function tap(o: Flags): Promise<void> {
  const file = o.write as string | undefined;
  if (!file) throw new UsageError('tap: -w FILE.pcapng is required (the capture file to write)');
  const filter = monitorFilterFromFlags(o);
  const max = countOf(o);
  const socket = socketOf(o);
  let fd: number;
  try {
    fd = openSync(file, 'w');
  } catch (e) {
    throw fromErrno(e, 'capture file', file);
  }
  const w = new PcapngWriter((chunk) => writeSync(fd, chunk));
  let events = 0;
  let lost = 0;
  let ifIn = -1;
  let ifOut = -1;
  err(`capturing on ${socket} into ${file} (Ctrl-C to stop)`);
  try {
    await ctlStream(socket, { cmd: 'monitor', filter, capture: true }, (msg) => {
      if (msg.type === 'status') {
        lost = Number(msg.lost);
        return true;
      }
      const e = msg as unknown as MonitorEvent;
      if (!e.pkt) return true;
      if (ifIn < 0) {
        ifIn = w.addInterface({
          name: `${e.node}:in`,
          description: 'kubetun: packets as received from the TUN',
          snaplen: e.pkt.snap,
        });
        ifOut = w.addInterface({
          name: `${e.node}:out`,
          description: 'kubetun: packets as written back (after NAT)',
          snaplen: e.pkt.snap,
        });
      }
      lost = e.lost;
      const t = e.time * 1000;
      const note = tapComment(e);
      const pin = Buffer.from(e.pkt.in, 'base64');
      w.packet(ifIn, t, pin, e.len, note);
      if (e.pkt.out !== undefined) {
        const pout = Buffer.from(e.pkt.out, 'base64');
        w.packet(ifOut, t, pout, e.verdict === 'REPLY' ? pout.length : e.len, note);
      }
      return ++events < max;
    });
  } finally {
    closeSync(fd);
  }
  err(`${events} events (${w.count} packets) written to ${file}, ${lost} events lost`);
}

/** The packet comment: verdict and reason, the service and backend, the conntrack use. */
export function tapComment(e: MonitorEvent): string {
  const parts = [`${e.verdict} ${e.reason}`];
  if (e.service) parts.push(`svc ${e.service}`);
  if (e.backend) parts.push(`backend ${e.backend}`);
  if (e.ct >= 0) parts.push(e.ctNew ? 'ct new' : 'ct hit');
  parts.push(`event ${e.seq}`);
  return parts.join('; ');
}

async function trace(o: Flags): Promise<void> {
  if (!o.from)
    throw new UsageError('trace: --from IP[:PORT] or [IPv6][:PORT] is required (the client)');
  if (!o.to)
    throw new UsageError('trace: --to IP:PORT or [IPv6]:PORT is required (the destination)');
  const req = { cmd: 'trace', from: o.from, to: o.to, proto: o.proto ?? 'tcp' };
  const r = await inspectRequest<TraceReport>(socketOf(o), req);
  if (o.json) out(JSON.stringify(r, null, 2));
  else for (const line of formatTrace(r)) out(line);
}

export function formatTrace(r: TraceReport): string[] {
  const L: string[] = [];
  const pkt = `${r.proto} ${formatTuple(r.proto, r.packet)}${r.proto === 'tcp' ? ' (SYN)' : ''}`;
  L.push(`trace on ${r.node}: ${pkt}`);
  const s = r.service;
  if (s) {
    const aff = s.affinityTimeoutSec ? `, affinity ClientIP ${s.affinityTimeoutSec}s` : '';
    L.push(`service    ${s.name} (${s.frontend}), scheduler ${s.scheduler}${aff}`);
    const n = s.endpoints.filter((e) => e.eligible).length;
    const fb = s.terminatingFallback ? ' (none ready: serving terminating endpoints)' : '';
    L.push(`endpoints  ${s.endpoints.length}, eligible for new flows ${n}${fb}`);
    for (const e of s.endpoints) {
      const where = [e.node, e.zone].filter(Boolean).join(' ');
      const state = e.ready ? 'ready' : e.terminating ? 'terminating' : 'not ready';
      const mark = e.eligible ? '+' : '-';
      L.push(
        `  ${mark} ${hostPort(e.ip, e.port).padEnd(21)} ${where.padEnd(14)} ${state}${e.why ? `: ${e.why}` : ''}`,
      );
    }
  } else {
    L.push('service    none (the destination is no service frontend on this node)');
  }
  if (r.affinity) {
    const a = r.affinity;
    L.push(
      `affinity   ${a.backend}, last used ${a.ageSec}s ago, timeout ${a.timeoutSec}s${a.fresh ? '' : ' (expired)'}`,
    );
  } else if (s?.affinityTimeoutSec) L.push('affinity   no entry for this client yet');
  const c = r.conntrack;
  if (c.hit) L.push(`conntrack  hit: entry ${c.entry} (${c.state}), the flow keeps its backend`);
  else if (c.created) L.push(`conntrack  miss: a new entry would be created (${c.state})`);
  else L.push('conntrack  not used');
  if (r.backend)
    L.push(
      `backend    ${r.backend}${c.created && s ? ` (chosen by ${r.affinity?.fresh ? 'affinity' : s.scheduler})` : ''}`,
    );
  const before = formatTuple(r.proto, r.packet);
  L.push(
    `rewrite    ${r.rewrite.changed ? `${before} => ${formatTuple(r.proto, r.rewrite.after)}` : 'none'}`,
  );
  L.push(`verdict    ${r.verdict} ${r.reason}: ${r.reasonDoc}`);
  L.push('(dry run on a copy of the maps: no state changed)');
  return L;
}

export function register(program: Command): void {
  withFilters(
    socketOptions(
      program
        .command('monitor')
        .description('live packet events of a running data plane (cilium monitor style)'),
    ),
  )
    .option('--json', 'one JSON object per event')
    .action(monitor);
  withFilters(
    socketOptions(
      program
        .command('tap')
        .description('capture each packet as received and as written into one pcapng file'),
    ),
  )
    .option('-w, --write <file>', 'the pcapng file to write')
    .action(tap);
  socketOptions(
    program
      .command('trace')
      .description('what the data plane would do with one packet now, and why (changes nothing)'),
  )
    .option('--from <ip[:port]>', 'the client (IPv6: [ip]:port, or a bare ip)')
    .option(
      '--to <ip:port>',
      'the destination (a VIP, NodePort, or any address; IPv6: [ip]:port)',
    )
    .option('--proto <proto>', 'tcp (a SYN), udp or icmp (an echo request)', 'tcp')
    .option('--json', 'print JSON instead of text')
    .action(trace);
}

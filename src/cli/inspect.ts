// `kubetun ct list|count|flush` and `kubetun svc list`: the running data plane's conntrack and
// service tables over its control socket, printed the way `conntrack -L` and `ipvsadm -Ln`
// print the kernel's (so a kubetun node reads like a kube-proxy node), or as JSON (--json).
import type { Command } from 'commander';
import { inspectRequest } from '../inspect/client.ts';
import { ctSummary, formatCtEntry } from '../inspect/ct-format.ts';
import { OTHER_STATES, SCTP_STATES, TCP_STATES } from '../inspect/ct-state.ts';
import { ctFilterFromFlags } from '../inspect/flags.ts';
import { resolveSocket } from '../inspect/socket.ts';
import { formatSvcReport } from '../inspect/svc-format.ts';
import type { CtEntry, SvcReport } from '../inspect/types.ts';

type Flags = Record<string, unknown>;

/** --socket / --node: which agent (src/inspect/socket.ts); monitor, trace and tap take them too. */
export function socketOptions(c: Command): Command {
  return c
    .option('--socket <path>', "the agent's control socket")
    .option(
      '--node <name>',
      'the agent of this node: <dir>/<name>.sock, dir from KUBETUN_LAB_PREFIX (kt-: /run/kubetun)',
    );
}

function withSocket(c: Command): Command {
  return socketOptions(c).option('--json', 'print JSON instead of text');
}

function withFilters(c: Command): Command {
  return c
    .option('-s, --src <addr>', 'original source address (client), or a CIDR')
    .option('-d, --dst <addr>', 'original destination address (the VIP), or a CIDR')
    .option('-r, --reply-src <addr>', 'reply source address (the backend), or a CIDR')
    .option('-q, --reply-dst <addr>', 'reply destination address, or a CIDR')
    .option('-p, --proto <proto>', 'tcp, udp or icmp')
    .option(
      '--state <state>',
      `TCP: ${TCP_STATES.join(', ')}; SCTP: ${SCTP_STATES.join(', ')}; UDP: ${OTHER_STATES.join(', ')}`,
    )
    .option('--sport <port>', 'original source port')
    .option('--dport <port>', 'original destination port')
    .option('-f, --family <family>', 'ipv4 or ipv6 (default: both)');
}

/** Errors are reported by src/cli/main.ts; `what` stays for the reader of the register list. */
function action(_what: string, fn: (o: Flags) => Promise<void>): (o: Flags) => Promise<void> {
  return fn;
}

const out = (s: string) => process.stdout.write(`${s}\n`);
export const socketOf = (o: Flags) =>
  resolveSocket({ socket: o.socket as string, node: o.node as string });

async function ctList(o: Flags): Promise<void> {
  const filter = ctFilterFromFlags(o);
  const req: Flags = { cmd: 'ct', filter };
  if (o.limit !== undefined) req.limit = Number(o.limit);
  const r = await inspectRequest<{ entries: CtEntry[]; total: number }>(socketOf(o), req);
  if (o.json) out(JSON.stringify(r.entries, null, 2));
  else for (const e of r.entries) out(formatCtEntry(e));
  if (r.total > r.entries.length) {
    process.stderr.write(`kubetun ct list: showing ${r.entries.length} of ${r.total} flows\n`);
  }
  if (!o.json) process.stderr.write(`${ctSummary(r.entries.length, 'shown')}\n`);
}

async function ctCount(o: Flags): Promise<void> {
  const req = { cmd: 'ct-count', filter: ctFilterFromFlags(o) };
  const r = await inspectRequest<{ count: number; max: number }>(socketOf(o), req);
  out(o.json ? JSON.stringify(r) : String(r.count));
}

async function ctFlush(o: Flags): Promise<void> {
  const req = { cmd: 'ct-flush', filter: ctFilterFromFlags(o) };
  const r = await inspectRequest<{ deleted: number }>(socketOf(o), req);
  if (o.json) out(JSON.stringify(r));
  else process.stderr.write(`${ctSummary(r.deleted, 'deleted')}\n`);
}

async function svcList(o: Flags): Promise<void> {
  const r = await inspectRequest<SvcReport>(socketOf(o), { cmd: 'svc' });
  if (o.json) out(JSON.stringify(r, null, 2));
  else for (const line of formatSvcReport(r)) out(line);
}

export function register(program: Command): void {
  const ct = program
    .command('ct')
    .description("the running data plane's conntrack table (conntrack -L / -C / -D style)");
  withFilters(withSocket(ct.command('list').description('list flows, one per line')))
    .option('--limit <n>', 'show at most n flows')
    .action(action('ct list', ctList));
  withFilters(withSocket(ct.command('count').description('count flows'))).action(
    action('ct count', ctCount),
  );
  withFilters(
    withSocket(ct.command('flush').description('delete flows (all, or those the filters match)')),
  ).action(action('ct flush', ctFlush));

  const svc = program
    .command('svc')
    .description("the running data plane's services and backends (ipvsadm -Ln style)");
  withSocket(svc.command('list').description('services, backends and their connections')).action(
    action('svc list', svcList),
  );
}

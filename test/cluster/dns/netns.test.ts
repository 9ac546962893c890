// Cluster DNS between two network namespaces (root), with libc's own resolver as the client:
//
//   <prefix>dns-srv  eth0 10.250.53.1 ══ eth0 10.250.53.2  <prefix>dns-cli
//     server.ts --listen 10.250.53.1:53           /etc/netns/<prefix>dns-cli/resolv.conf from
//     --upstream 127.0.0.1:5300 (a stand-in         resolvConf(): ClusterFirst for namespace
//     resolver on the namespace's loopback:         default, nameserver 10.250.53.1, ndots:5
//     example.com = 192.0.2.10; nothing leaves the machine)
//
// - `getent hosts web.default` and `dig` resolve through the search path;
// - tcpdump on the server's eth0 sees the ndots:5 expansion of `example.com`: the three cluster
//   search domains, the node's (`lab.internal`, which the kubelet appends), then the bare name;
// - a headless Service with 20 endpoints is truncated over UDP and libc asks again over TCP.
// The prefix follows KUBETUN_LAB_PREFIX:  KUBETUN_LAB_PREFIX=kd- npx vitest run test/cluster/dns/netns.test.ts
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import {
  type PodDns,
  placeResolvConf,
  removeResolvConf,
  resolvConf,
} from '../../../src/cluster/dns/resolv-conf.ts';
import { LAB_PREFIX } from '../../../src/lab/topology.ts';

const ROOT = join(import.meta.dirname, '../../..');
const SRV = `${LAB_PREFIX}dns-srv`;
const CLI = `${LAB_PREFIX}dns-cli`;
const SRV_IP = '10.250.53.1';
const CLI_IP = '10.250.53.2';
const BIG = 20;
const NODE_RESOLV_CONF = 'nameserver 192.0.2.1\nsearch lab.internal\n';

let view: string;
const procs: ChildProcess[] = [];

function run(ns: string, argv: string[], timeout = 30_000): { out: string; status: number | null } {
  const r = spawnSync('ip', ['netns', 'exec', ns, ...argv], { encoding: 'utf8', timeout });
  return { out: `${r.stdout}${r.stderr}`, status: r.status };
}

function must(argv: string[]): void {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${argv.join(' ')}: ${r.stderr}`);
}

/** Starts argv in ns; resolves once a line of its output matches ready. */
async function start(
  ns: string,
  argv: string[],
  ready: RegExp,
  log: string[] = [],
): Promise<ChildProcess> {
  const child = spawn('ip', ['netns', 'exec', ns, ...argv], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  procs.push(child);
  const onData = (b: Buffer) =>
    log.push(
      ...b
        .toString()
        .split('\n')
        .filter((l) => l !== ''),
    );
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  for (let i = 0; i < 600; i++) {
    if (log.some((l) => ready.test(l))) return child;
    if (child.exitCode !== null) break;
    await sleep(100);
  }
  throw new Error(`${argv.join(' ')} did not start: ${log.join(' | ')}`);
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.pid === undefined) return;
  const gone = new Promise((res) => child.once('exit', res));
  child.kill('SIGTERM');
  await Promise.race([gone, sleep(3000)]);
  if (child.exitCode === null) child.kill('SIGKILL');
}

function cleanup(): void {
  for (const ns of [SRV, CLI]) spawnSync('ip', ['netns', 'del', ns]);
  removeResolvConf(CLI);
}

beforeAll(async () => {
  cleanup(); // a previous run that crashed
  view = mkdtempSync(join(tmpdir(), 'kd-dns-netns-'));
  cpSync(join(ROOT, 'test/fixtures/cluster-dns'), view, { recursive: true });
  const ips = Array.from({ length: BIG }, (_, i) => `10.244.3.${i + 2}`);
  writeFileSync(
    join(view, 'big.yaml'),
    [
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'big', namespace: 'default' },
        spec: { clusterIP: 'None' },
      },
      {
        apiVersion: 'discovery.k8s.io/v1',
        kind: 'EndpointSlice',
        metadata: {
          name: 'big-1',
          namespace: 'default',
          labels: { 'kubernetes.io/service-name': 'big' },
        },
        addressType: 'IPv4',
        endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } })),
      },
    ]
      .map((o) => stringify(o))
      .join('---\n'),
  );
  must(['ip', 'netns', 'add', SRV]);
  must(['ip', 'netns', 'add', CLI]);
  must([
    'ip',
    '-n',
    SRV,
    'link',
    'add',
    'eth0',
    'type',
    'veth',
    'peer',
    'name',
    'eth0',
    'netns',
    CLI,
  ]);
  for (const [ns, ip] of [
    [SRV, SRV_IP],
    [CLI, CLI_IP],
  ] as const) {
    must(['ip', '-n', ns, 'addr', 'add', `${ip}/24`, 'dev', 'eth0']);
    must(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
    must(['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
  }
  const pod: PodDns = { metadata: { namespace: 'default' }, spec: { dnsPolicy: 'ClusterFirst' } };
  // The node's own search domain: the kubelet appends it after the cluster's three.
  placeResolvConf(CLI, resolvConf(pod, SRV_IP, 'cluster.local', NODE_RESOLV_CONF));
  const tsx = ['node', '--import', 'tsx'];
  await start(
    SRV,
    [
      ...tsx,
      'test/cluster/dns/dns-client.ts',
      'upstream',
      '127.0.0.1',
      '5300',
      'example.com=192.0.2.10',
    ],
    /^upstream on/,
  );
  const args = ['--dir', view, '--listen', `${SRV_IP}:53`, '--upstream', '127.0.0.1:5300'];
  await start(SRV, [...tsx, 'src/cluster/dns/server.ts', ...args], /cluster-dns: serving/);
});

afterAll(async () => {
  for (const p of procs) await stop(p);
  cleanup();
  if (view) rmSync(view, { recursive: true, force: true });
});

/** Runs f while tcpdump listens on the server's eth0; returns f's result and the capture's lines. */
async function captured<T>(filter: string, f: () => T): Promise<{ result: T; lines: string[] }> {
  const lines: string[] = [];
  const dump = await start(
    SRV,
    ['tcpdump', '-n', '-l', '-i', 'eth0', filter],
    /listening on/,
    lines,
  );
  const result = f();
  await sleep(500); // tcpdump prints what it saw before it takes the signal
  await stop(dump);
  return { result, lines };
}

describe('cluster DNS from a Pod namespace (libc resolver, ip netns exec)', () => {
  it('ip netns exec shows the Pod its placed resolv.conf; the host keeps its own', () => {
    const inside = run(CLI, ['cat', '/etc/resolv.conf']).out;
    expect(inside).toBe(
      `nameserver ${SRV_IP}\nsearch default.svc.cluster.local svc.cluster.local cluster.local lab.internal\noptions ndots:5\n`,
    );
    expect(readFileSync('/etc/resolv.conf', 'utf8')).not.toBe(inside);
  });

  it('getent hosts web.default and web resolve through the search path', () => {
    const r = run(CLI, ['getent', 'hosts', 'web.default']);
    expect(r.out.trim().split(/\s+/)).toEqual(['10.96.0.10', 'web.default.svc.cluster.local']);
    expect(run(CLI, ['getent', 'hosts', 'web']).out.trim().split(/\s+/)).toEqual([
      '10.96.0.10',
      'web.default.svc.cluster.local',
    ]);
    expect(run(CLI, ['getent', 'hosts', 'nothing-here']).status).toBe(2); // libc: not found
  });

  it('dig: A with the search list, SRV and PTR', () => {
    expect(run(CLI, ['dig', '+search', '+short', 'web']).out.trim()).toBe('10.96.0.10');
    expect(
      run(CLI, ['dig', '+short', 'SRV', '_http._tcp.web.default.svc.cluster.local']).out.trim(),
    ).toBe('0 100 80 web.default.svc.cluster.local.');
    expect(run(CLI, ['dig', '+short', '-x', '10.96.0.10']).out.trim()).toBe(
      'web.default.svc.cluster.local.',
    );
  });

  it('tcpdump sees the ndots:5 expansion of example.com: five queries, each search domain, then the name', async () => {
    const { result, lines } = await captured('udp port 53', () =>
      run(CLI, ['getent', 'ahostsv4', 'example.com']),
    );
    expect(result.out).toContain('192.0.2.10');
    const asked = lines
      .map((l) => / A\? (\S+)\. /.exec(l)?.[1])
      .filter((n): n is string => n !== undefined)
      .filter((n, i, all) => all.indexOf(n) === i);
    expect(asked).toEqual([
      'example.com.default.svc.cluster.local',
      'example.com.svc.cluster.local',
      'example.com.cluster.local',
      'example.com.lab.internal', // the node's search domain: outside the zone, so forwarded
      'example.com',
    ]);
    const nx = lines.filter((l) => /NXDomain\*/.test(l)); // authoritative NXDOMAIN per search name
    expect(nx.length).toBeGreaterThanOrEqual(3);
  });

  it('a truncated UDP answer makes libc ask again over TCP and get all the records', async () => {
    const { result, lines } = await captured('port 53', () =>
      run(CLI, ['getent', 'ahostsv4', 'big.default.svc.cluster.local']),
    );
    const addrs = new Set(
      result.out
        .split('\n')
        .map((l) => l.split(/\s+/)[0])
        .filter((a) => a),
    );
    expect(addrs.size).toBe(BIG);
    // over UDP: authoritative, TC (tcpdump's `|`), no records; then the same id over TCP, all 20
    const udp = lines.find((l) => /53 > .*: (\d+)\*\| 0\/0\/0 /.test(l));
    expect(udp).toBeDefined();
    const id = /: (\d+)\*\|/.exec(udp!)![1];
    expect(
      lines.some((l) => l.includes('Flags [P.]') && l.includes(` ${id}* ${BIG}/0/0 A 10.244.3.`)),
    ).toBe(true);
    expect(existsSync(`/etc/netns/${CLI}/resolv.conf`)).toBe(true);
  });
});

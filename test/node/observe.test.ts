// Root test: `kubetun monitor`, `kubetun trace` and `kubetun tap` against a real agent (`kubetun
// run` in the one-node namespace topology of test/node/topo.ts; web 10.96.0.10:80 -> be1/be2,
// plus sticky 10.96.0.40:80 with ClientIP affinity over the same pods), with real traffic:
//   - monitor shows the curl's DNAT (client -> VIP => client -> backend) and the ping's drop
//     with its reason, and ends cleanly on Ctrl-C (SIGINT) and on --count;
//   - trace agrees with the next real packet: the same backend where affinity makes it
//     deterministic, a backend of its eligible set otherwise, and it creates no flow;
//   - tap writes a pcapng whose two interfaces differ exactly by the NAT, and tshark reads it.
// Which backend a random choice lands on is not asserted anywhere: only membership.
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatMonitorEvent, type MonitorEvent } from '../../src/inspect/monitor.ts';
import { ctlRequest } from '../../src/node/ctl.ts';
import type { TraceReport } from '../../src/node/trace.ts';
import { PCAPNG_EPB, PCAPNG_IDB, pcapngBlocks } from '../../src/pcap/pcapng.ts';
import { PODS, Topo, VIP } from './topo.ts';

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const CLIENT = PODS[0].ip;
const BACKENDS = [PODS[1].ip, PODS[2].ip];
const STICKY = '10.96.0.40';
const STICKY_YAML = `apiVersion: v1
kind: Service
metadata: {name: sticky, namespace: default}
spec:
  clusterIP: ${STICKY}
  selector: {app: web}
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 600}}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: sticky-1, namespace: default, labels: {kubernetes.io/service-name: sticky}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [${BACKENDS[0]}], conditions: {ready: true}, nodeName: node1}
  - {addresses: [${BACKENDS[1]}], conditions: {ready: true}, nodeName: node1}
`;
const SLOW = 180_000;

const t = new Topo();
let agent: ChildProcess;

function kubetun(...args: string[]) {
  const r = spawnSync(process.execPath, ['--import', 'tsx', MAIN, ...args, '--socket', t.socket], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: r.status, out: r.stdout, err: r.stderr };
}

/** A CLI stream in the background: its stdout lines as they come, its exit. */
function background(...args: string[]) {
  const p = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args, '--socket', t.socket], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let err = '';
  let pending = '';
  p.stdout!.setEncoding('utf8').on('data', (d: string) => {
    pending += d;
    const parts = pending.split('\n');
    pending = parts.pop()!;
    lines.push(...parts);
  });
  p.stderr!.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  const exit = new Promise<number | null>((resolve) => p.once('exit', (code) => resolve(code)));
  return { p, lines, stderr: () => err, exit };
}

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 60_000) {
  const t0 = Date.now();
  while (!(await cond())) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const streams = async () =>
  ((await ctlRequest(t.socket, { cmd: 'status' })) as { monitorStreams: number }).monitorStreams;

/** curl from the client pod with a fixed source port; the name of the pod that answered. */
function curl(vip: string, sport: number): string {
  const r = t.exec('client', [
    'curl',
    '-s',
    '--max-time',
    '10',
    '--local-port',
    String(sport),
    `http://${vip}/`,
  ]);
  expect(r.status, r.err).toBe(0);
  return r.out;
}
const ipOf = (pod: string) =>
  PODS.find((p) => p.name === pod)?.ip ?? `no pod ${JSON.stringify(pod)}`;

beforeAll(async () => {
  await t.setup();
  writeFileSync(join(t.manifests, 'sticky.yaml'), STICKY_YAML);
  try {
    agent = await t.startAgent();
  } catch (err) {
    // the agent's own words say why (teardown removes the directory with its log)
    for (const f of readdirSync(t.dir).filter((n) => n.startsWith('agent-'))) {
      console.error(`${f}:\n${readFileSync(join(t.dir, f), 'utf8').slice(-4000)}`);
    }
    throw err;
  }
}, SLOW);

afterAll(async () => {
  if (agent && agent.exitCode === null) {
    const gone = new Promise((resolve) => agent.once('exit', resolve));
    agent.kill('SIGTERM');
    await gone;
  }
  await t.teardown();
}, SLOW);

describe('kubetun monitor', () => {
  it(
    "shows the curl's DNAT and the ping's drop with its reason; Ctrl-C ends it cleanly",
    async () => {
      const m = background('monitor', '--json', '--addr', CLIENT);
      await until('the monitor stream', () => m.lines.length > 0); // the agent's first status line
      expect(JSON.parse(m.lines[0]!)).toMatchObject({ type: 'status', lost: 0 });
      const served = ipOf(curl(VIP, 41001));
      t.exec('client', ['ping', '-c', '1', '-W', '1', VIP]); // dropped: no answer expected
      const events = () =>
        m.lines.map((l) => JSON.parse(l) as MonitorEvent).filter((e) => e.reason);
      await until('both events', () => events().some((e) => e.reason === 'DROP_ECHO_TO_VIP'));
      m.p.kill('SIGINT');
      expect(await m.exit).toBe(0);
      const evs = events();
      console.log(`monitor:\n${evs.map(formatMonitorEvent).join('\n')}`);
      const syn = evs.find((e) => e.reason === 'TX_DNAT_NEW' && e.before.sport === 41001);
      expect(syn).toMatchObject({
        type: 'trace',
        verdict: 'TX',
        service: 'default/web:http',
        ctNew: true,
        before: { src: CLIENT, dst: VIP, sport: 41001, dport: 80 },
        after: { src: CLIENT, dst: served, sport: 41001, dport: 8080 },
        backend: `${served}:8080`,
      });
      const reply = evs.find((e) => e.reason === 'TX_REVNAT' && e.before.dport === 41001);
      expect(reply).toMatchObject({
        before: { src: served, sport: 8080 },
        after: { src: VIP, sport: 80 },
      });
      expect(evs.find((e) => e.type === 'drop')).toMatchObject({
        reason: 'DROP_ECHO_TO_VIP',
        verdict: 'DROP',
        proto: 'icmp',
        before: { src: CLIENT, dst: VIP },
      });
      await until('the stream to close', async () => (await streams()) === 0);
    },
    SLOW,
  );

  it(
    '--drops prints cilium-monitor lines, drops only; --count ends it',
    async () => {
      const m = background('monitor', '--drops', '-c', '1');
      await until('the monitor stream', async () => (await streams()) === 1);
      curl(VIP, 41002); // not a drop: filtered out in the datapath
      t.exec('client', ['ping', '-c', '1', '-W', '1', VIP]);
      expect(await m.exit).toBe(0);
      expect(m.lines).toHaveLength(1);
      expect(m.lines[0]).toMatch(
        /^\d\d:\d\d:\d\d\.\d{3} node1 xx drop \(DROP_ECHO_TO_VIP\): icmp 10\.244\.1\.10 -> 10\.96\.0\.10$/,
      );
      expect(m.stderr()).toMatch(/1 events shown, 0 lost/);
      console.log(`monitor --drops:\n${m.lines.join('\n')}`);
    },
    SLOW,
  );
});

describe('kubetun trace', () => {
  it(
    'with ClientIP affinity: the backend the next real connection gets, and no flow made',
    () => {
      const first = ipOf(curl(STICKY, 42001)); // creates the affinity entry
      const r = kubetun(
        'trace',
        '--from',
        `${CLIENT}:42002`,
        '--to',
        `${STICKY}:80`,
        '--proto',
        'tcp',
        '--json',
      );
      expect(r.status, r.err).toBe(0);
      const tr = JSON.parse(r.out) as TraceReport;
      expect(tr).toMatchObject({
        verdict: 'TX',
        reason: 'TX_DNAT_NEW',
        backend: `${first}:8080`,
        affinity: { backend: `${first}:8080`, fresh: true, timeoutSec: 600 },
        conntrack: { created: true, hit: false },
        rewrite: { after: { src: CLIENT, dst: first, sport: 42002, dport: 8080 }, changed: true },
      });
      // nothing was created: no flow from that port
      const ct = kubetun('ct', 'list', '--json', '--sport', '42002');
      expect(JSON.parse(ct.out)).toEqual([]);
      expect(ipOf(curl(STICKY, 42002))).toBe(first);
    },
    SLOW,
  );

  it(
    'random: the eligible set is the service endpoints, and the next connection lands in it',
    () => {
      const r = kubetun('trace', '--from', `${CLIENT}:43001`, '--to', `${VIP}:80`);
      expect(r.status, r.err).toBe(0);
      console.log(`trace:\n${r.out}`);
      expect(r.out).toMatch(/^service {4}default\/web:http \(ClusterIP\), scheduler random$/m);
      expect(r.out).toMatch(/^verdict {4}TX TX_DNAT_NEW: /m);
      const j = JSON.parse(
        kubetun('trace', '--from', `${CLIENT}:43001`, '--to', `${VIP}:80`, '--json').out,
      ) as TraceReport;
      const eligible = j
        .service!.endpoints.filter((e) => e.eligible)
        .map((e) => e.ip)
        .sort();
      expect(eligible).toEqual([...BACKENDS].sort());
      expect(eligible).toContain(j.backend!.split(':')[0]);
      expect(eligible).toContain(ipOf(curl(VIP, 43001)));
      // the curl's flow is in TIME_WAIT now: a new SYN from the same port starts a new flow
      // (nf_conntrack's rule, ct.ts), and the trace says so, as the program would do
      const again = JSON.parse(
        kubetun('trace', '--from', `${CLIENT}:43001`, '--to', `${VIP}:80`, '--json').out,
      ) as TraceReport;
      expect([again.reason, again.conntrack.created]).toEqual(['TX_DNAT_NEW', true]);
      expect(eligible).toContain(again.backend!.split(':')[0]);
    },
    SLOW,
  );

  it(
    'a ping to the VIP: DROP_ECHO_TO_VIP, and a bad --to is one line naming the flag',
    () => {
      const r = kubetun('trace', '--from', CLIENT, '--to', VIP, '--proto', 'icmp', '--json');
      expect(JSON.parse(r.out)).toMatchObject({ verdict: 'DROP', reason: 'DROP_ECHO_TO_VIP' });
      const bad = kubetun('trace', '--from', CLIENT, '--to', VIP);
      expect(bad.status).not.toBe(0);
      expect(bad.err).toMatch(/to: "10\.96\.0\.10" needs a port/);
      expect(bad.err).not.toMatch(/\n\s+at /); // no stack
    },
    SLOW,
  );
});

describe('kubetun tap', () => {
  it(
    'two interfaces differing exactly by the NAT, read by tshark',
    async () => {
      const file = join(t.dir, 'tap.pcapng');
      const tap = background('tap', '-w', file, '--addr', CLIENT, '--proto', 'tcp');
      await until('the tap stream', async () => (await streams()) === 1);
      const served = ipOf(curl(VIP, 44001));
      await new Promise((r) => setTimeout(r, 500)); // the agent drains every 20 ms
      tap.p.kill('SIGINT');
      expect(await tap.exit).toBe(0);
      expect(tap.stderr()).toMatch(
        /events \(\d+ packets\) written to .*tap\.pcapng, 0 events lost/,
      );

      const blocks = pcapngBlocks(new Uint8Array(readFileSync(file)));
      expect(blocks.filter((b) => b.type === PCAPNG_IDB)).toHaveLength(2);
      const epbs = blocks
        .filter((b) => b.type === PCAPNG_EPB)
        .map((b) => {
          const v = new DataView(b.body.buffer, b.body.byteOffset);
          return {
            ifId: v.getUint32(0, true),
            data: b.body.subarray(20, 20 + v.getUint32(12, true)),
          };
        });
      // packets come in pairs: as received (interface 0), as written (interface 1)
      let pairs = 0;
      for (let i = 0; i + 1 < epbs.length; i += 2) {
        const [a, b] = [epbs[i]!, epbs[i + 1]!];
        expect([a.ifId, b.ifId]).toEqual([0, 1]);
        expect(b.data.length).toBe(a.data.length);
        // every byte equal but the IP checksum (10-11), addresses (12-19), ports (20-23) and the
        // TCP checksum (36-37): the NAT and nothing else — and a reply's TTL (8), given back one
        // (the kernel routed it into the TUN: src/node/steer-replies.ts)
        const reply = a.data[20]! * 256 + a.data[21]! === 8080;
        const ttl = reply && b.data[8] === a.data[8]! + 1;
        const differs = [...a.data.keys()].filter((k) => a.data[k] !== b.data[k]);
        const nat = (k: number) => (k >= 10 && k <= 23) || k === 36 || k === 37;
        expect(differs.every((k) => nat(k) || (k === 8 && ttl))).toBe(true);
        expect(differs.includes(8)).toBe(reply);
        pairs++;
      }
      expect(pairs).toBeGreaterThanOrEqual(6); // SYN, SYN-ACK, ACK, request, response, FINs

      const fields = [
        'frame.interface_name',
        'ip.src',
        'tcp.srcport',
        'ip.dst',
        'tcp.dstport',
        'ip.checksum.status',
        'frame.comment',
      ];
      const text = execFileSync(
        'tshark',
        [
          '-r',
          file,
          '-o',
          'ip.check_checksum:TRUE',
          '-T',
          'fields',
          '-E',
          'separator=|',
          ...fields.flatMap((f) => ['-e', f]),
        ],
        { encoding: 'utf8', env: { ...process.env, HOME: t.dir } },
      );
      console.log(`tshark -r tap.pcapng:\n${text}`);
      const rows = text
        .trim()
        .split('\n')
        .map((l) => l.split('|'));
      expect(rows).toHaveLength(epbs.length);
      const synIn = rows.find(
        (r) => r[0] === 'node1:in' && r[2] === '44001' && r[6]!.includes('TX_DNAT_NEW'),
      );
      const synOut = rows.find(
        (r) => r[0] === 'node1:out' && r[2] === '44001' && r[6]!.includes('TX_DNAT_NEW'),
      );
      expect(synIn?.slice(1, 5)).toEqual([CLIENT, '44001', VIP, '80']);
      expect(synOut?.slice(1, 5)).toEqual([CLIENT, '44001', served, '8080']);
      const repIn = rows.find(
        (r) => r[0] === 'node1:in' && r[4] === '44001' && r[6]!.includes('TX_REVNAT'),
      );
      const repOut = rows.find(
        (r) => r[0] === 'node1:out' && r[4] === '44001' && r[6]!.includes('TX_REVNAT'),
      );
      expect(repIn?.slice(1, 3)).toEqual([served, '8080']);
      expect(repOut?.slice(1, 3)).toEqual([VIP, '80']);
      expect(rows.every((r) => r[5] === '1')).toBe(true); // IP header checksum good on both sides
    },
    SLOW,
  );
});

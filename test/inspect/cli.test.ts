// Root test: `kubetun ct` and `kubetun svc` against a real agent (`kubetun run` in the one-node
// namespace topology of test/node/topo.ts: client, be1, be2 pods; web 10.96.0.10:80 -> be1/be2
// :8080, empty 10.96.0.20 without endpoints, far 10.96.0.30 -> a pod on "another node").
//
//   client ─curl 10.96.0.10─▶ kubetun (DNAT, ct) ─▶ be1|be2      then, over the control socket:
//   kubetun ct list / --json / --proto udp, svc list, ct flush, ct count
import { spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CtEntry } from '../../src/inspect/types.ts';
import { PODS, REMOTE_POD_IP, Topo, VIP } from '../node/topo.ts';

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const CLIENT = PODS[0].ip;
const t = new Topo();
let agent: ChildProcess;
/** the backend that answered the curl, and the client's port of that connection */
let served = '';
let flow: CtEntry;

function kubetun(...args: string[]) {
  const r = spawnSync(process.execPath, ['--import', 'tsx', MAIN, ...args, '--socket', t.socket], {
    encoding: 'utf8',
    timeout: 120_000, // a CLI start takes seconds on a loaded 2-core machine
  });
  return { status: r.status, out: r.stdout, err: r.stderr };
}

beforeAll(async () => {
  await t.setup();
  agent = await t.startAgent();
  const r = t.curl('client', `http://${VIP}/`);
  expect(r).toMatchObject({ status: 0 });
  served = PODS.find((p) => p.name === r.out)?.ip ?? `no pod answered ${JSON.stringify(r.out)}`;
});

afterAll(async () => {
  if (agent && agent.exitCode === null) {
    const gone = new Promise((resolve) => agent.once('exit', resolve));
    agent.kill('SIGTERM'); // the agent removes its steering; teardown then kills what is left
    await gone;
  }
  await t.teardown();
});

describe('kubetun ct / svc on a running agent', () => {
  it('ct list --json: the curl is one flow, client -> VIP and backend -> client', () => {
    const r = kubetun('ct', 'list', '--json');
    expect(r.status).toBe(0);
    const entries = JSON.parse(r.out) as CtEntry[];
    expect(entries).toHaveLength(1);
    flow = entries[0];
    expect(flow).toMatchObject({
      proto: 'TCP',
      orig: { src: CLIENT, dst: VIP, dport: 80 },
      reply: { src: served, dst: CLIENT, sport: 8080, dport: flow.orig.sport },
      seenReply: true,
      assured: true,
    });
    expect(flow.orig.packets).toBeGreaterThanOrEqual(4); // SYN, ACK, request, FIN, ...
    expect(flow.reply.packets).toBeGreaterThanOrEqual(3);
  });

  it('ct list: the same flow as a conntrack -L line, and the count line on stderr', () => {
    const r = kubetun('ct', 'list');
    expect(r.status).toBe(0);
    const o = flow.orig;
    const line = new RegExp(
      `^tcp {6}6 \\d+ ${flow.state} src=${CLIENT} dst=${VIP} sport=${o.sport} dport=80 ` +
        `packets=\\d+ bytes=\\d+ src=${served} dst=${CLIENT} sport=8080 dport=${o.sport} ` +
        'packets=\\d+ bytes=\\d+ \\[ASSURED\\] mark=0 use=1$',
    );
    expect(r.out.trimEnd().split('\n')).toEqual([expect.stringMatching(line)]);
    expect(r.err).toMatch(/: 1 flow entries have been shown\.\n$/);
  });

  it('ct list --proto udp / --src of another pod: filtered out', () => {
    for (const f of [
      ['--proto', 'udp'],
      ['--src', PODS[1].ip],
      ['--dst', '10.96.0.20'],
    ]) {
      const r = kubetun('ct', 'list', ...f);
      expect(r).toMatchObject({ status: 0, out: '' });
      expect(r.err).toMatch(/: 0 flow entries have been shown\./);
    }
    expect(kubetun('ct', 'list', '--proto', 'tcp', '--dst', VIP).out.split('\n')).toHaveLength(2);
  });

  it('svc list: ipvsadm -Ln with the serving backend holding the connection', () => {
    const r = kubetun('svc', 'list');
    expect(r.status).toBe(0);
    const [a, i] = flow.state === 'ESTABLISHED' ? [1, 0] : [0, 1];
    const be = (ip: string) =>
      ip === served
        ? `  -> ${ip}:8080             Masq    1      ${a}          ${i}         `
        : `  -> ${ip}:8080             Masq    1      0          0         `;
    expect(r.out.split('\n').slice(1)).toEqual([
      'Prot LocalAddress:Port Scheduler Flags  Service',
      '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn',
      'TCP  10.96.0.10:80 random               default/web:http',
      be(PODS[1].ip),
      be(PODS[2].ip),
      'TCP  10.96.0.20:80 random               default/empty:http',
      'TCP  10.96.0.30:80 random               default/far:http',
      `  -> ${REMOTE_POD_IP}:8080             Masq    1      0          0         `,
      '',
    ]);
    expect(r.out).toMatch(/^IP Virtual Server version 1\.2\.1 \(size=\d+\)\n/);
    const json = JSON.parse(kubetun('svc', 'list', '--json').out);
    expect(json.services[0]).toMatchObject({
      name: 'default/web:http',
      namespace: 'default',
      service: 'web',
      vip: VIP,
      port: 80,
    });
  });

  it('ct flush with a filter that matches nothing keeps the flow; ct flush empties the table', () => {
    expect(kubetun('ct', 'flush', '--proto', 'udp', '--json').out.trim()).toBe('{"deleted":0}');
    expect(kubetun('ct', 'count').out.trim()).toBe('1');
    const r = kubetun('ct', 'flush');
    expect(r.status).toBe(0);
    expect(r.err).toMatch(/: 1 flow entries have been deleted\./);
    expect(kubetun('ct', 'count').out.trim()).toBe('0');
    expect(kubetun('ct', 'list').out).toBe('');
  });

  it('a bad filter is refused with the flag named, exit status 2', () => {
    const r = kubetun('ct', 'flush', '--src', '10.244.1');
    expect(r.status).toBe(2);
    expect(r.err).toBe('kubetun ct flush: --src: invalid IPv4 address "10.244.1"\n');
  });
});

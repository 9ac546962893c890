// Root test: `kubetun run` in a node namespace with a client pod and two backend pods (topo.ts).
//
//   client 10.244.1.10 ──vc──┐                ┌── route 10.96.0.0/16 dev kt0 (node → VIP)
//   be1    10.244.1.11 ──vb1─┼─ tc redirect ─▶ kt0 ◀─▶ kubetun (DNAT / revNAT / reject)
//   be2    10.244.1.12 ──vb2─┘                └── written back: routed to the pods
//
// Service web 10.96.0.10:80 → be1/be2:8080; service empty 10.96.0.20:80 has no endpoints.
// Each steering piece is switched off while the agent runs to show what breaks without it.
import type { ChildProcess } from 'node:child_process';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ctlRequest } from '../../src/node/ctl.ts';
import { keyMatch } from '../../src/node/steer-endpoints.ts';
import type { CtEntry } from '../../src/node/inspect.ts';
import { GW, NODE_IP, PODS, REMOTE_POD_IP, Topo, VIP, VIP_EMPTY, VIP_FAR } from './topo.ts';
import { running, waitFor } from './wait.ts';

const t = new Topo();
const SYSCTLS = [
  'net.ipv4.ip_forward',
  'net.ipv4.conf.all.rp_filter',
  'net.ipv4.ip_local_reserved_ports',
];
let before: Record<string, string>;
let pristine: ReturnType<typeof nodeFootprint>;
let agent: ChildProcess;

interface Status {
  node: string;
  pid: number;
  packets: number;
  services: number;
  podIfaces: string[];
  watchdogPid: number;
}

const sysctl = (key: string) => t.must('node', ['sysctl', '-n', key]).trim();
const setSysctl = (key: string, v: string) => t.must('node', ['sysctl', '-qw', `${key}=${v}`]);
const status = async () => (await ctlRequest(t.socket, { cmd: 'status' })) as Status;
const counters = async () =>
  ((await ctlRequest(t.socket, { cmd: 'counters' })) as { counters: Record<string, number> })
    .counters;
const viaVip = (from = 'client', vip = VIP) => t.curl(from, `http://${vip}/`, 2);
const MIRRED = ['action', 'mirred', 'egress', 'redirect', 'dev', 'kt0'];
/** the endpoint tables' two prefs each (steer-endpoints.ts rebuild alternates) */
const POD_PREFS = ['7700', '7710'];
const UPLINK_PREFS = ['7701', '7711'];

/** Deletes whichever pref holds an endpoint table. */
function delPrefs(at: string[], prefs: string[]): void {
  for (const p of prefs) t.exec('node', ['tc', 'filter', 'del', ...at, 'pref', p]);
}

/** Puts endpoint keys back as plain filters (the same matches, without the hash table). */
function addEntries(at: string[], keys: string[], guard: string[]): void {
  for (const k of keys) {
    t.must('node', [
      'tc',
      'filter',
      'add',
      ...at,
      'protocol',
      'ip',
      'u32',
      ...guard,
      ...keyMatch(k),
      ...MIRRED,
    ]);
  }
}

function exited(p: ChildProcess): Promise<number | null> {
  if (p.exitCode !== null || p.signalCode !== null) return Promise.resolve(p.exitCode);
  return new Promise((resolve) => p.once('exit', (code) => resolve(code)));
}

/** Everything kubetun may leave behind in the node namespace (Topo.footprint). */
const nodeFootprint = () => t.footprint(SYSCTLS);

/** nodeFootprint() of the node as it was before kubetun first ran (sysctls as found then). */
function untouchedFootprint(): ReturnType<typeof nodeFootprint> {
  return { ...pristine, sysctls: before };
}

/** Switch something off, show the VIP fails, switch it back on, show the VIP works again. */
function breaksWithout(off: () => void, on: () => void, from = 'client', vip = VIP): void {
  off();
  let r: ReturnType<typeof viaVip>;
  try {
    r = viaVip(from, vip);
  } finally {
    on();
  }
  expect(r.status).not.toBe(0);
  expect(viaVip(from, vip).out).toMatch(vip === VIP_FAR ? /^remote$/ : /^be[12]$/);
}

beforeAll(async () => {
  await t.setup();
  before = Object.fromEntries(SYSCTLS.map((k) => [k, sysctl(k)]));
  pristine = nodeFootprint();
  // a node with nothing of kubetun's: the values the agent must leave it with again
  expect(pristine).toMatchObject({ clsact: false, filters: '', tun: false, svcRoute: '' });
  expect(pristine.nft).not.toContain('kubetun');
  expect(pristine.rules.join('\n')).not.toContain('7700');
  agent = await t.startAgent();
});

afterAll(() => t.teardown());

describe('kubetun run', () => {
  it('answers status on its control socket once ready, with the pod interfaces it hooked', async () => {
    const s = await status();
    expect(s.node).toBe('node1');
    expect(s.pid).toBe(agent.pid);
    expect(s.services).toBe(3);
    expect(s.podIfaces).toEqual(['vb1', 'vb2', 'vc']);
  });

  it('takes a client pod to a backend through the ClusterIP and tracks the flow', async () => {
    const bodies = new Set<string>();
    for (let i = 0; i < 6; i++) {
      const r = viaVip();
      expect(r.status).toBe(0);
      bodies.add(r.out);
    }
    for (const b of bodies) expect(['be1', 'be2']).toContain(b);
    const { entries } = (await ctlRequest(t.socket, { cmd: 'ct' })) as { entries: CtEntry[] };
    const mine = entries.filter((e) => e.orig.src === '10.244.1.10' && e.orig.dst === VIP);
    expect(mine.length).toBeGreaterThanOrEqual(6);
    for (const e of mine) {
      expect(e.proto).toBe('TCP');
      expect(e.orig.dport).toBe(80);
      expect(['10.244.1.11', '10.244.1.12']).toContain(e.reply.src);
      expect(e.reply).toMatchObject({ dst: '10.244.1.10', sport: 8080, dport: e.orig.sport });
      expect(e.packets).toBeGreaterThan(0);
    }
    expect((await counters()).TX_REVNAT).toBeGreaterThan(0);
  });

  it('serves node-originated traffic to a VIP (service route, source = node IP)', () => {
    expect(viaVip('node').out).toMatch(/^be[12]$/);
  });

  it('reverse-NATs replies of a backend on another node, arriving on the uplink', async () => {
    const r = viaVip('client', VIP_FAR);
    expect(r).toMatchObject({ status: 0, out: 'remote' });
    const { entries } = (await ctlRequest(t.socket, { cmd: 'ct' })) as { entries: CtEntry[] };
    expect(entries.some((e) => e.orig.dst === VIP_FAR && e.reply.src === REMOTE_POD_IP)).toBe(true);
  });

  it('drops ping to a VIP: no answer, counted as DROP_ECHO_TO_VIP', async () => {
    const n = (await counters()).DROP_ECHO_TO_VIP;
    expect(t.exec('client', ['ping', '-c', '1', '-W', '1', VIP]).status).toBe(1);
    expect((await counters()).DROP_ECHO_TO_VIP).toBe(n + 1);
  });

  it('refuses a service without endpoints at once (ICMP port unreachable, curl exit 7)', async () => {
    const n = (await counters()).REPLY_REJECT_NO_ENDPOINTS;
    const r = t.curl('client', `http://${VIP_EMPTY}/`, 5);
    expect(r.status).toBe(7); // "couldn't connect"; a timeout would be 28
    expect((await counters()).REPLY_REJECT_NO_ENDPOINTS).toBe(n + 1);
  });

  describe('without each piece of steering, ClusterIP traffic breaks', () => {
    it('the reply rule: fwmark → table 7700 → kt0 (replies of translated flows to pods)', () => {
      const rule = ['pref', '7700', 'fwmark', '0x2000/0x2000', 'lookup', '7700'];
      for (const vip of [VIP, VIP_FAR]) {
        breaksWithout(
          () => t.must('node', ['ip', 'rule', 'del', ...rule]),
          () => t.must('node', ['ip', 'rule', 'add', ...rule]),
          'client',
          vip,
        );
      }
    });

    it('the conntrack mark of flows the agent translated (nft table inet kubetun)', () => {
      const table = t.must('node', ['nft', 'list', 'table', 'inet', 'kubetun']);
      expect(table).toContain('ct mark set ct mark | 0x00002000');
      for (const vip of [VIP, VIP_FAR]) {
        breaksWithout(
          () => t.must('node', ['nft', 'delete', 'table', 'inet', 'kubetun']),
          () => expect(t.exec('node', ['nft', '-f', '-'], 15_000, table).status).toBe(0),
          'client',
          vip,
        );
      }
    });

    it('rp_filter=0 on the TUN (DNATed packets re-enter on kt0, their source routes via vc)', () => {
      const key = 'net.ipv4.conf.kt0.rp_filter';
      breaksWithout(
        () => setSysctl(key, '1'),
        () => setSysctl(key, '0'),
      );
    });

    it('rp_filter=0 on all (the effective value is max(all, kt0))', () => {
      const key = 'net.ipv4.conf.all.rp_filter';
      breaksWithout(
        () => setSysctl(key, '1'),
        () => setSysctl(key, '0'),
      );
    });

    it('accept_local=1 on the TUN (node → VIP comes back with the node IP as source)', () => {
      const key = 'net.ipv4.conf.kt0.accept_local';
      breaksWithout(
        () => setSysctl(key, '0'),
        () => setSysctl(key, '1'),
        'node',
      );
    });

    it('ip_forward=1 (written-back packets are forwarded from kt0 to the pod veths)', () => {
      breaksWithout(
        () => setSysctl('net.ipv4.ip_forward', '0'),
        () => setSysctl('net.ipv4.ip_forward', '1'),
      );
    });

    it("the pods' block endpoint table (replies of local backends to the node itself)", () => {
      // node -> VIP is masqueraded (the node IP is outside --cluster-cidr) to the pods' gateway
      // for a local backend: its reply goes to the gateway, a local address, never routed
      const backends = PODS.filter((p) => p.name !== 'client').map((p) => `${p.ip}/6/8080`);
      breaksWithout(
        () => delPrefs(['block', '7700'], POD_PREFS),
        () =>
          addEntries(['block', '7700', 'pref', '7700'], backends, [
            'match',
            'ip',
            'dst',
            `${GW}/32`,
          ]),
        'node',
      );
    });
  });

  it('hooks a pod interface that appears after startup', async () => {
    t.addPod({ name: 'be3', veth: 'vb3', ip: '10.244.1.13' });
    await waitFor(
      () => t.must('node', ['tc', 'filter', 'show', 'dev', 'vb3', 'ingress']).includes('kt0'),
      'vb3 hooked',
    );
    expect((await status()).podIfaces).toEqual(['vb1', 'vb2', 'vb3', 'vc']);
    expect(viaVip('be3').out).toMatch(/^be[12]$/);
  });

  it('reloads manifests on request, keeping the last good state when they are bad', async () => {
    const bad = join(t.manifests, 'zz-bad.yaml');
    writeFileSync(bad, 'apiVersion: v1\nkind: Service\nmetadata: {namespace: default}\nspec: {}\n');
    const r = (await ctlRequest(t.socket, { cmd: 'reload' })) as { error?: string };
    expect(r.error).toContain('zz-bad.yaml');
    expect(viaVip().out).toMatch(/^be[12]$/);
    rmSync(bad);
    const late = [
      'apiVersion: v1\nkind: Service\nmetadata: {name: late, namespace: default}',
      'spec: {clusterIP: 10.96.0.40, ports: [{port: 80, targetPort: 8080}]}\n---',
      'apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice',
      'metadata: {name: late-1, namespace: default, labels: {kubernetes.io/service-name: late}}',
      'addressType: IPv4\nports: [{port: 8080, protocol: TCP}]',
      'endpoints: [{addresses: [10.244.1.12], conditions: {ready: true}}]\n',
    ].join('\n');
    expect(viaVip('client', '10.96.0.40').status).not.toBe(0);
    writeFileSync(join(t.manifests, 'late.yaml'), late);
    expect(await ctlRequest(t.socket, { cmd: 'reload' })).toEqual({ services: 4, servicePorts: 4 });
    expect(viaVip('client', '10.96.0.40').out).toBe('be2');
    expect((await status()).services).toBe(4);
  });

  it('on SIGTERM removes exactly what it installed and restores the sysctls', async () => {
    const { watchdogPid } = await status();
    expect(viaVip().out).toMatch(/^be[12]$/);
    expect(nodeFootprint()).toMatchObject({
      tun: true,
      marked: expect.stringMatching(/mark=8192/),
    });
    agent.kill('SIGTERM');
    expect(await exited(agent)).toBe(0);
    expect(nodeFootprint()).toEqual(untouchedFootprint());
    expect(existsSync(t.socket)).toBe(false);
    expect(existsSync(t.state)).toBe(false);
    await waitFor(() => !running(watchdogPid), 'the disarmed watchdog to exit');
  });
});

describe('kubetun run failure mode: fail open', () => {
  const direct = () => t.curl('client', 'http://10.244.1.11:8080/', 2);

  it('when the agent is killed, its watchdog removes the steering: pods still talk, VIPs do not', async () => {
    // a short grace window: the watchdog's undo is the subject here, not the window's default
    agent = await t.startAgent(['--restart-grace', '1000']);
    const { watchdogPid } = await status();
    expect(viaVip().out).toMatch(/^be[12]$/);
    agent.kill('SIGKILL');
    await exited(agent);
    await waitFor(() => !running(watchdogPid), 'the watchdog to undo the steering');
    expect(nodeFootprint()).toEqual(untouchedFootprint());
    expect(direct().out).toBe('be1');
    expect(viaVip().status).not.toBe(0);
  });

  it('after a crash that also took the watchdog, a restart cleans the leftovers first', async () => {
    agent = await t.startAgent();
    const { watchdogPid } = await status();
    process.kill(watchdogPid, 'SIGKILL');
    agent.kill('SIGKILL');
    await exited(agent);
    // Left behind: redirects into a TUN that is gone, so VIP traffic is black-holed (pod-to-pod
    // traffic never crosses the TUN: it is not)
    expect(nodeFootprint().filters).toContain('pref 7705');
    expect(viaVip().status).not.toBe(0);
    expect(direct().out).toBe('be1');
    agent = await t.startAgent();
    expect(viaVip().out).toMatch(/^be[12]$/);
    expect(direct().out).toBe('be1');
    agent.kill('SIGTERM');
    expect(await exited(agent)).toBe(0);
    // all.rp_filter comes back to the value from before the FIRST run: the restart took the
    // original from the crashed run's state file, not the 0 that run had left.
    expect(nodeFootprint()).toEqual(untouchedFootprint());
  });
});

describe('kubetun run, the node inside --cluster-cidr (its own ClusterIP traffic not masqueraded)', () => {
  it("serves it through the uplink endpoint table (replies of remote backends to the node's IP)", async () => {
    agent = await t.startAgent(['--cluster-cidr', '10.0.0.0/8']);
    expect(viaVip('node', VIP_FAR).out).toBe('remote');
    const { entries } = (await ctlRequest(t.socket, { cmd: 'ct' })) as { entries: CtEntry[] };
    const e = entries.find((x) => x.orig.src === NODE_IP && x.orig.dst === VIP_FAR);
    expect(e?.reply.dst).toBe(NODE_IP); // not masqueraded: the reply comes to the node's IP
    breaksWithout(
      () => delPrefs(['dev', 'eth0', 'ingress'], UPLINK_PREFS),
      () =>
        addEntries(
          ['dev', 'eth0', 'ingress', 'pref', '7701'],
          [`${REMOTE_POD_IP}/6/8080`],
          ['match', 'ip', 'dst', `${NODE_IP}/32`],
        ),
      'node',
      VIP_FAR,
    );
    agent.kill('SIGTERM');
    expect(await exited(agent)).toBe(0);
  });
});

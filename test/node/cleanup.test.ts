// Root test (issue 21 point 4): `kubetun cleanup` leaves a node as it found it after a crash that
// took the watchdog too, and kubetun refuses to start beside kube-proxy's rules until they are
// removed (`kubetun cleanup --kube-proxy` or `kubetun run --cleanup-kube-proxy`).
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ctlRequest } from '../../src/node/ctl.ts';
import { Topo, VIP } from './topo.ts';
import { running, waitFor } from './wait.ts';

const t = new Topo();
const SYSCTLS = [
  'net.ipv4.ip_forward',
  'net.ipv4.conf.all.rp_filter',
  'net.ipv4.ip_local_reserved_ports',
];
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
let before: ReturnType<typeof t.footprint>;

function kubetun(args: string[]) {
  return t.exec('node', [process.execPath, '--import', 'tsx', MAIN, ...args], 60_000);
}

function exited(p: ChildProcess): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((r) => p.once('exit', () => r()));
}

beforeAll(async () => {
  await t.setup();
  before = t.footprint(SYSCTLS);
});
afterAll(() => t.teardown());

describe('kubetun cleanup', () => {
  it('after the agent and its watchdog were both killed, removes every trace', async () => {
    const agent = await t.startAgent();
    const { watchdogPid } = (await ctlRequest(t.socket, { cmd: 'status' })) as {
      watchdogPid: number;
    };
    expect(t.curl('client', `http://${VIP}/`, 2).out).toMatch(/^be[12]$/);
    process.kill(watchdogPid, 'SIGKILL');
    agent.kill('SIGKILL');
    await exited(agent);
    await waitFor(() => !running(watchdogPid), 'the watchdog to be gone');
    expect(t.footprint(SYSCTLS).filters).toContain('pref 7700'); // redirects into nowhere
    expect(existsSync(t.state)).toBe(true);
    const pinned = t.socket.replace(/\.sock$/, '.maps'); // the maps outlive the agent (pin.ts)
    expect(existsSync(pinned)).toBe(true);

    const r = kubetun(['cleanup', '--ctl-dir', dirname(t.socket), '--json']);
    expect(r.status, r.out).toBe(0);
    const report = JSON.parse(r.out);
    expect(report.stateFiles).toHaveLength(1);
    expect(report.stateFiles[0].steps).toBeGreaterThan(5);
    expect(t.footprint(SYSCTLS)).toEqual(before);
    expect(existsSync(t.state)).toBe(false);
    expect(existsSync(t.socket)).toBe(false);
    expect(existsSync(pinned)).toBe(false);
    expect(t.curl('client', 'http://10.244.1.11:8080/', 2).out).toBe('be1'); // pods talk again

    const again = kubetun(['cleanup', '--ctl-dir', dirname(t.socket)]);
    expect(again.out.trim()).toBe('nothing of kubetun on this node');
  });

  it('refuses while an agent is running, saying to stop it first', async () => {
    const agent = await t.startAgent();
    const r = kubetun(['cleanup', '--ctl-dir', dirname(t.socket)]);
    expect(r.status).toBe(2);
    expect(r.err).toMatch(/an agent answers on .*node1\.sock\n {2}hint: stop it first/);
    agent.kill('SIGTERM');
    await exited(agent);
    expect(t.footprint(SYSCTLS)).toEqual(before);
  });
});

describe("beside kube-proxy's rules", () => {
  // What kube-proxy's iptables and nftables modes leave on a node, in miniature.
  const KUBE_PROXY_IPTABLES = [
    '*nat',
    ':KUBE-SERVICES - [0:0]',
    ':KUBE-POSTROUTING - [0:0]',
    ':KUBE-MARK-MASQ - [0:0]',
    ':KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]',
    ':KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]',
    ':OTHER-CHAIN - [0:0]',
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    '-A PREROUTING -j OTHER-CHAIN',
    '-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O',
    '-A KUBE-SVC-XPGD46QRK7WJZT7O -j KUBE-SEP-SXIVWICOYRO3J4NJ',
    '-A KUBE-SEP-SXIVWICOYRO3J4NJ -s 10.244.1.11/32 -j KUBE-MARK-MASQ',
    '-A KUBE-SEP-SXIVWICOYRO3J4NJ -p tcp -m tcp -j DNAT --to-destination 10.244.1.11:8080',
    'COMMIT',
    '',
  ].join('\n');
  const save = () => t.must('node', ['iptables-save', '-t', 'nat']);

  function installKubeProxy(): void {
    const r = t.exec('node', ['iptables-restore', '--noflush'], 15_000, KUBE_PROXY_IPTABLES);
    expect(r.status, r.err).toBe(0);
    t.must('node', ['nft', 'add', 'table', 'ip', 'kube-proxy']);
  }

  it('kubetun run refuses to start, naming what it found and what to do', () => {
    installKubeProxy();
    const r = kubetun([
      'run',
      '--manifests',
      t.manifests,
      '--node-name',
      'node1',
      '--node-ip',
      '10.250.0.2',
      '--pod-cidr',
      '10.244.1.0/24',
      '--ctl-socket',
      t.socket,
    ]);
    expect(r.status).toBe(2);
    expect(r.err).toMatch(
      /kubetun run: kube-proxy's rules are on this node \(iptables nat: 5 KUBE-\* chains; nftables table ip kube-proxy\)\n {2}hint: stop kube-proxy, then run `kubetun cleanup --kube-proxy`/,
    );
    expect(t.footprint(SYSCTLS)).toEqual(before); // touched nothing
  });

  it("kubetun cleanup --kube-proxy removes kube-proxy's chains and table, and only those", () => {
    const r = kubetun(['cleanup', '--ctl-dir', dirname(t.socket), '--kube-proxy']);
    expect(r.status, r.err).toBe(0);
    expect(r.out).toContain('kube-proxy nftables table ip kube-proxy: removed');
    const after = save();
    expect(after).not.toMatch(/KUBE-/);
    expect(after).toContain('-A PREROUTING -j OTHER-CHAIN'); // someone else's rule stays
    expect(t.exec('node', ['nft', 'list', 'table', 'ip', 'kube-proxy']).status).not.toBe(0);
  });

  it('kubetun run --cleanup-kube-proxy removes them itself and serves', async () => {
    installKubeProxy();
    const agent = await t.startAgent(['--cleanup-kube-proxy']);
    expect(save()).not.toMatch(/KUBE-/);
    expect(t.curl('client', `http://${VIP}/`, 2).out).toMatch(/^be[12]$/);
    agent.kill('SIGTERM');
    await exited(agent);
  });
});

// `lab compare --vms`, the parts that need no VM and no root: the command line ssh hands the far
// shell (every argument arrives as it left, quotes, newlines and all), the hosts of a
// `vagrant ssh-config`, the clock offset measurement against a machine whose clock is off, the
// VM lab's namespace names, which scenarios run on VMs, and the streamed capture's stop (the far
// process ends only when its stdin closes, and what it writes as it stops is kept).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { CLOCK_SCRIPT, measureClockOffset, nowUs } from '../../src/lab/compare/clock.ts';
import { SCENARIOS } from '../../src/lab/compare/scenarios.ts';
import { vmRefusal } from '../../src/lab/compare/vm-lab.ts';
import { parsePlace, placeName } from '../../src/lab/vms.ts';
import { remoteCommand, sshConfigHosts, sshMachines, sshSudo } from '../../src/lab/machines.ts';
import { endStream, startStream, waitForStreamLog } from '../../src/lab/procs.ts';
import { type NsRoute, withNsRoute } from '../../src/sh.ts';

const WEIRD = [
  '',
  'a b',
  "it's",
  '"double"',
  '$HOME',
  '`id`',
  '$(id)',
  'a;b|c&d',
  'line1\nline2',
  '*',
  'back\\slash',
  '--',
  '-e',
  'ip and (host 10.244.2.3)',
  "const s = require('node:dgram');\ns.send('who?')",
];

/** What a shell makes of a command line: the argv it runs, split on NULs by printf. */
function splitBy(shell: string, line: string): string[] {
  const r = spawnSync(shell, ['-c', `${line}`], { encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
  return r.stdout.split('\0').slice(0, -1);
}

describe('the command line ssh hands the far side', () => {
  it('splits back into exactly the argv, in sh and in bash (the vagrant user`s shell)', () => {
    for (const shell of ['sh', 'bash'])
      expect(splitBy(shell, remoteCommand(['printf', '%s\\0', ...WEIRD]))).toEqual(WEIRD);
  });

  it('runs the argv as root through sudo, never prompting, after the host', () => {
    const argv = sshMachines('/x/ssh-config').run('node2', ['tcpdump', '-i', 'veth-pod-d', 'a b']);
    expect(argv.slice(0, 3)).toEqual(['ssh', '-F', '/x/ssh-config']);
    expect(argv).toContain('BatchMode=yes');
    // the host after `--`, then one string: the far side's whole command line
    expect(argv.slice(-3)).toEqual(['--', 'node2', "sudo -n tcpdump -i veth-pod-d 'a b'"]);
    const fakeSudo = 'sudo() { shift; printf "%s\\0" "$@"; }; ';
    expect(splitBy('bash', fakeSudo + sshSudo(WEIRD))).toEqual(WEIRD);
  });

  it('reads the hosts of `vagrant ssh-config`', () => {
    const text = [
      'Host node1',
      '  HostName 192.168.121.10',
      '  User vagrant',
      '  IdentityFile /root/.vagrant.d/insecure_private_key',
      '',
      'Host node2',
      '  HostName 192.168.121.11',
      'Host client',
      '  HostName 192.168.121.12',
      'Host *',
      '  LogLevel FATAL',
    ].join('\n');
    expect(sshConfigHosts(text)).toEqual(['node1', 'node2', 'client']);
  });
});

describe('the clock of another machine', () => {
  // A far side whose `date` runs 5 s ahead: the offset must say so, within the round trip.
  const ahead = `date() { echo $(( $(command date +%s%N) + 5000000000 )); }; ${CLOCK_SCRIPT}`;

  it('is measured as far minus here, within half the best round trip', async () => {
    const same = await measureClockOffset(['sh', '-c', CLOCK_SCRIPT], 'same clock');
    expect(Math.abs(same.offsetUs)).toBeLessThanOrEqual(same.rttUs / 2 + 5000);
    const off = await measureClockOffset(['sh', '-c', ahead], 'clock ahead');
    expect(Math.abs(off.offsetUs - 5_000_000)).toBeLessThanOrEqual(off.rttUs / 2 + 5000);
  });

  it('is this machine`s wall clock, µs — after the wall clock is stepped too', () => {
    // tcpdump stamps packets with the kernel's wall clock; the attempts' windows with nowUs
    expect(Math.abs(nowUs() / 1000 - Date.now())).toBeLessThanOrEqual(6);
    const real = Date.now;
    const step = 700; // ms: a time sync, a machine restored from a snapshot
    const now = vi.spyOn(Date, 'now').mockImplementation(() => real() + step);
    try {
      expect(Math.abs(nowUs() / 1000 - (real() + step))).toBeLessThanOrEqual(6);
      const [a, b] = [nowUs(), nowUs()];
      expect(b).toBeGreaterThanOrEqual(a);
    } finally {
      now.mockRestore();
    }
    expect(Math.abs(nowUs() / 1000 - Date.now())).toBeLessThanOrEqual(6);
  });

  it('fails naming the machine when no clock answers', async () => {
    await expect(
      measureClockOffset(['sh', '-c', 'echo ready; echo nope'], 'node9'),
    ).rejects.toThrow(/node9: "nope" is not a clock reading/);
  });
});

describe('the VM lab`s namespaces and scenarios', () => {
  it('names a namespace by machine: netns@host, the machine`s own as @host', () => {
    expect(placeName('node2', 'vm-pod-d')).toBe('vm-pod-d@node2');
    expect(parsePlace('vm-pod-d@node2')).toEqual({ host: 'node2', netns: 'vm-pod-d' });
    expect(parsePlace(placeName('client'))).toEqual({ host: 'client', netns: '' });
    // a namespace of this machine's own labs has no route there
    expect(parsePlace('kt-pod-d')).toBeUndefined();
  });

  it('runs every scenario but the ones that need the lab`s control plane or IPv6', () => {
    const refused = SCENARIOS.filter((s) => vmRefusal(s)).map((s) => s.name);
    // the VM lab's topology has no ipv6 block: the IPv6 twins cannot run there
    const twins = SCENARIOS.filter((s) => s.family === 'IPv6').map((s) => s.name);
    expect(twins).toHaveLength(13); // one per IPv4 scenario
    expect(refused).toEqual(['udp-stale-endpoint', ...twins]);
    expect(vmRefusal(SCENARIOS.find((s) => s.name === 'udp-v6')!)).toMatch(/no ipv6 block/);
    for (const name of ['clusterip-tcp', 'udp'])
      expect(vmRefusal(SCENARIOS.find((s) => s.name === name)!)).toBeUndefined();
  });
});

describe('kubetun lab compare --vms, before any VM is reached', () => {
  const cli = (args: string[]) =>
    spawnSync(
      process.execPath,
      [join(import.meta.dirname, '../../bin/kubetun.mjs'), 'lab', 'compare', ...args],
      {
        encoding: 'utf8',
        timeout: 60_000,
      },
    );

  it('lists which scenarios run on the VMs, and why one does not', () => {
    const r = cli(['--list', '--vms', '/nonexistent/ssh-config']);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^clusterip-tcp\s+yes {2}curl a ClusterIP/m);
    expect(r.stdout).toMatch(/^udp\s+yes {2}UDP request\/reply/m);
    expect(r.stdout).toMatch(/^udp-stale-endpoint\s+no {3}stale UDP/m);
    expect(r.stdout).toMatch(
      /^\s+not on the VMs: it changes Services or EndpointSlices through the lab's control plane/m,
    );
    // without --vms: the plain list
    expect(cli(['--list']).stdout).toMatch(/^clusterip-tcp\s+curl a ClusterIP/m);
  });

  it('says in one line how to make the ssh config when it is missing', () => {
    const r = cli(['--vms', '/nonexistent/ssh-config', 'clusterip-tcp']);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('--vms /nonexistent/ssh-config: cannot read it (ENOENT)');
    expect(r.stderr).toContain('vagrant ssh-config > FILE');
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
  });
});

describe('a streamed process (a capture over ssh)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kubetun-stream-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  // No namespaces here: a route that runs the command as is, through a wrapper of its own.
  const seen: string[] = [];
  const route: NsRoute = {
    node: process.execPath,
    argv: (ns, argv) => {
      seen.push(ns);
      return ['env', 'KUBETUN_TEST_ROUTE=1', ...argv];
    },
  };
  // Like tcpdump: says it listens, writes as it goes, and on SIGTERM writes its last and exits.
  const FAR = `echo "listening pid $$ route=$KUBETUN_TEST_ROUTE" >&2
trap 'echo last; echo "3 packets captured" >&2; exit 0' TERM
echo first
while :; do sleep 0.05; done`;

  it('ends when its stdin closes, after writing what it writes as it stops', async () => {
    const out = join(dir, 'out');
    const log = join(dir, 'log');
    const s = await withNsRoute(route, async () =>
      startStream('far', 'node-x', ['sh', '-c', FAR], out, log),
    );
    await waitForStreamLog(s, /listening pid \d+ route=1/, 10_000);
    const pid = Number(/listening pid (\d+)/.exec(readFileSync(log, 'utf8'))![1]);
    expect(existsSync(`/proc/${pid}`)).toBe(true);
    expect(await endStream(s, 10_000)).toBe(0);
    expect(readFileSync(out, 'utf8')).toBe('first\nlast\n');
    expect(readFileSync(log, 'utf8')).toContain('3 packets captured');
    expect(existsSync(`/proc/${pid}`)).toBe(false);
    expect(seen).toEqual(['node-x']);
  });

  it('fails at once, with its log, when the far process exits before it is ready', async () => {
    const s = await withNsRoute(route, async () =>
      startStream(
        'bad',
        'node-x',
        ['sh', '-c', 'echo "syntax error" >&2; exit 1'],
        join(dir, 'o2'),
        join(dir, 'l2'),
      ),
    );
    // "exited", not "not ready after 30000 ms": the stream's end is noticed, not waited out
    await expect(waitForStreamLog(s, /listening/, 30_000)).rejects.toThrow(
      /exited:\n.*syntax error/,
    );
  });
});

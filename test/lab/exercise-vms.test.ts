// `lab exercise --vms` without VMs (root): stand-ins for the VMs (vm-standins.ts), reached by the
// CLI only through `ssh` — a fake one, first on PATH, that makes each stand-in look like a
// Vagrant VM to the commands it runs (/opt/kubetun, vm-pod-a…, root) — so the host side runs as
// it would against the VMs, and so do the fix commands `solution` runs (KUBETUN_LAB_VMS). The
// solution bot's loop on them, through the CLI a learner uses: start → check fails, naming what
// fails → solution applies the fix → check passes → reset; the refusals, each one line.
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CheckReport } from '../../src/lab/exercise/run.ts';
import type { AgentReport } from '../../src/lab/node-agent.ts';
import { VMS_DIR } from '../../src/lab/prefix.ts';
import {
  type FakeSsh,
  fakeSsh,
  provisionNode,
  ROOT,
  RUN_DIR,
  sshLog,
  standInsDown,
  standInsUp,
} from './vm-standins.ts';

let ssh: FakeSsh;
let vms: string[];

function kubetun(args: string[], extraEnv: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin/kubetun.mjs'), ...args], {
    encoding: 'utf8',
    timeout: 600_000,
    env: { ...process.env, PATH: `${ssh.bin}:${process.env.PATH}`, ...extraEnv },
  });
  return { out: r.stdout ?? '', err: r.stderr ?? '', status: r.status ?? -1 };
}

function check(): CheckReport & { status: number } {
  const r = kubetun(['lab', 'exercise', 'check', '--json', ...vms]);
  expect(r.out, r.err).toMatch(/^\{/);
  return { ...(JSON.parse(r.out) as CheckReport), status: r.status };
}

const failing = (r: CheckReport) => r.items.filter((i) => !i.ok).map((i) => `${i.title}: ${i.detail}`);

/** What provision-node says of a stand-in's kubetun, on the stand-in itself. */
function agent(node: string): AgentReport {
  return JSON.parse(provisionNode(node, ['--agent', 'status', '--json']).out) as AgentReport;
}

beforeAll(() => {
  standInsUp();
  ssh = fakeSsh();
  vms = ['--vms', ssh.config];
  rmSync(VMS_DIR, { recursive: true, force: true });
}, 300_000);

afterAll(() => {
  if (ssh) kubetun(['lab', 'exercise', 'reset', ...vms]);
  standInsDown();
  rmSync(RUN_DIR, { recursive: true, force: true });
  rmSync(VMS_DIR, { recursive: true, force: true });
}, 300_000);

describe('lab exercise on stand-ins for the VMs, through ssh', () => {
  it('list --vms: which exercises run on the VMs, and why not the others (one line each)', () => {
    const r = kubetun(['lab', 'exercise', 'list', '--json', ...vms]);
    expect(r.status, r.err).toBe(0);
    const l = JSON.parse(r.out) as { name: string; notHere?: string }[];
    expect(l.filter((e) => !e.notHere).map((e) => e.name).sort()).toEqual([
      'curl-vs-ping',
      'dataplane-down',
      'nodeport-local',
    ]);
    const why = Object.fromEntries(l.map((e) => [e.name, e.notHere]));
    expect(why['selector-typo']).toMatch(/needs the lab's cluster, and the VMs' nodes read a static view/);
    expect(why['conntrack-full']).toMatch(/runs pool in pod-b, and the VM lab runs nothing in its pods/);
    expect(why['kube-proxy-chains']).toMatch(/runs keepalive in pod-d/);
    const text = kubetun(['lab', 'exercise', 'list', ...vms]).out;
    expect(text).toMatch(/\n {35}not here: .*static view/);
    expect(text).toMatch(/3 of 13 run here/);
    expect(sshLog(ssh), 'listing asks no VM').toEqual([]);
  });

  it('refuses an exercise the VMs cannot carry, in one line, before touching them', () => {
    const r = kubetun(['lab', 'exercise', 'start', 'session-affinity', ...vms]);
    expect(r.status).toBe(2);
    const lines = r.err.trim().split('\n');
    expect(lines.length, r.err).toBe(1);
    expect(lines[0]).toMatch(
      /session-affinity does not run on the VM lab \(node1, node2, client; ssh -F .*\): it checks the lab's objects \(service\), and the VMs' nodes read a static view/,
    );
    expect(sshLog(ssh)).toEqual([]);
  });

  it('dataplane-down: start, check fails naming what, solution runs the fix, check passes, reset', () => {
    const start = kubetun(['lab', 'exercise', 'start', 'dataplane-down', ...vms]);
    expect(start.status, start.err).toBe(0);
    expect(start.out).toContain('Ticket: from pod-c');
    // the fault is in the stand-in: node2's kubetun killed and kept down, node1's running
    expect([agent('node1').agent, agent('node2').agent]).toEqual(['running', 'stopped']);

    const broken = check();
    expect(broken.status).toBe(1);
    const why = failing(broken).join('\n');
    expect(why).toMatch(/the data plane \(kubetun\) runs on every node: kubetun on node2 is not running/);
    expect(why).toMatch(/every pod reaches web through its ClusterIP: pod-a 3\/3 -> .*pod-c 0\/3/);
    expect(why).toMatch(/every pod reaches the udp-echo Service \(UDP\): pod-a 3\/3; pod-b 3\/3; pod-c 0\/3; pod-d 0\/3/);
    expect(failing(broken)).toHaveLength(3);

    const sol = kubetun(['lab', 'exercise', 'solution', ...vms]);
    expect(sol.status, `${sol.out}\n${sol.err}`).toBe(0);
    expect(sol.out).toContain('$ kubetun lab agent restart node2');
    expect(sol.out).toContain('kubetun on node2 runs with no extra flags');
    // the hint's address is the VM's: node2's health check on 192.168.56.12
    expect(sol.out).toContain('http://192.168.56.12:10256/healthz');
    expect(agent('node2').agent).toBe('running');

    const fixed = check();
    expect(failing(fixed), 'every check holds after the fix').toEqual([]);
    expect(fixed.status).toBe(0);
    expect(fixed.items.map((i) => i.detail).join('\n')).toMatch(/pod-d 3\/3/);

    // everything went to the machines through ssh: agents, pods, views
    const log = sshLog(ssh);
    const to = (re: RegExp) => log.filter((l) => re.test(l)).length;
    expect(to(/^node2 .*--agent crash/)).toBe(1);
    expect(to(/^node2 .*--agent restart/)).toBe(1);
    expect(to(/^node2 .*ip netns exec vm-pod-c curl/)).toBeGreaterThan(0);
    expect(to(/^node1 .*ip netns exec vm-pod-a .*node \/opt\/kubetun\/lab\/servers\/udpq\.mjs/)).toBeGreaterThan(0);
    expect(to(/cat .*cluster\.json/)).toBeGreaterThan(0);

    const reset = kubetun(['lab', 'exercise', 'reset', ...vms]);
    expect(reset.status, reset.err).toBe(0);
    expect(reset.out).toContain('dataplane-down is no longer active');
    const list = JSON.parse(kubetun(['lab', 'exercise', 'list', '--json', ...vms]).out) as {
      name: string;
      done: boolean;
    }[];
    expect(list.find((e) => e.name === 'dataplane-down')?.done).toBe(true);
  }, 600_000);

  it('curl-vs-ping: the fix restarts both nodes with --vip-echo, and reset takes the flag away', () => {
    expect(kubetun(['lab', 'exercise', 'start', 'curl-vs-ping', ...vms]).status).toBe(0);
    const broken = check();
    expect(broken.status).toBe(1);
    expect(failing(broken).join('\n')).toMatch(/ping 10\.96\.0\.10: pod-a: no reply/);
    const sol = kubetun(['lab', 'exercise', 'solution', ...vms]);
    expect(sol.status, `${sol.out}\n${sol.err}`).toBe(0);
    expect([agent('node1').flags, agent('node2').flags]).toEqual([['--vip-echo'], ['--vip-echo']]);
    const fixed = check();
    expect(failing(fixed)).toEqual([]);
    const reset = kubetun(['lab', 'exercise', 'reset', ...vms]);
    expect(reset.out, reset.err).toMatch(/restarted kubetun on node1 with its default flags/);
    expect([agent('node1'), agent('node2')].map((a) => [a.agent, a.flags])).toEqual([
      ['running', []],
      ['running', []],
    ]);
  }, 600_000);

  it('refuses a new provisioning as the fix: traffic flows, check says the lab was rebuilt', () => {
    expect(kubetun(['lab', 'exercise', 'start', 'dataplane-down', ...vms]).status).toBe(0);
    expect(provisionNode('node2').status).toBe(0); // `vagrant provision node2`: kubetun back
    const r = check();
    expect(r.status).toBe(1);
    expect(r.items.find((i) => i.title.includes('reaches web'))?.ok, 'traffic flows').toBe(true);
    expect(failing(r).join('\n')).toMatch(
      /the lab was rebuilt at node1 .*, node2 .* \(a new provisioning \(vagrant provision or reload\)\)/,
    );
    expect(kubetun(['lab', 'exercise', 'reset', ...vms]).status).toBe(0);
  }, 600_000);

  it('lab exec and lab agent work on the VMs with KUBETUN_LAB_VMS; lab status refuses in one line', () => {
    const env = { KUBETUN_LAB_VMS: ssh.config };
    const curl = kubetun(['lab', 'exec', 'pod-c', '--', 'curl', '-sS', '-m', '3', 'http://10.96.0.10/'], env);
    expect(curl.out, curl.err).toMatch(/^pod-[abc] 10\.244\./);
    const crash = kubetun(['lab', 'agent', 'crash', 'node1'], env);
    expect(crash.status, crash.err).toBe(0);
    expect(agent('node1').agent).toBe('stopped');
    const restart = kubetun(['lab', 'agent', 'restart', 'node1'], env);
    expect(restart.out, restart.err).toContain('kubetun on node1 runs with no extra flags');
    expect(agent('node1').agent).toBe('running');
    const status = kubetun(['lab', 'status'], env);
    expect(status.status).toBe(2);
    expect(status.err.trim().split('\n')[0]).toMatch(
      /lab status: KUBETUN_LAB_VMS=.* selects the VM lab, where only lab exercise, agent, exec, compare work/,
    );
  }, 600_000);
});

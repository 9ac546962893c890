// Root test: `kubetun run` in the one-node topology (topo.ts) the way the DaemonSet runs it
// unprivileged — as root with exactly deploy/daemonset.yaml's capabilities and no new
// privileges (setpriv, the argv the lab's API mode uses: src/lab/daemonset.ts), /proc/sys
// read-only as runc mounts it in a container, and the host's /proc/sys/net bound read-write
// where --proc-sys-net points (the manifest's hostPath volume).
//
// Each failure case is the working start with one thing taken away: NET_ADMIN from the
// manifest's set, or the /proc/sys/net mount. Both stop with one line saying what to add.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_CAPABILITIES, missingCapabilities } from '../../src/node/capabilities.ts';
import { agentCapabilities, container, dropPrivilegesArgv } from '../../src/lab/daemonset.ts';
import { Topo, VIP } from './topo.ts';

const t = new Topo();
const SYSCTLS = ['net.ipv4.conf.all.rp_filter', 'net.ipv4.ip_local_reserved_ports'];
const HOST_NET = join(t.dir, 'host', 'proc', 'sys', 'net');
const manifest = container();

/** The manifest's container with its capability list changed. */
function withCaps(add: string[]) {
  const sc = manifest.securityContext!;
  return { ...manifest, securityContext: { ...sc, capabilities: { ...sc.capabilities, add } } };
}

/** unshare + mounts + setpriv: what a runtime builds around the container's process. */
function inContainer(caps = manifest, procSysNetMount = true): string[] {
  const mount = procSysNetMount
    ? [`mkdir -p ${HOST_NET}`, `mount --bind /proc/sys/net ${HOST_NET}`]
    : [];
  const ro = ['mount --bind /proc/sys /proc/sys', 'mount -o remount,bind,ro /proc/sys'];
  const script = [...mount, ...ro, 'exec "$@"'].join(' && ');
  const unshare = ['unshare', '-m', '--propagation', 'private', 'sh', '-c', script, 'sh'];
  return [...unshare, ...dropPrivilegesArgv(caps)];
}

/** `kubetun run` that is expected to stop by itself: its exit status and stderr lines. */
function runToExit(extra: string[], wrap: string[]) {
  const r = spawnSync('ip', t.agentArgv(extra, wrap), { encoding: 'utf8', timeout: 90_000 });
  return { status: r.status, lines: (r.stderr ?? '').trim().split('\n'), out: r.stdout ?? '' };
}

let before: ReturnType<Topo['footprint']>;

beforeAll(async () => {
  await t.setup();
  before = t.footprint(SYSCTLS);
}, 60_000);

afterAll(() => t.teardown(), 30_000);

describe('kubetun run with the DaemonSet capabilities', () => {
  it('the manifest adds exactly what the agent checks for, after dropping ALL', () => {
    expect(agentCapabilities(manifest)).toEqual([...AGENT_CAPABILITIES]);
  });

  it('exactly those capabilities, /proc/sys read-only, --proc-sys-net on the mount: serves a ClusterIP, writes and restores its sysctls', async () => {
    const agent: ChildProcess = await t.startAgent(['--proc-sys-net', HOST_NET], inContainer());
    try {
      // ip netns exec, unshare, sh and setpriv all exec: the spawned PID is the agent
      const status = readFileSync(`/proc/${agent.pid}/status`, 'utf8');
      const eff = BigInt(`0x${/^CapEff:\s*(\w+)/m.exec(status)![1]}`);
      const bnd = BigInt(`0x${/^CapBnd:\s*(\w+)/m.exec(status)![1]}`);
      expect(missingCapabilities(status)).toEqual([]);
      expect(eff.toString(2).replace(/0/g, '').length).toBe(AGENT_CAPABILITIES.length);
      expect(bnd).toBe(eff);
      expect(status).toMatch(/^NoNewPrivs:\s*1$/m);
      expect(t.curl('client', `http://${VIP}/`).out).toMatch(/^be[12]$/);
      // rp_filter was 1 (topo.ts): written through the mount, /proc/sys itself is read-only
      expect(t.must('node', ['sysctl', '-n', 'net.ipv4.conf.all.rp_filter']).trim()).toBe('0');
    } finally {
      const exited = new Promise((r) => agent.once('exit', r));
      agent.kill('SIGTERM'); // a clean stop: it undoes its steering and sysctls
      await exited;
    }
    expect(t.footprint(SYSCTLS)).toEqual(before); // restored through the mount too
  }, 120_000);

  it('without NET_ADMIN: one line naming it and where to add it, exit 2, nothing installed', () => {
    const without = withCaps(agentCapabilities(manifest).filter((c) => c !== 'NET_ADMIN'));
    const r = runToExit(['--proc-sys-net', HOST_NET], inContainer(without));
    expect(r.status).toBe(2);
    expect(r.lines).toEqual([
      expect.stringMatching(
        /^kubetun run: missing capability NET_ADMIN .*securityContext\.capabilities\.add \(deploy\/daemonset\.yaml\)/,
      ),
    ]);
    expect(t.footprint(SYSCTLS)).toEqual(before);
  }, 120_000);

  it('/proc/sys read-only and no --proc-sys-net: one line naming the sysctl and the flag, exit 2, nothing left', () => {
    const r = runToExit([], inContainer(manifest, false));
    expect(r.status).toBe(2);
    expect(r.lines).toEqual([
      expect.stringMatching(/^kubetun run: cannot write net\.ipv4\.\S+: .*EROFS.*--proc-sys-net/),
    ]);
    expect(t.footprint(SYSCTLS)).toEqual(before);
  }, 120_000);
});

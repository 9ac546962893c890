// Root test: `kubetun run` in the one-node topology (topo.ts) the way the DaemonSet runs it
// unprivileged, built by the lab's API mode from deploy/daemonset.yaml (src/lab/daemonset.ts):
// as root with exactly the manifest's capabilities and no new privileges (setpriv), in a mount
// namespace with the manifest's hostPath volumes, a fresh /dev holding /dev/net/tun only by its
// hostPath, and /proc/sys read-only as runc mounts it — the host's /proc/sys/net bound
// read-write where --proc-sys-net points.
//
// Each failure case is that start with one thing of the manifest taken away: NET_ADMIN, the
// /proc/sys/net volume, the /dev/net/tun volume. Each stops with one line saying what to add.
import type { ChildProcess } from 'node:child_process';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  agentCapabilities,
  agentMountScript,
  type Container,
  container,
  dropPrivilegesArgv,
  hostPathMounts,
  podVolumes,
} from '../../src/lab/daemonset.ts';
import { AGENT_CAPABILITIES, missingCapabilities } from '../../src/node/capabilities.ts';
import { Topo, VIP } from './topo.ts';

const t = new Topo();
const SYSCTLS = ['net.ipv4.conf.all.rp_filter', 'net.ipv4.ip_local_reserved_ports'];
const ROOT = join(t.dir, 'pod'); // where /host/proc/sys/net is bound (the lab: POD_ROOT)
const manifest = container();
const HOST_NET = hostPathMounts(manifest, podVolumes(), ROOT).find(
  (m) => m.name === 'proc-sys-net',
)!.at;

/** The manifest's container with its capability list changed. */
function withCaps(add: string[]): Container {
  const sc = manifest.securityContext!;
  return { ...manifest, securityContext: { ...sc, capabilities: { ...sc.capabilities, add } } };
}

/** The manifest's container without one of its volume mounts. */
function withoutMount(name: string): Container {
  return { ...manifest, volumeMounts: manifest.volumeMounts!.filter((m) => m.name !== name) };
}

/** unshare, the lab's mounts and setpriv: what a runtime builds around the container's process. */
function inContainer(c: Container = manifest): string[] {
  const script = agentMountScript(c, podVolumes(), { root: ROOT, serviceAccount: false });
  const unshare = ['unshare', '-m', '--propagation', 'private', 'sh', '-c', script, 'sh'];
  return [...unshare, ...dropPrivilegesArgv(c)];
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
    const agent: ChildProcess = await t.startAgent([`--proc-sys-net=${HOST_NET}`], inContainer());
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
    const r = runToExit([`--proc-sys-net=${HOST_NET}`], inContainer(without));
    expect(r.status).toBe(2);
    expect(r.lines).toEqual([
      expect.stringMatching(
        /^kubetun run: missing capability NET_ADMIN .*securityContext\.capabilities\.add \(deploy\/daemonset\.yaml\)/,
      ),
    ]);
    expect(t.footprint(SYSCTLS)).toEqual(before);
  }, 120_000);

  it('/proc/sys read-only and no --proc-sys-net: one line naming the sysctl and the flag, exit 2, nothing left', () => {
    const r = runToExit([], inContainer(withoutMount('proc-sys-net')));
    expect(r.status).toBe(2);
    expect(r.lines).toEqual([
      expect.stringMatching(/^kubetun run: cannot write net\.ipv4\.\S+: .*EROFS.*--proc-sys-net/),
    ]);
    expect(t.footprint(SYSCTLS)).toEqual(before);
  }, 120_000);

  it('no /dev/net/tun volume: one line saying to mount it by hostPath, exit 2, nothing left', () => {
    const r = runToExit([`--proc-sys-net=${HOST_NET}`], inContainer(withoutMount('dev-net-tun')));
    expect(r.status).toBe(2);
    expect(r.lines).toEqual([
      expect.stringMatching(
        /^kubetun run: cannot open \/dev\/net\/tun: ENOENT; in a container mount it by hostPath, type CharDevice/,
      ),
    ]);
    expect(t.footprint(SYSCTLS)).toEqual(before);
  }, 120_000);
});

// The systemd units `kubetun lab provision-node --systemd` writes in a node VM (offline): the
// network part as a oneshot that re-runs the same provisioning at boot, one unit per pod server
// in its pod namespace, and kubetun with the uplink, socket and manifests of this node; and the
// drop-in `provision-node --agent crash|restart` puts over kubetun.service.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentDropIn, systemdQuote } from '../../src/lab/node-agent.ts';
import { ctlSocketFor, kubetunArgv, systemdUnits } from '../../src/lab/provision.ts';
import { VIEW_DIR } from '../../src/lab/state.ts';
import { DEFAULT_RESTART_GRACE_MS } from '../../src/node/failure.ts';
import { LAB_PREFIX, loadTopology } from '../../src/lab/topology.ts';

const ROOT = join(import.meta.dirname, '../..');
const t = loadTopology(join(ROOT, 'lab/vagrant-topology.yaml'));
const node2 = t.nodes[1]!;
const units = systemdUnits(t, node2, 'eth1', {
  topologyFile: t.file,
  nodes: 3,
  node: '/usr/bin/node',
});
const byName = new Map(units.map((u) => [u.name, u.text]));
const line = (unit: string, key: string) =>
  byName
    .get(unit)!
    .split('\n')
    .filter((l) => l.startsWith(`${key}=`))
    .map((l) => l.slice(key.length + 1));

describe('systemd units for a node VM', () => {
  it('are the network oneshot, one unit per pod of this node, and kubetun', () => {
    expect(units.map((u) => u.name)).toEqual([
      'kubetun-node.service',
      'kubetun-pod-pod-c.service',
      'kubetun-pod-pod-d.service',
      'kubetun.service',
    ]);
  });

  it('rebuild the network at boot with the same provisioning command, and undo it on stop', () => {
    const cli = `/usr/bin/node ${ROOT}/bin/kubetun.mjs lab provision-node --topology ${t.file} --node node2 --nodes 3 --uplink eth1`;
    expect(line('kubetun-node.service', 'ExecStart')).toEqual([`${cli} --network-only`]);
    expect(line('kubetun-node.service', 'ExecStop')).toEqual([`${cli} --down`]);
    expect(line('kubetun-node.service', 'Environment')).toEqual([
      `KUBETUN_LAB_PREFIX=${LAB_PREFIX}`,
    ]);
    expect(line('kubetun-node.service', 'Type')).toEqual(['oneshot']);
  });

  it('run each pod server inside its pod namespace, after the network', () => {
    expect(line('kubetun-pod-pod-d.service', 'ExecStart')).toEqual([
      `/usr/bin/env ip netns exec ${LAB_PREFIX}pod-d /usr/bin/node ${ROOT}/lab/servers/echo.mjs --name pod-d --ip 10.244.2.3 --http 8080 --udp 5353`,
    ]);
    expect(line('kubetun-pod-pod-d.service', 'Requires')).toEqual(['kubetun-node.service']);
  });

  it('run kubetun for this node on the view of the shared manifests, reloadable with SIGHUP', () => {
    const argv = kubetunArgv(t, node2, 'eth1', ctlSocketFor(node2), '/usr/bin/node');
    expect(line('kubetun.service', 'ExecStart')).toEqual([argv.join(' ')]);
    expect(argv).toEqual(
      expect.arrayContaining(['--manifests', VIEW_DIR, '--node-ip', '192.168.56.12']),
    );
    // the VM topology has no ipv6 block: an IPv4-only agent
    expect(argv.filter((a) => /-v6$/.test(a))).toEqual([]);
    expect(line('kubetun.service', 'ExecReload')).toEqual(['/bin/kill -HUP $MAINPID']);
  });

  it('restart a crashed kubetun inside the restart grace window, and stop it for a handover', () => {
    expect(line('kubetun.service', 'Restart')).toEqual(['on-failure']);
    const sec = line('kubetun.service', 'RestartSec')[0]!;
    expect(Number(sec.replace(/ms$/, '')) / (sec.endsWith('ms') ? 1000 : 1)).toBeLessThan(
      DEFAULT_RESTART_GRACE_MS / 1000,
    );
    expect(line('kubetun.service', 'KillSignal')).toEqual(['SIGUSR2']);
    expect(line('kubetun.service', 'KillMode')).toEqual(['process']);
  });
});

describe("the drop-in of provision-node --agent over kubetun.service", () => {
  const dropIn = (flags: string[], held: boolean) =>
    agentDropIn(t, node2, 'eth1', { flags, held }, '/usr/bin/node');
  const keys = (text: string, key: string) =>
    text
      .split('\n')
      .filter((l) => l.startsWith(`${key}=`))
      .map((l) => l.slice(key.length + 1));

  it('is none for kubetun as provisioned: no flags, not held', () => {
    expect(dropIn([], false)).toBeUndefined();
  });

  it('after a crash keeps the unit from restarting (Restart=no) and leaves ExecStart alone', () => {
    const d = dropIn([], true)!;
    expect(d.split('\n')).toContain('[Service]');
    expect(keys(d, 'Restart')).toEqual(['no']);
    expect(keys(d, 'ExecStart')).toEqual([]);
  });

  it("with flags, resets ExecStart to the unit's own command and the flags after it", () => {
    const d = dropIn(['--vip-echo', '--ct-max', '262144'], false)!;
    expect(keys(d, 'Restart')).toEqual([]);
    const [reset, exec] = keys(d, 'ExecStart');
    expect(reset).toBe('');
    expect(exec).toBe(`${line('kubetun.service', 'ExecStart')[0]} --vip-echo --ct-max 262144`);
    expect(keys(dropIn(['--vip-echo'], true)!, 'Restart')).toEqual(['no']);
  });

  it('quotes a word for systemd: spaces and quotes in double quotes, no $ or % expansion', () => {
    expect(systemdQuote('--vip-echo')).toBe('--vip-echo');
    expect(systemdQuote('a b')).toBe('"a b"');
    expect(systemdQuote('say "hi"')).toBe('"say \\"hi\\""');
    expect(systemdQuote('$HOME')).toBe('"$$HOME"');
    expect(systemdQuote('50%')).toBe('"50%%"');
  });
});

// Stand-ins for the Vagrant VMs, for the tests of what runs on the VM lab from the host (`lab
// compare --vms`, `lab exercise --vms`) without booting a VM (root): network namespaces on one
// wire as Vagrant's private network joins them (eth1, 192.168.56.0/24), the nodes provisioned by
// the Vagrantfile's entry point `kubetun lab provision-node --topology lab/vagrant-topology.yaml`
// (in the background instead of --systemd), the client given lab/provision/client.sh's routes.
// The VM lab's namespace names ("@node1", "vm-kx-pod-d@node2") exist nowhere on this machine, so
// a command that bypassed the VM lab's route would fail.
//
//   <p>wire: br0 ─┬─ eth1 <p>node1 192.168.56.11 ─ veth-pod-a/b ══ <p>pod-a/b   <p> = "vm-" +
//                 ├─ eth1 <p>node2 192.168.56.12 ─ veth-pod-c/d ══ <p>pod-c/d         LAB_PREFIX
//                 └─ eth1 <p>client 192.168.56.100
//
// Two ways in. machines (in-process): `nsenter --net=…` into a stand-in, with its lab's
// environment. fakeSsh() (for the CLI and the commands it runs): an `ssh` first on PATH that
// makes a stand-in look like a Vagrant VM to whoever ssh's in — the command line run by a fresh
// bash as sshd runs it, root without sudo's password, the repository at /opt/kubetun, the pods'
// namespaces named vm-pod-a…, `kubetun` on PATH acting on the stand-in's lab — so the host side
// runs exactly as against the VMs (VAGRANT_SIDE), ssh's quoting included.
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Machines } from '../../src/lab/machines.ts';
import { LAB_PREFIX, loadTopology } from '../../src/lab/topology.ts';
import type { VmSide } from '../../src/lab/vms.ts';
import { listNetns } from '../../src/sh.ts';

export const ROOT = join(import.meta.dirname, '../..');
export const TOPOLOGY = join(ROOT, 'lab/vagrant-topology.yaml');
export const KUBETUN = [process.execPath, join(ROOT, 'bin/kubetun.mjs')];
/** The stand-ins' prefix: derived from LAB_PREFIX, not starting with it (provision.test.ts). */
export const P = `vm-${LAB_PREFIX}`;
export const NODES = ['node1', 'node2'] as const;
export const MACHINES = [...NODES, 'client'] as const;
export const RUN_DIR = mkdtempSync(join(tmpdir(), 'kubetun-vm-standins-'));
/** What the stand-ins were provisioned with: their own prefix and state directories. */
export const MACHINE_ENV = [
  `KUBETUN_LAB_PREFIX=${P}`,
  `KUBETUN_LAB_DIR=${join(RUN_DIR, 'lab')}`,
  `KUBETUN_CTL_DIR=${join(RUN_DIR, 'ctl')}`,
];
/** How the in-process route writes commands for the stand-ins (with `machines`). */
export const STANDIN_SIDE: VmSide = {
  kubetun: KUBETUN,
  topology: TOPOLOGY,
  prefix: P,
  repo: ROOT,
};
const t = loadTopology(TOPOLOGY);

export function run(argv: string[], timeout = 60_000) {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout });
  return { out: r.stdout ?? '', err: r.stderr ?? '', status: r.status ?? -1 };
}

/** A command on a stand-in machine: its network namespace, its lab's environment. */
export const onMachine = (host: string, argv: readonly string[]) => [
  'nsenter',
  `--net=/run/netns/${P}${host}`,
  '--',
  'env',
  ...MACHINE_ENV,
  ...argv,
];

/** The route to the stand-ins, counting what went through it. */
export const routed = new Map<string, number>();
export const machines: Machines = {
  node: process.execPath,
  run: (host, argv) => {
    routed.set(host, (routed.get(host) ?? 0) + 1);
    return onMachine(host, argv);
  },
  open: () => {},
  close: () => {},
};

export const provisionNode = (node: string, extra: string[] = []) =>
  run(
    onMachine(node, [...KUBETUN, 'lab', 'provision-node', '--topology', TOPOLOGY]).concat([
      '--node',
      node,
      '--nodes',
      '2',
      ...extra,
    ]),
    120_000,
  );
export const agentStatus = (node: string) => provisionNode(node, ['--agent', 'status']).out.trim();
const netns = () => listNetns().filter((n) => n.startsWith(P));

export function standInsDown(): void {
  for (const node of NODES) if (netns().includes(P + node)) provisionNode(node, ['--down']);
  for (const ns of netns()) run(['ip', 'netns', 'del', ns]);
}

/** The wire, the machines, both nodes provisioned, the client's routes. */
export function standInsUp(): void {
  standInsDown();
  const wire = `${P}wire`;
  for (const ns of [wire, ...MACHINES.map((m) => P + m)]) {
    run(['ip', 'netns', 'add', ns]);
    run(['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
  }
  run(['ip', '-n', wire, 'link', 'add', 'br0', 'type', 'bridge']);
  run(['ip', '-n', wire, 'link', 'set', 'br0', 'up']);
  for (const m of MACHINES) {
    const ip = [...t.nodes, ...t.clients].find((n) => n.name === m)!.ip;
    const peer = ['peer', 'name', 'eth1', 'netns', P + m];
    run(['ip', '-n', wire, 'link', 'add', `w-${m}`, 'type', 'veth', ...peer]);
    run(['ip', '-n', wire, 'link', 'set', `w-${m}`, 'master', 'br0', 'up']);
    run(['ip', '-n', P + m, 'addr', 'add', `${ip}/24`, 'dev', 'eth1']);
    run(['ip', '-n', P + m, 'link', 'set', 'eth1', 'up']);
  }
  // lab/provision/client.sh: each node's pod CIDR via that node
  for (const n of t.nodes.slice(0, 2))
    run(['ip', '-n', `${P}client`, 'route', 'add', n.podCidr, 'via', n.ip]);
  for (const node of NODES) {
    const r = provisionNode(node);
    if (r.status !== 0) throw new Error(`provision-node ${node} failed:\n${r.err}`);
  }
}

export interface FakeSsh {
  /** put it first on PATH */
  bin: string;
  /** an ssh config naming the machines, as `vagrant ssh-config` does */
  config: string;
  /** every ssh the host ran: "<host> <command line>" */
  log: string;
}

/** An `ssh` that reaches the stand-ins as if they were the Vagrant VMs (see the top). */
export function fakeSsh(): FakeSsh {
  const bin = join(RUN_DIR, 'ssh-bin');
  const far = join(RUN_DIR, 'vm-bin');
  const log = join(RUN_DIR, 'ssh.log');
  for (const d of [bin, far]) mkdirSync(d, { recursive: true });
  const script = (file: string, text: string) => {
    writeFileSync(file, text);
    chmodSync(file, 0o755);
  };
  const envs = MACHINE_ENV.join(' ');
  // on the VM: root already, as `sudo -n` makes it; kubetun acting on the stand-in's own lab
  script(join(far, 'sudo'), '#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n');
  script(
    join(far, 'kubetun'),
    `#!/bin/sh\nexec env ${envs} ${KUBETUN.join(' ')} "$@"\n`,
  );
  // what the VM's file system shows: /opt/kubetun, the pods' namespaces as vm-…
  script(
    join(far, 'vm-view'),
    `#!/bin/bash
set -e
mount -t tmpfs standin /opt
mkdir -p /opt/kubetun /opt/.netns
mount --bind '${ROOT}' /opt/kubetun
mount --rbind /run/netns /opt/.netns
mount -t tmpfs standin /run/netns
for f in /opt/.netns/*; do
  n=\${f##*/}
  for name in "$n" "vm-\${n#${P}}"; do
    [ -e "/run/netns/$name" ] && continue
    touch "/run/netns/$name"
    mount --bind "$f" "/run/netns/$name"
  done
done
exec bash -c "$1"
`,
  );
  const path = `${far}:${dirname(process.execPath)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`;
  script(
    join(bin, 'ssh'),
    `#!/bin/bash
# ssh [-F CONFIG] [-o OPTION]... [-f] [-N] [-O CTL] [--] HOST [COMMAND...]
while [ $# -gt 0 ]; do
  case "$1" in
    -O) master=1; shift 2 ;;
    -F|-o|-i|-p|-l) shift 2 ;;
    -N) master=1; shift ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=$1; shift
[ -n "$master" ] && exit 0
echo "$host $*" >> '${log}'
exec nsenter --net=/run/netns/${P}$host -- unshare --mount --propagation private -- \\
  env -i PATH=${path} HOME=/root bash ${join(far, 'vm-view')} "$*"
`,
  );
  const config = join(RUN_DIR, 'ssh-config');
  writeFileSync(config, MACHINES.map((m) => `Host ${m}\n  HostName ${m}\n`).join(''));
  writeFileSync(log, '');
  return { bin, config, log };
}

/** What went through the fake ssh to each machine. */
export function sshLog(f: FakeSsh): string[] {
  return readFileSync(f.log, 'utf8').split('\n').filter(Boolean);
}

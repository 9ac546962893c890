// The VM lab for real (CI stage "vms", scripts/test-vms.sh): the kubetun/debian12 box built here
// (cached), `vagrant up --provider=libvirt` of node1, node2 and the client under QEMU inside the
// network namespace <prefix>virt (scripts/vm-host.sh), then what runs on the VMs — a pod on
// node1 to a ClusterIP with backends on both VMs (curl answers, ping does not), NodePort from
// the client VM (Cluster and Local), kill -9 of a node's agent and systemd bringing it back,
// lab compare --vms against kube-proxy's rules in the VMs, an exercise run from the host —
// and `vagrant destroy -f` leaving nothing behind. Every phase prints its timing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CONSOLE_DIR,
  inNsArgs,
  loadSshConfig,
  run,
  runShown,
  ssh,
  timing,
  vagrant,
  virsh,
  SSH_CONFIG,
  vmHost,
} from './vms.ts';
import { mkdirSync } from 'node:fs';

const NODES = ['node1', 'node2'];
const WEB = '10.96.0.10';
let upOk = false;
let destroyed = false;

async function timed<T>(what: string, f: () => Promise<T> | T): Promise<T> {
  const t0 = Date.now();
  try {
    return await f();
  } finally {
    timing(what, Date.now() - t0);
  }
}

beforeAll(async () => {
  mkdirSync(CONSOLE_DIR, { recursive: true });
  await timed('libvirtd in its namespace', () => {
    const r = vmHost('start');
    if (r.status !== 0) throw new Error(`scripts/vm-host.sh start: ${r.err}${r.out}`);
  });
  const box = await timed('box build (cached when unchanged)', () =>
    runShown('bash', ['scripts/box-build.sh'], 3_600_000),
  );
  if (box !== 0) throw new Error(`scripts/box-build.sh failed (status ${box})`);
  const up = await timed('vagrant up --provider=libvirt (node1, node2, client)', () =>
    runShown(
      'bash',
      [
        'scripts/vm-host.sh',
        'exec',
        'vagrant',
        'up',
        '--provider=libvirt',
        '--no-color',
        '--no-tty',
      ],
      3_600_000,
    ),
  );
  if (up !== 0) throw new Error(`vagrant up failed (status ${up}); VM consoles in ${CONSOLE_DIR}`);
  upOk = true;
  loadSshConfig();
}, 7_200_000);

// KUBETUN_VM_KEEP=1 (working on this file: `-t NAME` picks tests) leaves the VMs running for the
// next run, whose `vagrant up` then only checks them; CI never sets it.
afterAll(async () => {
  if (process.env.KUBETUN_VM_KEEP === '1') return;
  if (!destroyed) vagrant(['destroy', '-f'], 600_000);
  vmHost('stop');
}, 900_000);

/** curl from a pod of the node, n times: the backends' names that answered. */
function curlFromPod(node: string, pod: string, url: string, n: number): string[] {
  const r = ssh(
    node,
    `for i in $(seq ${n}); do ip netns exec vm-${pod} curl -s -m 5 ${url} || echo FAIL; done`,
  );
  return r.out.split('\n').filter(Boolean);
}

describe('the lab on libvirt VMs', () => {
  it('runs kubetun as a systemd service on every node', () => {
    expect(upOk).toBe(true);
    for (const n of NODES) {
      const r = ssh(n, 'systemctl is-active kubetun.service kubetun-node.service');
      expect(r.out.trim().split('\n'), `${n}: ${r.err}`).toEqual(['active', 'active']);
    }
  });

  it('curl vs ping: a pod on node1 reaches the ClusterIP, backends on both VMs; ping does not', async () => {
    await timed('curl-vs-ping', () => {
      const answers = curlFromPod('node1', 'pod-a', `http://${WEB}/`, 30);
      const names = new Set(answers.map((l) => l.split(' ')[0]));
      expect(names.has('FAIL'), answers.join('\n')).toBe(false);
      expect(names.has('pod-c'), `node2's backend answered: ${[...names]}`).toBe(true);
      expect(names.has('pod-a') || names.has('pod-b'), `node1's backends: ${[...names]}`).toBe(
        true,
      );
      const ping = ssh('node1', `ip netns exec vm-pod-a ping -c 2 -W 1 ${WEB}; echo rc=$?`);
      expect(ping.out).toMatch(/2 packets transmitted, 0 received/);
      const direct = ssh('node1', 'ip netns exec vm-pod-a ping -c 1 -W 2 10.244.2.2');
      expect(direct.out, 'the backend pod itself answers ping').toMatch(/1 received/);
    });
  });

  it('NodePort from the client VM: Cluster via both nodes, Local only via the endpoint node', async () => {
    await timed('NodePort from the client VM', () => {
      const q = (url: string) => ssh('client', `curl -s -m 5 ${url} || echo FAIL`).out.trim();
      // Cluster: the backend sees the node's address (masquerade), never the client's — for a
      // backend on the same node the address MASQUERADE picks toward it, the pod gateway (as in
      // the namespace lab, test/lab/nodeport.test.ts).
      const masq: Record<string, Record<string, string>> = {
        '192.168.56.11': { 'pod-a': '10.244.1.1', 'pod-d': '192.168.56.11' },
        '192.168.56.12': { 'pod-a': '192.168.56.12', 'pod-d': '10.244.2.1' },
      };
      for (const [ip, want] of Object.entries(masq)) {
        const seen = new Set<string>();
        const loop = `for i in $(seq 12); do curl -s -m 5 http://${ip}:30080/whoami || echo FAIL; done`;
        for (const a of ssh('client', loop).out.trim().split('\n')) {
          const [pod, , src] = a.split(' ');
          expect(want[pod!], `web-np via ${ip}: ${a}`).toBeDefined();
          expect(src, `web-np via ${ip}: ${a}`).toBe(want[pod!]);
          seen.add(pod!);
        }
        expect(seen.size, `web-np via ${ip} reached pod-a and pod-d`).toBe(2);
      }
      // Local: the endpoint (pod-d) is on node2; it sees the client's own address.
      expect(q('http://192.168.56.12:30081/whoami')).toBe('pod-d 10.244.2.3 192.168.56.100');
      expect(q('http://192.168.56.11:30081/whoami')).toBe('FAIL');
    });
  });

  it("kill -9 of node1's agent: systemd starts it again and the VIP answers", async () => {
    await timed('kill -9 and systemd restart', async () => {
      const pid = ssh('node1', 'systemctl show -p MainPID --value kubetun.service').out.trim();
      expect(Number(pid)).toBeGreaterThan(1);
      ssh('node1', `kill -9 ${pid}`);
      let now = '';
      const deadline = Date.now() + 300_000;
      while (Date.now() < deadline) {
        const r = ssh(
          'node1',
          'systemctl is-active kubetun.service && systemctl show -p MainPID --value kubetun.service && ' +
            'test -S /run/kubetun-vm/node1.sock && echo \'{"cmd":"status"}\' | ' +
            'socat -t 2 - UNIX-CONNECT:/run/kubetun-vm/node1.sock',
        );
        const lines = r.out.trim().split('\n');
        if (lines[0] === 'active' && lines[1] !== pid && (lines[2] ?? '').startsWith('{')) {
          now = lines[1]!;
          break;
        }
        await new Promise((f) => setTimeout(f, 2000));
      }
      expect(now, 'a new kubetun process answering on its socket').toMatch(/^\d+$/);
      const restarts = ssh('node1', 'systemctl show -p NRestarts --value kubetun.service').out;
      expect(Number(restarts)).toBeGreaterThanOrEqual(1);
      const answers = curlFromPod('node1', 'pod-a', `http://${WEB}/`, 10);
      expect(answers.filter((l) => l === 'FAIL')).toEqual([]);
    });
  });

  it('lab compare across the VMs: ClusterIP TCP and UDP are the same as kube-proxy (iptables) in the VMs', async () => {
    await timed('lab compare --vms (clusterip-tcp, udp; kubetun and iptables)', () => {
      const r = run(
        'bash',
        inNsArgs([
          ...[process.execPath, 'bin/kubetun.mjs', 'lab', 'compare', '--vms', SSH_CONFIG],
          ...['--kernel', 'iptables', 'clusterip-tcp', 'udp'],
        ]),
        3_600_000,
      );
      process.stdout.write(r.out);
      expect(r.status, `${r.out}\n${r.err}`).toBe(0);
      expect(r.out).toMatch(/^clusterip-tcp: SAME/m);
      expect(r.out).toMatch(/^udp: SAME/m);
      expect(r.out).toMatch(/^2 same, 0 different, 0 expected \(documented\) differences$/m);
    });
  });

  it('lab exercise --vms: dataplane-down is broken, found unsolved, fixed by its solution, solved, reset', async () => {
    const kt = (...args: string[]) => {
      const r = run(
        'bash',
        inNsArgs([
          process.execPath,
          'bin/kubetun.mjs',
          'lab',
          'exercise',
          ...args,
          '--vms',
          SSH_CONFIG,
        ]),
        1_800_000,
      );
      process.stdout.write(`$ kubetun lab exercise ${args.join(' ')} (exit ${r.status})\n${r.out}`);
      return r;
    };
    await timed(
      'lab exercise --vms (list, a refused start, dataplane-down start/check/solution/check/reset)',
      () => {
        const list = kt('list');
        expect(list.status, list.err).toBe(0);
        expect(list.out).toMatch(/^0 of 13 done\. 3 of 13 run here/m);
        const refused = kt('start', 'session-affinity');
        expect(refused.status).toBe(2);
        expect(refused.err).toMatch(/session-affinity does not run on the VM lab/);
        expect(refused.err.trim().split('\n')).toHaveLength(1);
        const start = kt('start', 'dataplane-down');
        expect(start.status, start.err).toBe(0);
        expect(ssh('node2', 'systemctl is-active kubetun.service').out.trim()).toBe('failed');
        const before = kt('check');
        expect(before.status, before.err).toBe(1);
        expect(before.out).toMatch(/kubetun on node2 is not running/);
        expect(before.out).toMatch(/pod-c 0\/3/);
        expect(before.out.trim().split('\n').pop()).toBe('dataplane-down: not yet.');
        const fix = kt('solution');
        expect(fix.status, fix.err).toBe(0);
        expect(fix.out).toMatch(/kubetun lab agent restart node2/);
        expect(ssh('node2', 'systemctl is-active kubetun.service').out.trim()).toBe('active');
        const after = kt('check');
        expect(after.status, `${after.out}\n${after.err}`).toBe(0);
        expect(after.out.trim().split('\n').pop()).toBe('dataplane-down: solved.');
        const reset = kt('reset');
        expect(reset.status, reset.err).toBe(0);
        expect(reset.out).toMatch(/dataplane-down is no longer active/);
      },
    );
  }, 1_800_000);

  it('vagrant destroy -f leaves no VM, network or disk behind', async () => {
    await timed('vagrant destroy -f', () => {
      const r = vagrant(['destroy', '-f'], 600_000);
      expect(r.status, r.err).toBe(0);
      destroyed = true;
    });
    expect(virsh('list', '--all', '--name')).toEqual([]);
    // What stays is libvirt's own (inactive) "default" network and the box's image in the pool.
    expect(virsh('net-list', '--all', '--name').filter((n) => n !== 'default')).toEqual([]);
    const vols = virsh('vol-list', '--pool', 'default').slice(2);
    expect(vols.filter((v) => !v.includes('vagrant_box_image'))).toEqual([]);
    expect(run('bash', ['-c', 'ls .vagrant/machines/*/libvirt/id 2>/dev/null']).out).toBe('');
  });
});

// Steering.applied is the install's commands, for the agent's one "steering installed" log
// line — not a record of every later change: a long-lived agent hooks every new pod's veth and
// re-hooks the external IPs on every change, and a list kept growing with them is memory the
// agent never gives back. The commands are not run: sh.ts is replaced by a recorder, and the
// sysctls live in a scratch directory (--proc-sys-net), so this runs without root.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pino from 'pino';
import { afterAll, describe, expect, it, vi } from 'vitest';

const ran: string[][] = [];
vi.mock('../../src/sh.ts', () => ({
  sh: (argv: string[]) => {
    ran.push(argv);
    return '';
  },
  shTry: (argv: string[]) => {
    ran.push(argv);
    return { ok: true, out: '', err: '', status: 0 };
  },
  shJson: () => [],
  shBatch: (_tool: string[], lines: string[][]) => {
    ran.push(...lines);
    return [];
  },
  shBatchAsync: (_tool: string[], lines: string[][]) => {
    ran.push(...lines);
    return Promise.resolve([]);
  },
  shHasOutput: () => Promise.resolve(false),
}));

const { EndpointSteer } = await import('../../src/node/steer-endpoints.ts');
const { Steering, UndoLog } = await import('../../src/node/steering.ts');

const root = mkdtempSync(join(tmpdir(), 'kt-applied-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function sysctls(tun: string): string {
  const net = join(root, 'net');
  const keys = {
    'ipv4/ip_forward': '0',
    'ipv4/conf/all/rp_filter': '1',
    [`ipv4/conf/${tun}/rp_filter`]: '1',
    [`ipv4/conf/${tun}/accept_local`]: '0',
    'ipv4/ip_local_reserved_ports': '',
  };
  for (const [k, v] of Object.entries(keys)) {
    mkdirSync(dirname(join(net, k)), { recursive: true });
    writeFileSync(join(net, k), `${v}\n`);
  }
  return net;
}

describe('Steering.applied', () => {
  it('holds what install() ran, and stays that size through later pod and external-IP changes', async () => {
    const log = pino({ level: 'silent' });
    const steering = new Steering(
      {
        tun: 'kt0',
        uplink: 'eth0',
        nodeIp: '172.30.0.11',
        podCidr: '10.244.1.0/24',
        serviceCidr: '10.96.0.0/16',
        snatPorts: { min: 61440, max: 65535 },
        nodePorts: true,
        procSysNet: sysctls('kt0'),
        locals4: ['172.30.0.11', '10.244.1.1'],
        locals6: [],
      },
      new UndoLog(),
      log,
      new EndpointSteer(),
    );
    await steering.install(['veth-a', 'veth-b']);
    const installed = steering.applied.length;
    expect(installed).toBeGreaterThan(10);
    expect(steering.applied.some((l) => l.includes('nft -f -'))).toBe(true);
    const before = ran.length;
    for (let i = 0; i < 50; i++) {
      steering.hookPod(`veth-${i}`);
      steering.setExternalAddrs([`172.30.0.${200 + (i % 40)}`, '172.30.0.250']);
    }
    expect(ran.length).toBeGreaterThan(before + 100); // the changes did run
    expect(steering.applied.length).toBe(installed);
  });
});

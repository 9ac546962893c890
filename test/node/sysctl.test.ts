// Sysctls under a moved /proc/sys/net root (--proc-sys-net) and their undo argv, on plain files
// standing in for the sysctl files (no root needed).
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { PROC_SYS_NET, Sysctls } from '../../src/node/sysctl.ts';

const dir = mkdtempSync(join(tmpdir(), 'kt-sysctl-'));
const root = join(dir, 'host', 'proc', 'sys', 'net');
mkdirSync(join(root, 'ipv4'), { recursive: true });
const file = join(root, 'ipv4', 'ip_local_reserved_ports');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const run = (argv: string[]) => spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8' });

describe('Sysctls', () => {
  it('keeps net.* keys below the root it is given, and only those', () => {
    expect(new Sysctls().path('net/ipv4/ip_forward')).toBe('/proc/sys/net/ipv4/ip_forward');
    const s = new Sysctls(`${root}/`);
    expect(s.path('net/ipv4/conf/eth0.100/rp_filter')).toBe(`${root}/ipv4/conf/eth0.100/rp_filter`);
    expect(() => s.path('kernel/shmmax')).toThrow(/net\.\* keys only/);
  });

  it('reads and writes through the root', () => {
    const s = new Sysctls(root);
    writeFileSync(file, '61440-62463\n');
    expect(s.read('net/ipv4/ip_local_reserved_ports')).toBe('61440-62463');
    s.write('net/ipv4/ip_local_reserved_ports', '1000');
    expect(readFileSync(file, 'utf8')).toBe('1000\n');
  });

  it('undo argv writes the value with a newline, an empty one too (no bytes would change nothing)', () => {
    const s = new Sysctls(root);
    writeFileSync(file, '61440-62463');
    expect(run(s.writeArgv('net/ipv4/ip_local_reserved_ports', '')).status).toBe(0);
    expect(readFileSync(file, 'utf8')).toBe('\n');
    run(s.writeArgv('net/ipv4/ip_local_reserved_ports', '5000'));
    expect(readFileSync(file, 'utf8')).toBe('5000\n');
  });

  it("undo argv falls back to /proc/sys where the root is gone (the container's state file replayed on the node)", () => {
    const s = new Sysctls(join(dir, 'not-here'));
    const argv = s.writeArgv('net/ipv4/ip_forward', '0');
    expect(argv.slice(-2)).toEqual([
      join(dir, 'not-here', 'ipv4', 'ip_forward'),
      `${PROC_SYS_NET}/ipv4/ip_forward`,
    ]);
    // the default root has one path only
    expect(new Sysctls().writeArgv('net/ipv4/ip_forward', '0').slice(-2)).toEqual([
      '0',
      '/proc/sys/net/ipv4/ip_forward',
    ]);
  });
});

// Driving the VM lab from a test: scripts/vm-host.sh (libvirtd inside the network namespace
// <prefix>virt), scripts/box-build.sh, `vagrant` run inside that namespace, and plain ssh into
// the VMs with the config `vagrant ssh-config` prints — one ssh per check instead of one
// `vagrant ssh` (a Ruby start, seconds) per check.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { LAB_PREFIX } from '../../src/lab/topology.ts';

export const ROOT = join(import.meta.dirname, '../..');
export const NS = `${LAB_PREFIX}virt`;
export const STATE = join(ROOT, '.test-results', 'vms');
export const CONSOLE_DIR = join(STATE, 'console');

/** Vagrant's environment: our Vagrantfile, libvirt, one vCPU per VM (TCG on a 2-core host). */
export function vagrantEnv(): NodeJS.ProcessEnv {
  return {
    ...process.env,
    VAGRANT_CWD: ROOT,
    VAGRANT_DEFAULT_PROVIDER: 'libvirt',
    VAGRANT_CHECKPOINT_DISABLE: '1',
    KUBETUN_CPUS: process.env.KUBETUN_CPUS ?? '1',
    KUBETUN_MEMORY: process.env.KUBETUN_MEMORY ?? '1024',
    KUBETUN_VM_LOG_DIR: CONSOLE_DIR,
  };
}

/** Runs a command with its output shown as it comes (progress in the CI log); resolves its status. */
export function runShown(cmd: string, args: string[], timeoutMs: number): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, {
      cwd: ROOT,
      env: vagrantEnv(),
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve(code ?? (signal ? 128 : 1));
    });
  });
}

export interface Out {
  status: number;
  out: string;
  err: string;
}

export function run(cmd: string, args: string[], timeoutMs = 60_000): Out {
  const r = spawnSync(cmd, args, {
    cwd: ROOT,
    env: vagrantEnv(),
    encoding: 'utf8',
    timeout: timeoutMs,
  });
  return { status: r.status ?? 1, out: r.stdout ?? '', err: r.stderr ?? String(r.error ?? '') };
}

export const vmHost = (...args: string[]) => run('bash', ['scripts/vm-host.sh', ...args], 120_000);
export const virsh = (...args: string[]) =>
  run('virsh', ['-c', 'qemu:///system', ...args])
    .out.split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
export const inNsArgs = (cmd: string[]) => ['scripts/vm-host.sh', 'exec', ...cmd];
export const vagrant = (args: string[], timeoutMs = 600_000) =>
  run('bash', inNsArgs(['vagrant', ...args]), timeoutMs);

/** `vagrant ssh-config` of every machine: ssh() and `lab compare --vms` read it. */
export const SSH_CONFIG = join(STATE, 'ssh-config');
let sshConfig: string | undefined;

/** Writes `vagrant ssh-config` for every machine to SSH_CONFIG, for ssh(). */
export function loadSshConfig(): void {
  const r = vagrant(['ssh-config'], 180_000);
  if (r.status !== 0) throw new Error(`vagrant ssh-config: ${r.err || r.out}`);
  mkdirSync(STATE, { recursive: true });
  sshConfig = SSH_CONFIG;
  writeFileSync(sshConfig, r.out);
}

/** One command on a VM (as root, through sudo), over ssh inside the namespace. */
export function ssh(host: string, command: string, timeoutMs = 300_000): Out {
  if (!sshConfig) throw new Error('loadSshConfig() first');
  const argv = ['ssh', '-F', sshConfig, '-o', 'LogLevel=ERROR', '-o', 'ConnectTimeout=20', host];
  return run('bash', inNsArgs([...argv, `sudo bash -c ${shellQuote(command)}`]), timeoutMs);
}

export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** A timing line for the CI log, with the load average it was taken under. */
export function timing(what: string, ms: number): string {
  const load = run('cat', ['/proc/loadavg']).out.split(' ').slice(0, 3).join(' ');
  const line = `vm-stage timing: ${what}: ${(ms / 1000).toFixed(1)} s (load ${load})`;
  process.stdout.write(`${line}\n`);
  return line;
}

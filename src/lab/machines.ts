// Lab nodes that are other machines (the Vagrant VMs): how to run a command as root on one.
// Over ssh with the config `vagrant ssh-config` prints, as `ssh -F CONFIG HOST sudo -n ARGV…`:
// ssh hands the far side one command line, which the login shell there splits again, so every
// argument is quoted for a POSIX shell here (remoteCommand) — a pod name, a tcpdump filter or
// a script with quotes and newlines arrives as the same argv.
//
// One master connection per machine (ControlMaster), opened before the first command and
// closed after the last: each command is then a channel of it, not a new ssh handshake (seconds
// on a software-emulated VM).
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { shQuote } from '../sh.ts';
import { LabError } from './error.ts';

export interface Machines {
  /** argv that runs argv as root on machine host */
  run(host: string, argv: readonly string[]): string[];
  /** the Node binary on the machines (on their PATH) */
  node: string;
  /** before the first command (ssh: the master connections) */
  open(hosts: string[]): void;
  /** after the last */
  close(): void;
}

/** One shell command line that a POSIX shell splits back into exactly argv. */
export function remoteCommand(argv: readonly string[]): string {
  return argv.map(shQuote).join(' ');
}

/** The Host names of an ssh config (`vagrant ssh-config`: one per machine). */
export function sshConfigHosts(text: string): string[] {
  return text
    .split('\n')
    .flatMap((l) => /^\s*Host\s+(.+)$/i.exec(l)?.[1]?.trim().split(/\s+/) ?? [])
    .filter((h) => !/[*?!]/.test(h));
}

/** The machines of an ssh config, reached with `ssh -F config`. */
export function sshMachines(config: string): Machines {
  let controlDir: string | undefined;
  let opened: string[] = [];
  const base = (): string[] => [
    'ssh',
    '-F',
    config,
    '-o',
    'BatchMode=yes',
    '-o',
    'LogLevel=ERROR',
    '-o',
    'ConnectTimeout=60',
    ...(controlDir ? ['-o', `ControlPath=${join(controlDir, '%C')}`] : []),
  ];
  return {
    node: 'node',
    run: (host, argv) => [...base(), '-o', 'ControlMaster=no', '--', host, sshSudo(argv)],
    open(hosts) {
      controlDir = mkdtempSync(join(tmpdir(), 'kubetun-ssh-'));
      for (const host of hosts) {
        const log = join(controlDir, `${host}.log`);
        const fd = openSync(log, 'w');
        // -f: into the background once logged in. Its stderr is a file, not a pipe, or the
        // master (which keeps it) would hold spawnSync until it ends.
        const argv = [...base(), '-o', 'ControlMaster=yes', '-o', 'ControlPersist=900'];
        const r = spawnSync(argv[0]!, [...argv.slice(1), '-f', '-N', '--', host], {
          stdio: ['ignore', 'ignore', fd],
          timeout: 180_000,
        });
        closeSync(fd);
        if (r.status !== 0)
          throw new LabError(
            `ssh -F ${config} ${host}: ${readFileSync(log, 'utf8').trim() || r.error?.message || `exit ${r.status}`}`,
            {
              hint: 'the config is `vagrant ssh-config` of the running VMs; where the VMs sit in a network namespace (scripts/vm-host.sh), run this through `bash scripts/vm-host.sh exec …`',
            },
          );
        opened.push(host);
      }
    },
    close() {
      for (const host of opened)
        spawnSync('ssh', [...base().slice(1), '-O', 'exit', '--', host], {
          stdio: 'ignore',
          timeout: 30_000,
        });
      opened = [];
      if (controlDir) rmSync(controlDir, { recursive: true, force: true });
      controlDir = undefined;
    },
  };
}

/** The far side's command line: root through sudo, never asking for a password. */
export function sshSudo(argv: readonly string[]): string {
  return remoteCommand(['sudo', '-n', ...argv]);
}

// The Vagrantfile, checked by Vagrant itself (`vagrant validate`; Debian's vagrant package):
// the default two nodes and KUBETUN_NODES=3, each with the client, and a bad node count refused
// with the variable named. No provider can run here (no KVM, no VirtualBox), so the provider
// blocks are skipped (--ignore-provider); everything else — boxes, networks, synced folders,
// provisioners, the topology the file reads — is validated.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '../..');
const HOME = mkdtempSync(join(tmpdir(), 'kubetun-vagrant-home-'));

function hasVagrant(): boolean {
  return spawnSync('vagrant', ['--version'], { encoding: 'utf8' }).status === 0;
}

/** vagrant validate on the repo's Vagrantfile; its state and home kept out of the repo. */
function validate(env: Record<string, string> = {}) {
  const r = spawnSync('vagrant', ['validate', '--ignore-provider', '--no-color'], {
    encoding: 'utf8',
    timeout: 120_000,
    env: {
      ...process.env,
      VAGRANT_CWD: ROOT,
      VAGRANT_HOME: join(HOME, 'home'),
      VAGRANT_DOTFILE_PATH: join(HOME, 'dot'),
      VAGRANT_CHECKPOINT_DISABLE: '1',
      ...env,
    },
  });
  const machines = [...r.stdout.matchAll(/==> (\S+): Ignoring provider config/g)].map((m) => m[1]);
  return { status: r.status, out: r.stdout, err: r.stderr, machines };
}

beforeAll(() => {
  // CI runs as root on Debian: install Debian's vagrant when the image lacks it.
  if (!hasVagrant()) {
    execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'vagrant'], {
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
      stdio: 'ignore',
      timeout: 600_000,
    });
  }
}, 620_000);

afterAll(() => {
  rmSync(HOME, { recursive: true, force: true });
});

describe('Vagrantfile', () => {
  it('validates with the default two nodes and the client', () => {
    const r = validate();
    expect(r.out).toContain('Vagrantfile validated successfully.');
    expect(r.status).toBe(0);
    expect(r.machines).toEqual(['node1', 'node2', 'client']);
  });

  it('validates with KUBETUN_NODES=3', () => {
    const r = validate({ KUBETUN_NODES: '3' });
    expect(r.out).toContain('Vagrantfile validated successfully.');
    expect(r.status).toBe(0);
    expect(r.machines).toEqual(['node1', 'node2', 'node3', 'client']);
  });

  it('refuses a node count the topology cannot give, naming the variable', () => {
    const r = validate({ KUBETUN_NODES: '9' });
    expect(r.status).not.toBe(0);
    expect(r.out + r.err).toContain('KUBETUN_NODES="9": expected an integer 2..4');
  });
});

// Root-only control files whatever the umask (issue 18 point 7: under `umask 000` the socket and
// its directory were 0777, and a writable directory let any user plant `<node>.state.json`,
// whose undo commands the next start runs as root).
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { CtlServer } from '../../src/node/ctl.ts';
import { recoverState, writeState } from '../../src/node/failure.ts';
import { ensurePrivateDir } from '../../src/node/private-dir.ts';

const dir = mkdtempSync(join(tmpdir(), 'kt-private-'));
const CHILD = fileURLToPath(new URL('./fixtures/umask-child.ts', import.meta.url));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const mode = (p: string) => statSync(p).mode & 0o777;

describe('control socket and state file under umask 000', () => {
  it('directory 0700 (and the parents it made), socket 0600, state file 0600', () => {
    const root = join(dir, 'umask');
    const script = `umask 000; exec "${process.execPath}" --import tsx "${CHILD}" "${root}"`;
    const r = spawnSync('/bin/sh', ['-c', script], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    const got = JSON.parse(r.stdout);
    expect(got).toEqual({ umask: '0', parent: '700', dir: '700', sock: '600', state: '600' });
  });
});

describe('ensurePrivateDir', () => {
  it('tightens an existing directory of ours to 0700', () => {
    const d = join(dir, 'loose');
    mkdirSync(d);
    chmodSync(d, 0o755);
    ensurePrivateDir(d);
    expect(mode(d)).toBe(0o700);
  });

  it('refuses a directory others can write instead of chmod-ing it (a /tmp-like place)', async () => {
    const d = join(dir, 'shared');
    mkdirSync(d);
    chmodSync(d, 0o1777);
    expect(() => ensurePrivateDir(d)).toThrow(/writable by other users \(mode 1777\)/);
    expect(statSync(d).mode & 0o7777).toBe(0o1777);
    await expect(CtlServer.listen(join(d, 'n.sock'), () => ({}))).rejects.toThrow(/only this user/);
  });
});

describe('recoverState trusts only a private state file', () => {
  const marker = join(dir, 'ran');
  const planted = [['sh', '-c', 'echo planted >> "$1"', 'sh', marker]];

  it('a state file others could write: nothing in it runs, and it is left in place', async () => {
    const d = join(dir, 'planted-mode');
    ensurePrivateDir(d);
    const path = join(d, 'node1.state.json');
    writeState(path, { pid: 1, watchdogPid: 0, tun: 'kt0', undo: planted });
    chmodSync(path, 0o666);
    const r = await recoverState(path);
    expect(r?.refused).toMatch(/writable by other users \(mode 666\)/);
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(path)).toBe(true);
  });

  it('a state file in a directory others can write is refused too', async () => {
    const d = join(dir, 'planted-dir');
    mkdirSync(d);
    const path = join(d, 'node1.state.json');
    writeState(path, { pid: 1, watchdogPid: 0, tun: 'kt0', undo: planted });
    chmodSync(d, 0o777);
    const r = await recoverState(path);
    expect(r?.refused).toMatch(/planted-dir is writable by other users \(mode 777\)/);
    expect(existsSync(marker)).toBe(false);
  });

  it('a state file owned by another user is refused (root only: chown)', async () => {
    if (process.geteuid?.() !== 0) return; // only root can give a file away; CI runs as root
    const d = join(dir, 'planted-owner');
    ensurePrivateDir(d);
    const path = join(d, 'node1.state.json');
    writeState(path, { pid: 1, watchdogPid: 0, tun: 'kt0', undo: planted });
    spawnSync('chown', ['65534', path]);
    const r = await recoverState(path);
    expect(r?.refused).toMatch(/belongs to uid 65534/);
    expect(existsSync(marker)).toBe(false);
  });

  it('our own private state file is replayed as before', async () => {
    const d = join(dir, 'ours');
    ensurePrivateDir(d);
    const path = join(d, 'node1.state.json');
    writeState(path, { pid: 1, watchdogPid: 0, tun: 'kt0', undo: planted });
    const r = await recoverState(path);
    expect(r).toEqual({ prevPid: 1, steps: 1, failed: 0 });
    expect(readFileSync(marker, 'utf8')).toBe('planted\n');
    rmSync(marker);
  });
});

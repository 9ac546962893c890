// The prebuilt bundle (scripts/build-js.mjs, src/runtime.ts): bin/kubetun.mjs runs it only while
// it matches the sources, and the bundle's own entry points work from build/js — the CLI, the
// lab's DNS server, and the manifest worker behind an agent's start-up check.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildBundle, bundleFresh } from '../scripts/build-js.mjs';
import { LAB_PREFIX } from '../src/lab/prefix.ts';
import { BUNDLE_DIR, REPO_ROOT } from '../src/runtime.ts';

const BIN = join(REPO_ROOT, 'bin/kubetun.mjs');

function version(env: NodeJS.ProcessEnv = {}): string {
  const r = spawnSync(process.execPath, [BIN, '--version'], {
    encoding: 'utf8',
    env: { ...process.env, ...env },
  });
  expect(r.status, r.stderr).toBe(0);
  return r.stdout.trim();
}

describe('bundleFresh', () => {
  let repo: string;
  const stamp = (files: [string, number, number][], node = process.version) =>
    writeFileSync(join(repo, 'build/js/inputs.json'), JSON.stringify({ node, files, chunks: [] }));
  const entry = (f: string): [string, number, number] => {
    const s = statSync(join(repo, f));
    return [f, s.size, s.mtimeMs];
  };

  beforeAll(() => {
    repo = mkdtempSync(join(tmpdir(), 'kt-bundle-'));
    mkdirSync(join(repo, 'build/js'), { recursive: true });
    mkdirSync(join(repo, 'src'));
    writeFileSync(join(repo, 'src/a.ts'), 'export const a = 1;\n');
    writeFileSync(join(repo, 'src/b.ts'), 'export const b = 2;\n');
  });
  afterAll(() => rmSync(repo, { recursive: true, force: true }));

  it('holds while every input has the size and mtime recorded, for this Node', () => {
    stamp([entry('src/a.ts'), entry('src/b.ts')]);
    expect(bundleFresh(repo)).toBe(true);
    stamp([entry('src/a.ts'), entry('src/b.ts')], 'v0.0.0');
    expect(bundleFresh(repo)).toBe(false);
  });

  it('fails when an input was edited, touched or removed, or nothing was built', () => {
    stamp([entry('src/a.ts'), entry('src/b.ts')]);
    writeFileSync(join(repo, 'src/a.ts'), 'export const a = 10;\n'); // size changes
    expect(bundleFresh(repo)).toBe(false);
    stamp([entry('src/a.ts'), entry('src/b.ts')]);
    utimesSync(join(repo, 'src/b.ts'), new Date(), new Date(Date.now() + 5000)); // same size
    expect(bundleFresh(repo)).toBe(false);
    stamp([entry('src/a.ts'), entry('src/b.ts')]);
    rmSync(join(repo, 'src/b.ts'));
    expect(bundleFresh(repo)).toBe(false);
    rmSync(join(repo, 'build/js/inputs.json'));
    expect(bundleFresh(repo)).toBe(false);
  });
});

describe('the bundle of this repository', () => {
  beforeAll(async () => {
    await buildBundle();
  }, 120_000);

  it('is what bin/kubetun.mjs runs while it is fresh; KUBETUN_BUNDLE=0 takes the sources', () => {
    expect(bundleFresh()).toBe(true);
    expect(version()).toBe('0.1.0 (bundle: build/js)');
    expect(version({ KUBETUN_BUNDLE: '0' })).toBe('0.1.0 (sources: tsx)');
  });

  it('is not run once a source it was built from changes', async () => {
    const src = join(REPO_ROOT, 'src/runtime.ts');
    const { atime, mtime } = statSync(src);
    try {
      utimesSync(src, atime, new Date(mtime.getTime() + 1000));
      expect(version()).toBe('0.1.0 (sources: tsx)');
    } finally {
      utimesSync(src, atime, mtime);
      await buildBundle(); // sub-millisecond mtimes may not come back exactly: build again
    }
    expect(version()).toBe('0.1.0 (bundle: build/js)');
  }, 120_000);

  it("runs the lab's DNS server entry (its main runs: a bad --dir is refused in one line)", () => {
    const missing = join(mkdtempSync(join(tmpdir(), 'kt-dns-')), 'no-such-view');
    const r = spawnSync(
      process.execPath,
      [join(BUNDLE_DIR, 'dns-server.mjs'), '--dir', missing, '--listen', '127.0.0.1:0'],
      { encoding: 'utf8', timeout: 30_000 },
    );
    rmSync(dirname(missing), { recursive: true, force: true });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(
      `cluster-dns: --dir ${missing}: not a directory (the view directory to read)\n`,
    );
  });

  // Root: `kubetun run` in a namespace of its own, refused by the start-up check that runs in
  // the manifest worker (a thread that loads build/js/manifest-worker.mjs from the bundle, or
  // the source through tsx's require hook): the same refusal either way.
  it("refuses a bad manifest at an agent's start from the worker thread, bundled or not", () => {
    const ns = `${LAB_PREFIX}rt-${process.pid}`;
    const dir = mkdtempSync(join(tmpdir(), 'kt-rt-'));
    const manifests = join(dir, 'manifests');
    mkdirSync(manifests);
    writeFileSync(
      join(manifests, 'svc.yaml'),
      'apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  clusterIP: 10.96.0.10\n  ports: [{port: 99999}]\n',
    );
    spawnSync('ip', ['netns', 'add', ns]);
    try {
      for (const bundle of ['1', '0']) {
        const argv = [BIN, 'run', '--manifests', manifests, '--node-name', 'node1'];
        argv.push('--node-ip', '10.0.0.1', '--pod-cidr', '10.244.1.0/24');
        argv.push('--ctl-socket', join(dir, `node1-${bundle}.sock`));
        const r = spawnSync('ip', ['netns', 'exec', ns, process.execPath, ...argv], {
          encoding: 'utf8',
          env: { ...process.env, KUBETUN_BUNDLE: bundle },
          timeout: 60_000,
        });
        expect(r.status, `KUBETUN_BUNDLE=${bundle}: ${r.stderr}`).toBe(2);
        expect(r.stderr).toMatch(/svc\.yaml.*Service default\/web.*spec\.ports\[0\]\.port/s);
      }
    } finally {
      spawnSync('ip', ['netns', 'del', ns]);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

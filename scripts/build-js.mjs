// The prebuilt bundle: kubetun's TypeScript sources bundled by esbuild into build/js/*.mjs, one
// file per entry point (src/runtime.ts lists them) plus shared chunks, so that `kubetun` starts
// without transpiling (bin/kubetun.mjs: ~0.1 s instead of ~1 s here; minutes less per start
// under the VM lab's software emulation). npm dependencies stay outside (node_modules), so do
// the addon and every file the code finds by path. All outputs sit in one flat directory two
// levels below the repository, so `new URL('../../', import.meta.url)` in any of them is the
// repository's root, as it is from src/<area>/x.ts.
//
// build/js/inputs.json records each input source's size and mtime: bin/kubetun.mjs runs the
// bundle only while every input is unchanged (bundleFresh), and the sources through tsx
// otherwise, so an edited tree never runs stale code.
//
//   node scripts/build-js.mjs           (npm ci runs it; scripts/bootstrap.sh when stale)
import {
  existsSync,
  linkSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = join(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(REPO, 'build', 'js');
const STAMP = join(OUT, 'inputs.json');

/**
 * esbuild's options for code node runs as the agent does: ES modules split into shared chunks,
 * npm dependencies left in node_modules (bench-sync.ts bundles its child with them too).
 */
export const ESBUILD_NODE = {
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  packages: 'external',
  outExtension: { '.js': '.mjs' },
};

/** True when build/js holds a bundle built from the sources as they are now. */
export function bundleFresh(repo = REPO) {
  let inputs;
  try {
    inputs = JSON.parse(readFileSync(join(repo, 'build', 'js', 'inputs.json'), 'utf8'));
  } catch {
    return false;
  }
  if (inputs.node !== process.version) return false;
  for (const [file, size, mtimeMs] of inputs.files) {
    try {
      const s = statSync(join(repo, file));
      if (s.size !== size || s.mtimeMs !== mtimeMs) return false;
    } catch {
      return false;
    }
  }
  return true;
}

/** Builds the bundle; returns the number of input sources. Throws esbuild's error on failure. */
export async function buildBundle() {
  const { build } = await import('esbuild');
  const { tsImport } = await import('tsx/esm/api');
  const { BUNDLE_ENTRIES } = await tsImport('../src/runtime.ts', import.meta.url);
  const tmp = `${OUT}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  const result = await build({
    absWorkingDir: REPO,
    entryPoints: Object.entries(BUNDLE_ENTRIES).map(([out, src]) => ({ in: src, out })),
    ...ESBUILD_NODE,
    outdir: tmp,
    chunkNames: 'chunk-[hash]',
    sourcemap: 'linked',
    metafile: true,
    logLevel: 'warning',
  });
  const files = Object.keys(result.metafile.inputs)
    .filter((f) => !f.includes('node_modules/'))
    .map((f) => {
      const s = statSync(join(REPO, f));
      return [f, s.size, s.mtimeMs];
    });
  const chunks = readdirSync(tmp).filter((f) => f.startsWith('chunk-'));
  writeFileSync(
    join(tmp, 'inputs.json'),
    `${JSON.stringify({ node: process.version, files, chunks })}\n`,
  );
  // Chunks are loaded lazily (dynamic imports): a process that started from the previous bundle
  // may still ask for one of its chunks, so they move over (names carry their content's hash) —
  // the previous build's own, not what it carried over in turn.
  let previous = [];
  try {
    previous = JSON.parse(readFileSync(STAMP, 'utf8')).chunks ?? [];
  } catch {}
  for (const f of previous) {
    try {
      linkSync(join(OUT, f), join(tmp, f));
    } catch {}
  }
  // Then swap the directories; a concurrent build of the same sources writes the same bytes.
  mkdirSync(dirname(OUT), { recursive: true });
  const old = `${OUT}.old-${process.pid}`;
  try {
    renameSync(OUT, old);
  } catch {}
  renameSync(tmp, OUT);
  rmSync(old, { recursive: true, force: true });
  return files.length;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  // --install: npm's install hook. Without the sources (an image's dependency layer) there is
  // nothing to bundle yet; a failure leaves kubetun running from the sources, so it is a warning.
  const install = process.argv.includes('--install');
  if (install && !existsSync(join(REPO, 'src/cli/main.ts'))) process.exit(0);
  const t0 = Date.now();
  try {
    const n = await buildBundle();
    const kib = readdirSync(OUT).reduce((a, f) => a + statSync(join(OUT, f)).size, 0) >> 10;
    console.log(
      `kubetun: bundle of ${n} sources in ${relative(process.cwd(), OUT) || OUT} (${kib} KiB, ${Date.now() - t0} ms)`,
    );
  } catch (err) {
    console.error(
      `kubetun: the JS bundle did not build (${err.message.split('\n')[0]}); kubetun runs from the sources through tsx instead`,
    );
    process.exit(install ? 0 : 1);
  }
}

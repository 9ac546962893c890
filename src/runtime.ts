// How this process's code runs, and how it starts processes of its own code.
//
// kubetun runs from its TypeScript sources through tsx's loader, or from the prebuilt bundle
// scripts/build-js.mjs makes (build/js/*.mjs: the same sources, bundled by esbuild, which
// bin/kubetun.mjs prefers while it is newer than every source it was built from). The bundle
// starts in a tenth of the time: no transpiling, no module-by-module loading — which matters
// for every agent restart and, under software emulation in the VM lab, decides whether a node
// comes up in seconds or in minutes.
//
// Code that depends on where it lives asks here: the repository root (src/x.ts is one level
// below it, build/js/x.mjs two), and the argv of a process kubetun starts for its own code
// (the manifest worker, the lab's DNS server), which starts the same way this one did.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** True when this code runs from the bundle (build/js), false from the sources (src/). */
export const BUNDLED = import.meta.url.endsWith('.mjs');

/** The repository's root directory, with a trailing slash. */
export const REPO_ROOT = fileURLToPath(new URL(BUNDLED ? '../../' : '../', import.meta.url));

/** Where the bundle lives; scripts/build-js.mjs writes it, bin/kubetun.mjs reads it. */
export const BUNDLE_DIR = join(REPO_ROOT, 'build', 'js');

/**
 * V8 options of the agent's process (`node <these> bin/kubetun.mjs run`: the lab's argv and
 * systemd units, src/lab/provision.ts; the DaemonSet's command, deploy/daemonset.yaml; the
 * agent-like process of scripts/bench-sync.ts). A young generation of 1 MiB semi-spaces: a
 * load of 10k Services grows the default one to 16 MiB semi-spaces, which V8 keeps committed
 * after the load although what it holds is old by then — ~30 MiB of the agent's RSS for
 * nothing (issue 18: 175-184 -> 143-152 MiB after the load, the load's CPU time unchanged
 * within the machine's noise; the packet loop allocates nothing, so only the control plane
 * collects more often, in shorter pauses). Node reads V8 options at start only
 * (v8.setFlagsFromString does not resize the heap afterwards), hence the command line.
 */
export const AGENT_NODE_OPTIONS: readonly string[] = ['--max-semi-space-size=1'];

/** Program entry points other than the CLI: each is a module of src/ and a file of the bundle. */
const ENTRIES = {
  'manifest-worker': 'src/control/manifest-worker-main.ts',
  'dns-server': 'src/cluster/dns/server.ts',
} as const;
export type Entry = keyof typeof ENTRIES;

/**
 * Node's arguments that run an entry point (before the entry's own arguments): the bundled
 * file, or the source through tsx's loader (by absolute URL: the process may not start in the
 * repository's directory).
 */
export function entryArgv(entry: Entry): string[] {
  if (BUNDLED) return [join(BUNDLE_DIR, `${entry}.mjs`)];
  return ['--import', import.meta.resolve('tsx'), join(REPO_ROOT, ENTRIES[entry])];
}

/**
 * The source of a worker thread that runs an entry point (`new Worker(src, { eval: true })`):
 * workers do not inherit the --import loader, so from the sources it registers tsx first.
 */
export function workerSource(entry: Entry): string {
  if (BUNDLED) return `import(${JSON.stringify(join(BUNDLE_DIR, `${entry}.mjs`))});`;
  const tsx = createRequire(import.meta.url).resolve('tsx/cjs');
  const main = join(REPO_ROOT, ENTRIES[entry]);
  return `require(${JSON.stringify(tsx)}); require(${JSON.stringify(main)});`;
}

/** Every entry point, for scripts/build-js.mjs: output name → source path (repository-relative). */
export const BUNDLE_ENTRIES: Readonly<Record<string, string>> = {
  kubetun: 'src/cli/main.ts',
  ...ENTRIES,
};

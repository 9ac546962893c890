// Types of scripts/build-js.mjs for the TypeScript that imports it (test/runtime.test.ts).
/** esbuild's options for code node runs as the agent does (ES module chunks, npm packages external). */
export const ESBUILD_NODE: {
  bundle: true;
  splitting: true;
  format: 'esm';
  platform: 'node';
  target: 'node20';
  packages: 'external';
  outExtension: { '.js': '.mjs' };
};
/** True when build/js holds a bundle built from the sources as they are now. */
export function bundleFresh(repo?: string): boolean;
/** Builds the bundle; returns the number of input sources. */
export function buildBundle(): Promise<number>;

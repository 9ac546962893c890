// Types of scripts/build-js.mjs for the TypeScript that imports it (test/runtime.test.ts).
/** True when build/js holds a bundle built from the sources as they are now. */
export function bundleFresh(repo?: string): boolean;
/** Builds the bundle; returns the number of input sources. */
export function buildBundle(): Promise<number>;

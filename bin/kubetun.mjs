#!/usr/bin/env node
// Entry point for `kubetun`: the prebuilt bundle (build/js, scripts/build-js.mjs, made by
// `npm ci`) while it matches the sources, else the TypeScript sources through tsx's loader —
// no build step stands between a clone and a working command, and an edited source is never
// run stale. KUBETUN_BUNDLE=0 always takes the sources.
import { bundleFresh } from '../scripts/build-js.mjs';

if (process.env.KUBETUN_BUNDLE !== '0' && bundleFresh()) {
  // --debug prints stacks: name the sources in them, not the bundle's chunks
  if (process.env.KUBETUN_DEBUG === '1' || process.argv.includes('--debug'))
    process.setSourceMapsEnabled(true);
  await import('../build/js/kubetun.mjs');
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import('../src/cli/main.ts');
}

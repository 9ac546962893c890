#!/usr/bin/env node
// Entry point for `npx kubetun`: the sources are TypeScript, run through tsx's loader so that
// no build step stands between `npm ci` and a working command.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');

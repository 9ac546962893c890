import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

describe('kubetun cli', () => {
  it('prints its usage through the npm bin shim', () => {
    const out = execFileSync('node', ['bin/kubetun.mjs', '--help'], { encoding: 'utf8' });
    expect(out).toContain('Usage: kubetun');
  });
});

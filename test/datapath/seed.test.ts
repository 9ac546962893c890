// The backend-selection seed: drawn per process unless configured (a fixed default gave every
// node and every restart the same "random" backend sequence), and settable for replay/tests.
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { PROCESS_SEED, resolveDatapathConfig } from '../../src/datapath/state/config.ts';

function seedOfAFreshProcess(): number {
  const code =
    "import('./src/datapath/state/config.ts').then((m) => console.log(m.resolveDatapathConfig().seed))";
  return Number(execFileSync('npx', ['tsx', '-e', code], { encoding: 'utf8' }).trim());
}

describe('datapath seed', () => {
  it('differs between processes when not configured', () => {
    const a = seedOfAFreshProcess();
    const b = seedOfAFreshProcess();
    expect(Number.isInteger(a) && Number.isInteger(b)).toBe(true);
    expect(a).not.toBe(b);
    expect(a).not.toBe(0x6b756265);
  });

  it('is the configured one when given (replay, tests)', () => {
    expect(resolveDatapathConfig({ seed: 42 }).seed).toBe(42);
    expect(resolveDatapathConfig().seed).toBe(PROCESS_SEED);
  });
});

// scripts/test-summary.mjs: the closing "N passed, N failed" line over every stage's vitest JSON
// report (the main suite's and the VM stage's), a stage whose report is missing or whose
// beforeAll threw counting as a failure.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const SCRIPT = join(import.meta.dirname, '../scripts/test-summary.mjs');
const DIR = mkdtempSync(join(tmpdir(), 'kubetun-summary-'));
afterAll(() => rmSync(DIR, { recursive: true, force: true }));

function report(name: string, suites: { status: string; tests: string[] }[]): string {
  const file = join(DIR, name);
  const testResults = suites.map((s) => ({
    status: s.status,
    assertionResults: s.tests.map((status) => ({ status })),
  }));
  writeFileSync(file, JSON.stringify({ testResults }));
  return file;
}

function summary(...files: string[]) {
  const r = spawnSync(process.execPath, [SCRIPT, ...files], { encoding: 'utf8' });
  return { status: r.status, last: r.stdout.trim().split('\n').at(-1), out: r.stdout };
}

describe('test-summary.mjs', () => {
  it('adds up the passes and failures of every report', () => {
    const main = report('main.json', [{ status: 'passed', tests: ['passed', 'passed'] }]);
    const vms = report('vms.json', [{ status: 'failed', tests: ['passed', 'failed'] }]);
    expect(summary(main)).toMatchObject({ status: 0, last: '2 passed, 0 failed' });
    expect(summary(main, vms)).toMatchObject({ status: 1, last: '3 passed, 1 failed' });
  });

  it('counts a stage whose report is missing as one failure', () => {
    const main = report('main2.json', [{ status: 'passed', tests: ['passed'] }]);
    expect(summary(main, join(DIR, 'absent.json'))).toMatchObject({
      status: 1,
      last: '1 passed, 1 failed',
    });
  });

  it('counts a file whose beforeAll threw (its tests skipped) as one failure', () => {
    const vms = report('vms2.json', [{ status: 'failed', tests: ['skipped', 'skipped'] }]);
    expect(summary(vms)).toMatchObject({ status: 1, last: '0 passed, 1 failed, 2 skipped' });
  });

  it('names each failed test before the count: stage, file, name, the first line of its error', () => {
    const file = join(DIR, 'api.json');
    writeFileSync(
      file,
      JSON.stringify({
        testResults: [
          {
            name: join(process.cwd(), 'test/lab/x.test.ts'),
            status: 'failed',
            assertionResults: [
              { status: 'passed', fullName: 'x fine' },
              {
                status: 'failed',
                fullName: 'x restarts pod-c',
                failureMessages: [
                  '\x1b[31mAssertionError: expected 2 to be 1\x1b[39m\n    at x.ts:3',
                ],
              },
            ],
          },
          { name: join(process.cwd(), 'test/y.test.ts'), status: 'failed', message: 'boom\nstack' },
        ],
      }),
    );
    const main = join(DIR, 'vitest.json'); // the main suite's report: stage "suite"
    writeFileSync(main, JSON.stringify({ testResults: [{ name: 'z.test.ts', status: 'failed' }] }));
    const r = summary(file, main);
    expect(r.out.trim().split('\n')).toEqual([
      'FAILED [api] test/lab/x.test.ts > x restarts pod-c: AssertionError: expected 2 to be 1',
      'FAILED [api] test/y.test.ts: boom',
      'FAILED [suite] z.test.ts: failed to run',
      '1 passed, 3 failed',
    ]);
  });
});

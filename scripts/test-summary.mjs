// Reads vitest's JSON reports (the main suite's, the VM stage's) and prints "N passed, N failed"
// over all of them as the run's last line, after one line per failed test (the stage, from the
// report's name, then file, name and the first line of its error) so a log's tail says what
// failed and in which stage. Exits 1 when anything failed, when no test ran, or
// when a report is missing (a stage that could not even start counts as one failure).
import { readFileSync } from 'node:fs';
import { basename, relative } from 'node:path';

let passed = 0;
let failed = 0;
let skipped = 0;
const suites = [];
const failures = [];
for (const file of process.argv.slice(2)) {
  try {
    const stage = basename(file, '.json') === 'vitest' ? 'suite' : basename(file, '.json');
    for (const s of JSON.parse(readFileSync(file, 'utf8')).testResults ?? []) suites.push({ ...s, stage });
  } catch (err) {
    console.log(`no test report at ${file}: ${err.message}`);
    failed += 1;
  }
}
for (const suite of suites) {
  // A file that failed to load, or whose beforeAll threw (its tests then count as skipped), is
  // a failure all the same.
  const results = suite.assertionResults ?? [];
  const file = relative(process.cwd(), suite.name ?? '?');
  if (suite.status === 'failed' && !results.some((t) => t.status === 'failed')) {
    failed += 1;
    failures.push(`[${suite.stage}] ${file}: ${firstLine(suite.message) || 'failed to run'}`);
  }
  for (const t of results) {
    if (t.status === 'passed') passed += 1;
    else if (t.status === 'failed') {
      failed += 1;
      failures.push(`[${suite.stage}] ${file} > ${t.fullName ?? t.title}: ${firstLine(t.failureMessages?.[0])}`);
    } else skipped += 1;
  }
}
// vitest's messages carry colour codes.
function firstLine(text) {
  return (text ?? '').replace(/\x1b\[[0-9;]*m/g, '').split('\n')[0].slice(0, 300);
}
for (const f of failures) console.log(`FAILED ${f}`);
const ok = failed === 0 && passed > 0;
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(ok ? 0 : 1);

// Reads vitest's JSON reports (the main suite's, the VM stage's) and prints "N passed, N failed"
// over all of them as the run's last line. Exits 1 when anything failed, when no test ran, or
// when a report is missing (a stage that could not even start counts as one failure).
import { readFileSync } from 'node:fs';

let passed = 0;
let failed = 0;
let skipped = 0;
const suites = [];
for (const file of process.argv.slice(2)) {
  try {
    suites.push(...(JSON.parse(readFileSync(file, 'utf8')).testResults ?? []));
  } catch (err) {
    console.log(`no test report at ${file}: ${err.message}`);
    failed += 1;
  }
}
for (const suite of suites) {
  // A file that failed to load, or whose beforeAll threw (its tests then count as skipped), is
  // a failure all the same.
  const results = suite.assertionResults ?? [];
  if (suite.status === 'failed' && !results.some((t) => t.status === 'failed')) failed += 1;
  for (const t of results) {
    if (t.status === 'passed') passed += 1;
    else if (t.status === 'failed') failed += 1;
    else skipped += 1;
  }
}
const ok = failed === 0 && passed > 0;
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(ok ? 0 : 1);

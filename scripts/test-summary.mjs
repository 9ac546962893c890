// Reads vitest's JSON report and prints "N passed, N failed" as the run's last line.
// Exits 1 when anything failed, when no test ran, or when the report is missing.
import { readFileSync } from 'node:fs';

const file = process.argv[2];
let report;
try {
  report = JSON.parse(readFileSync(file, 'utf8'));
} catch (err) {
  console.log(`no test report at ${file}: ${err.message}`);
  console.log('0 passed, 1 failed');
  process.exit(1);
}
let passed = 0;
let failed = 0;
let skipped = 0;
for (const suite of report.testResults ?? []) {
  // A file that failed to load has no assertions but is a failure all the same.
  if (suite.status === 'failed' && (suite.assertionResults ?? []).length === 0) failed += 1;
  for (const t of suite.assertionResults ?? []) {
    if (t.status === 'passed') passed += 1;
    else if (t.status === 'failed') failed += 1;
    else skipped += 1;
  }
}
const ok = failed === 0 && passed > 0;
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(ok ? 0 : 1);

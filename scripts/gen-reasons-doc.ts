// Writes docs/reasons.md from the reason table (src/datapath/state/reasons.ts), the one place each
// reason's name, verdict and meaning live. test/datapath/reasons.test.ts fails when the file is
// out of date: run `npx tsx scripts/gen-reasons-doc.ts` after adding a reason.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { REASONS } from '../src/datapath/state/reasons.ts';
import { VERDICT_NAMES } from '../src/datapath/state/verdict.ts';

export const REASONS_DOC = fileURLToPath(new URL('../docs/reasons.md', import.meta.url));

export function reasonsMarkdown(): string {
  const rows = REASONS.map(
    (r, i) =>
      `| ${i} | \`${r.name}\` | ${VERDICT_NAMES[r.verdict]} | ${r.doc.replaceAll('|', '\\|')} |`,
  );
  return [
    '# Datapath reasons',
    '',
    'Generated from `src/datapath/state/reasons.ts` by `scripts/gen-reasons-doc.ts`; do not edit.',
    'Every packet `dpProcess` handles ends with exactly one reason. The reason decides the',
    'verdict and has a counter: `kubetun counters`, the metric',
    '`kubetun_datapath_packets_total{reason}` and `kubetun replay` show these names.',
    '',
    '| # | reason | verdict | meaning |',
    '| - | ------ | ------- | ------- |',
    ...rows,
    '',
  ].join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(REASONS_DOC, reasonsMarkdown());
  console.log(`wrote ${REASONS_DOC} (${REASONS.length} reasons)`);
}

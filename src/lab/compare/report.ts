// The text report of `lab compare`: one block per scenario, per capture point "same" or the
// first difference packet by packet, then the normalisations applied.
import { formatPointDiff } from './diff.ts';
import type { CompareReport, ScenarioResult } from './run.ts';

const VERDICT = {
  same: 'SAME',
  different: 'DIFFERENT',
  'expected-difference': 'EXPECTED DIFFERENCE',
};

export function formatReport(r: CompareReport): string {
  const out = [`kubetun vs kube-proxy (${r.kernel} mode), ${r.results.length} scenarios`, ''];
  for (const s of r.results) out.push(...formatScenario(s, r.kernel), '');
  out.push('Normalised (legitimately random, ignored):');
  for (const n of r.normalisations) out.push(`  - ${n}`);
  const expected = r.results.filter((s) => s.verdict === 'expected-difference').length;
  out.push(
    '',
    `${r.results.length - r.differences - expected} same, ${r.differences} different, ${expected} expected (documented) differences`,
  );
  return out.join('\n');
}

function formatScenario(s: ScenarioResult, kernel: string): string[] {
  const [a, b] = s.runs;
  const out = [`${s.name}: ${VERDICT[s.verdict]} — ${s.title}`];
  for (const run of s.runs) {
    const chosen = run.backend ? `, backend ${run.backend}` : '';
    const tries = run.attempts.length > 1 ? `, ${run.attempts.length} attempts` : '';
    const last = run.attempts[run.kept[0] ?? 0]?.output.split('\n')[0] ?? '';
    out.push(`  ${run.mode}${chosen}${tries}: ${last}`);
  }
  if (s.expected) out.push(`  deliberate: ${s.expected}`);
  if (s.note && s.verdict !== 'same') out.push(`  note: ${s.note}`);
  for (const p of s.points)
    out.push(...formatPointDiff(p, a.mode === 'kubetun' ? 'kubetun' : kernel, b.mode));
  return out;
}

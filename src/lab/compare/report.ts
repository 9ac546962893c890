// The text report of `lab compare`: one block per scenario, per capture point "same" or the
// first difference packet by packet, then the normalisations applied.
import { formatPointDiff } from './diff.ts';
import type { ClockOffset } from './clock.ts';
import type { CompareReport, ScenarioResult } from './run.ts';

const VERDICT = {
  same: 'SAME',
  different: 'DIFFERENT',
  'expected-difference': 'EXPECTED DIFFERENCE',
};

export function formatReport(r: CompareReport): string {
  const on = r.lab ? ` on ${r.lab}` : '';
  const out = [`kubetun vs kube-proxy (${r.kernel} mode)${on}, ${r.results.length} scenarios`];
  if (r.clocks) out.push(`clocks (capturing machine minus this one): ${formatClocks(r.clocks)}`);
  out.push('');
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
    const tries =
      (run.attempts.length > 1 ? `, ${run.attempts.length} attempts` : '') +
      (run.reruns ? `, run ${run.reruns + 1} times (a retransmission before)` : '');
    const last = run.attempts[run.kept[0] ?? 0]?.output.split('\n')[0] ?? '';
    out.push(`  ${run.mode}${chosen}${tries}: ${last}`);
  }
  if (s.verdict === 'different') {
    // an empty side with a full capture: the attempt's packets were not told apart (run.ts)
    for (const run of s.runs) {
      if (!run.leftOut?.length) continue;
      const where = run.leftOut.map((l) => `${l.point} ${l.captured}`).join(', ');
      out.push(`  ${run.mode}: captured but none the kept attempt's (packets): ${where}`);
    }
  }
  if (s.expected) out.push(`  deliberate: ${s.expected}`);
  if (s.note && s.verdict !== 'same') out.push(`  note: ${s.note}`);
  for (const p of s.points)
    out.push(...formatPointDiff(p, a.mode === 'kubetun' ? 'kubetun' : kernel, b.mode));
  return out;
}

/** "node1 +3.214 s ± 0.8 ms, node2 …" */
export function formatClocks(clocks: Record<string, ClockOffset>): string {
  return Object.entries(clocks)
    .map(([m, c]) => {
      const s = c.offsetUs / 1e6;
      return `${m} ${s >= 0 ? '+' : ''}${s.toFixed(3)} s ± ${(c.rttUs / 2000).toFixed(1)} ms`;
    })
    .join(', ');
}

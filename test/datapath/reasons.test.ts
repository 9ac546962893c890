// The reason table is the one source of reason names, verdicts and docs: each exported reason
// constant is its own row, the verdict comes from the row (not from the name), and the docs
// are generated from it.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import * as R from '../../src/datapath/state/reasons.ts';
import { V_DROP, V_PASS, V_REPLY, V_TX } from '../../src/datapath/state/verdict.ts';
import { REASONS_DOC, reasonsMarkdown } from '../../scripts/gen-reasons-doc.ts';

const constants = Object.entries(R).filter(
  (e): e is [string, number] => /^(PASS|TX|REPLY|DROP)_/.test(e[0]) && typeof e[1] === 'number',
);

describe('reason table', () => {
  it('has one row per constant, named like it, and nothing else', () => {
    expect(constants.length).toBe(R.REASON_COUNT);
    for (const [name, id] of constants) expect(R.REASONS[id]?.name).toBe(name);
  });

  it('gives every reason a verdict and a one-line doc', () => {
    for (const r of R.REASONS) {
      expect([V_PASS, V_TX, V_REPLY, V_DROP]).toContain(r.verdict);
      expect(r.doc.length).toBeGreaterThan(10);
      expect(r.doc).not.toContain('\n');
    }
    expect(R.REASON_VERDICT[R.DROP_CT_FULL]).toBe(V_DROP);
    expect(R.REASON_VERDICT[R.TX_FRAG]).toBe(V_TX);
    expect(R.reasonIsDrop(R.TX_REVSNAT)).toBe(false);
    expect(R.reasonIsDrop(R.DROP_ETP_NO_LOCAL_ENDPOINTS)).toBe(true);
  });

  it('docs/reasons.md is generated from it (npx tsx scripts/gen-reasons-doc.ts)', () => {
    expect(readFileSync(REASONS_DOC, 'utf8')).toBe(reasonsMarkdown());
  });
});

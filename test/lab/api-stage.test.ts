// scripts/test.sh's API stage (offline): every test file that brings a lab up either runs again
// in API mode (API_TESTS in scripts/test.sh) or is in docs/cluster.md's table of files left out,
// with a reason — so a new lab test is not silently left out of "the lab tests pass the same as
// with the manifests directory" (issue 21).
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import config from '../../vitest.config.ts';

const ROOT = join(import.meta.dirname, '../..');
const SELF = relative(ROOT, import.meta.filename);

/** The files the stage runs: the words of the API_TESTS=( … ) array. */
function apiTests(): string[] {
  const sh = readFileSync(join(ROOT, 'scripts/test.sh'), 'utf8');
  const m = /^API_TESTS=\(([^)]*)\)/m.exec(sh);
  if (!m) throw new Error('scripts/test.sh: no API_TESTS=( … )');
  return m[1]!.split(/\s+/).filter(Boolean);
}

/** The files docs/cluster.md's "The lab tests in API mode" table leaves out, with a reason. */
function leftOut(): Map<string, string> {
  const doc = readFileSync(join(ROOT, 'docs/cluster.md'), 'utf8');
  const section = doc.split('## The lab tests in API mode')[1]?.split('\n## ')[0] ?? '';
  const rows = [...section.matchAll(/^\| `([^`]+)` \| (.+) \|$/gm)];
  return new Map(rows.map((r) => [r[1]!, r[2]!.trim()]));
}

/** Folders the main suite leaves to a stage of their own (vitest.config.ts: test/vms, test/bot). */
const HELD_OUT = (config.test?.exclude ?? [])
  .filter((p) => p.startsWith('test/'))
  .map((p) => p.replace(/\*\*$/, ''));

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return HELD_OUT.includes(`${relative(ROOT, p)}/`) ? [] : testFiles(p);
    return e.name.endsWith('.test.ts') ? [relative(ROOT, p)] : [];
  });
}

/** A test brings a lab up when it calls labUp() or runs `lab up` (the CLI). */
const bringsUpLab = (f: string) =>
  f !== SELF && /\blabUp\(|\['lab', 'up'/.test(readFileSync(join(ROOT, f), 'utf8'));

describe("scripts/test.sh's API stage", () => {
  it('names only lab tests that exist, and none also left out', () => {
    const labTests = testFiles(join(ROOT, 'test')).filter(bringsUpLab);
    for (const f of apiTests()) expect(labTests, f).toContain(f);
    for (const f of apiTests()) expect(leftOut().has(f), f).toBe(false);
  });

  it('covers every test that brings a lab up, or the docs say why it is left out', () => {
    const out = leftOut();
    expect(out.size).toBeGreaterThan(0);
    for (const why of out.values()) expect(why.length).toBeGreaterThan(20);
    const uncovered = testFiles(join(ROOT, 'test'))
      .filter(bringsUpLab)
      .filter((f) => !apiTests().includes(f) && !out.has(f));
    expect(uncovered).toEqual([]);
  });
});

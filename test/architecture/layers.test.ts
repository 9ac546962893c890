// The import graph of src/ against docs/architecture.md: no circle (type-only imports count:
// a circle of types is still two modules that cannot be understood apart), and the layer rules
// of the doc's table "What may import what". Reads the sources; runs nothing.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = normalize(join(dirname(fileURLToPath(import.meta.url)), '../..'));
const SRC = join(ROOT, 'src');

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'native' ? [] : files(p);
    return e.name.endsWith('.ts') ? [p] : [];
  });
}

/** src-relative path -> the src-relative files it imports (static and dynamic, types too). */
function importGraph(): Map<string, string[]> {
  const g = new Map<string, string[]>();
  const spec = /(?:\bfrom|\bimport)\s*\(?\s*['"](\.{1,2}\/[^'"]+)['"]/g;
  for (const f of files(SRC)) {
    const text = readFileSync(f, 'utf8');
    const deps = [...text.matchAll(spec)].map((m) =>
      relative(SRC, normalize(join(dirname(f), m[1]!))),
    );
    g.set(relative(SRC, f), deps);
  }
  return g;
}

/** The layer a src-relative file belongs to (docs/architecture.md, "Layers"). */
function layerOf(file: string): string {
  const parts = file.split('/');
  if (parts[0] === 'datapath') {
    if (parts.length === 3) return `datapath/${parts[1]}`; // state, stages
    return parts[1] === 'program.ts' || parts[1] === 'program6.ts' // program6: its IPv6 half
      ? 'datapath/program'
      : `datapath/${parts[1]!.replace('.ts', '')}`;
  }
  return parts.length === 1 ? parts[0]!.replace('.ts', '') : parts[0]!;
}

// What each layer may import besides itself (docs/architecture.md, "What may import what").
// Layers not listed are applications (node, cli, lab, pcap, inspect, cluster): they may import
// anything below them that the rules for the imported layer allow.
const LEAVES = ['wire', 'errors'];
const MAY_IMPORT: Record<string, readonly string[]> = {
  wire: [],
  errors: [],
  runtime: [],
  sh: ['errors'],
  maps: ['wire'],
  sched: ['wire', 'maps'],
  model: ['wire'],
  endpoints: [...LEAVES, 'model'],
  rules: [...LEAVES, 'model', 'manifests', 'endpoints'],
  'datapath/state': [...LEAVES, 'maps', 'sched'],
  'datapath/stages': [...LEAVES, 'maps', 'sched', 'datapath/state'],
  'datapath/program': [...LEAVES, 'maps', 'datapath/state', 'datapath/stages'],
  'datapath/tune': [],
  loader: [...LEAVES, 'maps', 'sched', 'model', 'endpoints', 'datapath/state'],
  housekeeping: [...LEAVES, 'datapath/state', 'datapath/stages', 'loader'],
  control: [...LEAVES, 'model', 'manifests', 'endpoints', 'loader', 'datapath/state', 'runtime'],
};

/** Files outside the datapath that may run the program (the packet loop, the pcap replayer, the trace's dry run). */
const PROGRAM_CALLERS = ['node/loop.ts', 'node/trace.ts', 'pcap/replay.ts'];

function cycles(g: Map<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  let n = 0;
  const visit = (v: string): void => {
    index.set(v, n);
    low.set(v, n++);
    stack.push(v);
    on.add(v);
    for (const w of g.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const comp: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      on.delete(w);
      comp.push(w);
    } while (w !== v);
    if (comp.length > 1 || (g.get(v) ?? []).includes(v)) out.push(comp.sort());
  };
  for (const v of g.keys()) if (!index.has(v)) visit(v);
  return out;
}

describe('the import graph of src/ (docs/architecture.md)', () => {
  const g = importGraph();

  it('finds the sources and their imports', () => {
    expect(g.size).toBeGreaterThan(100);
    expect(g.get('datapath/program.ts')).toContain('datapath/stages/lb.ts');
  });

  it('has no circle', () => {
    expect(cycles(g)).toEqual([]);
  });

  it('keeps every layer to what it may import', () => {
    const bad: string[] = [];
    for (const [file, deps] of g) {
      const from = layerOf(file);
      const allowed = MAY_IMPORT[from];
      if (!allowed) continue;
      for (const d of deps) {
        const to = layerOf(d);
        if (to !== from && !allowed.includes(to)) bad.push(`${file} -> ${d} (${from} -> ${to})`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('lets only the packet loop, the trace and the replayer run the program', () => {
    const callers = [...g]
      .filter(([f, deps]) => !f.startsWith('datapath/') && deps.includes('datapath/program.ts'))
      .map(([f]) => f);
    expect(callers.sort()).toEqual(PROGRAM_CALLERS);
  });

  it('keeps the stages inside the datapath and housekeeping', () => {
    const users = [...g]
      .filter(([, deps]) => deps.some((d) => d.startsWith('datapath/stages/')))
      .map(([f]) => layerOf(f));
    expect([...new Set(users)].sort()).toEqual([
      'datapath/program',
      'datapath/stages',
      'housekeeping',
    ]);
  });
});

// The pure logic of `bench:datapath --count instructions` (scripts/bench/callgrind.ts): reading
// callgrind's dump files, pairing them with the child's marks, the per-packet figure with the
// harness loop and the set-up left out; and bench-ab's re-exports for a pre-layering revision.
// No valgrind run here and no timing: the dump texts are callgrind 3.19's format, cut short.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { layoutShims } from '../../scripts/bench-ab.ts';
import {
  callgrindIr,
  dumpNumber,
  pctChange,
  perPacket,
  segments,
} from '../../scripts/bench/callgrind.ts';

/** The head and tail of a real dump (callgrind.out.25151.1, node started under callgrind). */
const DUMP = `# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 25151
cmd:  node --single-threaded --predictable /tmp/cgproto/e.cjs
part: 1

desc: Timerange: Basic block 0 - 112389788
desc: Trigger: --dump-before=getpriority

positions: line
events: Ir
summary: 508886289

fl=(152)
fn=(574)
0 12

totals: 508886289
`;

describe('callgrindIr', () => {
  it('reads the summary line of a dump', () => {
    expect(callgrindIr(DUMP)).toBe(508886289);
  });

  it('takes the Ir column when more events were collected', () => {
    const text = 'events: Dr Ir Dw\nsummary: 7 1234 9\n0 1 2 3\ntotals: 7 1234 9\n';
    expect(callgrindIr(text)).toBe(1234);
  });

  it('falls back to totals when there is no summary', () => {
    expect(callgrindIr('events: Ir\nfn=(1) x\n0 5\ntotals: 5\n')).toBe(5);
  });

  it('refuses a dump without Ir or without a total', () => {
    expect(() => callgrindIr('events: Dr\nsummary: 5\n')).toThrow(/Ir column/);
    expect(() => callgrindIr('events: Ir\nfn=(1) x\n0 5\n')).toThrow(/summary/);
  });
});

describe('dumpNumber', () => {
  it('is the dump sequence number of callgrind.out.<pid>.<k>, 0 for the final dump', () => {
    expect(dumpNumber('/tmp/x/callgrind.out.4242.17', 4242)).toBe(17);
    expect(dumpNumber('/tmp/x/callgrind.out.4242', 4242)).toBe(0);
    expect(dumpNumber('/tmp/x/callgrind.out.4243.17', 4242)).toBe(0);
  });
});

describe('segments', () => {
  it('gives dump k the label of mark k, keeping copy and run segments in order', () => {
    const ir = new Map([
      [1, 9_000_000_000], // set-up, warm-up and the first clear: ended at mark 1 ('prep')
      [2, 100],
      [3, 1100],
      [4, 50],
      [5, 101],
      [6, 1102],
    ]);
    const got = segments(ir, ['prep', 'copy', 'run', 'prep', 'copy', 'run']);
    expect(got).toEqual({ copy: [100, 101], run: [1100, 1102] });
  });

  it('refuses when callgrind wrote fewer dumps than the child marked', () => {
    expect(() => segments(new Map([[1, 5]]), ['prep', 'copy'])).toThrow(/mark 2 \(copy\)/);
  });
});

describe('perPacket', () => {
  it('is (run - copy) / packets over the last segments, the unsettled first one left out', () => {
    // first segment still tiering up (+0.27%), the last three equal to the instruction
    const seg = {
      copy: [7_403_309, 7_395_828, 7_395_828, 7_395_828],
      run: [52_191_013, 52_050_808, 52_050_808, 52_050_808],
    };
    const p = perPacket(seg, 16_384);
    expect(p.ir).toBeCloseTo((52_050_808 - 7_395_828) / 16_384, 9);
    expect(p.spread).toBe(0);
    expect(p.used).toBe(3);
  });

  it('takes medians and reports the spread of the run segments', () => {
    const p = perPacket({ copy: [10, 12, 11], run: [1010, 1000, 1020] }, 10);
    expect(p.ir).toBe((1010 - 11) / 10);
    expect(p.spread).toBeCloseTo(20 / 1010, 12);
  });

  it('refuses no packets or no segment', () => {
    expect(() => perPacket({ copy: [1], run: [2] }, 0)).toThrow(RangeError);
    expect(() => perPacket({ copy: [], run: [] }, 10)).toThrow(/no measured segment/);
  });
});

describe('pctChange', () => {
  it('is positive when A executes more instructions than B', () => {
    expect(pctChange(102, 100)).toBeCloseTo(2, 12);
    expect(pctChange(98, 100)).toBeCloseTo(-2, 12);
  });
});

describe('layoutShims (bench-ab, a revision from before the layered datapath)', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  function tree(files: string[]): string {
    const d = mkdtempSync(join(tmpdir(), 'kubetun-shim-'));
    dirs.push(d);
    for (const f of files) {
      mkdirSync(join(d, f, '..'), { recursive: true });
      writeFileSync(join(d, f), '// tree file\n');
    }
    return d;
  }

  it('re-exports the flat datapath.ts and reasons.ts at the state/ paths the harness imports', () => {
    const d = tree(['src/datapath/datapath.ts', 'src/datapath/reasons.ts']);
    expect(layoutShims(d)).toBe(true);
    const s = join(d, 'src/datapath/state');
    expect(readFileSync(join(s, 'datapath.ts'), 'utf8')).toBe("export * from '../datapath.ts';\n");
    expect(readFileSync(join(s, 'reasons.ts'), 'utf8')).toBe("export * from '../reasons.ts';\n");
  });

  it('leaves a layered tree alone', () => {
    const d = tree(['src/datapath/state/datapath.ts', 'src/datapath/state/reasons.ts']);
    expect(layoutShims(d)).toBe(false);
    expect(readFileSync(join(d, 'src/datapath/state/datapath.ts'), 'utf8')).toBe('// tree file\n');
    expect(existsSync(join(d, 'src/datapath/datapath.ts'))).toBe(false);
  });
});

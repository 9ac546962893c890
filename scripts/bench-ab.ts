// The per-packet program of this tree against the same program at a git revision:
//
//   npm run bench:datapath -- --against REV [--rounds N] [--quick]
//        [--count instructions [--jobs N]] [--this REV2]
//
// Wall time (always): runs of bench-datapath in separate processes differ by up to 2x on a
// shared 2-core machine (frequency, neighbours, where the tables land), far more than the few
// percent a change to the hot path costs. Here both programs run in the same process on the same
// packets: the revision is extracted with `git archive` into a temporary directory, this tree's
// scripts/bench/harness.ts is copied into it, and each side's harness is imported from its own
// tree — so each side has its own loop functions (their own inline caches) over its own
// program. The sides then alternate A B B A … for N rounds; medians are printed side by side
// with the ratio. Even so an A/A run here put one side 56.6% ahead: the figures are printed, as
// noisy as they are.
//
// --count instructions: each side, scenario and service count once more, in a process of its own
// under callgrind (bench/count.ts): instructions per packet, which the machine's load does not
// move, beside the wall-time figures. Side A's first case runs twice: the difference between
// those two runs is printed as the count's own noise.
//
// --this REV2: side A is REV2 instead of the working tree (to measure one commit against its
// parent, e.g. --this 21d185b --against 21d185b^). Prints; asserts nothing.

import { spawnSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { median, pctChange } from './bench/callgrind.ts';
import {
  COUNT_DEFAULTS,
  type CountJob,
  countAll,
  SCENARIO_LABEL,
  type Scenario,
  spreadNote,
} from './bench/count.ts';
import type * as Harness from './bench/harness.ts';

type H = typeof Harness;

const here = dirname(fileURLToPath(import.meta.url));
const root = dirname(here);

/** One line, exit 2: what the user should fix. */
export function refuse(msg: string): never {
  process.stderr.write(`bench:datapath: ${msg}\n`);
  process.exit(2);
}

/**
 * A revision from before the layered datapath (51411f6, issue 16) kept Datapath and the reason
 * table at src/datapath/datapath.ts and reasons.ts, with the same exports the harness uses: two
 * re-export files at the new paths let the harness read it (the "before" of issue 16). Returns
 * whether it wrote them.
 */
export function layoutShims(dir: string): boolean {
  const dp = join(dir, 'src', 'datapath');
  if (existsSync(join(dp, 'state', 'datapath.ts')) || !existsSync(join(dp, 'datapath.ts'))) {
    return false;
  }
  mkdirSync(join(dp, 'state'), { recursive: true });
  writeFileSync(join(dp, 'state', 'datapath.ts'), "export * from '../datapath.ts';\n");
  writeFileSync(join(dp, 'state', 'reasons.ts'), "export * from '../reasons.ts';\n");
  return true;
}

/** REV's tree, extracted into a fresh directory with this tree's harness and node_modules. */
function extract(rev: string): { dir: string; commit: string; shimmed: boolean } {
  const git = (args: string[], input?: Buffer) =>
    spawnSync('git', args, { cwd: root, input, maxBuffer: 1 << 30 });
  const r = git(['rev-parse', '--verify', '--quiet', `${rev}^{commit}`]);
  if (r.status !== 0) refuse(`'${rev}' is not a commit of this repository (try a hash or main~3)`);
  const commit = r.stdout.toString().trim();
  const dir = mkdtempSync(join(tmpdir(), 'kubetun-ab-'));
  const tar = git(['archive', '--format=tar', commit]);
  const x = spawnSync('tar', ['-x', '-C', dir], { input: tar.stdout, maxBuffer: 1 << 30 });
  if (tar.status !== 0 || x.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    refuse(`could not extract ${commit.slice(0, 12)}: ${tar.stderr}${x.stderr}`.trim());
  }
  mkdirSync(join(dir, 'scripts', 'bench'), { recursive: true });
  copyFileSync(join(here, 'bench', 'harness.ts'), join(dir, 'scripts', 'bench', 'harness.ts'));
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
  return { dir, commit, shimmed: layoutShims(dir) };
}

interface Side {
  name: string;
  /** the tree's root (this tree, or REV extracted) */
  dir: string;
  h: H;
}

interface Case {
  label: string;
  scenario: Scenario;
  services: number;
  /** one timed run on side s; returns Mpps */
  run: (s: number) => number;
}

/** Established DNAT and revNAT, and new flows, at `services` services on both sides. */
function casesFor(sides: Side[], services: number, est: number, batch: number): Case[] {
  const FLOWS = 65_536;
  const CT = 262_144;
  const rounds = Math.max(1, Math.round(est / FLOWS));
  const st = sides.map(({ h }) => {
    const dp = h.datapathFor(services, CT);
    const orig = h.flowSet(services, FLOWS, h.ACK);
    h.runSet(dp, h.flowSet(services, FLOWS, h.SYN), 1, h.NOW);
    const reply = h.replySet(dp, services, FLOWS);
    const ndp = h.datapathFor(services, batch * 2);
    const syns = h.synSet(services, batch);
    for (let w = 0; w < 2; w++) {
      h.runSet(dp, orig, 1, h.NOW);
      h.runSet(dp, reply, 1, h.NOW);
      ndp.ct.clear();
      h.runSet(ndp, syns, 1, h.NOW);
    }
    const harness = h.timeIt(() => h.runCopyOnly(orig, rounds)).ns / (rounds * FLOWS);
    return { dp, orig, reply, ndp, syns, harness };
  });
  const timed = (s: number, what: string, fn: () => number, packets: number): number => {
    const { h } = sides[s];
    const t = h.timeIt(fn);
    h.checkAll(what === 'TX_DNAT_NEW' ? st[s].ndp : st[s].dp, what, t.result, packets);
    return h.mpps(packets, t.ns - st[s].harness * packets);
  };
  const label = (sc: Scenario) => `${services} services, ${SCENARIO_LABEL[sc]}`;
  return [
    {
      label: label('dnat'),
      scenario: 'dnat',
      services,
      run: (s) =>
        timed(
          s,
          'TX_DNAT',
          () => sides[s].h.runSet(st[s].dp, st[s].orig, rounds, sides[s].h.NOW),
          rounds * FLOWS,
        ),
    },
    {
      label: label('revnat'),
      scenario: 'revnat',
      services,
      run: (s) =>
        timed(
          s,
          'TX_REVNAT',
          () => sides[s].h.runSet(st[s].dp, st[s].reply, rounds, sides[s].h.NOW),
          rounds * FLOWS,
        ),
    },
    {
      label: label('new'),
      scenario: 'new',
      services,
      run: (s) => {
        st[s].ndp.ct.clear();
        return timed(
          s,
          'TX_DNAT_NEW',
          () => sides[s].h.runSet(st[s].ndp, st[s].syns, 1, sides[s].h.NOW),
          batch,
        );
      },
    },
  ];
}

export interface AbOptions {
  rounds: number;
  quick: boolean;
  /** --count instructions: add the callgrind counts (bench/count.ts; valgrind checked before) */
  count: boolean;
  /** side A at this revision instead of the working tree */
  thisRev?: string;
  jobs: number;
}

interface WallRow {
  label: string;
  scenario: Scenario;
  services: number;
  /** median Mpps of side A and side B */
  a: number;
  b: number;
}

function load(): string {
  return loadavg()
    .map((l) => l.toFixed(1))
    .join(' ');
}

/** The wall-time A/B: prints its table and returns the medians. */
function wallAB(sides: Side[], o: AbOptions, scales: number[]): WallRow[] {
  const est = o.quick ? 1_000_000 : 4_000_000;
  const batch = o.quick ? 65_536 : 131_072;
  const rows: WallRow[] = [];
  const lines: string[] = [];
  for (const services of scales) {
    process.stderr.write(`  … wall time, ${services} services: seeding both sides\n`);
    for (const c of casesFor(sides, services, est, batch)) {
      const got: number[][] = [[], []];
      for (let r = 0; r < o.rounds; r++) {
        const order = r % 2 ? [1, 0] : [0, 1];
        for (const s of order) got[s].push(c.run(s));
      }
      const [ma, mb] = got.map(median);
      rows.push({ label: c.label, scenario: c.scenario, services, a: ma, b: mb });
      const spread = (xs: number[]) =>
        `${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)}`;
      lines.push(
        `${c.label.padEnd(40)} | ${ma.toFixed(2).padStart(6)} (${spread(got[0])}) | ${mb.toFixed(2).padStart(6)} (${spread(got[1])}) | ${pctChange(ma, mb).toFixed(1).padStart(6)}%`,
      );
      process.stderr.write(`  … wall time, ${c.label}\n`);
    }
  }
  console.log(
    `wall time, ${o.rounds} rounds alternating A B B A in one process (Mpps per CPU-second, harness copy subtracted; noisy: an A/A run on this VM differed by up to 2x)`,
  );
  console.log(
    `${'case'.padEnd(40)} | ${sides[0].name}, median (min–max) | ${sides[1].name}, median (min–max) | change`,
  );
  for (const l of lines) console.log(l);
  console.log(
    `load average after ${load()}; change = ${sides[0].name} / ${sides[1].name} - 1 (negative: ${sides[0].name} is slower)\n`,
  );
  return rows;
}

/** The callgrind counts for the same cases, printed beside the wall-time medians. */
async function countAB(sides: Side[], o: AbOptions, wall: WallRow[]): Promise<void> {
  const opts = { ...COUNT_DEFAULTS, jobs: o.jobs };
  const side = (s: number) => ({ name: sides[s].name, dir: sides[s].dir, ring: 'off' as const });
  const jobs: CountJob[] = [];
  for (const w of wall) {
    for (const s of [0, 1])
      jobs.push({ side: side(s), scenario: w.scenario, services: w.services });
  }
  // side A's first case once more: two processes of the same code, the count's own noise
  jobs.push({ ...jobs[0] });
  const t0 = Date.now();
  console.log(
    `instruction count: callgrind, each side and case in a process of its own (${jobs.length} processes, ${opts.jobs} at a time); load average before ${load()}`,
  );
  const got = await countAll(jobs, opts);
  const secs = ((Date.now() - t0) / 1000).toFixed(0);
  console.log(
    `${'case'.padEnd(40)} | ${`${sides[0].name}, instr/packet`.padStart(26)} | ${`${sides[1].name}, instr/packet`.padStart(26)} | change | wall time (noisy): Mpps A, B, change`,
  );
  wall.forEach((w, k) => {
    const a = got[2 * k];
    const b = got[2 * k + 1];
    console.log(
      `${w.label.padEnd(40)} | ${`${a.ir.toFixed(1)}${spreadNote(a)}`.padStart(26)} | ${`${b.ir.toFixed(1)}${spreadNote(b)}`.padStart(26)} | ${pctChange(a.ir, b.ir).toFixed(2).padStart(5)}% | ${w.a.toFixed(2)}, ${w.b.toFixed(2)}, ${pctChange(w.a, w.b).toFixed(1)}%`,
    );
  });
  const again = got[got.length - 1];
  console.log(
    `noise of the count: ${sides[0].name}, ${wall[0].label}, run twice in two processes: ${got[0].ir.toFixed(1)} and ${again.ir.toFixed(1)} instr/packet (${pctChange(again.ir, got[0].ir).toFixed(3)}%)`,
  );
  console.log(
    `change = instructions of ${sides[0].name} / ${sides[1].name} - 1 (positive: ${sides[0].name} does more work per packet); the count does not see cache misses or mispredictions`,
  );
  console.log(
    `${secs} s for the count; load average after ${load()} (the counts do not depend on it)`,
  );
}

export async function benchAgainst(rev: string, o: AbOptions): Promise<void> {
  const trees = [o.thisRev, rev].map((r) => (r === undefined ? undefined : extract(r)));
  try {
    const sides: Side[] = [];
    for (const t of trees) {
      const dir = t?.dir ?? root;
      let h: H;
      try {
        h = (await import(pathToFileURL(join(dir, 'scripts', 'bench', 'harness.ts')).href)) as H;
      } catch (e) {
        for (const x of trees) if (x) rmSync(x.dir, { recursive: true, force: true });
        refuse(
          `${t?.commit.slice(0, 12) ?? 'this tree'} has not the datapath layout the harness needs: ${(e as Error).message.split('\n')[0]}`,
        );
      }
      sides.push({ name: t ? t.commit.slice(0, 12) : 'this tree', dir, h });
    }
    if (sides[0].name === sides[1].name) sides[1].name += "'";
    const head = spawnSync('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: root }).stdout;
    const a = trees[0]
      ? sides[0].name
      : `this tree (HEAD ${String(head).trim()}${dirty() ? ' + changes' : ''})`;
    console.log(`kubetun datapath A/B: A = ${a}, B = ${sides[1].name}`);
    for (const t of trees) {
      if (t?.shimmed) {
        console.log(
          `(${t.commit.slice(0, 12)} predates the layered datapath: read through re-exports at state/datapath.ts and state/reasons.ts)`,
        );
      }
    }
    console.log(
      `node ${process.version}, ${cpus()[0]?.model ?? '?'}; load average ${load()} on ${cpus().length} CPUs\n`,
    );
    const scales = o.quick ? [1_000] : [1_000, 100_000];
    const wall = wallAB(sides, o, scales);
    if (o.count) await countAB(sides, o, wall);
  } finally {
    for (const t of trees) if (t) rmSync(t.dir, { recursive: true, force: true });
  }
}

function dirty(): boolean {
  const r = spawnSync('git', ['status', '--porcelain', '--untracked-files=no'], { cwd: root });
  return String(r.stdout).trim() !== '';
}

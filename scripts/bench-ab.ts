// The per-packet program of this tree against the same program at a git revision, in one
// process, alternating: `npm run bench:datapath -- --against REV [--rounds N] [--quick]`.
//
// Runs of bench-datapath in separate processes differ by up to 2x on a shared 2-core machine
// (frequency, neighbours, where the tables land), far more than the few percent a change to the
// hot path costs. Here both programs run in the same process on the same packets: the revision
// is extracted with `git archive` into a temporary directory, this tree's scripts/bench/harness.ts
// is copied into it, and each side's harness is imported from its own tree — so each side has its
// own loop functions (their own inline caches) over its own program. The sides then alternate
// A B B A … for N rounds; medians are printed side by side with the ratio. Prints; asserts
// nothing.

import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type * as Harness from './bench/harness.ts';

type H = typeof Harness;

const here = dirname(fileURLToPath(import.meta.url));
const root = dirname(here);

/** One line, exit 2: what the user should fix. */
function refuse(msg: string): never {
  process.stderr.write(`bench:datapath --against: ${msg}\n`);
  process.exit(2);
}

/** REV's tree, extracted into a fresh directory with this tree's harness and node_modules. */
function extract(rev: string): { dir: string; commit: string } {
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
  return { dir, commit };
}

interface Side {
  name: string;
  h: H;
}

interface Case {
  label: string;
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
    const syns = h.packetSet(batch, (b, off, f) =>
      h.writeTcp(b, off, h.clientOf(f), h.vipOf((f * 7919) % services), h.sportOf(f), 80, h.SYN),
    );
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
  return [
    {
      label: `${services} services, established DNAT`,
      run: (s) =>
        timed(
          s,
          'TX_DNAT',
          () => sides[s].h.runSet(st[s].dp, st[s].orig, rounds, sides[s].h.NOW),
          rounds * FLOWS,
        ),
    },
    {
      label: `${services} services, established revNAT`,
      run: (s) =>
        timed(
          s,
          'TX_REVNAT',
          () => sides[s].h.runSet(st[s].dp, st[s].reply, rounds, sides[s].h.NOW),
          rounds * FLOWS,
        ),
    },
    {
      label: `${services} services, new flows (SYN)`,
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

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

export async function benchAgainst(rev: string, nRounds: number, quick: boolean): Promise<void> {
  const { dir, commit } = extract(rev);
  try {
    let b: H;
    try {
      b = (await import(pathToFileURL(join(dir, 'scripts', 'bench', 'harness.ts')).href)) as H;
    } catch (e) {
      refuse(
        `${commit.slice(0, 12)} has not the datapath layout the harness needs: ${(e as Error).message.split('\n')[0]}`,
      );
    }
    const a = (await import(pathToFileURL(join(here, 'bench', 'harness.ts')).href)) as H;
    const sides: Side[] = [
      { name: 'this tree', h: a },
      { name: commit.slice(0, 12), h: b },
    ];
    const head = spawnSync('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: root }).stdout;
    console.log(
      `kubetun datapath A/B: this tree (HEAD ${String(head).trim()}${dirty() ? ' + changes' : ''}) against ${commit.slice(0, 12)}, one process, ${nRounds} rounds alternating A B B A`,
    );
    console.log(
      `node ${process.version}, ${cpus()[0]?.model ?? '?'}; load average ${loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')} on ${cpus().length} CPUs; Mpps per CPU-second, harness copy subtracted\n`,
    );
    const est = quick ? 1_000_000 : 4_000_000;
    const batch = quick ? 65_536 : 131_072;
    const scales = quick ? [1_000] : [1_000, 100_000];
    const rows: string[] = [];
    for (const services of scales) {
      process.stderr.write(`  … ${services} services: seeding both sides\n`);
      for (const c of casesFor(sides, services, est, batch)) {
        const got: number[][] = [[], []];
        for (let r = 0; r < nRounds; r++) {
          const order = r % 2 ? [1, 0] : [0, 1];
          for (const s of order) got[s].push(c.run(s));
        }
        const [ma, mb] = got.map(median);
        const spread = (xs: number[]) =>
          `${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)}`;
        rows.push(
          `${c.label.padEnd(40)} | ${ma.toFixed(2).padStart(6)} (${spread(got[0])}) | ${mb.toFixed(2).padStart(6)} (${spread(got[1])}) | ${((ma / mb - 1) * 100).toFixed(1).padStart(6)}%`,
        );
        process.stderr.write(`  … ${c.label}\n`);
      }
    }
    console.log(
      `${'case'.padEnd(40)} | this tree, Mpps median (min–max) | ${sides[1].name}, Mpps median (min–max) | change`,
    );
    for (const r of rows) console.log(r);
    console.log(
      `\nload average after ${loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}; change = this tree / ${sides[1].name} - 1 (negative: this tree is slower)`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function dirty(): boolean {
  const r = spawnSync('git', ['status', '--porcelain', '--untracked-files=no'], { cwd: root });
  return String(r.stdout).trim() !== '';
}

// Instructions per packet of dpProcess, counted by callgrind: the repeatable half of
// `npm run bench:datapath -- --against REV --count instructions` and of `-- --ring --count
// instructions`. Wall time on this 2-vCPU VM with neighbours spreads by 2x between runs of the
// same code; an instruction count does not depend on the load, the clock or the neighbours, so
// it resolves the 2% that issue 20 and issue 16 ask about. It does not see cache misses or
// branch mispredictions: it says how much work the program does, not how long that work takes.
//
// How (and why this way):
//   - callgrind, not lackey or exp-bbv: it counts the same Ir several times faster than lackey,
//     and can dump-and-zero its counters while the program runs, which exp-bbv cannot.
//   - Set-up is left out by marks, not by subtracting an N-packet run from a 2N one: callgrind
//     cannot toggle collection on JIT code (V8's functions have no symbols for it) and client
//     requests need native code that both trees would have to build, but --dump-before=FN
//     dumps and zeroes the counters whenever FN is entered. FN is libc's getpriority, which
//     node never calls on its own (checked: one dump per os.getPriority() call, none else), so
//     os.getPriority() in the child is a free client request. One run then shows every
//     segment: the JIT settling is visible (segments equal to the instruction once it has),
//     where N/2N would need two runs per figure and hide an unsettled JIT in the difference.
//   - Each side, scenario and ring mode in a process of its own (bench/count-child.ts).
//   - V8 made deterministic: --single-threaded (no background compile or GC threads: their
//     work would land in whichever segment it happens to run in), --predictable (no time-based
//     GC or tiering), --random-seed (Math.random seeds the maps' hash tables: fixed placement).
//   - --smc-check=all-non-file (valgrind's default on amd64, written out): V8's code lives in
//     anonymous memory, which it checks; `all` also watches node's own file-backed code, which
//     never changes — same counts, 15% more time when measured.

import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import {
  callgrindIr,
  dumpNumber,
  type PerPacket,
  pctChange,
  perPacket,
  segments,
} from './callgrind.ts';
import type { RingMode } from './harness.ts';

const here = dirname(fileURLToPath(import.meta.url));
const root = dirname(dirname(here));

export type Scenario = 'dnat' | 'revnat' | 'new';
export const SCENARIO_LABEL: Record<Scenario, string> = {
  dnat: 'established DNAT',
  revnat: 'established revNAT',
  new: 'new flows (SYN)',
};

/** One program to count: a tree (its scripts/bench/harness.ts) and an event-ring mode. */
export interface CountSide {
  name: string;
  /** the tree's root directory */
  dir: string;
  ring: RingMode;
}

export interface CountJob {
  side: CountSide;
  scenario: Scenario;
  services: number;
}

export interface CountOptions {
  /** valgrind processes at once */
  jobs: number;
  /** unmeasured rounds before the first mark */
  warmup: number;
  /** measured copy/run pairs (the figure takes the last 3) */
  segments: number;
}

export const COUNT_DEFAULTS: CountOptions = { jobs: 2, warmup: 6, segments: 4 };

/** Null when valgrind can run, else what to do about it (one line). */
export function valgrindMissing(): string | null {
  const r = spawnSync('valgrind', ['--version'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return 'valgrind not found: install it (apt-get install valgrind)';
  return null;
}

function valgrindArgs(outDir: string, job: CountJob, o: CountOptions): string[] {
  return [
    '--tool=callgrind',
    '--smc-check=all-non-file',
    '--dump-before=getpriority',
    '--dump-instr=no',
    '--dump-line=no',
    `--callgrind-out-file=${join(outDir, 'callgrind.out.%p')}`,
    `--log-file=${join(outDir, 'valgrind.log')}`,
    ...childArgs(job, o.warmup, o.segments),
  ];
}

function childArgs(job: CountJob, warmup: number, segs: number): string[] {
  return [
    process.execPath,
    '--single-threaded',
    '--predictable',
    '--random-seed=42',
    '--import',
    'tsx',
    join(here, 'count-child.ts'),
    pathToFileURL(join(job.side.dir, 'scripts', 'bench', 'harness.ts')).href,
    job.scenario,
    String(job.services),
    job.side.ring,
    String(warmup),
    String(segs),
  ];
}

/**
 * Each side's child once, natively, with 10 services and nothing measured, before any callgrind
 * run: it fails fast (a revision the harness cannot read, a ring mode a revision lacks), and it
 * fills tsx's transform cache. Without it the first counted process of an extracted revision
 * compiled its files through esbuild, whose helper thread then woke now and then during the
 * measured segments: an A/A run put that side 0.29% apart, its segments ±0.08% (every later
 * process, cache warm, equal to the instruction).
 */
function prime(jobs: readonly CountJob[]): void {
  const seen = new Set<string>();
  for (const j of jobs) {
    const key = `${j.side.dir}\0${j.side.ring}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const [node, ...args] = childArgs({ ...j, scenario: 'dnat', services: 10 }, 0, 0);
    const r = spawnSync(node, args, { cwd: root, encoding: 'utf8' });
    if (r.status !== 0) {
      const why = r.stderr.split('\n').find((l) => /Error|error:/.test(l)) ?? r.stderr.trim();
      throw new Error(`${jobName(j)}: ${why.slice(0, 300)}`);
    }
  }
}

/** Runs one job under callgrind; resolves to its figure, rejects with the child's own error. */
function runJob(job: CountJob, o: CountOptions): Promise<PerPacket> {
  const outDir = mkdtempSync(join(tmpdir(), 'kubetun-count-'));
  return new Promise<PerPacket>((resolve, reject) => {
    const child = spawn('valgrind', valgrindArgs(outDir, job, o), {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      err += d;
    });
    child.on('error', reject);
    child.on('close', (code) => {
      try {
        if (code !== 0) {
          const why = err.split('\n').find((l) => /Error|error:/.test(l)) ?? err.trim();
          throw new Error(`exit ${code}: ${why.slice(0, 300)}`);
        }
        const { labels, packets } = JSON.parse(out.trim().split('\n').pop() ?? '') as {
          labels: string[];
          packets: number;
        };
        const ir = new Map<number, number>();
        for (const f of readdirSync(outDir)) {
          const k = dumpNumber(f, child.pid ?? -1);
          if (k > 0) ir.set(k, callgrindIr(readFileSync(join(outDir, f), 'utf8')));
        }
        resolve(perPacket(segments(ir, labels), packets));
      } catch (e) {
        reject(e);
      } finally {
        rmSync(outDir, { recursive: true, force: true });
      }
    });
  });
}

export function jobName(j: CountJob): string {
  const ring = j.side.ring === 'off' ? '' : `, ring ${j.side.ring}`;
  return `${j.side.name}${ring}: ${j.services} services, ${SCENARIO_LABEL[j.scenario]}`;
}

/**
 * Runs every job, `o.jobs` at a time, printing progress on stderr; the figures come back in
 * the order of `jobs`. A job that fails stops the count (a figure missing from an A/B would be
 * misread): no new job starts, the running ones finish, then the first failure is thrown.
 */
export async function countAll(jobs: readonly CountJob[], o: CountOptions): Promise<PerPacket[]> {
  prime(jobs);
  const res: PerPacket[] = new Array(jobs.length);
  const t0 = Date.now();
  let next = 0;
  let done = 0;
  let failed: Error | null = null;
  const worker = async (): Promise<void> => {
    while (next < jobs.length && failed === null) {
      const k = next++;
      try {
        res[k] = await runJob(jobs[k], o);
      } catch (e) {
        failed ??= new Error(`${jobName(jobs[k])}: ${(e as Error).message}`);
        return;
      }
      done++;
      process.stderr.write(
        `  … [${done}/${jobs.length}, ${((Date.now() - t0) / 1000).toFixed(0)} s] ${jobName(jobs[k])}: ${res[k].ir.toFixed(1)} instructions/packet\n`,
      );
    }
  };
  // every started job finishes before a failure is reported: no valgrind is left running
  await Promise.all(Array.from({ length: Math.max(1, Math.min(o.jobs, jobs.length)) }, worker));
  if (failed) throw failed;
  return res;
}

/**
 * The segments' spread, printed only past 0.01%: below it (a few thousand instructions in a
 * segment of 200 million, seen in settled runs) the JIT has settled.
 */
export function spreadNote(p: PerPacket): string {
  return p.spread <= 1e-4 ? '' : ` (segments ±${((p.spread / 2) * 100).toFixed(3)}%)`;
}

/**
 * The event ring's cost in instructions (issue 20): this tree with nobody listening, with a
 * subscriber whose filter matches nothing, with one taking every event, and with tap's capture,
 * each scenario at 1000 services (the ring's work per packet does not depend on the services).
 */
export async function countRing(quick: boolean, jobs: number): Promise<void> {
  const modes: RingMode[] = ['off', 'none', 'all', 'capture'];
  const scenarios: Scenario[] = quick ? ['dnat'] : ['dnat', 'revnat', 'new'];
  const list: CountJob[] = [];
  for (const scenario of scenarios) {
    for (const ring of modes) {
      list.push({ side: { name: 'this tree', dir: root, ring }, scenario, services: 1000 });
    }
  }
  list.push({ ...list[0] }); // ring off, DNAT, once more: the count's own noise
  const o = { ...COUNT_DEFAULTS, jobs };
  const t0 = Date.now();
  console.log(
    `\nevent ring, instruction count (callgrind, ${list.length} processes, ${jobs} at a time; load average before ${loadText()})`,
  );
  const got = await countAll(list, o);
  console.log(
    '1000 services              | off, instr/packet | filter matching nothing | every event      | every event + capture',
  );
  scenarios.forEach((sc, i) => {
    const row = got.slice(i * modes.length, (i + 1) * modes.length);
    const cell = (p: PerPacket) =>
      `${p.ir.toFixed(1)} (${pctChange(p.ir, row[0].ir) >= 0 ? '+' : ''}${pctChange(p.ir, row[0].ir).toFixed(1)}%)${spreadNote(p)}`;
    console.log(
      `${SCENARIO_LABEL[sc].padEnd(26)} | ${`${row[0].ir.toFixed(1)}${spreadNote(row[0])}`.padStart(17)} | ${cell(row[1]).padStart(23)} | ${cell(row[2]).padStart(16)} | ${cell(row[3])}`,
    );
  });
  const again = got[got.length - 1];
  console.log(
    `noise of the count: ring off, established DNAT, run twice in two processes: ${got[0].ir.toFixed(1)} and ${again.ir.toFixed(1)} (${pctChange(again.ir, got[0].ir).toFixed(3)}%)`,
  );
  console.log(
    `${((Date.now() - t0) / 1000).toFixed(0)} s for the count; load average after ${loadText()} (the counts do not depend on it). The ring off against the program without it: --against 53e461b (the commit before the ring) --count instructions`,
  );
}

function loadText(): string {
  return loadavg()
    .map((l) => l.toFixed(1))
    .join(' ');
}

// One side of the instruction-count A/B (bench/count.ts), run under callgrind: one tree's
// harness, one scenario, one service count, one event-ring mode, in a process of its own (the
// JIT's type feedback from one scenario never shapes another's code).
//
//   tsx scripts/bench/count-child.ts HARNESS_URL dnat|revnat|new SERVICES RING WARMUP SEGMENTS
//
// Set-up and warm-up first, then SEGMENTS pairs of segments, each ended by a mark
// (os.getPriority, which callgrind's --dump-before=getpriority turns into a dump): 'copy' is
// one round of the harness's restore loop alone, 'run' one round of the same loop through
// dpProcess. Their difference is the program's instructions; set-up (node and tsx start, map
// building, conntrack seeding, JIT warm-up) falls in segments nobody compares. Prints one JSON
// line: the label of each mark in order and the packets per segment (bench/callgrind.ts reads
// them back). The same fixed packets, flows and seeds on every run, so that a run is repeatable
// to the instruction (the parent also fixes V8's random seed: the maps' hash seeds).

import { getPriority } from 'node:os';
import type * as Harness from './harness.ts';

type H = typeof Harness;

const [harnessUrl, scenario, servicesArg, ringArg, warmArg, segArg] = process.argv.slice(2);
const h = (await import(harnessUrl)) as H;
// This side's own V8 tuning (the agent calls it; a tree without it runs with V8's defaults).
try {
  const tune = (await import(new URL('../../src/datapath/tune.ts', harnessUrl).href)) as {
    dpTuneV8?: () => void;
  };
  tune.dpTuneV8?.();
} catch {
  // no src/datapath/tune.ts in that tree
}

const services = Number(servicesArg);
const ring = ringArg as Harness.RingMode;
const warmup = Number(warmArg);
const segs = Number(segArg);
/** as bench-ab's wall-time cases: 65536 flows over a conntrack of 262144 */
const FLOWS = 65_536;
const CT = 262_144;
const SEED = 1;

const labels: string[] = [];
function mark(label: string): void {
  labels.push(label);
  getPriority(0);
}

interface Run {
  /** before each measured round, outside the segments (new flows: empty the conntrack) */
  prep: () => void;
  run: () => number;
  copy: () => number;
  expect: string;
  packets: number;
  dp: Harness.Datapath;
}

function setUp(): Run {
  if (scenario === 'new') {
    const dp = h.datapathFor(services, FLOWS * 2);
    const syns = h.synSet(services, FLOWS);
    return {
      prep: () => {
        dp.ct.clear();
        dp.rng.reseed(SEED); // every round draws the same backends: rounds equal to the instruction
      },
      run: () => h.runSet(dp, syns, 1, h.NOW),
      copy: () => h.runCopyOnly(syns, 1),
      expect: 'TX_DNAT_NEW',
      packets: FLOWS,
      dp,
    };
  }
  const dp = h.datapathFor(services, CT);
  h.runSet(dp, h.flowSet(services, FLOWS, h.SYN), 1, h.NOW); // the flows, created
  const ps =
    scenario === 'dnat' ? h.flowSet(services, FLOWS, h.ACK) : h.replySet(dp, services, FLOWS);
  return {
    prep: () => {},
    run: () => h.runSet(dp, ps, 1, h.NOW),
    copy: () => h.runCopyOnly(ps, 1),
    expect: scenario === 'dnat' ? 'TX_DNAT' : 'TX_REVNAT',
    packets: FLOWS,
    dp,
  };
}

if (!['dnat', 'revnat', 'new'].includes(scenario)) throw new Error(`scenario ${scenario}?`);
const r = setUp();
h.ringOn(r.dp, ring);
for (let w = 0; w < warmup; w++) {
  r.prep();
  h.checkAll(r.dp, r.expect, r.run(), r.packets);
  r.copy();
}
for (let s = 0; s < segs; s++) {
  r.prep();
  mark('prep');
  r.copy();
  mark('copy');
  const tx = r.run();
  mark('run');
  h.checkAll(r.dp, r.expect, tx, r.packets);
}
process.stdout.write(`${JSON.stringify({ labels, packets: r.packets })}\n`);

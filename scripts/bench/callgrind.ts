// The pure part of the instruction-count A/B (bench/count.ts): reading callgrind's dump files
// and turning the segments a child marked into instructions per packet. No I/O here, so it is
// tested offline (test/bench/callgrind.test.ts).
//
// A child (bench/count-child.ts) runs under `valgrind --tool=callgrind --dump-before=getpriority`
// and calls os.getPriority() between segments: each call makes callgrind write the instructions
// executed since the previous one into callgrind.out.<pid>.<k> (k = 1, 2, …) and start again
// from zero. The child prints the label of each mark, in order: dump k is the segment that
// ended at mark k. Labels: 'copy' (the harness's restore loop alone), 'run' (the same loop with
// dpProcess), anything else (set-up, warm-up, clearing the conntrack) is not compared.

/** Ir (instructions executed) of one callgrind dump: its `summary:` line, else `totals:`. */
export function callgrindIr(text: string): number {
  const events = /^events:\s*(.+)$/m.exec(text)?.[1].trim().split(/\s+/) ?? ['Ir'];
  const col = events.indexOf('Ir');
  if (col < 0) throw new Error(`callgrind dump without an Ir column (events: ${events.join(' ')})`);
  for (const key of ['summary', 'totals']) {
    const m = new RegExp(`^${key}:\\s*([\\d\\s]+)$`, 'm').exec(text);
    if (m) {
      const v = Number(m[1].trim().split(/\s+/)[col]);
      if (Number.isSafeInteger(v)) return v;
    }
  }
  throw new Error('callgrind dump without a summary: or totals: line');
}

/** k of a dump file `<prefix>.<pid>.<k>`; 0 for the final dump (no suffix) or another file. */
export function dumpNumber(file: string, pid: number): number {
  const m = new RegExp(`\\.${pid}\\.(\\d+)$`).exec(file);
  return m ? Number(m[1]) : 0;
}

/** The Ir of each 'copy' and 'run' segment, in order: dump k (1-based) ended at mark k-1. */
export function segments(
  irByDump: ReadonlyMap<number, number>,
  labels: readonly string[],
): { copy: number[]; run: number[] } {
  const copy: number[] = [];
  const run: number[] = [];
  labels.forEach((label, i) => {
    const ir = irByDump.get(i + 1);
    if (ir === undefined) throw new Error(`callgrind wrote no dump for mark ${i + 1} (${label})`);
    if (label === 'copy') copy.push(ir);
    else if (label === 'run') run.push(ir);
  });
  return { copy, run };
}

export interface PerPacket {
  /** instructions per packet of dpProcess: (run - copy) / packets, medians of the last segments */
  ir: number;
  /** (max - min) / median of the last `last` run segments: 0 once the JIT has settled */
  spread: number;
  /** how many segments the figure was taken over */
  used: number;
}

/**
 * Instructions per packet from the measured segments: the median of the last `last` run
 * segments minus the median of the last `last` copy segments, over the packets of one segment.
 * The first segments are left out: the JIT may still tier up there (seen: +0.27% in the first
 * segment after 8 warm-up rounds, then every segment equal to the instruction).
 */
export function perPacket(
  seg: { copy: readonly number[]; run: readonly number[] },
  packets: number,
  last = 3,
): PerPacket {
  if (!(packets > 0)) throw new RangeError(`perPacket: packets must be > 0, got ${packets}`);
  const n = Math.min(last, seg.run.length, seg.copy.length);
  if (n < 1) throw new Error('perPacket: no measured segment');
  const run = seg.run.slice(-n);
  const copy = seg.copy.slice(-n);
  const mr = median(run);
  const spread = mr === 0 ? 0 : (Math.max(...run) - Math.min(...run)) / mr;
  return { ir: (mr - median(copy)) / packets, spread, used: n };
}

/** a / b - 1, in percent (positive: a executes more instructions than b). */
export function pctChange(a: number, b: number): number {
  return (a / b - 1) * 100;
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

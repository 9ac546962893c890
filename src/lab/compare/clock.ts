// The comparison's clock. Attempts are timed on this machine (their time windows pick packets,
// run.ts pickPackets); packets are timed by the clock of the machine that captured them. In the
// namespace lab the two are one clock. A VM keeps its own, which may be anywhere (no NTP on the
// lab's isolated network; a software-emulated guest drifts): its offset is measured, and every
// packet it captured is moved onto this machine's clock (capture.ts stopCaptures).
//
// The measurement: one session to the machine that prints its clock each time it reads a line;
// this side notes the time before writing the line and after the answer. The far clock was read
// between the two, so offset = far − midpoint, within ± half the round trip; the best of a few
// round trips (the shortest) is kept. Opening the session (ssh, sudo) is not in any of them.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { LabError } from '../error.ts';

/** how far (ms) the two clocks may part before the anchor is taken again (reading jitter) */
const STEP_MS = 5;
/** the wall clock at performance.now()'s zero, ms: moved when the wall clock is stepped */
let wallAtZero = performance.timeOrigin;

/**
 * Wall-clock µs (the capture clock: tcpdump's timestamps are the kernel's wall clock), finer
 * than Date.now()'s milliseconds: the monotonic clock from a wall-clock anchor. The anchor is
 * taken again whenever the two part by more than STEP_MS — the wall clock was
 * stepped since the process started (a machine restored from a snapshot, a time sync), and a
 * process that kept its start's anchor would time its attempts hundreds of ms away from the
 * packets they sent (a comparison that picks packets by time window then finds none).
 */
export function nowUs(): number {
  const mono = performance.now();
  const wall = Date.now();
  const est = wallAtZero + mono;
  if (est < wall - STEP_MS || est > wall + 1 + STEP_MS) wallAtZero = wall - mono;
  return Math.floor((wallAtZero + mono) * 1000);
}

export interface ClockOffset {
  /** the far clock minus this one, µs */
  offsetUs: number;
  /** the round trip of the sample kept: the offset is right within half of it */
  rttUs: number;
}

/** What runs on the far side: `ready`, then its clock in ns for every line it reads. */
export const CLOCK_SCRIPT = 'echo ready; while read -r _; do date +%s%N; done';

const ROUNDS = 5;

/** argv: runs CLOCK_SCRIPT where the clock is (e.g. inNs(node, ['sh', '-c', CLOCK_SCRIPT])). */
export async function measureClockOffset(
  argv: string[],
  what: string,
  timeoutMs = 120_000,
): Promise<ClockOffset> {
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d) => {
    err += d;
  });
  child.stdin.on('error', () => {});
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async (): Promise<string> => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new LabError(`${what}: no answer in ${timeoutMs} ms`)),
        timeoutMs,
      );
    });
    try {
      const r = await Promise.race([lines.next(), late]);
      if (r.done) throw new LabError(`${what}: the clock session ended: ${err.trim()}`);
      return r.value.trim();
    } finally {
      clearTimeout(timer);
    }
  };
  try {
    if ((await next()) !== 'ready') throw new LabError(`${what}: unexpected answer: ${err.trim()}`);
    let best: ClockOffset | undefined;
    for (let i = 0; i < ROUNDS; i++) {
      const t0 = nowUs();
      child.stdin.write('\n');
      const raw = await next();
      const t1 = nowUs();
      if (!/^\d+$/.test(raw)) throw new LabError(`${what}: "${raw}" is not a clock reading`);
      const far = Number(BigInt(raw) / 1000n);
      const sample = { offsetUs: far - Math.round((t0 + t1) / 2), rttUs: t1 - t0 };
      if (!best || sample.rttUs < best.rttUs) best = sample;
    }
    return best!;
  } finally {
    child.stdin.end();
    child.kill('SIGTERM');
  }
}

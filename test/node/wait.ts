// Process and polling helpers shared by the node tests that start real processes.
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

/** True while `pid` exists and is not a zombie (a killed child not yet reaped counts as gone). */
export function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** Poll `cond` every 50 ms for up to 10 s; throws naming `what` if it never holds. */
export async function waitFor(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (cond()) return;
    await sleep(50);
  }
  throw new Error(`gave up waiting for ${what}`);
}

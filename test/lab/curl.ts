// Many curls from a lab namespace, each a new connection — the one way the root lab tests ask a
// Service who answers. Each answer is curl's output, or "curl exit N" when curl failed
// (28: timed out, 7: refused).
//
// The time limit: a connection that must answer gets ANSWER_S, long enough for two lost SYNs
// (retransmitted at 1 s and 3 s) or a loaded machine's stall — at 1-2 s such a stall failed CI
// checks that had nothing to do with what they checked. A connection that must be dropped is
// waited for DROPPED_S, so that checking a drop stays quick.
import { spawnSync } from 'node:child_process';

export const ANSWER_S = 5;
export const DROPPED_S = 2;

/** n curls of url from namespace ns: one line per curl, its body or "curl exit N". */
export function curlMany(ns: string, url: string, n: number, limitS = ANSWER_S): string[] {
  const script = `for i in $(seq ${n}); do curl -sS -m ${limitS} '${url}' 2>/dev/null || echo "curl exit $?"; done`;
  const r = spawnSync('ip', ['netns', 'exec', ns, 'sh', '-c', script], {
    encoding: 'utf8',
    timeout: 30_000 + n * limitS * 1000,
  });
  return r.stdout.trim().split('\n');
}

// What happens when the agent dies.
//
// The datapath lives in this process: once it is gone, every packet the tc hooks redirect into
// the TUN is lost (the TUN disappears with its last fd; mirred to a vanished device drops), and
// that is ALL pod traffic, not only traffic to Services. kube-proxy's failure mode is gentler
// (its rules stay in the kernel), and we cannot keep the program running without the process,
// so the decision is: FAIL OPEN. Service VIPs stop answering, everything else keeps flowing.
//
// - A watchdog (a tiny /bin/sh process in its own session, so signals aimed at the agent's
//   process group do not reach it) reads undo commands from a pipe as the agent installs
//   steering. When the pipe hits EOF without the word "clean" first — the agent died, however
//   it died, SIGKILL and OOM included — it replays the undo list, last first: tc redirects and
//   the service route are removed and sysctls restored, so pod-to-pod and pod-to-outside traffic
//   goes back to plain kernel routing within milliseconds.
// - A state file next to the control socket holds the same undo list (and the watchdog's pid).
//   A restarted `kubetun run` waits for a still-running watchdog, replays the list if the file is
//   still there (the watchdog died too), sweeps filters with kubetun's prefs, and installs
//   afresh: installation is idempotent and a restart always starts from a clean node. Its undo
//   commands run as root, so the file is trusted only if it is ours and nobody else could have
//   written it or its directory (private-dir.ts); otherwise nothing in it runs.
// - Conntrack state is not saved: flows open across a restart are picked up as new flows (a TCP
//   mid-stream packet is tracked again, a backend may be re-chosen).
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { privateFileProblem } from './private-dir.ts';
import { shQuote, tryRun } from './sh.ts';

const WATCHDOG_SCRIPT = `
undo=''
while IFS= read -r line; do
  case $line in
    clean) exit 0 ;;
    +*) undo="\${line#+}
$undo" ;;
  esac
done
printf '%s\\n' "$undo" | while IFS= read -r cmd; do
  [ -n "$cmd" ] && eval "$cmd" >/dev/null 2>&1
done
exit 0
`;

export class Watchdog {
  readonly pid: number;
  private readonly child: ChildProcess;

  private constructor(child: ChildProcess) {
    this.child = child;
    this.pid = child.pid ?? -1;
  }

  static start(): Watchdog {
    const child = spawn('/bin/sh', ['-c', WATCHDOG_SCRIPT], {
      detached: true,
      stdio: ['pipe', 'ignore', 'ignore'],
    });
    child.unref();
    child.stdin!.on('error', () => {}); // the watchdog died: nothing to report to
    (child.stdin as unknown as { unref?: () => void }).unref?.();
    return new Watchdog(child);
  }

  add(argv: readonly string[]): void {
    this.child.stdin!.write(`+${argv.map(shQuote).join(' ')}\n`);
  }

  /** The agent cleaned up itself: the watchdog exits without touching anything. */
  disarm(): void {
    this.child.stdin!.end('clean\n');
  }
}

export interface SavedState {
  pid: number;
  watchdogPid: number;
  tun: string;
  undo: string[][];
}

export function statePathFor(ctlSocket: string): string {
  return `${ctlSocket.replace(/\.sock$/, '')}.state.json`;
}

export function writeState(path: string, s: SavedState): void {
  writeFileSync(`${path}.tmp`, `${JSON.stringify(s)}\n`, { mode: 0o600 });
  renameSync(`${path}.tmp`, path); // never a half-written file after a crash
}

export function removeState(path: string): void {
  if (existsSync(path)) unlinkSync(path);
}

/** Running (not a zombie: a finished watchdog may wait a while for its new parent to reap it). */
function alive(pid: number): boolean {
  if (pid <= 0) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

export interface Recovered {
  prevPid: number;
  steps: number;
  failed: number;
  /** set when the file was not trusted: why (its undo commands were not run) */
  refused?: string;
}

/**
 * Undoes what a previous run recorded, after its watchdog (if still running) has finished.
 * Returns what was found, for the log; undefined when there was no state file. The undo
 * commands run as root, so a file that is not ours, or that others could have written (its
 * mode, its directory's), is refused: nothing in it runs, and it stays for the operator to see.
 */
export async function recoverState(path: string, waitMs = 5000): Promise<Recovered | undefined> {
  if (!existsSync(path)) return undefined;
  const refused = privateFileProblem(path);
  if (refused !== undefined) return { prevPid: 0, steps: 0, failed: 0, refused };
  let s: SavedState;
  try {
    s = JSON.parse(readFileSync(path, 'utf8')) as SavedState;
  } catch {
    removeState(path); // unreadable: the sweep of stale filters still runs
    return { prevPid: 0, steps: 0, failed: 0 };
  }
  for (let t = 0; t < waitMs && alive(s.watchdogPid); t += 50) await sleep(50);
  let failed = 0;
  for (const argv of [...s.undo].reverse()) if (!tryRun(argv).ok) failed++;
  removeState(path);
  return { prevPid: s.pid, steps: s.undo.length, failed };
}

// What happens when the agent dies.
//
// The datapath lives in this process: once it is gone, every packet the tc hooks redirect into
// the TUN is lost (the TUN disappears with its last fd; mirred to a vanished device drops):
// Service traffic, and every reply from an endpoint's address and port, direct ones too. kube-proxy's failure mode is gentler
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
// - A restart within the grace window (--restart-grace, default 15 s) loses nothing: the maps are
//   pinned in a file (pin.ts) and the TUN is persistent (TUNSETPERSIST), so while no agent runs
//   the redirects stay and their packets are dropped on their way into the TUN nobody reads
//   (routed ones counted in its tx_dropped, tc-redirected ones at the redirect; TCP
//   retransmits). The watchdog waits out the window; a restarted agent claims the dead one's
//   LEASE (an atomic rename of a file only that run created), the watchdog sees the lease gone
//   and exits without undoing anything, and the new agent attaches to the maps and the TUN and
//   forwards before it reloads anything: established flows continue with their conntrack
//   entries. If nobody claims the lease in the window, the watchdog takes it (the same rename,
//   so exactly one of them wins) and fails the node open as above; its undo list also deletes
//   the persistent TUN and the pinned maps.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { privateFileProblem } from './private-dir.ts';
import { shQuote, shTry } from '../sh.ts';

// $1: the lease file ('' = fail open at once), $2: the grace window in tenths of a second.
const WATCHDOG_SCRIPT = `
undo=''
while IFS= read -r line; do
  case $line in
    clean) exit 0 ;;
    +*) undo="\${line#+}
$undo" ;;
  esac
done
if [ -n "$1" ]; then
  i=0
  while [ "$i" -lt "$2" ]; do
    [ -e "$1" ] || exit 0
    sleep 0.1
    i=$((i + 1))
  done
  mv -f "$1" "$1.expired" 2>/dev/null || exit 0
  rm -f "$1.expired"
fi
printf '%s\\n' "$undo" | while IFS= read -r cmd; do
  [ -n "$cmd" ] && eval "$cmd" >/dev/null 2>&1
done
exit 0
`;

/**
 * How long steering stays after the agent died, waiting for a restarted agent (ms). 15 s, not
 * the 5 s it was: a cold start of the agent (node + tsx) took up to 8.8 s from the kill on this
 * shared two-core machine at load 9-18 (npm run soak), 2.1-2.7 s in the lab at load ~6
 * (test/lab/supervisor.test.ts), and kubelet's first CrashLoopBackOff delay for a DaemonSet
 * agent that crashes again is 10 s. The price: an agent that never comes back leaves Service
 * traffic (and endpoints' replies) dark 15 s before the node fails open.
 */
export const DEFAULT_RESTART_GRACE_MS = 15_000;

export class Watchdog {
  readonly pid: number;
  private readonly child: ChildProcess;

  private constructor(child: ChildProcess) {
    this.child = child;
    this.pid = child.pid ?? -1;
  }

  /**
   * `lease`: a file this run created; while it exists after the agent died (for `graceMs`), the
   * watchdog waits for a restarted agent to claim it (claimLease) instead of failing open.
   */
  static start(lease = '', graceMs = 0): Watchdog {
    const tenths = String(Math.ceil(Math.max(graceMs, 0) / 100));
    const child = spawn('/bin/sh', ['-c', WATCHDOG_SCRIPT, 'sh', lease, tenths], {
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
  /** the run's lease file (claimLease), absent for a run without a grace window */
  lease?: string;
  /** the run's pinned maps (pin.ts) */
  pin?: string;
  /** pod interfaces it hooked (a taking-over agent does not hook them again) */
  hooked?: string[];
}

/** This run's lease file: unique per process, beside the state file. */
export function leasePathFor(statePath: string, pid = process.pid): string {
  return `${statePath.replace(/\.state\.json$/, '')}.lease.${pid}`;
}

/** Creates the lease the watchdog waits on after a crash. */
export function createLease(path: string): void {
  writeFileSync(path, `${process.pid}\n`, { mode: 0o600 });
}

/**
 * Takes the lease of a dead run (atomic rename: if its watchdog took it first, the node has
 * failed open and this returns false). The watchdog, seeing the lease gone, exits untouched.
 */
export function claimLease(lease: string): boolean {
  try {
    renameSync(lease, `${lease}.claimed.${process.pid}`);
    unlinkSync(`${lease}.claimed.${process.pid}`);
    return true;
  } catch {
    return false;
  }
}

/**
 * The dead run's state if it can be taken over: the file is trusted (as recoverState checks)
 * and names a lease and pinned maps. Reads only; claiming is claimLease's.
 */
export function readHandover(path: string): SavedState | undefined {
  if (!existsSync(path) || privateFileProblem(path) !== undefined) return undefined;
  try {
    const s = JSON.parse(readFileSync(path, 'utf8')) as SavedState;
    return s.lease && s.pin && existsSync(s.lease) && existsSync(s.pin) ? s : undefined;
  } catch {
    return undefined;
  }
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
  // A watchdog still in its grace window would replay the same list: take its lease first.
  if (s.lease) claimLease(s.lease);
  for (let t = 0; t < waitMs && alive(s.watchdogPid); t += 50) await sleep(50);
  let failed = 0;
  for (const argv of [...s.undo].reverse()) if (!shTry(argv).ok) failed++;
  removeState(path);
  return { prevPid: s.pid, steps: s.undo.length, failed };
}

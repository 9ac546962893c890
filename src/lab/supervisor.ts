// The namespace lab's supervisor of a node's kubetun: what systemd's Restart=on-failure is to
// the agent in the VMs (provision.ts systemdUnits). A crashed agent (killed by a signal, or any
// exit status but 0 and 2 — 2 is a user mistake, which a restart would only repeat: systemd's
// RestartPreventExitStatus) is started again after a backoff, 0.5 s doubling to 4 s: the first
// restart lands well inside the restart grace window (node/failure.ts, 15 s), so the new agent
// takes over the pinned maps and the TUN and every flow continues. More than MAX_RESTARTS
// restarts within WINDOW_S seconds and it gives up (systemd's StartLimitBurst): the node fails
// open when the grace window ends, as with no supervisor.
//
// A /bin/sh process, as the watchdog is (starts in milliseconds, nothing to load), in the node's
// namespace; the agent is its child. Every start, exit, restart and the give-up are logged in
// the agent's log ("supervisor: ...") and the supervisor's state is written to a status file
// beside the control socket, which `lab status` shows. Signals:
//   SIGTERM / SIGINT  passed on to the agent (a clean stop); the supervisor exits with it
//   SIGUSR1           hold: the agent's next exit is not restarted (`lab agent crash`: the node's
//                     kube-proxy stays down until someone restarts it)
import { readFileSync, rmSync } from 'node:fs';

export const MAX_RESTARTS = 5;
export const WINDOW_S = 60;

// $1 status file, $2 restarts allowed in $3 seconds; then the agent's argv.
const SUPERVISOR_SCRIPT = `
st=$1; max=$2; win=$3; shift 3
child=0; stop=0; hold=0; restarts=0; recent=''; last=''
trap 'stop=1; [ "$child" -gt 0 ] && kill -TERM "$child" 2>/dev/null' TERM INT
trap 'hold=1' USR1
say() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) supervisor[$$]: $*"; }
put() {
  printf '{"pid":%d,"agentPid":%d,"state":"%s","restarts":%d,"lastExit":"%s","at":%d}\\n' \\
    $$ "$child" "$1" "$restarts" "$last" "$(date +%s)" > "$st.tmp" && mv -f "$st.tmp" "$st"
}
delay=0.5
while :; do
  "$@" &
  child=$!
  put running
  say "agent pid $child started"
  while :; do
    wait "$child"; rc=$?
    kill -0 "$child" 2>/dev/null || break
  done
  if [ "$rc" -gt 128 ]; then last="signal $((rc - 128))"; else last="status $rc"; fi
  if [ "$stop" = 1 ] || [ "$rc" = 0 ]; then say "agent exited ($last), stopped"; rm -f "$st"; exit "$rc"; fi
  if [ "$hold" = 1 ]; then say "agent exited ($last), held: not restarting"; child=0; put held; exit "$rc"; fi
  if [ "$rc" = 2 ]; then say "agent exited ($last: a usage error), not restarting"; child=0; put failed; exit 2; fi
  now=$(date +%s); keep=''
  for t in $recent; do [ $((now - t)) -lt "$win" ] && keep="$keep $t"; done
  recent="$keep $now"
  n=0; for t in $recent; do n=$((n + 1)); done
  if [ "$n" -gt "$max" ]; then
    say "agent exited ($last): $((n - 1)) restarts in \${win}s, giving up"
    child=0; put gave-up; exit 1
  fi
  restarts=$((restarts + 1))
  say "agent exited ($last), restart $restarts in \${delay}s"
  child=0; put restarting
  sleep "$delay"
  [ "$stop" = 1 ] && { rm -f "$st"; exit "$rc"; }
  case $delay in 0.5) delay=1 ;; 1) delay=2 ;; *) delay=4 ;; esac
done
`;

/** The supervisor's argv around an agent's (run it in the node's namespace). */
export function supervisedArgv(statusFile: string, agentArgv: readonly string[]): string[] {
  return [
    '/bin/sh',
    '-c',
    SUPERVISOR_SCRIPT,
    'kubetun-supervisor',
    statusFile,
    String(MAX_RESTARTS),
    String(WINDOW_S),
    ...agentArgv,
  ];
}

/** The status file beside the node's control socket. */
export function supervisorFileFor(ctlSocket: string): string {
  return `${ctlSocket.replace(/\.sock$/, '')}.supervisor.json`;
}

export interface SupervisorStatus {
  pid: number;
  /** the agent it runs now, 0 between runs */
  agentPid: number;
  state: 'running' | 'restarting' | 'held' | 'failed' | 'gave-up';
  /** restarts since the supervisor started */
  restarts: number;
  /** how the last agent ended ("signal 9", "status 1"), '' before any */
  lastExit: string;
  /** unix seconds of the last change */
  at: number;
}

export function readSupervisor(ctlSocket: string): SupervisorStatus | undefined {
  try {
    return JSON.parse(readFileSync(supervisorFileFor(ctlSocket), 'utf8')) as SupervisorStatus;
  } catch {
    return undefined;
  }
}

/** SIGUSR1: the supervisor of `a` (if `a` is one) restarts its agent no more. */
export function holdSupervisor(a: { pid: number; ctlSocket?: string }): void {
  if (!a.ctlSocket || readSupervisor(a.ctlSocket)?.pid !== a.pid) return;
  try {
    process.kill(a.pid, 'SIGUSR1');
  } catch {
    // gone already
  }
}

export function removeSupervisorFile(ctlSocket: string): void {
  rmSync(supervisorFileFor(ctlSocket), { force: true });
}

/** One line for `lab status`: restarts and how the last run ended, or the give-up. */
export function supervisorLine(s: SupervisorStatus | undefined): string {
  if (!s) return '';
  if (s.state === 'gave-up')
    return `, supervisor GAVE UP after ${s.restarts} restarts (last: ${s.lastExit}; kubetun lab agent restart)`;
  if (s.state === 'held') return `, supervisor held (${s.lastExit}; kubetun lab agent restart)`;
  if (s.restarts === 0) return '';
  return `, ${s.restarts} restarts by the supervisor (last: ${s.lastExit})`;
}

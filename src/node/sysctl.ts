// Sysctls through /proc/sys, keyed in slash form (net/ipv4/conf/eth0.100/rp_filter) so that
// interface names with dots need no escaping. Undo steps are argv lists (see steering.ts) so the
// watchdog shell can replay them after the agent is gone.
import { readFileSync, writeFileSync } from 'node:fs';

export function sysctlPath(key: string): string {
  return `/proc/sys/${key}`;
}

export function sysctlRead(key: string): string {
  return readFileSync(sysctlPath(key), 'utf8').trim();
}

export function sysctlWrite(key: string, value: string): void {
  writeFileSync(sysctlPath(key), value);
}

/** argv that writes `value` to the sysctl, for undo lists (no procps needed). */
export function sysctlWriteArgv(key: string, value: string): string[] {
  return ['sh', '-c', 'printf %s "$1" > "$2"', 'sh', value, sysctlPath(key)];
}

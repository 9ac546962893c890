// The lab's memory between commands: which namespaces it made and which processes it started
// (PID plus start time, so a PID reused after a reboot or crash is never killed by mistake).
// Written before each thing is created, so `lab down` after a crash in the middle of `lab up`
// still finds everything.
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';

import { join } from 'node:path';
import { LAB_DIR, STATE_FILE } from './prefix.ts';

// The paths follow the lab prefix; src/lab/prefix.ts holds the rule.
export { CTL_DIR, LAB_DIR, LOG_DIR, STATE_FILE } from './prefix.ts';
/** What every node's data plane reads: the control plane's defaulted Services + EndpointSlices. */
export const VIEW_DIR = join(LAB_DIR, 'view');
/** The control plane's persisted objects and allocations (kept by `lab down`, as etcd is). */
export const STORE_DIR = join(LAB_DIR, 'store');
/** Pod namespaces the kubelets made: `lab down` removes them even after a crash. */
export const SANDBOX_FILE = join(LAB_DIR, 'sandboxes.json');

/** kubetun on every node; the kernel with kube-proxy's iptables or nftables ruleset; or none. */
export type LabMode = 'kubetun' | 'iptables' | 'nftables' | 'none';
export const LAB_MODES: readonly LabMode[] = ['kubetun', 'iptables', 'nftables', 'none'];

export interface LabProcess {
  /** workload: a process an exercise runs in a pod (a client, a connection pool) */
  role: 'server' | 'kubetun' | 'capture' | 'control-plane' | 'apiserver' | 'workload';
  /** the pod or node it serves */
  name: string;
  ns: string;
  pid: number;
  /** /proc/<pid>/stat field 22: with the PID, identifies the process for good */
  startTime: string;
  log: string;
  /** the log's size when the process started: its own output begins there (a restarted
   * server appends to its pod's log, which already holds the last run's ready line) */
  logFrom?: number;
  argv: string[];
  /** kubetun only */
  ctlSocket?: string;
}

export interface LabState {
  version: 1;
  topologyFile: string;
  /** sha256 of the topology file's text: an edited topology means a rebuild, not a no-op */
  topologyHash: string;
  mode: LabMode;
  /** the agents were started with --no-offload */
  noOffload?: boolean;
  /** what the agents read: the view directory (default), or the lab's API server (apiserver.ts) */
  source?: 'dir' | 'api';
  /** 'building' until lab up finished; a crash leaves it there */
  phase: 'building' | 'up';
  /**
   * set while something else programs the kernel data plane: `lab mode` swapping it (the
   * control plane's kernel-mode sync must not install the old mode's rules behind the switch's
   * flush, compare/mode.ts), bench:e2e restoring 10k services' rules in one flushing restore
   */
  switching?: boolean;
  createdAt: string;
  namespaces: string[];
  /** veth pairs and bridges, as "ns:ifname", for the record (they die with their namespaces) */
  links: string[];
  processes: LabProcess[];
  /**
   * Extra `kubetun run` flags per node (`lab agent NODE --restart -- FLAGS`): the node's
   * kube-proxy configuration. A rebuild (`lab up`) starts from none.
   */
  agentFlags?: Record<string, string[]>;
}

export function readState(): LabState | undefined {
  if (!existsSync(STATE_FILE)) return undefined;
  try {
    const s = JSON.parse(readFileSync(STATE_FILE, 'utf8')) as LabState;
    return s.version === 1 ? s : undefined;
  } catch {
    return undefined;
  }
}

export function writeState(s: LabState): void {
  mkdirSync(LAB_DIR, { recursive: true });
  const tmp = `${STATE_FILE}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(s, null, 2)}\n`);
  renameSync(tmp, STATE_FILE);
}

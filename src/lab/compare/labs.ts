// The lab a comparison runs on, as the engine (run.ts) sees it: a topology, the view its data
// planes read, which data plane runs and how to switch it, where its namespaces' commands run
// and by which clock its captures are timed. Two kinds, and nothing in the engine knows which:
//
//   namespaceLab   `lab up`'s lab on this machine: namespaces reached by `ip netns exec`, the
//                  mode switched by `lab mode` (mode.ts), one clock
//   openVmLab      (vm-lab.ts) nodes that are other machines (the Vagrant VMs), reached by ssh:
//                  an NsRoute, the mode switched through each node's provisioning, a clock per
//                  machine
import { join } from 'node:path';
import type { NsRoute } from '../../sh.ts';
import { labUp, type Progress } from '../lab.ts';
import type { KernelMode } from '../kube-proxy.ts';
import { type LabMode, LOG_DIR, readState, VIEW_DIR } from '../state.ts';
import { LAB_PREFIX, loadTopology, type Topology } from '../topology.ts';
import type { ClockOffset } from './clock.ts';
import { labSwitchMode } from './mode.ts';
import { familyRefusal, type Scenario } from './scenarios.ts';

export interface CompareLab {
  /** for the report: which lab this is */
  name: string;
  topology: Topology;
  /** the Services and EndpointSlices the data planes read */
  viewDir: string;
  /** where the captures' pcaps and logs go */
  captureDir: string;
  /** where its namespaces' commands run; undefined: this machine (`ip netns exec`) */
  route?: NsRoute;
  /** the data plane that runs now */
  mode(): LabMode;
  /** reinstall: program it afresh even when it already runs that mode */
  switchMode(mode: LabMode, say: Progress, reinstall: boolean): Promise<void>;
  /** the clock of the machine that captures in namespace ns, minus this one's (µs) */
  clockOffsetUs(ns: string): number;
  /** the measured offsets per machine, for the report (none: one clock) */
  clocks(): Record<string, ClockOffset>;
  /** why scenario s cannot run on this lab, or undefined */
  cannotRun(s: Scenario): string | undefined;
  /** how much slower its machines are (AttemptCtx.slowness) */
  slowness: number;
}

/** The namespace lab of this machine (brought up in the kernel mode if it is not up). */
export async function namespaceLab(o: {
  topology?: string;
  kernel: KernelMode;
  progress: Progress;
}): Promise<CompareLab> {
  let state = readState();
  if (state?.phase !== 'up')
    state = await labUp({ topology: o.topology, mode: o.kernel, progress: o.progress });
  const initial = state.mode;
  const topology = loadTopology(state.topologyFile);
  return {
    name: `the namespace lab (prefix ${LAB_PREFIX})`,
    topology,
    viewDir: VIEW_DIR,
    captureDir: join(LOG_DIR, 'compare'),
    mode: () => readState()?.mode ?? initial,
    switchMode: async (mode, say, reinstall) => {
      await labSwitchMode(mode, say, { reinstall });
    },
    clockOffsetUs: () => 0,
    clocks: () => ({}),
    cannotRun: (s) => familyRefusal(s, topology),
    slowness: 1,
  };
}

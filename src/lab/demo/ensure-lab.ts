// The demos' shared first step: use the running lab in the mode the demo needs. A lab that is up
// in another mode is switched in place (`lab mode`: the same namespaces, pods and servers, about
// a second) and switched back when the demo ends, so a demo never leaves the lab changed; with no
// lab up, one is built in that mode (and left up: the demo says how to try it yourself).

import { UsageError } from '../../errors.ts';
import { labSwitchMode } from '../compare/mode.ts';
import { type Progress, labUp } from '../lab.ts';
import { type LabMode, type LabState, readState } from '../state.ts';
import { labStatusOffline } from '../status.ts';
import type { Topology } from '../topology.ts';

/** Runs fn on the lab in `mode`; a lab that was up in another mode gets its mode back after. */
export async function withLabMode<T>(
  topology: string | undefined,
  mode: LabMode,
  progress: Progress | undefined,
  fn: (state: LabState) => Promise<T>,
): Promise<T> {
  const s = labStatusOffline(topology);
  if (!s.up) {
    progress?.('bringing the lab up first');
    return fn(await labUp({ topology, mode, progress }));
  }
  const was = s.mode;
  if (was === mode || was === null) return fn(readState()!);
  progress?.(`the lab runs in mode ${was}; switching it to ${mode} for this demo (lab mode)`);
  const state = await labSwitchMode(mode, progress);
  try {
    return await fn(state);
  } finally {
    progress?.(`switching the lab back to mode ${was}`);
    await labSwitchMode(was, progress);
  }
}

/** A demo's IPv6 variant needs a dual-stack lab: a topology with an ipv6 block. */
export function requireIpv6(t: Topology, demo: string): void {
  if (t.ipv6) return;
  throw new UsageError(`lab demo ${demo} --ipv6: the lab's topology ${t.file} has no ipv6 block`, {
    hint: 'bring the lab up with a dual-stack topology (lab/topology.yaml is one), or leave --ipv6 out',
  });
}

// The demos' shared first step: use the running lab if it is up in the mode the demo needs,
// else (re)build it in that mode, saying which on `progress`.

import { type Progress, labUp } from '../lab.ts';
import { type LabMode, type LabState, readState } from '../state.ts';
import { labStatusOffline } from '../status.ts';

export async function ensureLab(
  topology: string | undefined,
  mode: LabMode,
  progress: Progress | undefined,
): Promise<LabState> {
  const s = labStatusOffline(topology);
  if (!s.up || s.mode !== mode) {
    progress?.(
      s.up
        ? `the lab runs in mode ${s.mode}; rebuilding it in mode ${mode}`
        : 'bringing the lab up first',
    );
    return labUp({ topology, mode, progress });
  }
  return readState()!;
}

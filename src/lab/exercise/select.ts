// Which lab `lab exercise` and `lab agent` work on: the VM lab when KUBETUN_LAB_VMS names its ssh
// config (`--vms CONFIG` sets it, and the fix commands inherit it), else the namespace lab.
import { resolve } from 'node:path';
import { VMS_ENV } from '../prefix.ts';
import { vmsFromEnv } from '../vms.ts';
import type { ExerciseLab } from './labs.ts';
import { namespaceExerciseLab } from './ns-lab.ts';
import { vmExerciseLab } from './vm-lab.ts';

export function exerciseLab(): ExerciseLab {
  const v = vmsFromEnv();
  return v ? vmExerciseLab(v, resolve(process.env[VMS_ENV]!)) : namespaceExerciseLab();
}

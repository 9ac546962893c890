// The mountpoint where API-mode agents find their ServiceAccount (`lab up --source api`,
// daemonset.ts): /var/run/secrets/kubernetes.io/serviceaccount must exist on the machine for the
// bind mount each agent makes in its own mount namespace, so the lab creates the directories that
// are missing and `lab down` removes them again — leaving the machine as it found it.
//
// The path is one for every lab on the machine (in-cluster config fixes it), so the lab that
// creates it may not be the one that comes down last. Hence: the outermost directory the lab
// created carries a marker file, and any `lab down` removes the marked directories once no
// process on the machine has a mount there (every mount namespace's mountinfo) and no other lab
// is in API mode (its state, written before it makes the mountpoint: one coming up may not have
// mounted yet). A directory that was there before, unmarked, is never touched.
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { SA_MOUNT } from './apiserver.ts';
import { allLabStateFiles, STATE_FILE } from './prefix.ts';

const MARK = '.kubetun-lab';

/** /var/run/secrets, …/kubernetes.io, …/serviceaccount: outermost first. */
function chain(): string[] {
  const parts = SA_MOUNT.split('/').filter(Boolean);
  const dirs = parts.map((_, i) => `/${parts.slice(0, i + 1).join('/')}`);
  return dirs.slice(dirs.indexOf('/var/run/secrets'));
}

/** lab up: creates what is missing of the mountpoint and marks the outermost directory made. */
export function makeSaMountpoint(): void {
  const missing = chain().find((d) => !existsSync(d));
  if (!missing) return;
  mkdirSync(SA_MOUNT, { recursive: true });
  writeFileSync(join(missing, MARK), 'made by kubetun lab up --source api; lab down removes it\n');
}

/** True when some process on the machine has a mount at `path`. */
function mountedAnywhere(path0: string): boolean {
  const path = realpathSync(path0);
  const seen = new Set<string>();
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const ns = readlinkSync(`/proc/${pid}/ns/mnt`);
      if (seen.has(ns)) continue;
      seen.add(ns);
      const info = readFileSync(`/proc/${pid}/mountinfo`, 'utf8');
      // mountinfo field 5 is the mount point (spaces escaped as \040; this path has none)
      if (info.split('\n').some((l) => l.split(' ')[4] === path)) return true;
    } catch {
      // the process ended meanwhile
    }
  }
  return false;
}

/** True when another lab on the machine is up (or coming up) in API mode. */
function otherApiLab(): boolean {
  return allLabStateFiles().some((f) => {
    if (f === STATE_FILE) return false;
    try {
      return (JSON.parse(readFileSync(f, 'utf8')) as { source?: string }).source === 'api';
    } catch {
      return false;
    }
  });
}

/** Some agent mounts it, or another API-mode lab may be between making and mounting it. */
export function saMountpointInUse(): boolean {
  return mountedAnywhere(SA_MOUNT) || otherApiLab();
}

/**
 * lab down: removes the directories a lab made (innermost first, each only while empty), once
 * no agent of any lab mounts there. Returns the directories removed.
 */
export function removeSaMountpoint(): string[] {
  const dirs = chain();
  const marked = dirs.findIndex((d) => existsSync(join(d, MARK)));
  if (marked < 0 || !existsSync(SA_MOUNT) || saMountpointInUse()) return [];
  const removed: string[] = [];
  for (const d of dirs.slice(marked).reverse()) {
    rmSync(join(d, MARK), { force: true });
    try {
      rmdirSync(d);
    } catch {
      break; // not empty: something else lives there now
    }
    removed.push(d);
  }
  return removed;
}

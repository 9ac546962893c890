// One prefix governs everything a lab owns. KUBETUN_LAB_PREFIX (default `kt-`) names the lab's
// network namespaces, and from it follow its state directory (state, lock, node records, logs)
// and the directory of its agents' control sockets — so a second lab (a test, a benchmark, a
// comparison run) lives beside the default one, every command finds its own lab's sockets,
// and `lab down` knows exactly what to remove. Nothing else in the code spells these paths.
//
//   prefix   namespaces        state, logs                control sockets
//   kt-      kt-node1 …        /run/kubetun-lab/          /run/kubetun/<node>.sock
//   kg-      kg-node1 …        /run/kubetun-lab-kg/       /run/kubetun-kg/<node>.sock
//
// The Vagrant VMs' lab, driven from here, keeps its state in /run/kubetun-vms/ (-kg: …-vms-kg/).
//
// KUBETUN_LAB_DIR and KUBETUN_CTL_DIR still override the two directories (a VM keeps its own).
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

export const LAB_PREFIX = process.env.KUBETUN_LAB_PREFIX || 'kt-';

/** A prefix must make safe namespace and path names (it is joined into both). */
if (!/^[A-Za-z0-9][A-Za-z0-9_.-]{0,15}$/.test(LAB_PREFIX)) {
  process.stderr.write(
    `kubetun: KUBETUN_LAB_PREFIX=${JSON.stringify(LAB_PREFIX)} is not a lab prefix (use e.g. kg-: lower-case letters, digits, dashes)\n`,
  );
  process.exit(2);
}

// The default lab (prefix kt-) keeps the historical paths; another prefix gets its own.
const suffix = LAB_PREFIX === 'kt-' ? '' : `-${LAB_PREFIX.replace(/-+$/, '')}`;

export const LAB_DIR = process.env.KUBETUN_LAB_DIR || `/run/kubetun-lab${suffix}`;
export const STATE_FILE = join(LAB_DIR, 'state.json');
export const LOG_DIR = join(LAB_DIR, 'logs');
/** Where each node's kubetun listens for inspect commands (the path `kubetun run` is told). */
export const CTL_DIR = process.env.KUBETUN_CTL_DIR || `/run/kubetun${suffix}`;
/**
 * Names the ssh config of the Vagrant lab (`vagrant ssh-config > FILE`). Set — by `--vms FILE`
 * or by hand — the lab commands that work on VMs (`lab exercise`, `lab agent`, `lab exec`, `lab
 * compare`) work on the VMs, and the others refuse: a fix typed for the VMs never lands on a
 * namespace lab. The fix commands `lab exercise solution` runs inherit it.
 */
export const VMS_ENV = 'KUBETUN_LAB_VMS';
/**
 * The Vagrant lab's state on this machine (`lab exercise --vms`: its progress and undo steps):
 * a directory of its own, which no namespace lab's `lab down` touches.
 */
export const VMS_DIR = `/run/kubetun-vms${suffix}`;

/** Every lab's state file on this machine under the default directories, this lab's included. */
export function allLabStateFiles(): string[] {
  const lab = /^kubetun-lab(-[A-Za-z0-9_.-]+)?$/;
  let entries: string[] = [];
  try {
    entries = readdirSync('/run').filter((e) => lab.test(e));
  } catch {
    return [];
  }
  return entries.map((e) => join('/run', e, 'state.json')).filter((f) => existsSync(f));
}

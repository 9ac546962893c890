// How `exercise start` breaks the lab: each setup step is something that happens to real
// clusters — a node's proxy crashes, its configuration changes, an object is edited, a client
// opens connections — done with the lab's own tools. Nothing here touches kubetun's code.
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { NoLabError } from '../../errors.ts';
import { crashAgent, restartAgent } from '../agent.ts';
import { labCtl } from '../ctl.ts';
import { type Progress, REPO_ROOT, remember } from '../lab.ts';
import { installKubeProxyRules, isKernelMode } from '../kube-proxy.ts';
import { freshLog } from '../provision.ts';
import { startInNs, waitForLog } from '../procs.ts';
import { inNs, sh } from '../../sh.ts';
import { readState } from '../state.ts';
import { loadTopology, targetNamespace, type Topology } from '../topology.ts';
import { rolloutWaiting } from '../../cluster/deployment-controller.ts';
import type { Deployment } from '../../cluster/types.ts';
import { getObject, resyncCluster } from './cluster.ts';
import { EX_MANIFESTS, pushUndo } from './lab.ts';
import { type Action, ExerciseError } from './spec.ts';

export function nsOf(t: Topology, target: string): string {
  const ns = targetNamespace(t, target);
  if (!ns) throw new ExerciseError(`${target}: no pod, node or client of that name in the lab`);
  return ns;
}

/** `node` and repository-relative script paths in an exercise's argv, made absolute. */
export function resolveArgv(argv: string[]): string[] {
  return argv.map((a, i) =>
    i === 0 && a === 'node' ? process.execPath : /^lab\//.test(a) ? join(REPO_ROOT, a) : a,
  );
}

/**
 * After the objects changed: every node's data plane applies them now (kubetun watches the
 * directory too; this makes the change take effect before the next step), or the kernel's
 * kube-proxy rules are rendered and installed afresh.
 */
export async function syncDataplanes(say: Progress): Promise<void> {
  const s = readState();
  if (!s) return;
  // the control plane takes the files in now (its watch would, a moment later), view written
  await resyncCluster().catch(() => undefined);
  if (s.mode === 'kubetun') {
    for (const p of s.processes.filter((x) => x.role === 'kubetun' && x.ctlSocket))
      await labCtl(p.ctlSocket!, { cmd: 'reload' }, 10_000).catch(() => undefined);
  } else if (s.mode === 'iptables') {
    // kube-proxy's sync: iptables-restore --noflush of its full ruleset rewrites its chains and
    // leaves conntrack alone (the UDP cleanup after it is kube-proxy's `conntrack -D`).
    const t = loadTopology(s.topologyFile);
    for (const n of t.nodes) installKubeProxyRules(t, n);
  } else if (isKernelMode(s.mode)) {
    const { labSwitchMode } = await import('../compare/mode.ts');
    await labSwitchMode(s.mode, say, { reinstall: true });
  }
}

/** Until the Deployment's rollout is done (kubectl rollout status's test), at most 2 minutes. */
async function rolloutWait(ref: string): Promise<void> {
  let waits: string | undefined = 'not found';
  for (const until = Date.now() + 120_000; Date.now() < until; await sleep(500)) {
    const { object } = await getObject<Deployment>(ref, 'Deployment');
    waits = object ? rolloutWaiting(object) : `no Deployment ${ref}`;
    if (waits === undefined) return;
  }
  throw new ExerciseError(`rollout of ${ref} did not finish in 120 s: ${waits}`);
}

export async function runAction(a: Action, say: Progress): Promise<void> {
  const s = readState();
  if (!s) throw new NoLabError();
  const t = loadTopology(s.topologyFile);
  switch (a.kind) {
    case 'crash-agent':
      return crashAgent(a.node);
    case 'agent':
      await restartAgent(a.node, a.flags, () => {});
      return;
    case 'manifest':
      writeFileSync(join(EX_MANIFESTS, a.file), a.text.endsWith('\n') ? a.text : `${a.text}\n`);
      return syncDataplanes(say);
    case 'remove-manifest':
      rmSync(join(EX_MANIFESTS, a.file), { force: true });
      return syncDataplanes(say);
    case 'workload': {
      const argv = resolveArgv(a.argv);
      const p = startInNs(
        'workload',
        a.name,
        nsOf(t, a.pod),
        argv,
        freshLog(`workload-${a.name}.log`),
      );
      remember(s, p);
      await waitForLog(p, /^ready\b/m, 15_000);
      return;
    }
    case 'exec':
      if (a.undo) pushUndo({ in: a.in, cmd: a.undo });
      sh(inNs(nsOf(t, a.in), resolveArgv(a.cmd)), { timeoutMs: 60_000 });
      return;
    case 'sleep':
      await sleep(a.ms);
      return;
    case 'rollout-wait':
      return rolloutWait(a.deployment);
  }
}

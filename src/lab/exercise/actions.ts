// How `exercise start` breaks the lab: each setup step is something that happens to real
// clusters — a node's proxy crashes, its configuration changes, an object is edited, a client
// opens connections — done with the lab's own tools. Nothing here touches kubetun's code.
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Progress } from '../lab.ts';
import { inNs, nsNode, sh } from '../../sh.ts';
import { targetNamespace, type Topology } from '../topology.ts';
import { rolloutWaiting } from '../../cluster/deployment-controller.ts';
import type { Deployment } from '../../cluster/types.ts';
import { getObject } from './cluster.ts';
import type { ExerciseLab } from './labs.ts';
import { pushUndo } from './lab.ts';
import { type Action, ExerciseError } from './spec.ts';

export function nsOf(t: Topology, target: string): string {
  const ns = targetNamespace(t, target);
  if (!ns) throw new ExerciseError(`${target}: no pod, node or client of that name in the lab`);
  return ns;
}

/**
 * `node` and repository-relative script paths in an exercise's argv, as they are where the
 * lab's namespaces are: the Node there (the route's), the lab's repository (repo).
 */
export function resolveArgv(argv: string[], repo: string): string[] {
  return argv.map((a, i) =>
    i === 0 && a === 'node' ? nsNode() : /^lab\//.test(a) ? join(repo, a) : a,
  );
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

/** One setup step on the lab (t: its topology). */
export async function runAction(
  a: Action,
  lab: ExerciseLab,
  t: Topology,
  say: Progress,
): Promise<void> {
  switch (a.kind) {
    case 'crash-agent':
      return lab.crashAgent(a.node);
    case 'agent':
      await lab.restartAgent(a.node, a.flags, () => {});
      return;
    case 'manifest':
      return lab.writeObject(a.file, a.text, say);
    case 'remove-manifest':
      return lab.writeObject(a.file, undefined, say);
    case 'workload':
      return lab.startWorkload(a, resolveArgv(a.argv, lab.repo));
    case 'exec':
      if (a.undo) pushUndo({ in: a.in, cmd: resolveArgv(a.undo, lab.repo) }, lab.dir);
      sh(inNs(nsOf(t, a.in), resolveArgv(a.cmd, lab.repo)), { timeoutMs: 60_000 });
      return;
    case 'sleep':
      await sleep(a.ms);
      return;
    case 'rollout-wait':
      return rolloutWait(a.deployment);
  }
}

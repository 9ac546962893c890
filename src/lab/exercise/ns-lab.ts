// The exercise lab on this machine (ExerciseLab, labs.ts): `lab up` of the default topology with
// its objects in the lab's own copy (lab.ts), its control plane holding the cluster, every node's
// kubetun a lab process — every capability an exercise may need.
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { EndpointSlice, Pod, Service } from '../../cluster/types.ts';
import { agentOf, crashAgent, restartAgent } from '../agent.ts';
import { labCtl } from '../ctl.ts';
import { LabError } from '../error.ts';
import { DEFAULT_TOPOLOGY, type Progress, REPO_ROOT, remember } from '../lab.ts';
import { installKubeProxyRules, isKernelMode } from '../kube-proxy.ts';
import { freshLog } from '../provision.ts';
import { isAlive, readLog, startInNs, stopProcess, waitForLog } from '../procs.ts';
import { readState, writeState } from '../state.ts';
import { LAB_PREFIX, loadTopology } from '../topology.ts';
import { nsOf } from './actions.ts';
import { listObjects, resyncCluster } from './cluster.ts';
import type { AgentNow, ExerciseLab, LabNow } from './labs.ts';
import { EX_DIR, EX_MANIFESTS, EX_TOPOLOGY, ensureExerciseLab, restoreManifests } from './lab.ts';

export function namespaceExerciseLab(): ExerciseLab {
  return {
    name: `the namespace lab (prefix ${LAB_PREFIX})`,
    // the exercise lab's topology is the default one with its objects elsewhere (lab.ts)
    addresses: loadTopology(DEFAULT_TOPOLOGY),
    dir: EX_DIR,
    rebuiltBy: 'lab up',
    env: {},
    repo: REPO_ROOT,
    lacks: {},
    modeCommand: (mode) => `kubetun lab mode ${mode}`,
    open: () => {},
    close: () => {},
    now: labNow,
    ensure: async (mode, say) => {
      await ensureExerciseLab(mode, say);
      return (await labNow())!;
    },
    normalise,
    switchMode: async (mode, say) => {
      const { labSwitchMode } = await import('../compare/mode.ts');
      await labSwitchMode(mode, say);
    },
    syncDataplanes,
    objects: async () => {
      const [services, slices, pods] = await Promise.all([
        listObjects<Service>('Service'),
        listObjects<EndpointSlice>('EndpointSlice'),
        listObjects<Pod>('Pod'),
      ]);
      return [{ where: '', services, slices, pods }];
    },
    crashAgent,
    restartAgent,
    agentCtl: async <T>(node: string, req: Record<string, unknown>) => {
      const a = agentOf(readState() ?? ({ processes: [] } as never), node);
      if (!a || !isAlive(a)) throw new LabError(`kubetun on ${node} is not running`);
      return labCtl<T>(a.ctlSocket!, req);
    },
    objectsDir: () => EX_MANIFESTS,
    writeObject: async (file, text, say) => {
      const path = join(EX_MANIFESTS, file);
      if (text === undefined) rmSync(path, { force: true });
      else writeFileSync(path, text.endsWith('\n') ? text : `${text}\n`);
      await syncDataplanes(say);
    },
    startWorkload: async (a, argv) => {
      const s = readState()!;
      const ns = nsOf(loadTopology(s.topologyFile), a.pod);
      const p = startInNs('workload', a.name, ns, argv, freshLog(`workload-${a.name}.log`));
      remember(s, p);
      await waitForLog(p, /^ready\b/m, 15_000);
    },
    workload: (name) => {
      const w = readState()?.processes.find((p) => p.role === 'workload' && p.name === name);
      return w && { ns: w.ns, pid: w.pid, alive: isAlive(w), log: readLog(w.log) };
    },
  };
}

async function labNow(): Promise<LabNow | undefined> {
  const s = readState();
  if (s?.phase !== 'up') return undefined;
  const t = loadTopology(s.topologyFile);
  const agents: Record<string, AgentNow> = {};
  if (s.mode === 'kubetun')
    await Promise.all(
      t.nodes.map(async (n) => {
        const p = agentOf(s, n.name);
        const flags = s.agentFlags?.[n.name] ?? [];
        let problem: string | undefined;
        if (!p || !isAlive(p)) problem = `kubetun on ${n.name} is not running`;
        else if (
          !(await labCtl(p.ctlSocket!, { cmd: 'status' }).then(
            () => true,
            () => false,
          ))
        )
          problem = `kubetun on ${n.name} does not answer on ${p.ctlSocket}`;
        agents[n.name] = { problem, flags };
      }),
    );
  const exerciseLab = s.topologyFile === EX_TOPOLOGY;
  return { mode: s.mode, createdAt: s.createdAt, topology: t, exerciseLab, agents };
}

/**
 * After the objects changed: every node's data plane applies them now (kubetun watches the
 * directory too; this makes the change take effect before the next step), or the kernel's
 * kube-proxy rules are rendered and installed afresh.
 */
async function syncDataplanes(say: Progress): Promise<void> {
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

/** Back to what `lab up` made: default objects, no workloads, every agent with no extra flags. */
async function normalise(say: Progress): Promise<string[]> {
  const did: string[] = [];
  const changed = restoreManifests();
  if (changed.length) did.push(`restored ${changed.join(', ')}`);
  // the store as the files say: objects deleted by hand back, ones `lab apply` added gone
  const removed = await resyncCluster(true, true);
  if (removed.length) did.push(`deleted ${removed.join(', ')} (not in the lab's files)`);
  await syncDataplanes(say);
  const s = readState();
  if (!s) return did;
  const workloads = s.processes.filter((p) => p.role === 'workload');
  for (const w of workloads) await stopProcess(w, 1000);
  if (workloads.length) {
    s.processes = s.processes.filter((p) => p.role !== 'workload');
    writeState(s);
    did.push(`stopped ${workloads.map((w) => w.name).join(', ')}`);
  }
  if (s.mode === 'kubetun') {
    const t = loadTopology(s.topologyFile);
    for (const n of t.nodes) {
      const a = agentOf(s, n.name);
      const flags = s.agentFlags?.[n.name] ?? [];
      if (a && isAlive(a) && flags.length === 0) continue;
      await restartAgent(n.name, [], () => {});
      did.push(`restarted kubetun on ${n.name} with its default flags`);
    }
  }
  return did;
}

// The shortcuts `exercise check` refuses, whatever the exercise: traffic that flows because the
// fault was routed around is not a fix. Each guard is one check line like any other.
//
//   the lab was not rebuilt        `lab up` (on VMs: a new provisioning) wipes the fault instead
//                                  of finding it
//   the data plane is on           the mode the exercise started in, every node's proxy running
//                                  and healthy (kubetun: /healthz 200; kernel: its chains there)
//   the Services are the same      as the data planes get them (ExerciseLab.objects: the control
//                                  plane's store, where edited files, `lab apply` and `lab
//                                  delete` alike count; on VMs each node's view): none deleted,
//                                  none added (a new Service pointed at a pod IP), type, IPs,
//                                  ports and selector as at start except the fields the
//                                  exercise's fix may change; every endpoint address is its Pod's
import { setTimeout as sleep } from 'node:timers/promises';
import type { EndpointSlice, Pod, Service } from '../../cluster/types.ts';
import { inNs, shAsync } from '../../sh.ts';
import type { CheckItem } from './checks.ts';
import type { ExerciseLab, LabNow } from './labs.ts';
import type { ActiveExercise, ServiceSnapshot } from './lab.ts';

/** Service fields (of spec, as the store has them) a fix may not change unless mayChange says. */
export const GUARDED_FIELDS = [
  'type',
  'clusterIPs',
  'ports',
  'selector',
  'sessionAffinity',
  'externalTrafficPolicy',
  'internalTrafficPolicy',
] as const;

/** where: the reader of the objects when there are several (a VM lab's node). */
function snap(s: Service, where: string): ServiceSnapshot {
  const spec = s.spec as unknown as Record<string, unknown>;
  const fields: Record<string, unknown> = {};
  for (const f of GUARDED_FIELDS) fields[f] = spec[f] ?? null;
  const key = `${s.metadata.namespace}/${s.metadata.name}`;
  return { key: where ? `${key} on ${where}` : key, fields };
}

/** The lab's Services now, as its data planes get them. */
export async function serviceSnapshots(lab: ExerciseLab): Promise<ServiceSnapshot[]> {
  return (await lab.objects()).flatMap((o) => o.services.map((s) => snap(s, o.where)));
}

function serviceProblems(a: ActiveExercise, mayChange: string[], now: ServiceSnapshot[]) {
  const was = new Map(a.baseline.map((s) => [s.key, s]));
  const problems: string[] = [];
  for (const s of now) {
    const b = was.get(s.key);
    if (!b) {
      problems.push(
        `${s.key} was not there at start: repair the original Service, do not route around it`,
      );
      continue;
    }
    for (const f of GUARDED_FIELDS) {
      if (mayChange.includes(f)) continue;
      if (JSON.stringify(s.fields[f]) !== JSON.stringify(b.fields[f]))
        problems.push(
          `${s.key} ${f} changed from ${JSON.stringify(b.fields[f])} to ${JSON.stringify(s.fields[f])}`,
        );
    }
  }
  for (const k of was.keys()) if (!now.some((s) => s.key === k)) problems.push(`${k} was deleted`);
  return problems;
}

/** Every endpoint address is an address of the Pod it names (or of some Pod, if it names none). */
function endpointProblems(slices: EndpointSlice[], pods: Pod[]): string[] {
  const podIp = new Map<string, string>();
  // every address of the Pod: podIP and, on a dual-stack lab, its IPv6 entry of podIPs
  for (const p of pods) {
    if (p.status?.podIP) podIp.set(p.status.podIP, p.metadata.name);
    for (const { ip } of p.status?.podIPs ?? []) podIp.set(ip, p.metadata.name);
  }
  const problems: string[] = [];
  for (const sl of slices)
    for (const e of sl.endpoints ?? [])
      for (const ip of e.addresses) {
        const named = e.targetRef?.name;
        if (!podIp.has(ip) || (named && podIp.get(ip) !== named))
          problems.push(
            `EndpointSlice ${sl.metadata.namespace}/${sl.metadata.name}: ${ip} is not the address of pod ${named ?? '(none named)'}`,
          );
      }
  return problems;
}

export async function servicesGuard(
  a: ActiveExercise,
  mayChange: string[],
  lab: ExerciseLab,
): Promise<CheckItem> {
  const title = 'the Services are the ones the exercise started with';
  try {
    const views = await lab.objects();
    const now = views.flatMap((o) => o.services.map((s) => snap(s, o.where)));
    const problems = [
      ...serviceProblems(a, mayChange, now),
      ...views.flatMap((o) => endpointProblems(o.slices, o.pods)),
    ];
    const n =
      views.length > 1
        ? `${now.length / views.length} Services on each node`
        : `${now.length} Services`;
    return {
      title,
      ok: problems.length === 0,
      detail: problems.length ? problems.join('; ') : `${n} as at start`,
    };
  } catch (err) {
    return { title, ok: false, detail: `the lab's objects: ${(err as Error).message}` };
  }
}

export async function dataplaneGuard(
  a: ActiveExercise,
  s: LabNow,
  lab: ExerciseLab,
): Promise<CheckItem> {
  const title = `the data plane (${a.mode}) runs on every node`;
  if (s.mode !== a.mode)
    return {
      title,
      ok: false,
      detail: `the lab now runs mode ${s.mode}; the exercise is about ${a.mode} — switch back with: ${lab.modeCommand(a.mode)}`,
    };
  const t = s.topology;
  const problems: string[] = [];
  await Promise.all(
    t.nodes.map(async (n) => {
      if (s.mode === 'kubetun') {
        const problem = s.agents[n.name]?.problem;
        if (problem) return void problems.push(problem);
        // three tries, a second apart: an agent the fix has just restarted may still be busy
        // with its first sync (seconds on a loaded machine) while its socket already answers
        let code = '';
        for (let k = 0; k < 3 && code !== '200'; k++) {
          if (k > 0) await sleep(1000);
          const h = await shAsync(
            inNs(n.ns, [
              'curl',
              '-s',
              '-m',
              '3',
              '-o',
              '/dev/null',
              '-w',
              '%{http_code}',
              `http://${n.ip}:10256/healthz`,
            ]),
            60_000,
          );
          code = h.out;
        }
        if (code !== '200') problems.push(`${n.name} /healthz answers ${code || 'nothing'}`);
      } else {
        const r = await shAsync(inNs(n.ns, ['nft', 'list', 'ruleset']), 60_000);
        if (!/KUBE-SERVICES|services/.test(r.out))
          problems.push(`${n.name} has no kube-proxy rules`);
      }
    }),
  );
  return {
    title,
    ok: problems.length === 0,
    detail: problems.length ? problems.join('; ') : `${t.nodes.length} nodes`,
  };
}

export function rebuiltGuard(a: ActiveExercise, s: LabNow, lab: ExerciseLab): CheckItem {
  const ok = s.createdAt === a.labCreatedAt;
  return {
    title: 'the lab is the one the exercise broke',
    ok,
    detail: ok
      ? `built ${s.createdAt}`
      : `the lab was rebuilt at ${s.createdAt} (${lab.rebuiltBy}): that wipes the fault instead of finding it; start the exercise again`,
  };
}

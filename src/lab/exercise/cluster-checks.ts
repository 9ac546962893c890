// The checks that read the lab's cluster: a field of an object as the store has it, a Service's
// ready endpoints, and a rolling restart watched from every pod — the behaviour a preStop hook
// and a grace period buy. Like every check, each returns one line of what holds or not yet.
import { spawn } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { matchesSelector } from '../../cluster/selector.ts';
import type { Deployment, Pod, Service } from '../../cluster/types.ts';
import { apiCall } from '../api.ts';
import { inNs } from '../../sh.ts';
import { nsOf } from './actions.ts';
import type { Topology } from '../topology.ts';
import { fieldAt, getObject, isPodReady, listObjects, readyEndpoints } from './cluster.ts';
import type { CheckItem } from './item.ts';
import { EX_DIR } from './lab.ts';
import type { Check } from './spec.ts';

type C<K extends Check['kind']> = Extract<Check, { kind: K }>;

export async function checkService(c: C<'service'>): Promise<CheckItem> {
  const { object: svc } = await getObject<Service>(c.name, 'Service');
  // fields are the spec's (sessionAffinity), or a path from the object (metadata.labels)
  const v = svc ? (fieldAt(svc.spec, c.field) ?? fieldAt(svc, c.field)) : undefined;
  return {
    title: c.title,
    ok: svc !== undefined && JSON.stringify(v) === JSON.stringify(c.equals),
    detail: svc ? `${c.name} ${c.field} = ${JSON.stringify(v)}` : `no Service ${c.name}`,
  };
}

export async function checkObject(c: C<'object'>): Promise<CheckItem> {
  const r = await getObject(c.ref, 'Service');
  if (!r.object) return { title: c.title, ok: false, detail: `no ${r.kind} ${r.ns}/${r.name}` };
  const v = fieldAt(r.object, c.field);
  const same = (w: unknown) => JSON.stringify(v) === JSON.stringify(w);
  const ok =
    c.exists !== undefined
      ? (v !== undefined && v !== null) === c.exists
      : 'notEquals' in c
        ? !same(c.notEquals)
        : same(c.equals);
  const shown = v === undefined ? 'not set' : JSON.stringify(v);
  return { title: c.title, ok, detail: `${r.kind} ${r.ns}/${r.name} ${c.field}: ${shown}` };
}

export async function checkEndpoints(c: C<'endpoints'>): Promise<CheckItem> {
  const { object: svc, ns, name } = await getObject<Service>(c.service, 'Service');
  if (!svc) return { title: c.title, ok: false, detail: `no Service ${ns}/${name}` };
  const ready = await readyEndpoints(svc, c.port);
  const on = c.port === undefined ? '' : ` on port ${c.port}`;
  return {
    title: c.title,
    ok: ready.length >= c.atLeast,
    detail: `${ns}/${name} has ${ready.length} ready endpoint(s)${on}${ready.length ? `: ${ready.join(', ')}` : ''}`,
  };
}

/** curl exit codes: 7 refused, 52 empty reply, 56 reset — a Pod that went away under a client. */
const loopScript = (url: string, stop: string) =>
  `ok=0; bad=0; slow=0; i=0; while [ ! -e ${stop} ] && [ $i -lt 2000 ]; do i=$((i+1)); curl -s -m 2 -o /dev/null ${url}; e=$?; if [ $e -eq 0 ]; then ok=$((ok+1)); elif [ $e -eq 28 ]; then slow=$((slow+1)); else bad=$((bad+1)); fi; sleep 0.2; done; echo "$ok $bad $slow"`;

function loop(ns: string, url: string, stop: string): Promise<number[]> {
  return new Promise((resolve) => {
    const argv = inNs(ns, ['sh', '-c', loopScript(url, stop)]);
    const p = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    p.stdout.on('data', (d) => {
      out += d;
    });
    p.on('close', () => resolve(out.trim().split(' ').map(Number)));
  });
}

/** Polls until every Pod of the Deployment is new and ready and the old ones are gone. */
async function rolledOut(d: Deployment, before: Set<string>, ms: number): Promise<boolean> {
  const want = d.spec.replicas ?? 1;
  for (const until = Date.now() + ms; Date.now() < until; await sleep(500)) {
    const pods = (await listObjects<Pod>('Pod', d.metadata.namespace)).filter((p) =>
      matchesSelector(p.metadata.labels ?? {}, d.spec.selector),
    );
    if (pods.length === want && pods.every((p) => !before.has(p.metadata.name) && isPodReady(p)))
      return true;
  }
  return false;
}

/** `who`: the pods (and nodes, clients) that send the requests, `from` expanded. */
export async function checkRollout(
  c: C<'rollout'>,
  t: Topology,
  who: string[],
): Promise<CheckItem> {
  const { object: d, ns, name } = await getObject<Deployment>(c.deployment, 'Deployment');
  if (!d) return { title: c.title, ok: false, detail: `no Deployment ${ns}/${name}` };
  const pods = await listObjects<Pod>('Pod', ns);
  const before = new Set(pods.map((p) => p.metadata.name));
  const stop = join(EX_DIR, `rollout-stop-${process.pid}`);
  rmSync(stop, { force: true });
  const loops = who.map((w) => loop(nsOf(t, w), c.url, stop));
  await sleep(1000);
  await apiCall('POST', '/restart', { namespace: ns, name });
  const done = await rolledOut(d, before, 120_000);
  await sleep(2000);
  writeFileSync(stop, '');
  const res = await Promise.all(loops);
  rmSync(stop, { force: true });
  const [ok, bad, slow] = [0, 1, 2].map((i) => res.reduce((n, r) => n + (r[i] || 0), 0));
  const per = who.map((w, i) => `${w} ${res[i]![0]} ok ${res[i]![1]} failed`).join('; ');
  return {
    title: c.title,
    ok: done && bad === 0 && ok >= who.length * 5,
    detail: `rollout restart deploy/${name}${done ? '' : ' did not finish in 120 s'}: ${ok} answered, ${bad} refused or reset, ${slow} timed out (${per})`,
  };
}

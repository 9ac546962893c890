// The lab's kubectl: `kubetun lab apply / delete / get / describe / logs / rollout restart|status
// / scale`, talking to the lab control plane's API (src/lab/api.ts). Output follows kubectl's:
// "service/web created", "pod "web-x" deleted", the tables of src/lab/get.ts.
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Command, Option } from 'commander';
import { parseSelector, matchesSelector } from '../cluster/selector.ts';
import { rolloutWaiting } from '../cluster/deployment-controller.ts';
import type { Deployment, EndpointSlice, KObject, Service } from '../cluster/types.ts';
import { LABEL_SERVICE_NAME } from '../cluster/types.ts';
import { readObjects } from '../cluster/files.ts';
import { requireRoot, UsageError, UserError } from '../errors.ts';
import { apiCall } from '../lab/api.ts';
import type { ApplyReply } from '../lab/control-plane-api.ts';
import { podLogFile } from '../lab/control-plane.ts';
import { describeService, formatObjects, kindOf, type Output } from '../lab/get.ts';

const OUTPUTS: Output[] = ['wide', 'yaml', 'json', 'name'];

async function list(kind: string, namespace?: string): Promise<KObject[]> {
  const q = new URLSearchParams({ kind });
  if (namespace !== undefined) q.set('namespace', namespace);
  return (await apiCall<{ items: KObject[] }>('GET', `/objects?${q}`)).items;
}

async function getOne(kind: string, namespace: string, name: string): Promise<KObject> {
  const hit = (
    await list(kind, kind === 'Node' || kind === 'Namespace' ? undefined : namespace)
  ).find((o) => o.metadata.name === name);
  if (!hit)
    throw new UserError(
      'NOT_FOUND',
      `${kind.toLowerCase()}s "${name}" not found in namespace ${namespace}`,
    );
  return hit;
}

/** "deploy/web" or ("deploy", "web"). */
function typeAndName(ref: string, name?: string): { kind: string; name: string } {
  if (name !== undefined) return { kind: kindOf(ref), name };
  const m = /^([^/]+)\/(.+)$/.exec(ref);
  if (!m) throw new UsageError(`expected TYPE/NAME (e.g. deploy/web), got "${ref}"`);
  return { kind: kindOf(m[1]!), name: m[2]! };
}

function printApply(r: ApplyReply): void {
  for (const l of r.results) process.stdout.write(`${l}\n`);
  for (const l of r.ignored) process.stderr.write(`${l}\n`);
  if (r.errors.length > 0) {
    for (const e of r.errors) process.stderr.write(`error: ${e}\n`);
    process.exitCode = 1;
  }
}

/** kubectl waits for a deleted object to be gone (a Pod's grace period) unless --wait=false. */
async function waitGone(
  kind: string,
  namespace: string,
  name: string,
  timeoutMs: number,
): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (!(await list(kind, namespace)).some((o) => o.metadata.name === name)) return;
    await sleep(200);
  }
}

async function deleteOne(
  kind: string,
  namespace: string,
  name: string,
  o: DeleteOpts,
): Promise<void> {
  const grace = o.gracePeriod === undefined ? undefined : Number(o.gracePeriod);
  const r = await apiCall<{ deleted: boolean }>('POST', '/delete', {
    kind,
    namespace,
    name,
    grace,
  });
  const what = `${kind.toLowerCase()} "${name}"`;
  if (!r.deleted) {
    process.stderr.write(`Error from server (NotFound): ${what} not found\n`);
    process.exitCode = 1;
    return;
  }
  process.stdout.write(`${what} deleted\n`);
  if (o.wait !== false && kind === 'Pod') await waitGone(kind, namespace, name, 120_000);
}

/**
 * kubectl's rollout status: done when the Deployment's controller has seen its last change and
 * every replica is updated and available, with no old one left (terminating Pods no longer count).
 */
async function rolloutStatus(namespace: string, name: string, timeoutMs: number): Promise<void> {
  let last = '';
  for (const until = Date.now() + timeoutMs; Date.now() < until; await sleep(500)) {
    const msg = rolloutWaiting((await getOne('Deployment', namespace, name)) as Deployment);
    if (msg === undefined)
      return void process.stdout.write(`deployment "${name}" successfully rolled out\n`);
    if (msg !== last) process.stdout.write(`${msg}\n`);
    last = msg;
  }
  throw new UserError(
    'ROLLOUT_TIMEOUT',
    `deployment "${name}" did not finish rolling out in ${timeoutMs / 1000} s (lab get pods, lab describe)`,
  );
}

interface DeleteOpts {
  filename?: string;
  namespace: string;
  gracePeriod?: string;
  wait?: boolean;
}

export function registerClusterCommands(lab: Command): void {
  const ns = () => new Option('-n, --namespace <ns>', 'namespace').default('default');
  const guard = (what: string, fn: () => Promise<void>) => async () => {
    requireRoot(`lab ${what}`);
    await fn();
  };

  lab
    .command('apply')
    .description('create or update the objects of a YAML/JSON file or directory (kubectl apply)')
    .requiredOption('-f, --filename <path>', 'file or directory')
    .action((o: { filename: string }) =>
      guard('apply', async () => {
        const objects = readObjects(o.filename);
        printApply(await apiCall<ApplyReply>('POST', '/apply', { objects }));
      })(),
    );

  lab
    .command('delete [type] [name]')
    .description(
      'delete objects of a file (-f), or one by type and name: lab delete pod NAME (graceful)',
    )
    .option('-f, --filename <path>', 'file or directory')
    .addOption(ns())
    .option('--grace-period <seconds>', 'override the Pod grace period (0: at once)')
    .option('--no-wait', 'return at once instead of waiting for Pods to be gone')
    .action((type: string | undefined, name: string | undefined, o: DeleteOpts) =>
      guard('delete', async () => {
        if (o.filename) {
          for (const { object } of readObjects(o.filename)) {
            const obj = object as KObject;
            if (!obj?.kind || !obj.metadata?.name) continue;
            try {
              kindOf(obj.kind);
            } catch {
              continue;
            }
            await deleteOne(obj.kind, obj.metadata.namespace ?? o.namespace, obj.metadata.name, o);
          }
          return;
        }
        if (!type)
          throw new UsageError('say what to delete: lab delete -f FILE, or lab delete pod NAME');
        const t = typeAndName(type, name);
        await deleteOne(t.kind, o.namespace, t.name, o);
      })(),
    );

  lab
    .command('get <type> [name]')
    .description('list pods, svc, endpointslices, deploy, rs, nodes, ns in kubectl columns')
    .addOption(ns())
    .option('-A, --all-namespaces', 'every namespace')
    .option('-l, --selector <selector>', 'label selector, e.g. app=web,tier!=db')
    .addOption(new Option('-o, --output <format>', 'wide, yaml, json or name').choices(OUTPUTS))
    .action(
      (
        type: string,
        name: string | undefined,
        o: { namespace: string; allNamespaces?: boolean; selector?: string; output?: Output },
      ) =>
        guard('get', async () => {
          const kind = kindOf(type);
          const scoped = kind === 'Node' || kind === 'Namespace' || o.allNamespaces;
          let objs = await list(kind, scoped ? undefined : o.namespace);
          if (name) {
            objs = objs.filter((x) => x.metadata.name === name);
            if (objs.length === 0)
              throw new UserError(
                'NOT_FOUND',
                `${type} "${name}" not found${scoped ? '' : ` in namespace ${o.namespace}`}`,
              );
          }
          if (o.selector) {
            const sel = parseSelector(o.selector);
            objs = objs.filter((x) => matchesSelector(x.metadata.labels, sel));
          }
          const text = formatObjects(kind, objs, o.output ?? 'table', {
            allNamespaces: o.allNamespaces,
            single: !!name,
          });
          if (text === '')
            process.stderr.write(
              `No resources found${scoped ? '' : ` in ${o.namespace} namespace`}.\n`,
            );
          process.stdout.write(text);
        })(),
    );

  lab
    .command('describe <type> <name>')
    .description('describe a service: selector, ports, endpoints (kubectl describe svc)')
    .addOption(ns())
    .action((type: string, name: string, o: { namespace: string }) =>
      guard('describe', async () => {
        if (kindOf(type) !== 'Service')
          throw new UsageError('the lab describes services: lab describe svc NAME');
        const svc = (await getOne('Service', o.namespace, name)) as Service;
        const slices = ((await list('EndpointSlice', o.namespace)) as EndpointSlice[]).filter(
          (s) => s.metadata.labels?.[LABEL_SERVICE_NAME] === name,
        );
        process.stdout.write(describeService(svc, slices));
      })(),
    );

  lab
    .command('logs <pod>')
    .description("a Pod's server output (kubectl logs)")
    .addOption(ns())
    .action((pod: string, o: { namespace: string }) =>
      guard('logs', async () => {
        const p = await getOne('Pod', o.namespace, pod);
        process.stdout.write(readFileSync(podLogFile(p as never), 'utf8'));
      })(),
    );

  const rollout = lab.command('rollout').description('rolling updates of Deployments');
  rollout
    .command('restart <ref>')
    .description('restart every Pod of deploy/NAME by a rolling update (kubectl rollout restart)')
    .addOption(ns())
    .action((ref: string, o: { namespace: string }) =>
      guard('rollout', async () => {
        const t = typeAndName(ref);
        if (t.kind !== 'Deployment') throw new UsageError('rollout restart takes deploy/NAME');
        await apiCall('POST', '/restart', { namespace: o.namespace, name: t.name });
        process.stdout.write(`deployment.apps/${t.name} restarted\n`);
      })(),
    );

  rollout
    .command('status <ref>')
    .description('wait until the rollout of deploy/NAME has finished (kubectl rollout status)')
    .addOption(ns())
    .option('--timeout <seconds>', 'give up after this long (exit 1)', '120')
    .action((ref: string, o: { namespace: string; timeout: string }) =>
      guard('rollout', async () => {
        const t = typeAndName(ref);
        if (t.kind !== 'Deployment') throw new UsageError('rollout status takes deploy/NAME');
        await rolloutStatus(o.namespace, t.name, Number(o.timeout) * 1000);
      })(),
    );

  lab
    .command('scale <ref>')
    .description('set the replicas of deploy/NAME (kubectl scale)')
    .requiredOption('--replicas <n>', 'desired replicas')
    .addOption(ns())
    .action((ref: string, o: { replicas: string; namespace: string }) =>
      guard('scale', async () => {
        const t = typeAndName(ref);
        const n = Number(o.replicas);
        if (t.kind !== 'Deployment') throw new UsageError('scale takes deploy/NAME');
        if (!Number.isInteger(n) || n < 0)
          throw new UsageError(`--replicas: "${o.replicas}" is not a whole number >= 0`);
        await apiCall('POST', '/scale', { namespace: o.namespace, name: t.name, replicas: n });
        process.stdout.write(`deployment.apps/${t.name} scaled\n`);
      })(),
    );

  lab
    .command('apiserver', { hidden: true })
    .description("serve the lab's view and Nodes over list/watch (lab up --source api starts it)")
    .requiredOption('--topology <file>', 'lab topology YAML')
    .action((o: { topology: string }) =>
      guard('apiserver', async () => {
        const { runApiServer } = await import('../lab/apiserver.ts');
        await runApiServer(o.topology);
      })(),
    );

  lab
    .command('control-plane', { hidden: true })
    .description('run the lab control plane (lab up starts it)')
    .requiredOption('--topology <file>', 'lab topology YAML')
    .action((o: { topology: string }) =>
      guard('control-plane', async () => {
        const { runControlPlane } = await import('../lab/control-plane-main.ts');
        await runControlPlane(o.topology);
      })(),
    );
}

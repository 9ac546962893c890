// A lab node's agent started exactly as deploy/daemonset.yaml starts it on a cluster (`lab up
// --source api`): the container's command and args, with $(VAR) expanded from its env as the
// kubelet does, the environment a Pod gets (NODE_NAME from the downward API, and
// KUBERNETES_SERVICE_HOST/PORT: the manifest's fields a user sets to the API server, which the
// lab sets to its own), and the ServiceAccount directory
// bind-mounted at /var/run/secrets/kubernetes.io/serviceaccount in a mount namespace of the
// agent's own — so the agent finds its API server by in-cluster configuration and its node's
// IP, pod CIDR and zone in its Node object, with no lab flag telling it.
//
// What the lab changes, each named once here: the repository path instead of /opt/kubetun, the
// node binary running the lab, the ConfigMap's config.conf at API_DIR instead of the volume at
// /var/lib/kubetun, --service-cidr (the manifest's comment says to set it to the cluster's), and
// --ctl-socket (the lab's socket directory, so lab commands find the agent).
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { REPO_ROOT } from '../runtime.ts';
import { API_DIR, apiServerAt, SA_DIR, SA_MOUNT } from './apiserver.ts';
import { LabError } from './error.ts';
import { type LabNode, parseCidr, type Topology, u32ToIp } from './topology.ts';

const REPO = REPO_ROOT;
const DEPLOY = join(REPO, 'deploy');
const IMAGE_ROOT = '/opt/kubetun/';
const CONFIG_MOUNT = '/var/lib/kubetun/';

export interface Container {
  command: string[];
  args: string[];
  env?: { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
}

function docs(file: string): Record<string, any>[] {
  return parseAllDocuments(readFileSync(join(DEPLOY, file), 'utf8')).map((d) => d.toJS());
}

export function container(): Container {
  const ds = docs('daemonset.yaml').find((d) => d?.kind === 'DaemonSet');
  const c = ds?.spec?.template?.spec?.containers?.[0] as Container | undefined;
  if (!c?.command || !c.args)
    throw new LabError('deploy/daemonset.yaml: no container command/args');
  return c;
}

/** Writes the ConfigMap's config.conf where the lab's agents read it; returns the path. */
export function writeAgentConfig(): string {
  const cm = docs('configmap.yaml').find((d) => d?.kind === 'ConfigMap');
  const text = cm?.data?.['config.conf'];
  if (typeof text !== 'string') throw new LabError('deploy/configmap.yaml: no data config.conf');
  mkdirSync(API_DIR, { recursive: true });
  const file = join(API_DIR, 'config.conf');
  writeFileSync(file, text);
  return file;
}

/**
 * The Pod's environment for one node, as the kubelet builds it: first the `kubernetes`
 * Service's variables (its ClusterIP, the first address of the service CIDR, port 443), then
 * the container's env over them — where the lab, as the user does, sets the two API fields to
 * its own API server. Without those fields the agent would be sent to the ClusterIP.
 */
export function podEnv(c: Container, t: Topology, n: LabNode): Record<string, string> {
  const at = apiServerAt(t);
  const env: Record<string, string> = {
    KUBERNETES_SERVICE_HOST: u32ToIp((parseCidr(t.serviceCidr).addr + 1) >>> 0),
    KUBERNETES_SERVICE_PORT: '443',
  };
  // the container's fields a user sets to the API server (docs/cluster.md, Install)
  const apiValue: Record<string, string> = {
    KUBERNETES_SERVICE_HOST: at.host,
    KUBERNETES_SERVICE_PORT: String(at.port),
  };
  for (const e of c.env ?? []) {
    if (e.name in apiValue) env[e.name] = apiValue[e.name]!;
    else if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.fieldRef?.fieldPath === 'spec.nodeName') env[e.name] = n.name;
    else throw new LabError(`deploy/daemonset.yaml: env ${e.name}: the lab cannot resolve it`);
  }
  return env;
}

/** The argv (run in the node's namespace) that starts the node's agent as the DaemonSet does. */
export function daemonSetAgentArgv(
  t: Topology,
  n: LabNode,
  ctlSocket: string,
  extra: string[] = [],
  node = process.execPath,
): string[] {
  const c = container();
  const env = podEnv(c, t, n);
  const expand = (s: string) => s.replace(/\$\(([A-Z_][A-Z0-9_]*)\)/g, (m, v) => env[v] ?? m);
  const lab: Record<string, string> = {
    '--config': join(API_DIR, 'config.conf'),
    '--service-cidr': t.serviceCidr,
    '--ctl-socket': ctlSocket,
  };
  const args = c.args.map((a) => {
    const flag = a.split('=')[0]!;
    if (flag in lab) return `${flag}=${lab[flag]}`;
    return expand(a).replace(CONFIG_MOUNT, `${API_DIR}/`);
  });
  const command = c.command.map((a, i) =>
    i === 0 && a === 'node' ? node : a.replace(IMAGE_ROOT, REPO),
  );
  // `sh -c` mounts the ServiceAccount directory where in-cluster config looks (the mountpoint
  // lab up made, sa-mountpoint.ts), then execs the agent (one PID from `ip netns exec` on, so
  // the lab stops it as any other agent).
  const mount = `mount --bind "$0" ${SA_MOUNT} && exec "$@"`;
  return [
    'env',
    ...Object.entries(env).map(([k, v]) => `${k}=${v}`),
    'unshare',
    '-m',
    '--propagation',
    'private',
    'sh',
    '-c',
    mount,
    SA_DIR,
    ...command,
    ...args,
    ...extra,
  ];
}

// A lab node's agent started exactly as deploy/daemonset.yaml starts it on a cluster (`lab up
// --source api`): the container's command and args, with $(VAR) expanded from its env as the
// kubelet does, the environment a Pod gets (NODE_NAME from the downward API, and
// KUBERNETES_SERVICE_HOST/PORT: the manifest's fields a user sets to the API server, which the
// lab sets to its own), and the ServiceAccount directory
// bind-mounted at /var/run/secrets/kubernetes.io/serviceaccount in a mount namespace of the
// agent's own — so the agent finds its API server by in-cluster configuration and its node's
// IP, pod CIDR and zone in its Node object, with no lab flag telling it.
//
// The container around it, as far as a namespace lab can build one (agentMountScript and
// dropPrivilegesArgv below, both read from the manifest): the agent runs as root with exactly
// the container's capabilities (securityContext.capabilities: drop ALL, then add) and no new
// privileges; /proc/sys and /sys read-only, as runc mounts them in an unprivileged container; a
// fresh /dev with runc's default device nodes and nothing else but the manifest's hostPath
// devices (/dev/net/tun); the manifest's other hostPath volumes bound where it mounts them.
// Not emulated: the runtime's device cgroup, seccomp and AppArmor profiles, a PID namespace —
// docs/cluster.md says what that leaves unverified.
//
// What the lab changes, each named once here: the repository path instead of /opt/kubetun, the
// node binary running the lab, the ConfigMap's config.conf at API_DIR instead of the volume at
// /var/lib/kubetun (its clusterCIDR the topology's), --service-cidr (the manifest's comment
// says to set it to the cluster's), --ctl-socket (the lab's socket directory, so lab commands
// find the agent), and a hostPath volume mounted at a path the machine does not have
// (/host/proc/sys/net) is bound below POD_ROOT instead, in the arguments too. A dual-stack
// topology runs deploy/dual-stack as that Component does: its config.conf (clusterCIDR in
// kube-proxy's v4,v6 form) and --service-cidr-v6; --node-ip-v6 and --pod-cidr-v6 come from the
// Node object (its IPv6 InternalIP and spec.podCIDRs), as on a cluster.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { REPO_ROOT } from '../runtime.ts';
import { shQuote } from '../sh.ts';
import { API_DIR, apiServerAt, SA_DIR, SA_MOUNT } from './apiserver.ts';
import { LabError } from './error.ts';
import { LAB_DIR } from './state.ts';
import { type LabNode, parseCidr, type Topology, u32ToIp } from './topology.ts';

const REPO = REPO_ROOT;
const DEPLOY = join(REPO, 'deploy');
const IMAGE_ROOT = '/opt/kubetun/';
const CONFIG_MOUNT = '/var/lib/kubetun/';

/** Where the lab binds hostPath volumes whose mountPath the machine lacks (/host/...). */
export const POD_ROOT = join(LAB_DIR, 'daemonset-pod');

export interface Container {
  command: string[];
  args: string[];
  env?: { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
  securityContext?: {
    privileged?: boolean;
    allowPrivilegeEscalation?: boolean;
    capabilities?: { add?: string[]; drop?: string[] };
  };
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
}

export interface Volume {
  name: string;
  hostPath?: { path: string; type?: string };
}

function docs(file: string): Record<string, any>[] {
  return parseAllDocuments(readFileSync(join(DEPLOY, file), 'utf8')).map((d) => d.toJS());
}

function podSpec(): { containers: Container[]; volumes?: Volume[] } {
  const ds = docs('daemonset.yaml').find((d) => d?.kind === 'DaemonSet');
  return ds?.spec?.template?.spec ?? { containers: [] };
}

export function podVolumes(): Volume[] {
  return podSpec().volumes ?? [];
}

export function container(): Container {
  const c = podSpec().containers?.[0];
  if (!c?.command || !c.args)
    throw new LabError('deploy/daemonset.yaml: no container command/args');
  return c;
}

/**
 * The capabilities the container runs with, as the manifest names them (NET_ADMIN, …): its
 * `add` after `drop: [ALL]`. A privileged container, or one that keeps the runtime's default
 * set, is not what the lab emulates.
 */
export function agentCapabilities(c: Container = container()): string[] {
  const sc = c.securityContext ?? {};
  const drop = sc.capabilities?.drop ?? [];
  if (sc.privileged || drop.length !== 1 || drop[0] !== 'ALL')
    throw new LabError(
      "deploy/daemonset.yaml: the lab starts agents with securityContext.capabilities drop [ALL] plus add; privileged, or the runtime's default set, is not emulated",
    );
  return sc.capabilities?.add ?? [];
}

/**
 * setpriv's argv that runs the rest as the container's root runs: its bounding, permitted and
 * effective sets exactly the container's capabilities (a root execve takes the bounding set),
 * none inheritable or ambient, and no_new_privs for allowPrivilegeEscalation: false.
 */
export function dropPrivilegesArgv(c: Container = container()): string[] {
  const caps = agentCapabilities(c).map((x) => `,+${x.toLowerCase()}`);
  const nnp = c.securityContext?.allowPrivilegeEscalation === false ? ['--no-new-privs'] : [];
  return ['setpriv', `--bounding-set=-all${caps.join('')}`, '--inh-caps=-all', ...nnp, '--'];
}

/**
 * The container's hostPath mounts: the host path, where the agent sees it (`at`), and whether
 * the lab binds it — a device (the container's /dev is fresh) or a mountPath the machine lacks
 * (bound below POD_ROOT); any other is the machine's own path already.
 */
export function hostPathMounts(c = container(), volumes = podVolumes(), root = POD_ROOT) {
  return (c.volumeMounts ?? []).flatMap((m) => {
    const host = volumes.find((v) => v.name === m.name)?.hostPath?.path;
    if (!host) return [];
    const dev = m.mountPath.startsWith('/dev/');
    const at = dev || host === m.mountPath ? m.mountPath : join(root, m.mountPath);
    return [{ name: m.name, host, mountPath: m.mountPath, at, bind: dev || at !== host }];
  });
}

// runc's default device nodes in a container's /dev (libcontainer's DefaultSimpleDevices)
const DEV_NODES: [string, number, number][] = [
  ['null', 1, 3],
  ['zero', 1, 5],
  ['full', 1, 7],
  ['random', 1, 8],
  ['urandom', 1, 9],
  ['tty', 5, 0],
];

/**
 * The shell script (root, in the agent's own mount namespace) that builds the container's view
 * and then execs `"$@"`: the ServiceAccount, the hostPath volumes (taken before /dev is
 * replaced and /proc/sys made read-only: the kubelet takes them from the host's view), a fresh
 * /dev, /proc/sys and /sys read-only. `root`: where moved mountPaths go (POD_ROOT);
 * `serviceAccount: false` leaves the ServiceAccount out (an agent fed by a directory).
 */
export function agentMountScript(
  c = container(),
  volumes = podVolumes(),
  o: { root?: string; serviceAccount?: boolean } = {},
): string {
  const q = shQuote;
  const root = o.root ?? POD_ROOT;
  const mounts = hostPathMounts(c, volumes, root).filter((m) => m.bind);
  const stage = (name: string) => q(join(root, '.host', name)); // by volume: a name is one kind
  const lines = [
    ...(o.serviceAccount === false ? [] : [`mount --bind ${q(SA_DIR)} ${q(SA_MOUNT)}`]),
    `mkdir -p ${q(join(root, '.host'))}`,
  ];
  // stage each source: a directory's mountpoint is a directory, anything else a file
  for (const m of mounts) {
    lines.push(
      `if [ -d ${q(m.host)} ]; then mkdir -p ${stage(m.name)}; else : > ${stage(m.name)}; fi`,
    );
    lines.push(`mount --bind ${q(m.host)} ${stage(m.name)}`);
  }
  lines.push('mount -t tmpfs -o nosuid,mode=755 tmpfs /dev');
  for (const [name, major, minor] of DEV_NODES)
    lines.push(`mknod -m 666 /dev/${name} c ${major} ${minor}`);
  lines.push('ln -s /proc/self/fd /dev/fd', 'mkdir /dev/shm /dev/pts');
  for (const m of mounts) {
    const dir = `mkdir -p ${q(m.at)}`;
    const file = `mkdir -p ${q(dirname(m.at))} && : > ${q(m.at)}`;
    lines.push(`if [ -d ${stage(m.name)} ]; then ${dir}; else ${file}; fi`);
    lines.push(`mount --bind ${stage(m.name)} ${q(m.at)}`);
  }
  lines.push('mount --bind /proc/sys /proc/sys', 'mount -o remount,bind,ro /proc/sys');
  lines.push('mount -o remount,bind,ro /sys', 'exec "$@"');
  return lines.join(' && ');
}

/**
 * The ConfigMap's config.conf as the lab's agents read it (writeAgentConfig): on a dual-stack
 * topology deploy/dual-stack's, as `components: [dual-stack]` replaces it; its clusterCIDR the
 * topology's (kube-proxy's "v4[,v6]" form), as --service-cidr is.
 */
export function agentConfigText(t: Topology): string {
  const text = t.ipv6
    ? readFileSync(join(DEPLOY, 'dual-stack/config.conf'), 'utf8')
    : docs('configmap.yaml').find((d) => d?.kind === 'ConfigMap')?.data?.['config.conf'];
  if (typeof text !== 'string') throw new LabError('deploy/configmap.yaml: no data config.conf');
  const cidrs = t.ipv6 ? `${t.clusterCidr},${t.ipv6.clusterCidr}` : t.clusterCidr;
  return text.replace(/^clusterCIDR: .*$/m, `clusterCIDR: ${cidrs}`);
}

/** Writes the agents' config.conf (agentConfigText) where they read it; returns the path. */
export function writeAgentConfig(t: Topology): string {
  mkdirSync(API_DIR, { recursive: true });
  const file = join(API_DIR, 'config.conf');
  writeFileSync(file, agentConfigText(t));
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
  const moved = hostPathMounts(c).filter((m) => m.at !== m.mountPath);
  const args = c.args.map((a) => {
    const flag = a.split('=')[0]!;
    if (flag in lab) return `${flag}=${lab[flag]}`;
    const v = expand(a).replace(CONFIG_MOUNT, `${API_DIR}/`);
    return moved.reduce((x, m) => x.replace(`=${m.mountPath}`, `=${m.at}`), v);
  });
  const command = c.command.map((a, i) =>
    i === 0 && a === 'node' ? node : a.replace(IMAGE_ROOT, REPO),
  );
  // `sh -c` builds the container's view in the agent's own mount namespace (the
  // ServiceAccount where in-cluster config looks: the mountpoint lab up made, sa-mountpoint.ts),
  // then setpriv drops to the container's capabilities and execs the agent (one PID from
  // `ip netns exec` on, so the lab stops it as any other agent).
  return [
    'env',
    ...Object.entries(env).map(([k, v]) => `${k}=${v}`),
    'unshare',
    '-m',
    '--propagation',
    'private',
    'sh',
    '-c',
    agentMountScript(c),
    'sh',
    ...dropPrivilegesArgv(c),
    ...command,
    ...args,
    // a dual-stack topology: IPv6 ClusterIPs too (the IPv6 pod CIDR comes from the Node's podCIDRs)
    ...(t.ipv6 ? [`--service-cidr-v6=${t.ipv6.serviceCidr}`] : []),
    ...extra,
  ];
}

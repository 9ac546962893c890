// deploy/: the DaemonSet and its RBAC, loaded with @kubernetes/client-node's own YAML loader and
// serializer (kubectl's client dry run needs an API server, and none is reachable here). Checks
// the fields the agent relies on, that nothing is misspelt (a field the typed model does not know
// is lost in a round trip), and — by running the agent's API client against the fake API server
// and recording its calls — that the ClusterRole covers every list/watch the agent makes.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import {
  dumpYaml,
  KubeConfig,
  loadAllYaml,
  type V1ClusterRole,
  type V1ConfigMap,
  type V1DaemonSet,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { ChangeTracker } from '../../src/control/tracker.ts';
import { KubernetesSource } from '../../src/control/source-k8s.ts';
import { AGENT_NODE_OPTIONS } from '../../src/runtime.ts';
import { agentCapabilities, dropPrivilegesArgv } from '../../src/lab/daemonset.ts';
import { AGENT_CAPABILITIES } from '../../src/node/capabilities.ts';
import { API_HOST_PLACEHOLDER, readNodeFacts } from '../../src/node/cluster-config.ts';
import { addRunOptions } from '../../src/cli/run.ts';
import { mergeUnderFlags, readKubeProxyConfig } from '../../src/node/kube-proxy-config.ts';
import { type RunFlags, resolveRunConfig } from '../../src/node/options.ts';
import { FakeApiServer } from '../control/fake-apiserver.ts';

const DEPLOY = fileURLToPath(new URL('../../deploy/', import.meta.url));
const KUBETUN = fileURLToPath(new URL('../../bin/kubetun.mjs', import.meta.url));

const FILES = ['rbac.yaml', 'configmap.yaml', 'daemonset.yaml'];
type Raw = Record<string, unknown>;
/** the objects as plain YAML (our parser) and as the client library's typed model */
const raw: Raw[] = FILES.flatMap((f) =>
  parseAllDocuments(readFileSync(`${DEPLOY}${f}`, 'utf8')).map((d) => d.toJS() as Raw),
);
const models: Raw[] = FILES.flatMap((f) => loadAllYaml(readFileSync(`${DEPLOY}${f}`, 'utf8')));
const typed = (kind: string) => {
  const m = models.find((d) => d.kind === kind);
  if (!m) throw new Error(`deploy/ has no ${kind}`);
  return m as any;
};

/** Leaf paths of a plain object; the typed round trip must keep every one of them. */
function paths(o: unknown, p = ''): string[] {
  if (o === null || typeof o !== 'object') return [p];
  if (Array.isArray(o)) return o.flatMap((v, i) => paths(v, `${p}[${i}]`));
  return Object.entries(o).flatMap(([k, v]) => paths(v, p ? `${p}.${k}` : k));
}

describe('deploy/ manifests', () => {
  it('every object is a known kind and survives the typed round trip field for field', () => {
    const kinds = ['ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'DaemonSet', 'ServiceAccount'];
    expect(raw.map((d) => d.kind).sort()).toEqual(kinds);
    raw.forEach((d, i) => {
      const back = parseAllDocuments(dumpYaml(models[i]))[0].toJS();
      expect(paths(back).sort(), `${d.kind}`).toEqual(paths(d).sort());
    });
  });

  it('the DaemonSet runs like kube-proxy: host network, critical, tolerant, probes on :10256', () => {
    const ds = typed('DaemonSet') as V1DaemonSet;
    const pod = ds.spec!.template.spec!;
    expect(ds.metadata?.namespace).toBe('kube-system');
    expect(pod.hostNetwork).toBe(true);
    expect(pod.priorityClassName).toBe('system-node-critical');
    expect(pod.tolerations).toEqual([{ operator: 'Exists' }]);
    expect(pod.serviceAccountName).toBe(typed('ServiceAccount').metadata.name);
    const c = pod.containers[0];
    expect(c.livenessProbe?.httpGet).toMatchObject({ path: '/livez', port: 10256 });
    expect(c.readinessProbe?.httpGet).toMatchObject({ path: '/healthz', port: 10256 });
    expect(c.env?.find((e) => e.name === 'NODE_NAME')?.valueFrom?.fieldRef?.fieldPath).toBe(
      'spec.nodeName',
    );
    // the API server's address: a marked value the install docs say to set (not the kubelet's
    // `kubernetes` ClusterIP, which only a running proxy makes reachable)
    const env = (name: string) => c.env?.find((e) => e.name === name)?.value;
    expect(env('KUBERNETES_SERVICE_HOST')).toBe(API_HOST_PLACEHOLDER);
    expect(env('KUBERNETES_SERVICE_PORT')).toMatch(/^[0-9]+$/);
    const install = readFileSync(`${DEPLOY}../docs/cluster.md`, 'utf8').split('## Install')[1]!;
    expect(install).toContain(API_HOST_PLACEHOLDER);
    expect(install).toContain('KUBERNETES_SERVICE_PORT');
    const vol = (name: string) => pod.volumes!.find((v) => v.name === name);
    const mount = (name: string) => c.volumeMounts!.find((m) => m.name === name)?.mountPath;
    expect(vol('dev-net-tun')?.hostPath).toEqual({ path: '/dev/net/tun', type: 'CharDevice' });
    expect(mount('dev-net-tun')).toBe('/dev/net/tun');
    expect(vol('run-kubetun')?.hostPath?.path).toBe('/run/kubetun');
    expect(c.args).toContain('--ctl-socket=/run/kubetun/$(NODE_NAME).sock');
    expect(ds.spec!.selector.matchLabels).toEqual(
      Object.fromEntries(
        Object.entries(ds.spec!.template.metadata!.labels!).filter(([k]) => k === 'k8s-app'),
      ),
    );
  });

  it('is not privileged: drops ALL, adds exactly what the agent requires and the lab starts it with', () => {
    const ds = typed('DaemonSet') as V1DaemonSet;
    const sc = ds.spec!.template.spec!.containers[0].securityContext!;
    expect(sc.privileged).toBeUndefined();
    expect(sc.allowPrivilegeEscalation).toBe(false);
    expect(sc.capabilities?.drop).toEqual(['ALL']);
    expect(sc.capabilities?.add).toEqual([...AGENT_CAPABILITIES]);
    // the lab's API mode reads the same list from the file (src/lab/daemonset.ts)
    expect(agentCapabilities()).toEqual(sc.capabilities?.add);
    expect(dropPrivilegesArgv()).toContain(
      `--bounding-set=-all${AGENT_CAPABILITIES.map((c) => `,+${c.toLowerCase()}`).join('')}`,
    );
  });

  it("mounts the host's /proc/sys/net read-write where --proc-sys-net points", () => {
    const ds = typed('DaemonSet') as V1DaemonSet;
    const pod = ds.spec!.template.spec!;
    const c = pod.containers[0];
    const vol = pod.volumes!.find((v) => v.name === 'proc-sys-net');
    expect(vol?.hostPath).toEqual({ path: '/proc/sys/net', type: 'Directory' });
    const m = c.volumeMounts!.find((x) => x.name === 'proc-sys-net')!;
    expect(m.readOnly).toBeUndefined();
    expect(c.args).toContain(`--proc-sys-net=${m.mountPath}`);
  });

  it('the container args are flags `kubetun run` has, and --config points at the ConfigMap', () => {
    const ds = typed('DaemonSet') as V1DaemonSet;
    const c = ds.spec!.template.spec!.containers[0];
    // the agent's V8 options, as the lab starts it (src/runtime.ts AGENT_NODE_OPTIONS)
    expect(c.command).toEqual([
      'node',
      ...AGENT_NODE_OPTIONS,
      '/opt/kubetun/bin/kubetun.mjs',
      'run',
    ]);
    const help = spawnSync(process.execPath, [KUBETUN, 'run', '--help'], { encoding: 'utf8' });
    for (const a of c.args ?? []) {
      const flag = a.split('=')[0];
      expect(help.stdout, flag).toMatch(new RegExp(`\\s${flag}\\b`));
    }
    const config = c.args!.find((a) => a.startsWith('--config='))!.split('=')[1];
    const cm = typed('ConfigMap') as V1ConfigMap;
    const mount = c.volumeMounts!.find((m) => m.name === 'config')!;
    expect(config).toBe(`${mount.mountPath}/config.conf`);
    const cfgVol = ds.spec!.template.spec!.volumes!.find((v) => v.name === 'config')!;
    expect(cfgVol.configMap?.name).toBe(cm.metadata?.name);
    expect(Object.keys(cm.data ?? {})).toEqual(['config.conf']);
  });

  it('the ConfigMap is a KubeProxyConfiguration kubetun takes whole (no ignored setting)', () => {
    const cm = typed('ConfigMap') as V1ConfigMap;
    const tmp = `${process.env.TMPDIR ?? '/tmp'}/kt-deploy-config-${process.pid}.conf`;
    writeFileSync(tmp, cm.data!['config.conf']);
    const r = readKubeProxyConfig(tmp, 2);
    expect(r.notes).toEqual([]);
    expect(r.flags.clusterCidr).toBe('10.244.0.0/16');
    rmSync(tmp);
  });
});

// deploy/dual-stack/: a kustomize Component adding --service-cidr-v6 to the args and a
// config.conf whose clusterCIDR is kube-proxy's dual-stack form. Built with kubectl's own
// kustomize (offline), as `components: [dual-stack]` in deploy/kustomization.yaml builds it.
// Needs a kubectl whose kustomize knows Components (1.21 or later): this machine kind and CI
// have 1.32; the bootstrap installs none (Debian 12's kubernetes-client is 1.20, too old).
const KUBECTL = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).status === 0;

describe.skipIf(!KUBECTL)('deploy/dual-stack (kubectl kustomize)', () => {
  /** deploy/ with the component, as kubectl builds it: DaemonSet args and config.conf. */
  function built(): { args: string[]; conf: string } {
    // inside the worktree: kustomize takes only relative paths to bases and components
    const dir = mkdtempSync(join(DEPLOY, '..', '.deploy-test-'));
    try {
      const k = 'resources: [../deploy]\ncomponents: [../deploy/dual-stack]\n';
      writeFileSync(join(dir, 'kustomization.yaml'), k);
      const r = spawnSync('kubectl', ['kustomize', dir], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      const docs = loadAllYaml(r.stdout) as Raw[];
      const ds = docs.find((d) => d.kind === 'DaemonSet') as V1DaemonSet;
      const cm = docs.filter((d) => d.kind === 'ConfigMap') as V1ConfigMap[];
      expect(cm).toHaveLength(1); // replaced, not added beside
      return {
        args: ds.spec!.template.spec!.containers[0].args!,
        conf: cm[0].data!['config.conf'],
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it('adds --service-cidr-v6 and the dual-stack clusterCIDR, nothing else', () => {
    const base = (typed('DaemonSet') as V1DaemonSet).spec!.template.spec!.containers[0].args!;
    const { args, conf } = built();
    expect(args.filter((a) => !base.includes(a))).toEqual(['--service-cidr-v6=fd00:10:96::/112']);
    const baseConf = (typed('ConfigMap') as V1ConfigMap).data!['config.conf'];
    const other = (c: string) => c.split('\n').filter((l) => !l.startsWith('clusterCIDR:'));
    expect(other(conf)).toEqual(other(baseConf));
    // the IPv4 entry is the base's, the IPv6 one added
    const cidrOf = (c: string) => /^clusterCIDR: (.*)$/m.exec(c)?.[1];
    expect(cidrOf(conf)).toBe(`${cidrOf(baseConf)},fd00:10:244::/56`);
  });

  it("the agent's config from it (args over the file, as run.ts merges them) is dual-stack", () => {
    const { args, conf } = built();
    const cmd = addRunOptions(new Command('run').exitOverride());
    cmd.parse(args, { from: 'user' });
    const tmp = `${process.env.TMPDIR ?? '/tmp'}/kt-deploy-dual-${process.pid}.conf`;
    writeFileSync(tmp, conf);
    const read = readKubeProxyConfig(tmp, 2);
    rmSync(tmp);
    expect(read.notes).toEqual([]);
    const flags = mergeUnderFlags(
      cmd.opts() as RunFlags,
      read.flags,
      (k) => cmd.getOptionValueSource(k) === 'cli',
    );
    // what the Node object gives (run.ts withNodeFacts) and the downward API's node name
    const node = {
      nodeName: 'n1',
      nodeIp: '10.250.0.2',
      podCidr: '10.244.1.0/24',
      podCidrV6: 'fd00:10:244:1::/64',
      nodeIpV6: 'fd00:250::2',
    };
    const c = resolveRunConfig({ ...flags, ...node }, { cores: 2, inCluster: true });
    expect(c.serviceCidrV6).toBe('fd00:10:96::/112');
    expect(c.clusterCidr).toBe('10.244.0.0/16,fd00:10:244::/56');
    expect(c.datapath).toMatchObject({
      clusterCidr: '10.244.0.0/16',
      clusterCidr6: 'fd00:10:244::/56',
      nodeIp6: 'fd00:250::2',
    });
  });
});

describe('the ClusterRole covers every call the agent makes', () => {
  const api = new FakeApiServer();
  beforeAll(() => api.start());
  afterAll(() => api.stop());

  /** (apiGroup, resource, verb) of a request path, as the apiserver's RBAC sees it. */
  function rbacOf(r: { path: string; watch: boolean }) {
    const core = /^\/api\/v1\/([a-z]+)$/.exec(r.path);
    const group = /^\/apis\/([^/]+)\/[^/]+\/([a-z]+)$/.exec(r.path);
    const [apiGroup, resource] = core
      ? ['', core[1]]
      : group
        ? [group[1], group[2]]
        : ['?', r.path];
    return { apiGroup, resource, verb: r.watch ? 'watch' : 'list' };
  }

  it('informers (Services, EndpointSlices, its Node) and the Node facts lookup', async () => {
    api.upsert('Node', { metadata: { name: 'n1', namespace: '' }, spec: {} });
    const kc = new KubeConfig();
    kc.loadFromClusterAndUser(
      { name: 'fake', server: api.url, skipTLSVerify: true },
      { name: 'sa' },
    );
    const source = new KubernetesSource({
      kubeConfig: kc,
      sink: new ChangeTracker(),
      nodeName: 'n1',
    });
    await source.start();
    await readNodeFacts(kc, 'n1');
    await vi.waitFor(() => expect(api.requests.filter((r) => r.watch).length).toBe(3));
    await source.stop();
    const calls = new Set(api.requests.map((r) => JSON.stringify(rbacOf(r))));
    expect([...calls].sort()).toEqual(
      [
        { apiGroup: '', resource: 'services', verb: 'list' },
        { apiGroup: '', resource: 'services', verb: 'watch' },
        { apiGroup: 'discovery.k8s.io', resource: 'endpointslices', verb: 'list' },
        { apiGroup: 'discovery.k8s.io', resource: 'endpointslices', verb: 'watch' },
        { apiGroup: '', resource: 'nodes', verb: 'list' },
        { apiGroup: '', resource: 'nodes', verb: 'watch' },
      ]
        .map((c) => JSON.stringify(c))
        .sort(),
    );
    const role = typed('ClusterRole') as V1ClusterRole;
    const allowed = (c: { apiGroup: string; resource: string; verb: string }) =>
      role.rules!.some(
        (rule) =>
          rule.apiGroups!.includes(c.apiGroup) &&
          rule.resources!.includes(c.resource) &&
          rule.verbs.includes(c.verb),
      );
    for (const c of calls) expect(allowed(JSON.parse(c)), c).toBe(true);
    // and nothing more: every rule grants only what a call above used
    const granted = role.rules!.flatMap((rule) =>
      rule.apiGroups!.flatMap((g) =>
        rule.resources!.flatMap((res) =>
          rule.verbs.map((v) => JSON.stringify({ apiGroup: g, resource: res, verb: v })),
        ),
      ),
    );
    expect(granted.sort()).toEqual([...calls].sort());
  });
});

// The lab's API server pieces without root: the view and the topology's Nodes become the served
// objects, a sync upserts only what changed and removes what vanished (so a watcher sees one
// event per real change), and the agent's argv is the DaemonSet's container command line.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { AGENT_NODE_OPTIONS } from '../../src/runtime.ts';
import { API_DIR, desiredObjects, SA_DIR, SA_MOUNT, syncServer } from '../../src/lab/apiserver.ts';
import {
  agentCapabilities,
  agentConfigText,
  agentMountScript,
  container,
  daemonSetAgentArgv,
  dropPrivilegesArgv,
  hostPathMounts,
  POD_ROOT,
  podEnv,
} from '../../src/lab/daemonset.ts';
import { ListWatchServer } from '../../src/lab/list-watch-server.ts';
import { loadTopology } from '../../src/lab/topology.ts';

const ROOT = join(import.meta.dirname, '../..');
const t = loadTopology(join(ROOT, 'lab/topology.yaml'));
const svc = (port: number) => ({
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name: 'web', namespace: 'default', resourceVersion: '7' },
  spec: { clusterIP: '10.96.0.10', ports: [{ port }] },
});

describe('lab API server sync', () => {
  it("serves the Nodes with pod CIDR and InternalIP, and the view's Services; only changes are written", () => {
    const s = new ListWatchServer();
    const ns = { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'default' } };
    expect(syncServer(s, desiredObjects(t, [ns, svc(80)]))).toBe(t.nodes.length + 1);
    const node1 = s.stored('Node').get('/node1') as Record<string, any>;
    expect(node1.spec.podCIDR).toBe('10.244.1.0/24');
    expect(node1.status.addresses).toContainEqual({ type: 'InternalIP', address: '172.30.0.11' });
    const rv = s.rv;
    expect(syncServer(s, desiredObjects(t, [svc(80)]))).toBe(0); // the same view: no event
    expect(s.rv).toBe(rv);
    expect(syncServer(s, desiredObjects(t, [svc(81)]))).toBe(1);
    expect(syncServer(s, desiredObjects(t, []))).toBe(1); // the Service went away
    expect(s.stored('Service').size).toBe(0);
  });
});

describe('agent as the DaemonSet starts it', () => {
  it('runs the container command with its env, the ServiceAccount mounted, the lab overrides named', () => {
    const n = t.nodes[1]!;
    const argv = daemonSetAgentArgv(t, n, '/run/x/node2.sock', ['--no-offload'], '/usr/bin/node');
    expect(argv.slice(0, 4)).toEqual([
      'env',
      'KUBERNETES_SERVICE_HOST=172.30.0.11',
      'KUBERNETES_SERVICE_PORT=6443',
      'NODE_NAME=node2',
    ]);
    const sh = argv.indexOf('sh');
    expect(argv[sh + 2]).toContain(`mount --bind ${SA_DIR} ${SA_MOUNT}`);
    const priv = dropPrivilegesArgv();
    expect(argv.slice(sh + 3, sh + 4 + priv.length)).toEqual(['sh', ...priv]);
    expect(argv.slice(sh + 4 + priv.length)).toEqual([
      '/usr/bin/node',
      ...AGENT_NODE_OPTIONS, // the DaemonSet's command has them: deploy/daemonset.yaml
      join(ROOT, 'bin/kubetun.mjs'),
      'run',
      `--config=${API_DIR}/config.conf`,
      '--hostname-override=node2',
      '--service-cidr=10.96.0.0/16',
      '--uplink=eth0',
      '--ctl-socket=/run/x/node2.sock',
      `--proc-sys-net=${POD_ROOT}/host/proc/sys/net`,
      // the dual-stack topology: IPv6 ClusterIPs too (the IPv6 pod CIDR from the Node object)
      '--service-cidr-v6=fd00:10:96::/112',
      '--no-offload',
    ]);
  });

  it("reads the ConfigMap's config, deploy/dual-stack's on a dual-stack topology, with the topology's cluster CIDRs", () => {
    // the IPv6 cluster CIDR's masquerade decisions come from clusterCIDR's v4,v6 form, as
    // `components: [dual-stack]` ships it; --node-ip-v6 and --pod-cidr-v6 from the Node
    const dual = agentConfigText(t);
    expect(dual).toMatch(/^clusterCIDR: 10\.244\.0\.0\/16,fd00:10:244::\/56$/m);
    const v4 = agentConfigText(loadTopology(join(ROOT, 'lab/vagrant-topology.yaml')));
    expect(v4).toMatch(/^clusterCIDR: 10\.244\.0\.0\/16$/m);
    // the rest is the ConfigMap's, line for line
    const other = (s: string) => s.split('\n').filter((l) => !l.startsWith('clusterCIDR:'));
    expect(other(dual)).toEqual(other(v4));
  });

  it("builds the container's view: the manifest's hostPath volumes, a fresh /dev, /proc/sys and /sys read-only", () => {
    const script = agentMountScript().split(' && ');
    const at = (line: string) => {
      const i = script.indexOf(line);
      expect(i, line).toBeGreaterThanOrEqual(0);
      return i;
    };
    // every source is bound before /dev is replaced and /proc/sys made read-only (the kubelet
    // takes them from the host's view), then bound where the container mounts it
    const mounts = hostPathMounts().filter((m) => m.bind);
    expect(mounts.map((m) => [m.host, m.at])).toEqual([
      ['/dev/net/tun', '/dev/net/tun'],
      ['/proc/sys/net', `${POD_ROOT}/host/proc/sys/net`],
    ]);
    const devTmpfs = at('mount -t tmpfs -o nosuid,mode=755 tmpfs /dev');
    const ro = at('mount -o remount,bind,ro /proc/sys');
    mounts.forEach((m) => {
      const stage = `${POD_ROOT}/.host/${m.name}`;
      expect(at(`mount --bind ${m.host} ${stage}`)).toBeLessThan(devTmpfs);
      expect(at(`mount --bind ${stage} ${m.at}`)).toBeGreaterThan(devTmpfs);
      expect(at(`mount --bind ${stage} ${m.at}`)).toBeLessThan(ro);
    });
    at('mknod -m 666 /dev/null c 1 3');
    at('mount -o remount,bind,ro /sys');
    expect(script.at(-1)).toBe('exec "$@"');
  });

  it('refuses a privileged container: the lab emulates drop ALL plus add only', () => {
    const c = container();
    expect(() => agentCapabilities({ ...c, securityContext: { privileged: true } })).toThrow(
      /privileged.*not emulated/,
    );
    const caps = { drop: ['ALL'], add: ['NET_ADMIN', 'NET_RAW'] };
    expect(dropPrivilegesArgv({ ...c, securityContext: { capabilities: caps } })).toEqual([
      'setpriv',
      '--bounding-set=-all,+net_admin,+net_raw',
      '--inh-caps=-all',
      '--',
    ]);
  });

  it("sets the API server through the manifest's KUBERNETES_SERVICE_HOST/PORT fields, over the kubelet's ClusterIP", () => {
    const c = container();
    const n = t.nodes[0]!;
    expect(podEnv(c, t, n)).toMatchObject({
      KUBERNETES_SERVICE_HOST: '172.30.0.11',
      KUBERNETES_SERVICE_PORT: '6443',
    });
    // without the fields the kubelet's value stands: the `kubernetes` ClusterIP, port 443
    const env = c.env!.filter((e) => !e.name.startsWith('KUBERNETES_SERVICE_'));
    expect(podEnv({ ...c, env }, t, n)).toEqual({
      KUBERNETES_SERVICE_HOST: '10.96.0.1',
      KUBERNETES_SERVICE_PORT: '443',
      NODE_NAME: 'node1',
    });
  });
});

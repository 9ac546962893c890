// kubetun run as kube-proxy's DaemonSet runs it (issue 21 point 2): a KubeProxyConfiguration
// file under the flags, the node's facts from its Node object, in-cluster API config (HTTPS +
// the ServiceAccount token, against the fake API server), and the metrics port's /proxyMode and
// /configz that Kubernetes e2e "should check kube-proxy urls" reads.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { ProxyMetrics, startMetricsServer } from '../../src/control/metrics.ts';
import {
  API_HOST_PLACEHOLDER,
  loadKubeConfig,
  nodeFacts,
  readNodeFacts,
} from '../../src/node/cluster-config.ts';
import {
  configzBody,
  goDurationMs,
  mergeUnderFlags,
  readKubeProxyConfig,
} from '../../src/node/kube-proxy-config.ts';
import { FakeApiServer } from '../control/fake-apiserver.ts';

const dir = mkdtempSync(join(tmpdir(), 'kt-cluster-config-'));
const KUBETUN = fileURLToPath(new URL('../../bin/kubetun.mjs', import.meta.url));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

// The shape kubeadm writes into the kube-proxy ConfigMap (config.conf), trimmed to what matters.
const KUBEADM = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
bindAddress: 0.0.0.0
clientConnection:
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
clusterCIDR: 10.244.0.0/16
conntrack:
  maxPerCore: 32768
  min: 131072
  tcpCloseWaitTimeout: 1h0m0s
  tcpEstablishedTimeout: 24h0m0s
healthzBindAddress: ""
ipvs:
  scheduler: rr
metricsBindAddress: 0.0.0.0:10249
mode: iptables
nodePortAddresses: [192.168.0.0/16]
iptables:
  syncPeriod: 30s
  minSyncPeriod: 1s
`;

describe('KubeProxyConfiguration file', () => {
  it('becomes kubetun run flags, with a line for each setting kubetun does not take', () => {
    const r = readKubeProxyConfig(file('kubeadm.yaml', KUBEADM), 8);
    expect(r.flags).toEqual({
      kubeconfig: '/var/lib/kube-proxy/kubeconfig.conf',
      clusterCidr: '10.244.0.0/16',
      metricsBindAddress: '0.0.0.0:10249',
      syncPeriod: '30000',
      minSyncPeriod: '1000',
      scheduler: 'rr',
      ctMax: String(32768 * 8), // max(maxPerCore x cores, min)
      ctTimeout: 'tcp-established=86400,tcp-close-wait=3600',
    });
    expect(r.notes).toEqual([
      expect.stringMatching(/kubeadm\.yaml: bindAddress: no kubetun equivalent; ignored$/),
      expect.stringMatching(/: mode: kubetun is its own data plane; the mode is ignored$/),
      expect.stringMatching(/: nodePortAddresses: NodePorts are served on the node IP only$/),
    ]);
    expect(readKubeProxyConfig(file('few-cores.yaml', KUBEADM), 2).flags.ctMax).toBe('131072');
  });

  it('a malformed value is refused naming the file and the field', () => {
    const bad = file('bad.yaml', KUBEADM.replace('24h0m0s', '24 hours'));
    expect(() => readKubeProxyConfig(bad, 2)).toThrow(
      `${bad}: conntrack.tcpEstablishedTimeout: expected a duration like "30s" or "1h0m0s", got "24 hours"`,
    );
    const kind = file(
      'kind.yaml',
      KUBEADM.replace('KubeProxyConfiguration', 'KubeletConfiguration'),
    );
    expect(() => readKubeProxyConfig(kind, 2)).toThrow(
      `${kind}: kind: expected KubeProxyConfiguration`,
    );
  });

  it('detectLocalMode and detectLocal become the --detect-local-mode flags', () => {
    const f = file(
      'detect.yaml',
      `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
detectLocalMode: BridgeInterface
detectLocal:
  bridgeInterface: cni0
  interfaceNamePrefix: ""
`,
    );
    const r = readKubeProxyConfig(f, 2);
    expect(r.flags).toEqual({ detectLocalMode: 'BridgeInterface', podBridgeInterface: 'cni0' });
    expect(r.notes).toEqual([]);
  });

  it('reads Go durations as kube-proxy writes them', () => {
    expect(goDurationMs('1h0m0s', 'f', 'x')).toBe(3_600_000);
    expect(goDurationMs('1m30s', 'f', 'x')).toBe(90_000);
    expect(goDurationMs('500ms', 'f', 'x')).toBe(500);
    expect(goDurationMs('0', 'f', 'x')).toBe(0);
    expect(() => goDurationMs('', 'f', 'x')).toThrow(/expected a duration/);
  });

  it('flags typed on the command line win over the file', () => {
    const merged = mergeUnderFlags(
      { scheduler: 'maglev', clusterCidr: '10.0.0.0/8' },
      { scheduler: 'rr', clusterCidr: '10.244.0.0/16', ctMax: '9' },
      (k) => k === 'scheduler',
    );
    expect(merged).toEqual({ scheduler: 'maglev', clusterCidr: '10.244.0.0/16', ctMax: '9' });
  });

  it('kubetun run --config with a bad file: one line naming file and field, exit 2', () => {
    const bad = file('bad-cli.yaml', KUBEADM.replace('30s', 'thirty'));
    const r = spawnSync(process.execPath, [KUBETUN, 'run', '--config', bad, '--manifests', dir], {
      encoding: 'utf8',
    });
    expect(r.status).toBe(2);
    expect(r.stderr.trim()).toBe(
      `kubetun run: ${bad}: iptables.syncPeriod: expected a duration like "30s" or "1h0m0s", got "thirty"`,
    );
  });
});

describe('metrics port URLs kube-proxy serves', () => {
  let close: (() => Promise<void>) | undefined;
  afterEach(async () => close?.());

  it('/proxyMode, /healthz and /configz answer as kube-proxy does; others are 404', async () => {
    const view = {
      nodeName: 'node1',
      clusterCidr: '10.244.0.0/16',
      healthzBindAddress: '0.0.0.0:10256',
      metricsBindAddress: '127.0.0.1:0',
      syncPeriodMs: 30_000,
      minSyncPeriodMs: 1000,
      scheduler: 'random',
      ctMax: 131072,
      ctTcpEstablishedSec: 86400,
      ctTcpCloseWaitSec: 3600,
      ctUdpSec: 30,
      ctUdpStreamSec: 120,
      detectLocalMode: 'BridgeInterface',
      bridgeInterface: 'cni0',
      interfaceNamePrefix: '',
    };
    const h = await startMetricsServer(new ProxyMetrics(), {
      host: '127.0.0.1',
      port: 0,
      configz: () => configzBody(view),
    });
    close = h.close;
    const base = `http://127.0.0.1:${h.port}`;
    const mode = await fetch(`${base}/proxyMode`);
    expect(mode.status).toBe(200);
    expect(mode.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(await mode.text()).toBe('kubetun');
    expect(await (await fetch(`${base}/healthz`)).text()).toBe('ok');
    const cz = (await (await fetch(`${base}/configz`)).json()) as Record<string, any>;
    const kpc = cz['kubeproxy.config.k8s.io'];
    expect(kpc).toMatchObject({
      kind: 'KubeProxyConfiguration',
      hostnameOverride: 'node1',
      syncPeriod: '30s',
      minSyncPeriod: '1s',
      conntrack: { tcpEstablishedTimeout: '86400s', tcpCloseWaitTimeout: '3600s' },
      detectLocalMode: 'BridgeInterface',
      detectLocal: { bridgeInterface: 'cni0' },
    });
    expect((await fetch(`${base}/nope`)).status).toBe(404);
  });
});

describe("the node's facts from its Node object", () => {
  const node = {
    metadata: { name: 'node1', namespace: '', labels: { 'topology.kubernetes.io/zone': 'zone-a' } },
    spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['fd00:10:244:1::/64', '10.244.1.0/24'] },
    status: {
      addresses: [
        { type: 'Hostname', address: 'node1' },
        { type: 'InternalIP', address: 'fd00::11' },
        { type: 'InternalIP', address: '172.30.0.11' },
      ],
    },
  };

  it('InternalIP (IPv4), the IPv4 pod CIDR and the zone label; the IPv6 pod CIDR and InternalIP of a dual-stack node', () => {
    expect(nodeFacts(node)).toEqual({
      ip: '172.30.0.11',
      ip6: 'fd00::11',
      podCidr: '10.244.1.0/24',
      podCidr6: 'fd00:10:244:1::/64',
      zone: 'zone-a',
    });
    // canonical text (it goes into a tc match); a single-stack node has none
    const upper = { spec: { podCIDRs: ['10.244.1.0/24', 'FD00:10:244:0001:0::/64'] } };
    expect(nodeFacts(upper).podCidr6).toBe('fd00:10:244:1::/64');
    expect(nodeFacts({ spec: { podCIDR: '10.244.1.0/24' } })).not.toHaveProperty('podCidr6');
    // the IPv6 InternalIP (--node-ip-v6), canonical; an ExternalIP is not the node's own
    const v6 = [
      { type: 'ExternalIP', address: 'fd00::99' },
      { type: 'InternalIP', address: 'FD00:0::0011' },
    ];
    expect(nodeFacts({ status: { addresses: v6 } }).ip6).toBe('fd00::11');
    expect(
      nodeFacts({ status: { addresses: [{ type: 'ExternalIP', address: '192.0.2.7' }] } }),
    ).toEqual({ ip: '192.0.2.7', podCidr: undefined, zone: undefined });
  });

  it('in-cluster config: HTTPS to KUBERNETES_SERVICE_HOST with the ServiceAccount token and CA', async () => {
    const sa = join(dir, 'sa');
    const saDir = join(sa, 'var/run/secrets/kubernetes.io/serviceaccount');
    mkdirSync(saDir, { recursive: true });
    const key = join(dir, 'key.pem');
    const cert = join(saDir, 'ca.crt'); // self-signed: the CA is the certificate itself
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=127.0.0.1',
        '-addext',
        'subjectAltName=IP:127.0.0.1',
        '-keyout',
        key,
        '-out',
        cert,
      ],
      { stdio: 'ignore' },
    );
    writeFileSync(join(saDir, 'token'), 'sa-token-123');
    writeFileSync(join(saDir, 'namespace'), 'kube-system');
    const api = new FakeApiServer();
    await api.start({ key: readFileSync(key, 'utf8'), cert: readFileSync(cert, 'utf8') });
    api.upsert('Node', node);
    const saved = {
      host: process.env.KUBERNETES_SERVICE_HOST,
      port: process.env.KUBERNETES_SERVICE_PORT,
    };
    process.env.KUBERNETES_SERVICE_HOST = '127.0.0.1';
    process.env.KUBERNETES_SERVICE_PORT = String(api.port);
    try {
      const kc = loadKubeConfig(undefined, sa);
      expect(kc.getCurrentCluster()?.server).toBe(`https://127.0.0.1:${api.port}`);
      expect(await readNodeFacts(kc, 'node1')).toEqual({
        ip: '172.30.0.11',
        ip6: 'fd00::11',
        podCidr: '10.244.1.0/24',
        podCidr6: 'fd00:10:244:1::/64',
        zone: 'zone-a',
      });
      expect(api.lastAuthorization).toBe('Bearer sa-token-123');
      await expect(readNodeFacts(kc, 'node9')).rejects.toThrow(
        "no Node named node9: set --node-name (or NODE_NAME) to this node's name",
      );
    } finally {
      process.env.KUBERNETES_SERVICE_HOST = saved.host;
      process.env.KUBERNETES_SERVICE_PORT = saved.port;
      if (saved.host === undefined) delete process.env.KUBERNETES_SERVICE_HOST;
      if (saved.port === undefined) delete process.env.KUBERNETES_SERVICE_PORT;
      await api.stop();
    }
  });

  it('outside a Pod and without --kubeconfig: a message saying what to give', () => {
    const saved = process.env.KUBERNETES_SERVICE_HOST;
    delete process.env.KUBERNETES_SERVICE_HOST;
    try {
      expect(() => loadKubeConfig(undefined)).toThrow(/give --kubeconfig FILE, or run in a Pod/);
    } finally {
      if (saved !== undefined) process.env.KUBERNETES_SERVICE_HOST = saved;
    }
  });

  it("with deploy/daemonset.yaml's API server address left unset: says to set it", () => {
    const saved = [process.env.KUBERNETES_SERVICE_HOST, process.env.KUBERNETES_SERVICE_PORT];
    process.env.KUBERNETES_SERVICE_HOST = API_HOST_PLACEHOLDER;
    process.env.KUBERNETES_SERVICE_PORT = '6443';
    try {
      expect(() => loadKubeConfig(undefined)).toThrow(
        /set it \(and KUBERNETES_SERVICE_PORT\) in deploy\/daemonset.yaml's env to your API server's address/,
      );
    } finally {
      for (const [k, v] of [
        ['KUBERNETES_SERVICE_HOST', saved[0]],
        ['KUBERNETES_SERVICE_PORT', saved[1]],
      ] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });
});

// Real kubectl output for the admission tests. `kubectl create|run|expose ... --dry-run=client
// -o yaml` needs no cluster, but kubectl still reads the API's discovery documents first; a tiny
// discovery-only server (no objects, nothing is ever created) answers them.
//
// Every case is also committed under test/fixtures/kubectl/, so the tests run where kubectl is
// absent; where it is present they check the committed copy is still what kubectl prints.
// Regenerate the copies: npx tsx test/cluster/kubectl.ts --write
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';

export const FIXTURES = join(import.meta.dirname, '..', 'fixtures', 'kubectl');

/** name → kubectl arguments (without --dry-run/-o, which are added). */
export const KUBECTL_CASES: Record<string, string[]> = {
  'svc-clusterip': ['create', 'service', 'clusterip', 'foo', '--tcp=80:8080'],
  'svc-clusterip-multi': ['create', 'service', 'clusterip', 'multi', '--tcp=80:8080,443:8443'],
  'svc-headless': ['create', 'service', 'clusterip', 'hl', '--clusterip=None'],
  'svc-nodeport': ['create', 'service', 'nodeport', 'np', '--tcp=80:8080'],
  'svc-nodeport-fixed': [
    'create',
    'service',
    'nodeport',
    'npf',
    '--tcp=80:8080',
    '--node-port=30080',
  ],
  'svc-loadbalancer': ['create', 'service', 'loadbalancer', 'lb', '--tcp=443:8443'],
  'svc-externalname': ['create', 'service', 'externalname', 'ext', '--external-name=example.com'],
  'deploy-web': ['create', 'deployment', 'web', '--image=nginx', '--port=8080', '--replicas=3'],
  // the Deployment behind svc-clusterip's Service foo (test/lab/cluster-dns.test.ts applies both)
  'deploy-foo': ['create', 'deployment', 'foo', '--image=nginx', '--port=8080', '--replicas=2'],
  'pod-run': ['run', 'pod-a', '--image=nginx', '--port=8080', '--labels=app=web'],
  'ns-demo': ['create', 'namespace', 'demo'],
};

const res = (kind: string, name: string, namespaced = true) => ({
  name,
  singularName: '',
  namespaced,
  kind,
  verbs: ['create', 'get', 'list', 'delete', 'patch', 'update', 'watch'],
});

const DISCOVERY: Record<string, unknown> = {
  '/api': { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [] },
  '/api/v1': {
    kind: 'APIResourceList',
    groupVersion: 'v1',
    resources: [
      res('Pod', 'pods'),
      res('Service', 'services'),
      res('Namespace', 'namespaces', false),
    ],
  },
  '/apis': {
    kind: 'APIGroupList',
    apiVersion: 'v1',
    groups: [
      {
        name: 'apps',
        versions: [{ groupVersion: 'apps/v1', version: 'v1' }],
        preferredVersion: { groupVersion: 'apps/v1', version: 'v1' },
      },
    ],
  },
  '/apis/apps/v1': {
    kind: 'APIResourceList',
    groupVersion: 'apps/v1',
    resources: [res('Deployment', 'deployments')],
  },
};

/** Runs every case through kubectl; undefined when kubectl is not installed. */
export async function kubectlOutputs(): Promise<Record<string, string> | undefined> {
  const run = promisify(execFile);
  try {
    await run('kubectl', ['version', '--client']);
  } catch {
    return undefined;
  }
  const server = http.createServer((req, res) => {
    const body = DISCOVERY[(req.url ?? '').split('?')[0]];
    res.writeHead(body ? 200 : 404, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body ?? { kind: 'Status', code: 404 }));
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // kubectl writes its discovery cache under $HOME/.kube: a home of its own, removed after
  // (HOME=/nonexistent made kubectl create /nonexistent/.kube on the machine)
  const home = mkdtempSync(join(tmpdir(), 'kt-kubectl-home-'));
  try {
    const out: Record<string, string> = {};
    for (const [name, args] of Object.entries(KUBECTL_CASES)) {
      const flags = [
        '--server',
        url,
        '--kubeconfig',
        '/dev/null',
        '--dry-run=client',
        '-o',
        'yaml',
      ];
      out[name] = (
        await run('kubectl', [...args, ...flags], { env: { ...process.env, HOME: home } })
      ).stdout;
    }
    return out;
  } finally {
    server.close();
    rmSync(home, { recursive: true, force: true });
  }
}

export function committedFixture(name: string): string {
  return readFileSync(join(FIXTURES, `${name}.yaml`), 'utf8');
}

if (process.argv.includes('--write')) {
  const outs = await kubectlOutputs();
  if (!outs) throw new Error('kubectl is not installed');
  for (const [name, text] of Object.entries(outs))
    writeFileSync(join(FIXTURES, `${name}.yaml`), text);
  console.log(`wrote ${Object.keys(outs).length} files to ${FIXTURES}`);
}

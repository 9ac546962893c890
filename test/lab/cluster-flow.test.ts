// The lab as a small cluster (root), the flow README and lab/README.md show:
//
//   lab up ──▶ Deployment api (lab/manifests/api.yaml): 2 Pods, generated names, one per node,
//              filling the slices of Service api (10.96.0.70) and headless api-headless
//   pod-a ──▶ kube-dns 10.96.0.53 (a VIP: every answer crossed the data plane) ──▶ coredns Pods:
//              A, headless A, SRV, ExternalName CNAME, PTR, NXDOMAIN, over UDP and TCP
//   tcpdump in pod-a: the ndots:5 search expansion of web.default and example.com
//   lab apply of real `kubectl create … --dry-run=client -o yaml` output; lab exec in any Pod;
//   allocation conflicts refused naming file, object and field
//
// Run beside other labs with a prefix: KUBETUN_LAB_PREFIX=kf- npx vitest run test/lab/cluster-flow.test.ts
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Pod, Service } from '../../src/cluster/types.ts';
import { labDown, labUp } from '../../src/lab/lab.ts';
import { LAB_PREFIX } from '../../src/lab/topology.ts';
import { isReady, kubetun, list, readyAddresses, until } from './living.ts';

const ROOT = join(import.meta.dirname, '../..');
const FIXTURES = join(ROOT, 'test/fixtures/kubectl');
const dir = mkdtempSync(join(tmpdir(), 'kubetun-flow-'));
const POD_A = `${LAB_PREFIX}pod-a`;
const CLUSTER = ['default.svc.cluster.local', 'svc.cluster.local', 'cluster.local'];

function inPodA(script: string, timeout = 60_000): { out: string; status: number } {
  const r = spawnSync('ip', ['netns', 'exec', POD_A, 'sh', '-c', script], {
    encoding: 'utf8',
    timeout,
  });
  return { out: r.stdout, status: r.status ?? -1 };
}

/** dig from pod-a to the kube-dns ClusterIP; a lost datagram on a loaded machine is retried. */
const dig = (args: string) => inPodA(`dig +time=2 +tries=3 @10.96.0.53 ${args}`).out;
const lines = (s: string) => s.trim().split('\n').filter(Boolean).sort();

async function readyPods(app: string, n: number): Promise<Pod[]> {
  return until(
    120_000,
    async () => (await list<Pod>('Pod', `app=${app}`)).filter(isReady),
    (v) => v.length === n,
  );
}

/** tcpdump -n on pod-a's eth0 while fn runs: the lines it printed. */
async function captured(filter: string, fn: () => void): Promise<string[]> {
  const p = spawn('ip', ['netns', 'exec', POD_A, 'tcpdump', '-l', '-n', '-i', 'eth0', filter], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  p.stdout.on('data', (d) => {
    out += d;
  });
  p.stderr.on('data', (d) => {
    err += d;
  });
  await until(
    10_000,
    () => err,
    (e) => e.includes('listening on'),
  );
  fn();
  await sleep(1000);
  const gone = new Promise((r) => p.once('exit', r));
  p.kill('SIGINT');
  await gone;
  return out.split('\n');
}

/** The names asked for (A), in order, each once. */
const asked = (capture: string[]) =>
  capture
    .map((l) => / A\? (\S+)\. /.exec(l)?.[1])
    .filter((n): n is string => n !== undefined)
    .filter((n, i, all) => all.indexOf(n) === i);

describe('the lab as a cluster', () => {
  let api: Pod[] = [];
  let apiIPs: string[] = [];

  beforeAll(async () => {
    await labDown();
    await labUp({ mode: 'kubetun' });
    api = await readyPods('api', 2);
    apiIPs = api.map((p) => p.status!.podIP!).sort();
  }, 300_000);
  afterAll(async () => {
    await labDown();
  }, 240_000);

  it('lab up brings up Deployment api: Pods with generated names, one per node, filling the Services slices', async () => {
    expect(api.map((p) => p.metadata.name)).toEqual(
      api.map(() => expect.stringMatching(/^api-[a-z0-9]+-[a-z0-9]{5}$/)),
    );
    expect(api.map((p) => p.metadata.ownerReferences?.[0]?.kind)).toEqual([
      'ReplicaSet',
      'ReplicaSet',
    ]);
    expect(api.map((p) => p.spec.nodeName).sort()).toEqual(['node1', 'node2']);
    expect(
      await until(
        15_000,
        () => readyAddresses('api'),
        (v) => v.length === 2,
      ),
    ).toEqual(apiIPs);
    expect(await readyAddresses('api-headless')).toEqual(apiIPs);
    const slices = kubetun([
      'lab',
      'get',
      'endpointslices',
      '-l',
      'kubernetes.io/service-name=api',
    ]);
    expect(slices.out).toMatch(/^api-[a-z0-9]{5}\s+IPv4\s+8080\s+10\.244\.\d+\.\d+,10\.244\./m);
    // named pod → Service name (cluster DNS) → ClusterIP (the data plane) → a Deployment Pod
    const r = kubetun(['lab', 'exec', 'pod-a', '--', 'curl', '-s', '-m', '5', 'http://api/']);
    expect(r.out).toMatch(/^api-\S+ 10\.244\.[12]\.\d+\n$/);
    expect(apiIPs).toContain(r.out.trim().split(' ')[1]);
  }, 240_000);

  it('lab exec runs in any Pod of the store: a Deployment Pod by name, a kube-system Pod with -n', async () => {
    const name = api[0]!.metadata.name;
    const r = kubetun(['lab', 'exec', name, '--', 'curl', '-s', '-m', '5', 'http://web/']);
    expect(r.out).toMatch(/^pod-[abc] 10\.244\.[12]\.\d+\n$/);
    const [dns] = await list<Pod>('Pod', 'k8s-app=kube-dns', 'kube-system');
    const addr = kubetun([
      'lab',
      'exec',
      '-n',
      'kube-system',
      dns!.metadata.name,
      '--',
      'ip',
      '-4',
      '-o',
      'addr',
      'show',
      'eth0',
    ]);
    expect(addr.out).toContain(`inet ${dns!.status!.podIP}/32`);
    const none = kubetun(['lab', 'exec', 'no-such-pod', '--', 'true']);
    expect(none.status).not.toBe(0);
    expect(none.err).toMatch(/no Pod "no-such-pod" in namespace default/);
    expect(none.err).not.toMatch(/\n\s+at /); // no stack trace
  }, 240_000);

  it('cluster DNS answers every record kind through the kube-dns ClusterIP, over UDP and TCP', async () => {
    const ext = kubetun(['lab', 'apply', '-f', join(FIXTURES, 'svc-externalname.yaml')]);
    expect(ext.out).toContain('service/ext created');
    // A of a ClusterIP Service, over UDP and over TCP (kube-dns serves both ports)
    expect(dig('+short web.default.svc.cluster.local').trim()).toBe('10.96.0.10');
    expect(dig('+tcp +short api.default.svc.cluster.local').trim()).toBe('10.96.0.70');
    // headless: the ready Pods' own addresses
    expect(lines(dig('+short api-headless.default.svc.cluster.local'))).toEqual(apiIPs);
    // SRV: a ClusterIP Service's port names the Service; a headless one's names each Pod
    expect(dig('+short SRV _http._tcp.api.default.svc.cluster.local').trim()).toBe(
      '0 100 80 api.default.svc.cluster.local.',
    );
    expect(lines(dig('+short SRV _http._tcp.api-headless.default.svc.cluster.local'))).toEqual(
      apiIPs.map((ip) =>
        expect.stringMatching(
          new RegExp(
            `^0 \\d+ 8080 ${ip.replaceAll('.', '-')}\\.api-headless\\.default\\.svc\\.cluster\\.local\\.$`,
          ),
        ),
      ),
    );
    // ExternalName: a CNAME to spec.externalName (kubectl create service externalname output)
    expect(
      await until(
        10_000,
        () => dig('+noall +answer ext.default.svc.cluster.local'),
        (v) => v.includes('CNAME'),
      ),
    ).toMatch(/^ext\.default\.svc\.cluster\.local\.\s+\d+\s+IN\s+CNAME\s+example\.com\.$/m);
    // PTR of a ClusterIP
    expect(dig('+short -x 10.96.0.10').trim()).toBe('web.default.svc.cluster.local.');
    // nothing of that name: NXDOMAIN, authoritative
    const nx = dig('nothing-here.default.svc.cluster.local');
    expect(nx).toMatch(/status: NXDOMAIN/);
    expect(nx).toMatch(/flags: qr aa/);
  }, 240_000);

  it('tcpdump in a Pod sees the ndots:5 search expansion, the answers coming back from the VIP', async () => {
    const resolv = inPodA('cat /etc/resolv.conf').out;
    expect(resolv).toMatch(/^nameserver 10\.96\.0\.53$/m);
    expect(resolv).toMatch(/^options ndots:5$/m);
    const search = /^search (.+)$/m.exec(resolv)![1]!.split(/\s+/);
    expect(search.slice(0, 3)).toEqual(CLUSTER);
    let hosts = '';
    const capture = await captured('udp port 53', () => {
      hosts = inPodA('getent ahostsv4 web.default').out;
      inPodA('getent ahostsv4 example.com');
    });
    expect(hosts).toMatch(/^10\.96\.0\.10\s/);
    const names = asked(capture);
    // web.default has 1 dot < 5: the first search domain is tried first, the second answers
    expect(names.slice(0, 2)).toEqual([
      'web.default.default.svc.cluster.local',
      'web.default.svc.cluster.local',
    ]);
    // example.com: every search domain, in order, before the name itself (a node search domain
    // outside the cluster is REFUSED, which ends libc's search; none here: the bare name last)
    const ex = names.filter((n) => n.startsWith('example.com'));
    const expected = [...search.map((d) => `example.com.${d}`), 'example.com'];
    expect(ex.slice(0, 3)).toEqual(CLUSTER.map((d) => `example.com.${d}`));
    expect(ex).toEqual(expected.slice(0, ex.length));
    if (search.length === 3) expect(ex).toEqual(expected);
    // the queries go to the VIP and the answers come back from it (reverse NAT on the node)
    expect(capture.some((l) => / > 10\.96\.0\.53\.53: \d+\+ A\? example\.com\./.test(l))).toBe(
      true,
    );
    expect(
      capture.some((l) => /IP 10\.96\.0\.53\.53 > 10\.244\.1\.2\.\d+: \d+ NXDomain\*/.test(l)),
    ).toBe(true);
  }, 240_000);

  it('takes kubectl create output unchanged: Deployment foo and Service foo fill a slice, answer by name, scale', async () => {
    for (const f of ['deploy-foo', 'svc-clusterip']) {
      const r = kubetun(['lab', 'apply', '-f', join(FIXTURES, `${f}.yaml`)]);
      expect(r.err).toBe('');
    }
    const [svc] = await list<Service>('Service', 'app=foo');
    // allocated by the control plane (kubectl gives no clusterIP), from the service CIDR
    expect(svc!.spec.clusterIP).toMatch(/^10\.96\.\d+\.\d+$/);
    const foo = (await readyPods('foo', 2)).map((p) => p.status!.podIP!).sort();
    expect(
      await until(
        15_000,
        () => readyAddresses('foo'),
        (v) => v.length === 2,
      ),
    ).toEqual(foo);
    const body = await until(
      15_000,
      () => inPodA('curl -s -m 3 http://foo/').out,
      (v) => v.startsWith('foo-'),
    );
    expect(foo).toContain(body.trim().split(' ')[1]);
    expect(kubetun(['lab', 'get', 'svc', 'foo']).out).toContain(svc!.spec.clusterIP);
    expect(kubetun(['lab', 'scale', 'deploy/foo', '--replicas', '3']).out).toBe(
      'deployment.apps/foo scaled\n',
    );
    await readyPods('foo', 3);
    expect(
      await until(
        15_000,
        () => readyAddresses('foo'),
        (v) => v.length === 3,
      ),
    ).toHaveLength(3);
  }, 180_000);

  it('refuses allocation conflicts naming file, object and field, and keeps what it had', async () => {
    const file = join(dir, 'clash.yaml');
    const svc = (name: string, spec: string) =>
      `apiVersion: v1\nkind: Service\nmetadata: { name: ${name} }\nspec:\n${spec}`;
    writeFileSync(
      file,
      [
        svc('taken-ip', '  clusterIP: 10.96.0.10\n  ports: [{ port: 80 }]\n'),
        svc('outside', '  clusterIP: 10.97.0.5\n  ports: [{ port: 80 }]\n'),
        svc('taken-port', '  type: NodePort\n  ports: [{ port: 80, nodePort: 30080 }]\n'),
        svc('low-port', '  type: NodePort\n  ports: [{ port: 80, nodePort: 8080 }]\n'),
      ].join('---\n'),
    );
    const r = kubetun(['lab', 'apply', '-f', file]);
    expect(r.status).not.toBe(0);
    for (const [name, field] of [
      ['taken-ip', 'spec.clusterIP'],
      ['outside', 'spec.clusterIP'],
      ['taken-port', 'spec.ports[0].nodePort'],
      ['low-port', 'spec.ports[0].nodePort'],
    ])
      expect(r.err).toContain(`${file}: Service default/${name}: ${field}`);
    expect(r.err).not.toMatch(/\n\s+at /);
    const got = (await list<Service>('Service')).map((s) => s.metadata.name);
    expect(got).not.toContain('taken-ip');
    expect(got).not.toContain('taken-port');
    expect(inPodA('curl -s -m 3 http://10.96.0.10/').out).toMatch(/^pod-[abc] /);
  }, 240_000);
});

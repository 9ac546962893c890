// Exercises as data (lab/exercises/*.yaml, src/lab/exercise/spec.ts), offline: every shipped
// exercise loads and is complete; a broken file is refused naming the file and the field; the
// answer rules and the KUBE-SEP walk the kube-proxy-chains exercise grades with; what each
// exercise needs of its lab, why the VM lab refuses some, and how an exercise reads there.
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { rolloutWaiting } from '../../src/cluster/deployment-controller.ts';
import { serverFor } from '../../src/cluster/images.ts';
import type { Deployment, Pod } from '../../src/cluster/types.ts';
import { flowBackends, sepFor } from '../../src/lab/exercise/answers.ts';
import { triedAsIsFirst } from '../../src/lab/exercise/dns-checks.ts';
import {
  cannotRun,
  type ExerciseLab,
  exerciseNeeds,
  forLab,
} from '../../src/lab/exercise/labs.ts';
import { answerMatches, availableFeatures, parseAnswers } from '../../src/lab/exercise/run.ts';
import { VM_LACKS } from '../../src/lab/exercise/vm-lab.ts';
import { loadTopology } from '../../src/lab/topology.ts';
import { loadExercises, parseExercise } from '../../src/lab/exercise/spec.ts';
import { renderIptables } from '../../src/rules/iptables.ts';
import { parseManifests, resolveServicePorts } from '../../src/manifests/index.ts';

const MINIMAL = `
name: x
order: 1
title: T
minutes: 5
teaches: t
symptom: s
hints: [h]
checks:
  - { kind: http, title: web, url: http://10.96.0.10/ }
solution:
  cause: c
  evidence: [{ run: r, saw: s }]
  fix: [kubetun lab agent restart node1]
`;

describe('the shipped exercises', () => {
  const all = loadExercises();

  it('at least the point-2 set, each complete, in a stable order with unique names', () => {
    expect(all.length).toBeGreaterThanOrEqual(12);
    expect(new Set(all.map((e) => e.name)).size).toBe(all.length);
    expect(new Set(all.map((e) => e.order)).size).toBe(all.length);
    for (const e of all) {
      expect(e.hints.length, e.name).toBeGreaterThan(0);
      expect(e.solution.evidence.length, e.name).toBeGreaterThan(0);
      expect(e.checks.length + e.questions.length, e.name).toBeGreaterThan(0);
    }
  });

  it("fixes are a learner's commands: kubetun and shell tools, never an edit of kubetun's code", () => {
    for (const e of all) {
      expect(
        e.solution.fix.some((c) => /\bkubetun\b/.test(c)),
        e.name,
      ).toBe(true);
      for (const c of e.solution.fix)
        expect(c, e.name).not.toMatch(/\bsrc\/|\.ts\b|git |node_modules/);
    }
  });

  it('setup never touches the repository: manifests are written by name into the lab copy', () => {
    for (const e of all)
      for (const a of e.setup) if (a.kind === 'manifest') expect(a.file).not.toContain('/');
  });
});

describe('parseExercise refuses a broken file naming file and field', () => {
  const bad = (text: string) => () => parseExercise(text, '/ex/x.yaml');
  it('accepts the minimal exercise', () => {
    expect(parseExercise(MINIMAL, '/ex/x.yaml').checks[0]).toMatchObject({
      kind: 'http',
      times: 3,
      from: ['pods'],
    });
  });
  it.each([
    ['name: y', /^\/ex\/x\.yaml: name: must be the file's name \(x\)/],
    ['modes: [none]', /modes: "none" is not a lab data plane/],
    ['needs: [ipv6]', /needs: "ipv6" is not a lab feature/],
    ['hints: []', /hints: at least one hint/],
    ['setup: [{ reboot: node1 }]', /setup\[0\]\.reboot: unknown action/],
    ['setup: [{ crash-agent: node1, sleep: 5 }]', /setup\[0\]: one action per step/],
    [
      'setup: [{ manifest: { file: ../web.yaml, text: x } }]',
      /setup\[0\]\.manifest\.file: a plain file name/,
    ],
    ['checks: [{ kind: magic, title: t }]', /checks\[0\]\.kind: unknown check "magic"/],
    ['checks: [{ kind: http, title: t }]', /checks\[0\]\.url: a non-empty string/],
    ['questions: [{ id: q, ask: a }]', /questions\[0\]\.accept: at least one/],
    [
      'checks: [{ kind: object, title: t, ref: Service default/web, field: spec.type }]',
      /checks\[0\]\.equals: exactly one of equals, notEquals or exists/,
    ],
    [
      'checks: [{ kind: object, title: t, ref: r, field: f, equals: 1, exists: true }]',
      /checks\[0\]\.equals: exactly one of/,
    ],
    ['checks: [{ kind: endpoints, title: t }]', /checks\[0\]\.service: a non-empty string/],
    [
      'checks: [{ kind: rollout, title: t, url: http://x/ }]',
      /checks\[0\]\.deployment: a non-empty string/,
    ],
  ])('%s', (line, re) => {
    const key = line.split(':')[0]!;
    const text = MINIMAL.split('\n')
      .filter(
        (l) => !l.startsWith(`${key}:`) && !(key === 'checks' && l.startsWith('  - { kind: http')),
      )
      .join('\n');
    expect(bad(`${text}\n${line}\n`)).toThrow(re);
  });
  it('the cluster checks: object (one of equals/notEquals/exists), endpoints, rollout', () => {
    const checks = `checks:
  - { kind: object, title: o, ref: Deployment default/cart, field: spec.x, exists: true }
  - { kind: object, title: n, ref: Service default/c, field: spec.clusterIP, notEquals: None }
  - { kind: endpoints, title: e, service: orders, port: 8080, atLeast: 3 }
  - { kind: rollout, title: r, deployment: cart, url: http://10.96.0.62/ }
`;
    const text = MINIMAL.split('\n')
      .filter((l) => !l.startsWith('checks:') && !l.startsWith('  - { kind: http'))
      .join('\n');
    expect(parseExercise(`${text}\n${checks}`, '/ex/x.yaml').checks).toEqual([
      { kind: 'object', title: 'o', ref: 'Deployment default/cart', field: 'spec.x', exists: true },
      {
        kind: 'object',
        title: 'n',
        ref: 'Service default/c',
        field: 'spec.clusterIP',
        notEquals: 'None',
      },
      { kind: 'endpoints', title: 'e', service: 'orders', port: 8080, atLeast: 3 },
      {
        kind: 'rollout',
        title: 'r',
        from: ['pods'],
        deployment: 'cart',
        url: 'http://10.96.0.62/',
      },
    ]);
  });
  it('not YAML', () => {
    expect(bad('name: [')).toThrow(/^\/ex\/x\.yaml: not YAML/);
  });
});

describe('answers', () => {
  it('case, spaces and quotes do not matter; numbers compare as numbers', () => {
    expect(answerMatches(' ExternalTrafficPolicy ', ['externalTrafficPolicy'])).toBe(true);
    expect(answerMatches('0.50000', ['1/2'])).toBe(true);
    expect(answerMatches('1/3', ['0.3333'])).toBe(true);
    expect(answerMatches('33.33%', ['1/3'])).toBe(true);
    expect(answerMatches('0.5', ['1/3'])).toBe(false);
    expect(answerMatches('node1', ['node2'])).toBe(false);
  });
  it('--answer ID=VALUE, the ID may be left out when there is one question', () => {
    const e = parseExercise(
      `${MINIMAL}questions: [{ id: q, ask: a, accept: [x] }]\n`,
      '/ex/x.yaml',
    );
    expect(parseAnswers(['q=1', 'y'], e)).toEqual({ q: 'y' });
    expect(() => parseAnswers(['z=1'], e)).toThrow(/asks q; write ID=VALUE/);
  });
});

describe('sepFor: from the VIP through KUBE-SVC to the KUBE-SEP that DNATs to the backend', () => {
  const svc = (name: string, ip: string) => `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: default }
spec:
  clusterIP: ${ip}
  clusterIPs: [${ip}]
  ports: [{ name: http, protocol: TCP, port: 80, targetPort: 8080 }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: ${name}-1, namespace: default, labels: { kubernetes.io/service-name: ${name} } }
addressType: IPv4
ports: [{ name: http, protocol: TCP, port: 8080 }]
endpoints:
  - { addresses: [10.244.1.2], nodeName: node1 }
  - { addresses: [10.244.1.3], nodeName: node1 }
  - { addresses: [10.244.2.2], nodeName: node2 }
---
`;
  const state = parseManifests(
    svc('web', '10.96.0.10') + svc('web-rr', '10.96.0.50'),
    'inline.yaml',
  );
  const text = renderIptables(resolveServicePorts(state, { nodeName: 'node2' }), {
    nodeName: 'node2',
    nodeIPs: ['172.30.0.12'],
    clusterCIDR: '10.244.0.0/16',
    nfacct: false,
  });
  it("web's SEP for pod-b, not web-rr's or web-lc's (they DNAT to the same pod)", () => {
    const sep = sepFor(text, '10.96.0.10', 80, '10.244.1.3:8080');
    expect(sep).toMatch(/^KUBE-SEP-/);
    const svcLine = text.split('\n').find((l) => l.includes(`-j ${sep}`))!;
    expect(svcLine).toContain('default/web:http -> 10.244.1.3:8080');
    expect(sepFor(text, '10.96.0.50', 80, '10.244.1.3:8080')).not.toBe(sep);
    expect(sepFor(text, '10.96.0.10', 80, '10.244.2.3:8080')).toBeUndefined();
  });
});

describe('flowBackends: the backend of every ESTABLISHED flow conntrack lists', () => {
  it('one per open connection, the reply tuple read: a pool that reconnected shows both', () => {
    const out = [
      'tcp      6 86397 ESTABLISHED src=10.244.2.3 dst=10.96.0.10 sport=41000 dport=80 src=10.244.1.3 dst=10.244.2.3 sport=8080 dport=41000 [ASSURED] mark=0 use=1',
      'tcp      6 431999 ESTABLISHED src=10.244.2.3 dst=10.96.0.10 sport=41002 dport=80 src=10.244.2.2 dst=10.244.2.3 sport=8080 dport=41002 [ASSURED] mark=0 use=1',
      'conntrack v1.4.7 (conntrack-tools): 2 flow entries have been shown.',
    ].join('\n');
    expect(flowBackends(out, '10.244.2.3')).toEqual(['10.244.1.3:8080', '10.244.2.2:8080']);
    expect(flowBackends('', '10.244.2.3')).toEqual([]);
  });
});

describe('the ndots exercise: names, rollouts, the DNS Pod flags', () => {
  it("glibc's rule: as is first when absolute or with at least ndots dots", () => {
    expect(triedAsIsFirst('api.partner.example', 5)).toBe(false);
    expect(triedAsIsFirst('api.partner.example.', 5)).toBe(true);
    expect(triedAsIsFirst('api.partner.example', 2)).toBe(true);
    expect(triedAsIsFirst('api.partner.example', 1)).toBe(true);
    expect(triedAsIsFirst('web', 1)).toBe(false);
  });

  it("rolloutWaiting: kubectl rollout status's steps, done only when every replica is new and ready", () => {
    const d = (status: Record<string, number>, generation = 2) =>
      ({
        metadata: { name: 'checkout', generation },
        spec: { replicas: 2 },
        status,
      }) as unknown as Deployment;
    const all = { observedGeneration: 2, updatedReplicas: 2, replicas: 2, readyReplicas: 2 };
    expect(rolloutWaiting(d(all))).toBeUndefined();
    expect(rolloutWaiting(d({ ...all, observedGeneration: 1 }))).toMatch(/to be observed/);
    expect(rolloutWaiting(d({ ...all, updatedReplicas: 1 }))).toMatch(/1 out of 2 new/);
    expect(rolloutWaiting(d({ ...all, replicas: 3 }))).toMatch(/1 old replicas are pending/);
    expect(rolloutWaiting(d({ ...all, readyReplicas: 1 }))).toMatch(/1 of 2 updated/);
  });

  it("a DNS image's container args are the lab DNS server's flags", () => {
    const pod = (args?: string[]) =>
      ({
        metadata: { name: 'coredns-x', namespace: 'kube-system' },
        spec: { containers: [{ name: 'coredns', image: 'registry.k8s.io/coredns/coredns', args }] },
      }) as unknown as Pod;
    const ctx = { podIP: '10.244.1.9', viewDir: '/v' };
    const plain = serverFor(pod(), ctx).argv;
    expect(plain.slice(-2)).toEqual(['--listen', '10.244.1.9:53']);
    const up = serverFor(pod(['--upstream', '172.30.0.100:53', '--log']), ctx).argv;
    expect(up.slice(-3)).toEqual(['--upstream', '172.30.0.100:53', '--log']);
  });
});

describe('availableFeatures', () => {
  let dir = '';
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  it('follows what the checkout has', () => {
    dir = mkdtempSync(join(tmpdir(), 'ke-feat-'));
    expect([...availableFeatures(dir)]).toEqual([]);
    mkdirSync(join(dir, 'src/cluster/dns'), { recursive: true });
    writeFileSync(join(dir, 'src/cluster/store.ts'), '');
    expect([...availableFeatures(dir)].sort()).toEqual(['cluster', 'dns']);
  });
});

describe('which lab an exercise runs on', () => {
  const all = loadExercises();
  const byName = (n: string) => all.find((e) => e.name === n)!;
  const vms = { name: 'the VMs', lacks: VM_LACKS } as ExerciseLab;

  it('needs follow what setup, checks and fix use', () => {
    expect([...exerciseNeeds(byName('dataplane-down')).keys()]).toEqual([]);
    expect(exerciseNeeds(byName('conntrack-full'))).toEqual(
      new Map([
        ['workloads', 'its setup runs pool in pod-b'],
        ['agent-socket', "it reads kubetun's counters on node1"],
      ]),
    );
    expect([...exerciseNeeds(byName('stale-udp')).keys()].sort()).toEqual([
      'control-plane',
      'kernel-modes',
      'workloads',
    ]);
    // session-affinity's fix edits the objects: a control plane even without the check
    const fixOnly = { ...byName('session-affinity'), checks: [] };
    expect(exerciseNeeds(fixOnly).get('control-plane')).toMatch(/its fix edits the lab's objects/);
    expect(exerciseNeeds(byName('dataplane-down'), 'iptables').get('kernel-modes')).toBe(
      'it runs in iptables mode',
    );
  });

  it('the VM lab runs dataplane-down, nodeport-local and curl-vs-ping; each other one says why', () => {
    const here = all.filter((e) => !cannotRun(vms, e)).map((e) => e.name);
    expect(here.sort()).toEqual(['curl-vs-ping', 'dataplane-down', 'nodeport-local']);
    expect(cannotRun(vms, byName('selector-typo'))).toBe(
      `it needs the lab's cluster, and ${VM_LACKS['control-plane']}`,
    );
    for (const e of all) expect(cannotRun(vms, e) ?? '', e.name).not.toMatch(/\n/);
    expect(all.every((e) => cannotRun({ lacks: {} } as ExerciseLab, e) === undefined)).toBe(true);
  });

  it("reads with the lab's own node addresses: every text, check and answer", () => {
    const ref = loadTopology(join(import.meta.dirname, '../../lab/topology.yaml'));
    const vm = loadTopology(join(import.meta.dirname, '../../lab/vagrant-topology.yaml'));
    const e = forLab(byName('nodeport-local'), { addresses: vm } as ExerciseLab, ref);
    expect(e.symptom).toContain('http://192.168.56.12:30081/ but http://192.168.56.11:30081/');
    expect(e.questions.find((q) => q.id === 'send-to')!.accept).toEqual(['node2', '192.168.56.12']);
    expect(e.solution.evidence[0]!.saw).toContain('192.168.56.100'); // the client's
    expect(JSON.stringify(e)).not.toMatch(/172\.30\.0\./);
    // the same lab: nothing changes
    const same = byName('nodeport-local');
    expect(forLab(same, { addresses: ref } as ExerciseLab, ref)).toBe(same);
    // an address is replaced whole: 172.30.0.1 is not the start of 172.30.0.11
    const one = { ...ref, nodes: [{ ...ref.nodes[0]!, ip: '172.30.0.1' }], clients: [] };
    const x = forLab(same, { addresses: vm } as ExerciseLab, one);
    expect(x.symptom).toContain('172.30.0.11:30081');
  });
});

// The manifests source with its work in the manifest worker (issue 18 point 2): the agent's
// packet loop shares the main thread, so reading, parsing and validating a directory must
// leave that thread free, and the changes must come back in slices with the event loop turning
// between them.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { startControlPlane } from '../../src/control/control-plane.ts';
import { DirState } from '../../src/control/dir-state.ts';
import { ManifestWorker } from '../../src/control/manifest-worker.ts';
import { ManifestDirSource } from '../../src/control/source-dir.ts';
import { ChangeTracker } from '../../src/control/tracker.ts';
import { ManifestError } from '../../src/manifests/errors.ts';
import { whileTurning } from '../fixtures/turns.ts';

function service(name: string, ip: string, port = 80): string {
  return `apiVersion: v1
kind: Service
metadata: {name: ${name}, namespace: bench}
spec:
  clusterIP: ${ip}
  ports: [{name: http, protocol: TCP, port: ${port}, targetPort: 8080}]
`;
}

function slice(name: string, svc: string, ip: string): string {
  return `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ${name}
  namespace: bench
  labels: {kubernetes.io/service-name: ${svc}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints:
- addresses: [${ip}]
  conditions: {ready: true}
`;
}

let dir: string;
let source: ManifestDirSource | undefined;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'kubetun-worker-'));
});
afterEach(() => {
  source?.stop();
  source = undefined;
  rmSync(dir, { recursive: true, force: true });
});

const parse = { serviceCidr: '10.96.0.0/12' };

/** The source as the agent runs it (the worker), without watch or poll: reloads are the test's. */
function workerSource(sink: ChangeTracker): ManifestDirSource {
  return new ManifestDirSource({ dir, sink, parse, worker: true, watch: false, pollIntervalMs: 0 });
}

describe('ManifestDirSource in the manifest worker', () => {
  it('feeds the trackers as in-process and refuses an object naming file, object and field', async () => {
    writeFileSync(
      join(dir, 'a.yaml'),
      `${service('a', '10.96.0.10')}---\n${slice('a-1', 'a', '10.244.1.5')}`,
    );
    writeFileSync(join(dir, 'bad.yaml'), service('pod-shadow', '10.244.2.2'));
    const t = new ChangeTracker();
    const errors: Error[] = [];
    const synced = vi.fn();
    const changed = vi.fn();
    source = new ManifestDirSource({
      dir,
      sink: t,
      parse,
      worker: true,
      onError: (e) => errors.push(e),
      onSynced: synced,
      onChange: changed,
      watch: false,
      pollIntervalMs: 0,
    });
    expect(await source.start()).toBe(false);
    expect(synced).toHaveBeenCalledTimes(1);
    expect(changed).toHaveBeenCalledTimes(1);
    expect(t.checkout().changedServicePorts).toEqual(['bench/a:http']);
    expect(t.resolve('bench/a:http')?.endpoints.map((e) => e.ip)).toEqual(['10.244.1.5']);
    expect(errors).toHaveLength(1);
    const err = errors[0] as ManifestError;
    expect(err).toBeInstanceOf(ManifestError);
    expect(err.file).toBe(join(dir, 'bad.yaml'));
    expect(err.object).toBe('Service bench/pod-shadow');
    expect(err.field).toBe('spec.clusterIP');
    // The worker keeps the last good state: the same files again are no event; an edit is one.
    expect(await source.reload()).toBe(false);
    expect(t.pendingChanges()).toBe(0);
    writeFileSync(
      join(dir, 'a.yaml'),
      `${service('a', '10.96.0.10')}---\n${slice('a-1', 'a', '10.244.1.6')}`,
    );
    await source.reload();
    expect(changed).toHaveBeenCalledTimes(2);
    expect(t.checkout().changedServicePorts).toEqual(['bench/a:http']);
    expect(t.resolve('bench/a:http')?.endpoints.map((e) => e.ip)).toEqual(['10.244.1.6']);
  });

  it('a reload asked for while one runs reads the files after the ask (the ctl reload answer)', async () => {
    writeFileSync(join(dir, 'a.yaml'), service('a', '10.96.0.10'));
    const errors: Error[] = [];
    source = new ManifestDirSource({
      dir,
      sink: new ChangeTracker(),
      parse,
      worker: true,
      onError: (e) => errors.push(e),
      watch: false,
      pollIntervalMs: 0,
    });
    const first = source.start();
    writeFileSync(join(dir, 'b.yaml'), service('b', '10.96.0.11', 70000));
    const second = source.reload();
    const third = source.reload();
    await first; // it may or may not have read b.yaml: the worker reads when it is up
    expect(await second).toBe(false);
    expect(third).toBe(second);
    expect(source.lastErrors.map((e) => (e as ManifestError).object)).toEqual(['Service bench/b']);
  });

  it('hands over objects equal to the in-process ones (their JSON: every optional field kept)', async () => {
    // every optional field of the model the parser fills, IPv4 and IPv6
    writeFileSync(
      join(dir, 'rich.yaml'),
      `apiVersion: v1
kind: Service
metadata:
  name: rich
  namespace: bench
  annotations: {kubetun.io/scheduler: maglev, example.com/note: "x"}
spec:
  type: LoadBalancer
  clusterIP: 10.96.0.20
  clusterIPs: [10.96.0.20, fd00:96::20]
  ipFamilies: [IPv4, IPv6]
  ipFamilyPolicy: RequireDualStack
  selector: {app: rich}
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}
  externalTrafficPolicy: Local
  internalTrafficPolicy: Local
  trafficDistribution: PreferClose
  externalIPs: [192.0.2.10]
  loadBalancerSourceRanges: [198.51.100.0/24]
  ports:
  - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
  - {name: dns, protocol: UDP, port: 53, targetPort: dns, nodePort: 30053}
status:
  loadBalancer: {ingress: [{ip: 192.0.2.20}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: rich-4
  namespace: bench
  labels: {kubernetes.io/service-name: rich}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}, {name: dns, protocol: UDP, port: 5353}]
endpoints:
- addresses: [10.244.1.5]
  conditions: {ready: false, serving: true, terminating: true}
  nodeName: node-a
  zone: zone-a
  hints: {forZones: [{name: zone-a}], forNodes: [{name: node-a}]}
  targetRef: {kind: Pod, name: rich-0, namespace: bench}
- addresses: [10.244.2.5]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: rich-6
  namespace: bench
  labels: {kubernetes.io/service-name: rich}
addressType: IPv6
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints:
- addresses: ["fd00:244::5"]
  conditions: {ready: true}
`,
    );
    const dual = { serviceCidr: '10.96.0.0/12,fd00:96::/108' };
    const inProcess = new ManifestDirSource({ dir, sink: new ChangeTracker(), parse: dual });
    const ok = inProcess.reload();
    expect(inProcess.lastErrors.map((e) => e.message)).toEqual([]);
    expect(ok).toBe(true);
    inProcess.stop();
    const sink = new ChangeTracker();
    source = new ManifestDirSource({ dir, sink, parse: dual, worker: true, pollIntervalMs: 0 });
    expect(await source.start()).toBe(true);
    expect(source.services.size).toBe(1);
    expect(source.slices.size).toBe(2);
    expect([...source.services]).toStrictEqual([...inProcess.services]);
    expect([...source.slices]).toStrictEqual([...inProcess.slices]);
  });

  it('the main thread keeps turning while a large directory loads (no gap near the whole load)', async () => {
    const n = 1000;
    const docs: string[] = [];
    for (let i = 0; i < n; i++) {
      const ip = `${(i + 1) >> 8}.${(i + 1) & 255}`;
      docs.push(service(`s${i}`, `10.96.${ip}`), slice(`s${i}-1`, `s${i}`, `10.244.${ip}`));
    }
    writeFileSync(join(dir, 'big.yaml'), docs.join('---\n'));
    const t = new ChangeTracker();
    const src = workerSource(t);
    source = src;
    // the packet loop's stand-in: a task every turn of the event loop, its longest wait kept
    const r = await whileTurning(() => src.reload());
    expect(r.value).toBe(true);
    expect(t.checkout().changedServicePorts).toHaveLength(n);
    // In-process the whole load is one task: no turn at all and a gap as long as the load. In
    // the worker, the main thread only applies slices of 64 objects, a turn between each; the
    // bound is a quarter of the load (seconds on a loaded machine), far from scheduling noise.
    expect(r.turns).toBeGreaterThanOrEqual((2 * n) / 200);
    expect(r.maxGapMs).toBeLessThan(r.ms / 4);
  });
});

describe('the strict first load (the agent start-up check)', () => {
  it('loads a valid directory; a refused object fails the start naming file, object and field, nothing applied', async () => {
    writeFileSync(join(dir, 'a.yaml'), service('a', '10.96.0.10'));
    const programmed: string[][] = [];
    const start = () =>
      startControlPlane({
        source: { dir, parse, worker: true, strictStart: true, pollIntervalMs: 0 },
        program: ({ changes }) => {
          programmed.push(changes.changedServicePorts);
          return true;
        },
        metricsBind: null,
        healthzBind: null,
      });
    const cp = await start();
    await cp.firstSync;
    await cp.stop();
    expect(programmed).toEqual([['bench/a:http']]);
    writeFileSync(join(dir, 'b.yaml'), service('b', '10.96.0.11', 70000));
    programmed.length = 0;
    const err = await start().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ManifestError);
    expect(err).toMatchObject({
      file: join(dir, 'b.yaml'),
      object: 'Service bench/b',
      field: 'spec.ports[0].port',
    });
    expect(programmed).toEqual([]); // all or nothing: not even a.yaml
  });

  // Issue 18 (10k Services end to end): the strict first load streams each file's objects as
  // it parses, so the trackers fill while the worker still reads the next file; none of it is
  // in force until the outcome says applied.
  it('streams each file as it parses: a later refusal comes after the earlier files, not applied', async () => {
    writeFileSync(
      join(dir, 'a.yaml'),
      [service('a', '10.96.0.10'), slice('a-1', 'a', '10.244.1.5')].join('---\n'),
    );
    writeFileSync(join(dir, 'b.yaml'), service('b', '10.96.0.11', 70000));
    const w = new ManifestWorker(dir, parse);
    try {
      const seen: string[] = [];
      const onChunk = (s: [string, unknown][], l: [string, unknown][]) =>
        void seen.push(...s.map(([n]) => `svc ${n}`), ...l.map(([n]) => `slice ${n}`));
      const o = await w.reload(onChunk, true);
      expect(seen).toEqual(['svc bench/a', 'slice bench/a-1']);
      expect(o).toMatchObject({ applied: false, fatal: true });
      expect(o.errors[0]).toMatchObject({ object: 'Service bench/b', field: 'spec.ports[0].port' });
      expect(w.state.loaded).toBe(false);
    } finally {
      await w.stop();
    }
  });

  // Issue 18: the Proxier's prefill (proxier.ts) programs the streamed slices while the rest
  // parses; onSlice is how it hears of them.
  it('tells onSlice of each streamed slice that left changes, before the load is in', async () => {
    writeFileSync(
      join(dir, 'a.yaml'),
      [service('a', '10.96.0.10'), slice('a-1', 'a', '10.244.1.5')].join('---\n'),
    );
    writeFileSync(join(dir, 'b.yaml'), service('b', '10.96.0.11'));
    const sink = new ChangeTracker();
    const events: string[] = [];
    source = new ManifestDirSource({
      dir,
      sink,
      parse,
      worker: true,
      strictStart: true,
      watch: false,
      pollIntervalMs: 0,
      onSlice: () => void events.push(`slice: ${sink.pendingChanges()} pending`),
      onSynced: () => void events.push('synced'),
    });
    expect(await source.start()).toBe(true);
    // a.yaml's Service, its slice, b.yaml's Service: one slice each kind per file
    expect(events).toEqual(['slice: 1 pending', 'slice: 2 pending', 'slice: 3 pending', 'synced']);
  });

  it('DirState streams a strict load from an empty state file by file, and only that load', () => {
    writeFileSync(join(dir, 'a.yaml'), service('a', '10.96.0.10'));
    writeFileSync(
      join(dir, 'b.yaml'),
      [service('b', '10.96.0.11'), slice('b-1', 'b', '10.244.1.6')].join('---\n'),
    );
    const st = new DirState(dir, parse);
    const calls: string[][] = [];
    const stream = (s: [string, string | null][], l: [string, string | null][]) =>
      void calls.push([...s, ...l].map(([n]) => n));
    const d = st.reload(true, stream);
    expect(calls).toEqual([['bench/a'], ['bench/b', 'bench/b-1']]);
    expect(d).toMatchObject({
      applied: true,
      services: [],
      slices: [],
      counts: { services: 2, slices: 1 },
    });
    expect(JSON.parse(st.state.services.get('bench/b') ?? '')).toMatchObject({
      clusterIPs: ['10.96.0.11'],
    });
    // with a state to diff against, the changes come as a delta, never streamed
    writeFileSync(join(dir, 'a.yaml'), service('a', '10.96.0.10', 81));
    calls.length = 0;
    const d2 = st.reload(true, stream);
    expect(calls).toEqual([]);
    expect(d2.services.map(([n]) => n)).toEqual(['bench/a']);
  });

  it('a tolerant source refuses the same object alone and applies the rest', async () => {
    writeFileSync(join(dir, 'a.yaml'), service('a', '10.96.0.10'));
    writeFileSync(join(dir, 'b.yaml'), service('b', '10.96.0.11', 70000));
    const t = new ChangeTracker();
    source = workerSource(t);
    expect(await source.start()).toBe(false);
    expect(t.checkout().changedServicePorts).toEqual(['bench/a:http']);
  });
});

// Issue 18 (the soak's churn): a fresh worker per reload cost ~250 ms of CPU for the lab's small
// view (booting the bundle, parsing cold), seconds at nice 10 on a loaded node, while a
// terminating endpoint kept taking new connections. A small directory keeps its worker.
describe('ManifestWorker: a warm worker for a small directory', () => {
  const names = (chunks: [string, unknown][][]) => chunks.flat().map(([n]) => n);

  it('reuses its worker while reloads come, with the changes of each; ends it when none came', async () => {
    writeFileSync(join(dir, 'a.yaml'), service('a', '10.96.0.10'));
    writeFileSync(join(dir, 'b.yaml'), service('b', '10.96.0.11'));
    const w = new ManifestWorker(dir, parse, { maxObjects: 10, ms: 300 });
    try {
      const seen: [string, unknown][][] = [];
      const onChunk = (s: [string, unknown][]) => void seen.push(s);
      expect((await w.reload(onChunk)).applied).toBe(true);
      expect(names(seen)).toEqual(['bench/a', 'bench/b']);
      expect(w.warmNow).toBe(true);
      seen.length = 0;
      writeFileSync(join(dir, 'b.yaml'), service('b', '10.96.0.11', 81));
      await w.reload(onChunk);
      expect(w.boots).toBe(1);
      // the warm worker's state is the last reload's: only b changed
      expect(names(seen)).toEqual(['bench/b']);
      expect(seen[0][0][1]).toMatchObject({ ports: [{ port: 81 }] });
      await new Promise((r) => setTimeout(r, 500));
      expect(w.warmNow).toBe(false);
      seen.length = 0;
      await w.reload(onChunk);
      expect(w.boots).toBe(2);
      expect(names(seen)).toEqual([]);
    } finally {
      await w.stop();
    }
  });

  it('a larger directory gets a worker per reload, as before', async () => {
    for (let i = 0; i < 6; i++)
      writeFileSync(join(dir, `s${i}.yaml`), service(`s${i}`, `10.96.0.${i + 1}`));
    const w = new ManifestWorker(dir, parse, { maxObjects: 5, ms: 10_000 });
    try {
      await w.reload(() => {});
      expect(w.warmNow).toBe(false);
      // the new worker diffs against the JSON made here from the objects in force: the very
      // text the last one handed over, so nothing unchanged comes back
      const seen: string[] = [];
      const onChunk = (s: [string, unknown][]) => void seen.push(...s.map(([n]) => n));
      await w.reload(onChunk);
      expect(w.boots).toBe(2);
      expect(seen).toEqual([]);
      writeFileSync(join(dir, 's3.yaml'), service('s3', '10.96.0.4', 81));
      await w.reload(onChunk);
      expect(seen).toEqual(['bench/s3']);
      expect(w.state.services.get('bench/s3')).toMatchObject({ ports: [{ port: 81 }] });
    } finally {
      await w.stop();
    }
  });

  it('a stop while the worker boots ends that reload, and the worker', async () => {
    writeFileSync(join(dir, 'a.yaml'), service('a', '10.96.0.10'));
    const w = new ManifestWorker(dir, parse);
    const reload = w.reload(() => {});
    await w.stop();
    const o = await reload;
    expect(o).toMatchObject({ applied: false, fatal: true });
    expect(o.errors[0].message).toMatch(/stopped while it booted/);
    expect(w.warmNow).toBe(false);
  });
});

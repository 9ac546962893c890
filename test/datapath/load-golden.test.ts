// The maps a load writes, byte for byte: a fixed set of ~1,900 service ports using every
// feature the loader has (both families, NodePort, externalIPs, LoadBalancer IPs and source
// ranges, both traffic policies, affinity, schedulers, weights, terminating and local endpoints,
// backends shared between services, hash-colliding ids) is written into datapaths of a fixed
// seed, and a digest of every map buffer the loader writes (services, backends, reverse NAT of
// both families, the source-range arrays), the scheduler table and the loader's own answers is
// held to the digest the code gave when this test was written (a667684's loader, issue 18).
//
// What it is for: the loader is rewritten for speed, and the hash tables' bytes depend on the
// order of every insert and delete, the ids on every collision; a change that moves one entry
// is a change of what a restarted agent attaches to (pinned maps, src/node/pin.ts). A change
// that means to change the bytes updates the digests here, and says why.
//
// Steps, each with its digest: a full load; a partial update (changed endpoints, services
// changed, added and deleted); a second full load of a different set (leftovers removed); the
// agent's path (ChangeTracker -> datapathSync in slices of 64) from empty to the first set and
// then to the second.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { datapathSync } from '../../src/control/datapath-sync.ts';
import { ChangeTracker } from '../../src/control/tracker.ts';
import { createDatapath, type Datapath } from '../../src/datapath/state/datapath.ts';
import { DpLoader, WEIGHTS_ANNOTATION } from '../../src/loader/load.ts';
import { BackendMap } from '../../src/maps/backends.ts';
import { RevNatMap } from '../../src/maps/revnat.ts';
import { ServiceMap } from '../../src/maps/services.ts';
import type {
  Endpoint,
  EndpointSlice,
  Protocol,
  ResolvedEndpoint,
  ResolvedServicePort,
  Service,
  ServicePort,
} from '../../src/model.ts';
import { servicePortName } from '../../src/model.ts';
import { SCHED_ANNOTATION } from '../../src/sched/kinds.ts';
import { makeDefaultService } from '../fixtures/model.ts';
import { mulberry32 as rng } from '../wire/helpers.ts';

const CFG = {
  seed: 0x5eed,
  svcCapacity: 1 << 14,
  beCapacity: 1 << 13,
  revNatCapacity: 4096,
  nodeIp: 0xc0a8010a, // 192.168.1.10
  nodeIp6: 'fd00:1::10',
  podCidr6: 'fd00:10:244:1::/64',
};

/**
 * A datapath whose maps hash with fixed seeds (a map's seed is random unless given: the
 * datapath's maps are made here, empty, and the datapath attached to their buffers), with
 * small id spaces, so that reverse-NAT ids collide and are probed.
 */
function datapath(): Datapath {
  const v6 = { seed: 0x5eed6, ipv6: true };
  return createDatapath(CFG, {
    svc: new ServiceMap(CFG.svcCapacity, { seed: 0x5eed }).buffer as ArrayBuffer,
    be: new BackendMap(CFG.beCapacity, { seed: 0x5eed }).buffer as ArrayBuffer,
    revnat: new RevNatMap(CFG.revNatCapacity, { seed: 0x5eed }).buffer as ArrayBuffer,
    svc6: new ServiceMap(CFG.svcCapacity, v6).buffer as ArrayBuffer,
    be6: new BackendMap(CFG.beCapacity, v6).buffer as ArrayBuffer,
    revnat6: new RevNatMap(CFG.revNatCapacity, v6).buffer as ArrayBuffer,
  });
}

const NODE = 'node-1';

const SCHEDS = ['rr', 'wrr', 'lc', 'sh', 'maglev', 'random'];

interface Obj {
  svc: Service;
  slices: EndpointSlice[];
}

/** Service `i` of generation `gen` (a later generation moves some endpoints and fields). */
function object(i: number, gen: number): Obj {
  const r = rng(i * 7919 + gen * 104729 + 1);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
  const dual = i % 7 === 3;
  const type = pick(['ClusterIP', 'ClusterIP', 'NodePort', 'LoadBalancer'] as const);
  const clusterIPs = [`10.96.${(i >> 8) & 255}.${i & 255}`];
  if (dual) clusterIPs.push(`fd00:96::${i.toString(16)}`);
  const protos: Protocol[] = ['TCP', 'UDP', 'SCTP'];
  const ports: ServicePort[] = [];
  const nports = 1 + Math.floor(r() * 2.2);
  for (let k = 0; k < nports; k++) {
    ports.push({
      name: nports > 1 ? `p${k}` : '',
      protocol: k === 0 ? 'TCP' : pick(protos),
      port: 80 + k,
      targetPort: 8080 + k,
      nodePort: type === 'ClusterIP' ? 0 : 30000 + ((i * 3 + k) % 2700),
    });
  }
  const annotations: Record<string, string> = {};
  if (r() < 0.25) annotations[SCHED_ANNOTATION] = pick(SCHEDS);
  const addr = (n: number) => `10.244.${n % 3}.${(n >> 2) & 255}`;
  const endpoints: Endpoint[] = [];
  const neps = Math.floor(r() * 5);
  for (let k = 0; k < neps; k++) {
    // a shared pool of ~1000 addresses: backends shared between services
    const n = Math.floor(r() * 1000) + gen * (i % 5 === 0 ? 1 : 0);
    const terminating = r() < 0.1;
    endpoints.push({
      addresses: [addr(n)],
      conditions: { ready: !terminating, serving: true, terminating },
      nodeName: `node-${n % 3}`,
      targetName: `pod-${n}`,
    });
  }
  if (r() < 0.1 && endpoints.length > 0)
    annotations[WEIGHTS_ANNOTATION] = `${endpoints[0]!.addresses[0]}=3,pod-1=0`;
  const svc = makeDefaultService(`s${i}`, {
    namespace: `ns${i % 4}`,
    type,
    clusterIPs,
    ipFamilies: dual ? ['IPv4', 'IPv6'] : ['IPv4'],
    ports,
    annotations,
    sessionAffinity: r() < 0.15 ? 'ClientIP' : 'None',
    affinityTimeoutSeconds: 60 + gen,
    externalTrafficPolicy: type !== 'ClusterIP' && r() < 0.3 ? 'Local' : 'Cluster',
    internalTrafficPolicy: r() < 0.1 ? 'Local' : 'Cluster',
    externalIPs: r() < 0.1 ? [`203.0.113.${i & 255}`] : [],
    loadBalancerIPs: type === 'LoadBalancer' ? [`198.51.${(i >> 8) & 255}.${i & 255}`] : [],
    loadBalancerSourceRanges:
      type === 'LoadBalancer' && r() < 0.5 ? ['10.0.0.0/8', `172.${16 + (i % 16)}.0.0/16`] : [],
  });
  const slicePorts = ports.map((p) => ({
    name: p.name,
    protocol: p.protocol,
    port: p.targetPort as number,
  }));
  const slices: EndpointSlice[] = [
    {
      namespace: svc.namespace,
      name: `s${i}-a`,
      serviceName: svc.name,
      addressType: 'IPv4',
      ports: slicePorts,
      endpoints,
    },
  ];
  if (dual)
    slices.push({
      namespace: svc.namespace,
      name: `s${i}-b`,
      serviceName: svc.name,
      addressType: 'IPv6',
      ports: slicePorts,
      endpoints: endpoints.map((e, k) => ({
        ...e,
        addresses: [`fd00:10:244:${k % 3}::${(i + k).toString(16)}`],
      })),
    });
  return { svc, slices };
}

/** The resolved service ports of `objs`, as the tracker makes them (endpoints per family). */
function resolved(objs: Obj[]): ResolvedServicePort[] {
  const out: ResolvedServicePort[] = [];
  for (const { svc, slices } of objs) {
    for (const p of svc.ports) {
      const eps = (family: 'IPv4' | 'IPv6') =>
        slices
          .filter((s) => s.addressType === family)
          .flatMap((s) =>
            s.endpoints.map(
              (e): ResolvedEndpoint => ({
                ip: e.addresses[0]!,
                port: s.ports.find((sp) => sp.name === p.name)!.port,
                ready: e.conditions.ready,
                serving: e.conditions.serving,
                terminating: e.conditions.terminating,
                nodeName: e.nodeName,
                targetName: e.targetName,
              }),
            ),
          )
          .filter((e, k, all) => all.findIndex((x) => x.ip === e.ip) === k)
          .sort((a, b) => (`${a.ip}:${a.port}` < `${b.ip}:${b.port}` ? -1 : 1));
      out.push({
        service: svc,
        port: p,
        servicePortName: servicePortName(svc, p),
        endpoints: eps('IPv4'),
        endpoints6: eps('IPv6'),
      });
    }
  }
  return out;
}

const FIRST = Array.from({ length: 1200 }, (_, i) => object(i, 0));
/** the second set: a third of the services changed, a tenth gone, 200 new */
const SECOND = [
  ...FIRST.flatMap((o, i) => (i % 10 === 9 ? [] : [i % 3 === 0 ? object(i, 1) : o])),
  ...Array.from({ length: 200 }, (_, k) => object(1200 + k, 0)),
];

/** A digest of everything a load writes (hex, first 16 characters). */
function digest(dp: Datapath, loader: DpLoader): string {
  const h = createHash('sha256');
  const bytes = (b: ArrayBufferLike | ArrayBufferView) =>
    h.update(
      ArrayBuffer.isView(b)
        ? new Uint8Array(b.buffer, b.byteOffset, b.byteLength)
        : new Uint8Array(b),
    );
  for (const m of [dp.svc, dp.be, dp.revnat, dp.svc6, dp.be6, dp.revnat6]) bytes(m.buffer);
  const n = dp.nat;
  for (const a of [n.rangeStart, n.rangeCount, n.rangeNet, n.rangeMask, n.rangeNet6, n.rangeMask6])
    bytes(a);
  const sched: number[] = [];
  for (let r = 1; r < dp.sched.capacity; r++) {
    const kind = dp.sched.kind(r);
    if (kind < 0) continue; // none set
    sched.push(r, kind, dp.sched.count(r), dp.sched.flags(r));
    for (let i = 0; i < dp.sched.count(r); i++)
      sched.push(dp.sched.backendId(r, i), dp.sched.weight(r, i));
  }
  const aff: number[] = [];
  for (let r = 0; r < 0x10000; r++)
    if (loader.affinityTimeout(r)) aff.push(r, loader.affinityTimeout(r));
  h.update(JSON.stringify([sched, aff, loader.loaded().sort(), loader.externalFrontends()]));
  return h.digest('hex').slice(0, 16);
}

const OPTS = { nodeName: NODE };

describe('the maps a load writes, byte for byte (issue 18: the loader rewritten for speed)', () => {
  it('full load, partial update, second full load', () => {
    const dp = datapath();
    const loader = new DpLoader(dp);
    const first = resolved(FIRST);
    loader.load(first, OPTS);
    const full = digest(dp, loader);
    // partial: every fifth port of the second set written, the ports it no longer has deleted
    const second = resolved(SECOND);
    const names = new Set(second.map((p) => p.servicePortName));
    const changed = second.filter((_, k) => k % 5 === 0);
    const deleted = first.map((p) => p.servicePortName).filter((n) => !names.has(n));
    loader.update(changed, deleted, OPTS);
    const partial = digest(dp, loader);
    loader.load(second, OPTS);
    const again = digest(dp, loader);
    expect({ full, partial, again }).toEqual({
      full: '3b30e1361a9f71f2',
      partial: '710eb1bf5848c1ae',
      again: '90c42cc0a5c6a2ed',
    });
  });

  it("the agent's path: tracker, datapathSync in slices of 64", async () => {
    const dp = datapath();
    const t = new ChangeTracker({ nodeName: NODE });
    const sync = datapathSync(dp, OPTS);
    const apply = (objs: Obj[], before: Obj[]) => {
      const now = new Set(objs.map((o) => o.svc.name));
      for (const o of before) {
        if (now.has(o.svc.name)) continue;
        t.services.update(o.svc, null);
        for (const s of o.slices) t.endpointSlices.update(s, null);
      }
      for (const o of objs) {
        t.services.update(null, o.svc);
        for (const s of o.slices) t.endpointSlices.update(null, s);
      }
      return sync.program({ full: false, changes: t.checkout(), tracker: t });
    };
    await apply(FIRST, []);
    const first = digest(dp, sync.loader);
    await apply(SECOND, FIRST);
    const second = digest(dp, sync.loader);
    expect({ first, second }).toEqual({ first: '67b01c6dcb7f98f1', second: '101ec013299ed3ad' });
  });
});

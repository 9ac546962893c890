// Control-plane cost at scale: change trackers + sync runner for 10k services with 3 endpoints
// each, then one EndpointSlice change. Prints figures; asserts nothing.
//
//   npx tsx scripts/bench-sync.ts [services=10000] [changes=200]
//
// "control" is this area's part (tracker updates, checkout, resolve, runner bookkeeping);
// "dpLoadServices" is the datapath loader writing the maps, measured separately because it
// belongs to src/datapath (it is a full loader: it diffs against the maps itself).

import { FakeClock } from '../src/control/clock.ts';
import { Proxier } from '../src/control/proxier.ts';
import { ChangeTracker } from '../src/control/tracker.ts';
import { createDatapath } from '../src/datapath/datapath.ts';
import { dpLoadServices } from '../src/datapath/load.ts';
import type { EndpointSlice, Service } from '../src/model.ts';

const N = Number(process.argv[2] ?? 10_000);
const CHANGES = Number(process.argv[3] ?? 200);

function ip(base: number, i: number): string {
  return `${base >>> 24}.${(base >>> 16) & 255}.${((i >>> 8) + ((base >>> 8) & 255)) & 255}.${i & 255}`;
}

function service(i: number): Service {
  return {
    namespace: 'bench',
    name: `svc-${i}`,
    type: 'ClusterIP',
    clusterIPs: [ip(0x0a600000, i)],
    ports: [{ name: 'http', protocol: 'TCP', port: 80, targetPort: 8080, nodePort: 0 }],
    sessionAffinity: 'None',
    affinityTimeoutSeconds: 10800,
    externalTrafficPolicy: 'Cluster',
    internalTrafficPolicy: 'Cluster',
    externalIPs: [],
    loadBalancerIPs: [],
    loadBalancerSourceRanges: [],
    healthCheckNodePort: 0,
    annotations: {},
    labels: {},
  };
}

function slice(i: number, gen = 0): EndpointSlice {
  const endpoints = [0, 1, 2].map((k) => ({
    addresses: [ip(0x0af40000 + (k << 20), (i + gen) & 0xffff)],
    conditions: { ready: true, serving: true, terminating: false },
    nodeName: `node-${k}`,
  }));
  return {
    namespace: 'bench',
    name: `svc-${i}-abcde`,
    serviceName: `svc-${i}`,
    addressType: 'IPv4',
    ports: [{ name: 'http', protocol: 'TCP', port: 8080 }],
    endpoints,
  };
}

function ms(t0: number): string {
  return `${(performance.now() - t0).toFixed(1)} ms`;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

process.stdout.write(`building ${N} services and slices...\n`);
const services = Array.from({ length: N }, (_, i) => service(i));
const slices = Array.from({ length: N }, (_, i) => slice(i));

// ---- tracker alone -------------------------------------------------------------------------
{
  const t = new ChangeTracker();
  let t0 = performance.now();
  for (const s of services) t.services.update(null, s);
  for (const s of slices) t.endpointSlices.update(null, s);
  process.stdout.write(`tracker: ${N} services + ${N} slices update()      ${ms(t0)}\n`);
  t0 = performance.now();
  const ch = t.checkout();
  process.stdout.write(
    `tracker: checkout (${ch.changedServicePorts.length} service ports)   ${ms(t0)}\n`,
  );
  t0 = performance.now();
  const all = t.resolveAll();
  process.stdout.write(`tracker: resolveAll (${all.length})                    ${ms(t0)}\n`);

  const times: number[] = [];
  for (let k = 0; k < CHANGES; k++) {
    const i = (k * 7919) % N;
    const s0 = performance.now();
    t.endpointSlices.update(slice(i, k), slice(i, k + 1));
    const c = t.checkout();
    t.resolve(c.changedServicePorts[0]);
    times.push(performance.now() - s0);
  }
  process.stdout.write(
    `tracker: one slice change at ${N} (update+checkout+resolve), median of ${CHANGES}: ${(median(times) * 1000).toFixed(0)} µs\n`,
  );
}

// ---- proxier with runner and the datapath loader ---------------------------------------------
{
  const clock = new FakeClock();
  const dp = createDatapath({ svcCapacity: 1 << 17, beCapacity: 1 << 17 });
  let controlMs = 0;
  let loadMs = 0;
  const p = new Proxier({
    clock,
    program: ({ tracker }) => {
      const c0 = performance.now();
      const ports = tracker.resolveAll();
      const c1 = performance.now();
      dpLoadServices(dp, ports);
      loadMs += performance.now() - c1;
      controlMs += c1 - c0;
      return true;
    },
  });
  let t0 = performance.now();
  for (const s of services) p.onServiceUpdate(null, s);
  for (const s of slices) p.onEndpointSliceUpdate(null, s);
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  const feedMs = performance.now() - t0;
  t0 = performance.now();
  clock.advance(0);
  const syncMs = performance.now() - t0;
  process.stdout.write(
    `proxier: initial load: events ${feedMs.toFixed(1)} ms, sync ${syncMs.toFixed(1)} ms ` +
      `(of which resolveAll ${controlMs.toFixed(1)} ms, dpLoadServices ${loadMs.toFixed(1)} ms)\n`,
  );

  const control: number[] = [];
  const load: number[] = [];
  for (let k = 0; k < Math.min(CHANGES, 50); k++) {
    const i = (k * 7919) % N;
    controlMs = 0;
    loadMs = 0;
    clock.advance(2000); // past the min interval: every change is its own sync
    const s0 = performance.now();
    p.onEndpointSliceUpdate(slice(i, k), slice(i, k + 1));
    clock.advance(0);
    const total = performance.now() - s0;
    control.push(total - loadMs);
    load.push(loadMs);
  }
  process.stdout.write(
    `proxier: one slice change at ${N}: control ${median(control).toFixed(2)} ms ` +
      `(a full resolveAll for the full loader included), dpLoadServices ${median(load).toFixed(2)} ms (medians)\n`,
  );
  p.stop();
}

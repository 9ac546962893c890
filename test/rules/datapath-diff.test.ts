// Differential test between the two readings of kube-proxy in this repository: for random
// ClusterIP services (endpoint readiness/serving/terminating, node placement, both internal
// traffic policies), where a pod's connection to the ClusterIP ends up according to the
// rendered iptables rules (traced as kube-proxy's tests trace them) must match the backends
// the datapath loader (src/datapath/load.ts) puts behind the frontend, or its verdict when
// there are none (REJECT, or DROP for internalTrafficPolicy: Local).
//
// Not generated, because the two sides are known to differ there (see the rules helper's
// report): topology hints (the datapath has no node zone), an internalTrafficPolicy: Local
// service with no usable endpoint anywhere (kube-proxy REJECTs, the datapath DROPs).

import { loaderOf } from '../datapath/harness.ts';
import { describe, expect, it } from 'vitest';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import { SVC_F_ITP_LOCAL } from '../../src/maps/services.ts';
import type { Endpoint } from '../../src/model.ts';
import { renderIptables } from '../../src/rules/iptables.ts';
import { u32ToIpv4 } from '../../src/wire/addr.ts';
import { ep, makeService, makeSlice, port, resolve, slicePort, testNodeName } from './builders.ts';
import { tracePacket } from './ipt-dump.ts';
import { mulberry32 as rng } from '../wire/helpers.ts';

const CONDITIONS = [
  { ready: true, serving: true, terminating: false },
  { ready: false, serving: true, terminating: true },
  { ready: false, serving: false, terminating: true },
  { ready: false, serving: false, terminating: false },
];

function randomEndpoints(r: () => number): Endpoint[] {
  const n = Math.floor(r() * 5);
  return Array.from({ length: n }, (_, i) =>
    ep(`10.244.${i}.${1 + Math.floor(r() * 3)}`, {
      ...CONDITIONS[Math.floor(r() * CONDITIONS.length)],
      nodeName: r() < 0.5 ? testNodeName : 'other-node',
    }),
  );
}

function datapathOutcome(model: ReturnType<typeof resolve>): string {
  const dp = createDatapath();
  loaderOf(dp).load(model, { nodeName: testNodeName });
  const m = dp.svc.lookup(0x0a60000a, 80, 6, 0); // 10.96.0.10:80/TCP
  if (m < 0) return 'no frontend';
  const count = dp.svc.count(m);
  if (count === 0) return dp.svc.flags(m) & SVC_F_ITP_LOCAL ? 'DROP' : 'REJECT';
  const out: string[] = [];
  for (let slot = 1; slot <= count; slot++) {
    const b = dp.be.lookup(dp.svc.backendId(dp.svc.lookup(0x0a60000a, 80, 6, slot)));
    out.push(`${u32ToIpv4(dp.be.addr(b))}:${dp.be.port(b)}`);
  }
  return out.sort().join(', ');
}

describe('iptables rules vs datapath loader, random ClusterIP services', () => {
  it('agree on where a pod connection to the ClusterIP goes (400 cases)', () => {
    const r = rng(20261129);
    let compared = 0;
    for (let seed = 0; compared < 400; seed++) {
      const itp = r() < 0.5 ? ('Local' as const) : ('Cluster' as const);
      const endpoints = randomEndpoints(r);
      const usable = endpoints.some(
        (e) => e.conditions.ready || (e.conditions.serving && e.conditions.terminating),
      );
      if (itp === 'Local' && !usable) continue; // known divergence, see the header
      const svc = makeService('ns', 'web', (s) => {
        s.clusterIPs = ['10.96.0.10'];
        s.internalTrafficPolicy = itp;
        s.ports = [port({ name: 'http', port: 80 })];
      });
      const model = resolve([svc], [makeSlice('ns', 'web', endpoints, [slicePort('http', 8080)])]);
      const rules = renderIptables(model, { nodeName: testNodeName, clusterCIDR: '10.0.0.0/8' });
      const traced = tracePacket(
        rules,
        { sourceIP: '10.0.0.2', protocol: 'tcp', destIP: '10.96.0.10', destPort: 80 },
        [],
      );
      const rulesOutcome = traced.output.split(', ').sort().join(', ');
      expect({ seed, itp, endpoints, outcome: datapathOutcome(model) }).toEqual({
        seed,
        itp,
        endpoints,
        outcome: rulesOutcome,
      });
      compared++;
    }
  });
});

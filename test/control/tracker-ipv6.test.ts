// The IPv6 half of dual-stack Services reaches the control plane and is left out of the IPv4
// data plane on purpose (issue 19 point 2 adds it): counted per event, said once in the log,
// and the IPv4 half of the same Service is programmed as before.
import { describe, expect, it } from 'vitest';
import { ignoredIPv6Notice } from '../../src/control/control-plane.ts';
import { ChangeTracker } from '../../src/control/tracker.ts';
import { ep, slice, svc } from './fixtures.ts';

const dual = () =>
  svc('web', {
    clusterIPs: ['10.96.0.20', 'fd00:10:96::20'],
    ipFamilies: ['IPv4', 'IPv6'],
    ipFamilyPolicy: 'RequireDualStack',
  });
const v6slice = () => ({
  ...slice('web-v6', 'web', [ep('fd00:10:244:1::5')]),
  addressType: 'IPv6' as const,
});

describe('ChangeTracker.ignoredIPv6', () => {
  it('counts Services with an IPv6 ClusterIP and IPv6 slices as events arrive and leave', () => {
    const t = new ChangeTracker();
    expect(t.ignoredIPv6).toEqual({ services: 0, slices: 0 });
    t.services.update(null, dual());
    t.endpointSlices.update(null, v6slice());
    t.endpointSlices.update(null, slice('web-v4', 'web', [ep('10.244.1.5')]));
    t.services.update(null, svc('v4only'));
    expect(t.ignoredIPv6).toEqual({ services: 1, slices: 1 });
    t.checkout();
    // the IPv4 half is programmed: its ClusterIP's endpoints are the IPv4 slice's only
    const r = t.resolve('default/web:dns');
    expect(r?.endpoints.map((e) => e.ip)).toEqual(['10.244.1.5']);
    // an update dropping the IPv6 ClusterIP, then deletes, bring the counts back to zero
    t.services.update(dual(), svc('web', { clusterIPs: ['10.96.0.20'] }));
    expect(t.ignoredIPv6.services).toBe(0);
    t.endpointSlices.update(v6slice(), null);
    expect(t.ignoredIPv6).toEqual({ services: 0, slices: 0 });
  });
});

describe('ignoredIPv6Notice', () => {
  it('logs once, the first time there is IPv6 to leave out, with the counts', () => {
    const lines: [object, string][] = [];
    const n = ignoredIPv6Notice({ info: (o, m) => lines.push([o, m ?? '']), error: () => {} });
    expect(n.check({ services: 0, slices: 0 })).toBe(false);
    expect(n.check({ services: 2, slices: 1 })).toBe(true);
    expect(n.check({ services: 3, slices: 1 })).toBe(false);
    expect(lines).toHaveLength(1);
    expect(lines[0][0]).toEqual({ ipv6Services: 2, ipv6EndpointSlices: 1 });
    expect(lines[0][1]).toMatch(/not programmed: this data plane serves IPv4 only/);
  });
});

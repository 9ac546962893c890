// The IPv6 half of dual-stack Services reaches the data plane (issue 19 point 2): the tracker
// resolves each service port's IPv6 EndpointSlices into `endpoints6` beside the IPv4 ones, an
// IPv6-only Service has its service ports, and a change to either family's ClusterIP or slices
// re-syncs the port. (Before, the IPv6 half was counted, said once in the log and dropped: an
// IPv6-only Service had no service port and `endpoints6` did not exist.)
import { describe, expect, it } from 'vitest';
import { ChangeTracker } from '../../src/control/tracker.ts';
import { ep, slice, svc } from './fixtures.ts';

const dual = (v6 = 'fd00:10:96::20') =>
  svc('web', {
    clusterIPs: ['10.96.0.20', v6],
    ipFamilies: ['IPv4', 'IPv6'],
    ipFamilyPolicy: 'RequireDualStack',
  });
const v6slice = (ip = 'fd00:10:244:1::5') => ({
  ...slice('web-v6', 'web', [ep(ip)]),
  addressType: 'IPv6' as const,
});

describe('ChangeTracker, IPv6', () => {
  it('resolves a dual-stack port with its IPv4 and IPv6 endpoints apart', () => {
    const t = new ChangeTracker();
    t.services.update(null, dual());
    t.endpointSlices.update(null, v6slice());
    t.endpointSlices.update(null, slice('web-v4', 'web', [ep('10.244.1.5')]));
    t.checkout();
    const r = t.resolve('default/web:dns');
    expect(r?.endpoints.map((e) => `${e.ip}:${e.port}`)).toEqual(['10.244.1.5:5353']);
    expect(r?.endpoints6?.map((e) => `${e.ip}:${e.port}`)).toEqual(['fd00:10:244:1::5:5353']);
  });

  it('gives an IPv6-only Service its service ports', () => {
    const t = new ChangeTracker();
    t.services.update(
      null,
      svc('v6only', { clusterIPs: ['fd00:10:96::30'], ipFamilies: ['IPv6'] }),
    );
    t.endpointSlices.update(null, { ...v6slice(), serviceName: 'v6only' });
    const ch = t.checkout();
    expect(ch.changedServicePorts).toEqual(['default/v6only:dns']);
    expect(t.resolveAll().map((r) => r.servicePortName)).toEqual(['default/v6only:dns']);
    expect(t.resolve('default/v6only:dns')?.endpoints6?.map((e) => e.ip)).toEqual([
      'fd00:10:244:1::5',
    ]);
  });

  it('re-syncs a port when only its IPv6 ClusterIP or IPv6 slice changes', () => {
    const t = new ChangeTracker();
    t.services.update(null, dual());
    t.endpointSlices.update(null, v6slice());
    t.checkout();
    t.services.update(dual(), dual('fd00:10:96::21'));
    expect(t.checkout().changedServicePorts).toEqual(['default/web:dns']);
    t.endpointSlices.update(v6slice(), v6slice('fd00:10:244:1::6'));
    expect(t.checkout().changedServicePorts).toEqual(['default/web:dns']);
    expect(t.resolve('default/web:dns')?.endpoints6?.map((e) => e.ip)).toEqual([
      'fd00:10:244:1::6',
    ]);
  });
});

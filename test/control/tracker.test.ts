import { describe, expect, it } from 'vitest';
import { buildEndpoints, ChangeTracker } from '../../src/control/tracker.ts';
import { resolveServicePorts } from '../../src/manifests/resolve.ts';
import { ep, port, slice, svc } from './fixtures.ts';

function loaded(): ChangeTracker {
  const t = new ChangeTracker({ now: () => 1000 });
  t.services.update(null, svc('dns'));
  t.endpointSlices.update(null, slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7')]));
  t.checkout();
  return t;
}

describe('ChangeTracker: pending changes', () => {
  it('add reports the new service port and its endpoints', () => {
    const t = new ChangeTracker();
    expect(t.services.update(null, svc('dns'))).toBe(true);
    t.endpointSlices.update(null, slice('dns-a', 'dns', [ep('10.244.1.5')]));
    expect(t.pendingServiceChanges).toBe(1);
    expect(t.pendingEndpointChanges).toBe(1);
    const ch = t.checkout();
    expect(ch.changedServicePorts).toEqual(['default/dns:dns']);
    expect(ch.changedServices).toEqual(['default/dns']);
    expect(ch.serviceChanges).toBe(1);
    expect(ch.endpointChanges).toBe(1);
    expect(t.pendingChanges()).toBe(0);
    const r = t.resolve('default/dns:dns')!;
    expect(r.endpoints.map((e) => `${e.ip}:${e.port}`)).toEqual(['10.244.1.5:5353']);
  });

  it('drops an update that changes nothing the data plane uses', () => {
    const t = loaded();
    const noisy = svc('dns', {
      labels: { app: 'x' },
      annotations: { a: 'b' },
      origin: { file: 'f', doc: 1 },
    });
    expect(t.services.update(svc('dns'), noisy)).toBe(false);
    expect(t.pendingServiceChanges).toBe(0);
    expect(t.serviceChangesTotal).toBe(2);
    const ch = t.checkout();
    expect(ch.changedServicePorts).toEqual([]);
    expect(ch.serviceChanges).toBe(0);
  });

  it('keeps an update that changes a data-plane field', () => {
    const t = loaded();
    t.services.update(svc('dns'), svc('dns', { sessionAffinity: 'ClientIP' }));
    expect(t.pendingService('default/dns')?.previous?.sessionAffinity).toBe('None');
    expect(t.pendingService('default/dns')?.current?.sessionAffinity).toBe('ClientIP');
    expect(t.checkout().changedServicePorts).toEqual(['default/dns:dns']);
  });

  it('drops changes that cancel out before the sync: add then delete, edit then revert', () => {
    const t = loaded();
    t.services.update(null, svc('web', { clusterIPs: ['10.96.0.20'] }));
    t.services.update(svc('web', { clusterIPs: ['10.96.0.20'] }), null);
    t.services.update(svc('dns'), svc('dns', { internalTrafficPolicy: 'Local' }));
    t.services.update(svc('dns', { internalTrafficPolicy: 'Local' }), svc('dns'));
    const s2 = slice('dns-a', 'dns', [ep('10.244.1.5')]);
    t.endpointSlices.update(slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7')]), s2);
    t.endpointSlices.update(s2, slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7')]));
    expect(t.pendingChanges()).toBe(0);
    expect(t.checkout().changedServicePorts).toEqual([]);
  });

  it('an endpoint moving between two slices of a service is not a change', () => {
    const t = loaded();
    t.endpointSlices.update(null, slice('dns-b', 'dns', [ep('10.244.2.7')]));
    t.endpointSlices.update(
      slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7')]),
      slice('dns-a', 'dns', [ep('10.244.1.5')]),
    );
    expect(t.pendingEndpointChanges).toBe(2);
    const ch = t.checkout();
    expect(ch.endpointChanges).toBe(2);
    expect(ch.changedServicePorts).toEqual([]);
    expect(ch.udpConntrackCleanup).toBe(false);
  });

  it('reports the oldest pending change time, and endpoint change times at checkout', () => {
    let now = 5000;
    const t = new ChangeTracker({ now: () => now });
    t.services.update(null, svc('dns'));
    now = 6000;
    t.services.update(svc('dns'), svc('dns', { clusterIPs: ['10.96.0.11'] }));
    t.endpointSlices.update(null, slice('dns-a', 'dns', [ep('10.244.1.5')]));
    now = 7000;
    t.endpointSlices.update(null, slice('dns-b', 'dns', [ep('10.244.1.6')]));
    expect(t.oldestPending()).toBe(5000);
    expect(t.checkout().changeTimes.sort()).toEqual([6000, 7000]);
    expect(t.oldestPending()).toBeUndefined();
  });

  it('an endpoint change for a port the service does not have is not reported', () => {
    const t = loaded();
    t.endpointSlices.update(
      null,
      slice('dns-x', 'dns', [ep('10.244.3.3')], [{ name: 'other', protocol: 'TCP', port: 9 }]),
    );
    expect(t.checkout().changedServicePorts).toEqual([]);
  });
});

describe('ChangeTracker: what changed', () => {
  it('reports only the service port whose endpoints changed', () => {
    const t = new ChangeTracker();
    t.services.update(
      null,
      svc('dns', { ports: [port('dns', 'UDP', 53), port('dns-tcp', 'TCP', 53)] }),
    );
    t.endpointSlices.update(
      null,
      slice(
        'dns-a',
        'dns',
        [ep('10.244.1.5')],
        [
          { name: 'dns', protocol: 'UDP', port: 53 },
          { name: 'dns-tcp', protocol: 'TCP', port: 53 },
        ],
      ),
    );
    t.checkout();
    t.endpointSlices.update(
      null,
      slice('dns-b', 'dns', [ep('10.244.2.7')], [{ name: 'dns-tcp', protocol: 'TCP', port: 53 }]),
    );
    expect(t.checkout().changedServicePorts).toEqual(['default/dns:dns-tcp']);
  });

  it('reports deleted service ports and forgets them', () => {
    const t = loaded();
    t.services.update(svc('dns'), null);
    const ch = t.checkout();
    expect(ch.deletedServicePorts).toEqual(['default/dns:dns']);
    expect(ch.changedServicePorts).toEqual(['default/dns:dns']);
    expect(t.resolve('default/dns:dns')).toBeUndefined();
    expect(t.resolveAll()).toEqual([]);
  });

  it('headless and ExternalName services have no service ports, so adding one is a no-op', () => {
    const t = new ChangeTracker();
    t.services.update(null, svc('headless', { clusterIPs: [] }));
    t.services.update(null, svc('ext', { type: 'ExternalName', clusterIPs: [] }));
    expect(t.pendingServiceChanges).toBe(0);
    const ch = t.checkout();
    expect(ch.serviceChanges).toBe(0);
    expect(ch.changedServicePorts).toEqual([]);
    expect(t.servicePortCount).toBe(0);
  });

  it('resolveAll gives every service port with endpoints matched by port name and protocol', () => {
    const t = loaded();
    t.services.update(
      null,
      svc('web', {
        clusterIPs: ['10.96.0.20'],
        ports: [port('', 'TCP', 80, { targetPort: 'http' })],
      }),
    );
    t.endpointSlices.update(
      null,
      slice('web-1', 'web', [ep('10.244.1.9')], [{ name: '', protocol: 'TCP', port: 8080 }]),
    );
    t.checkout();
    const all = t.resolveAll();
    expect(all.map((r) => r.servicePortName)).toEqual(['default/dns:dns', 'default/web']);
    expect(all[1].endpoints).toEqual([
      { ip: '10.244.1.9', port: 8080, ready: true, serving: true, terminating: false },
    ]);
  });
});

describe('ChangeTracker: resolveAll between checkouts', () => {
  it('reflects changed endpoints, added and deleted ports after each checkout, not before', () => {
    const t = loaded();
    expect(t.resolveAll().map((r) => r.endpoints.length)).toEqual([2]);
    t.endpointSlices.update(null, slice('dns-b', 'dns', [ep('10.244.3.3')]));
    t.services.update(
      null,
      svc('web', { clusterIPs: ['10.96.0.20'], ports: [port('http', 'TCP', 80)] }),
    );
    expect(t.resolveAll().map((r) => r.endpoints.length)).toEqual([2]);
    t.checkout();
    expect(t.resolveAll().map((r) => [r.servicePortName, r.endpoints.length])).toEqual([
      ['default/dns:dns', 3],
      ['default/web:http', 0],
    ]);
    t.services.update(svc('dns'), null);
    t.checkout();
    expect(t.resolveAll().map((r) => r.servicePortName)).toEqual(['default/web:http']);
  });
});

describe('ChangeTracker: UDP conntrack cleanup', () => {
  it('a UDP endpoint that stops serving is stale (the CoreDNS restart case)', () => {
    const t = loaded();
    t.endpointSlices.update(
      slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7')]),
      slice('dns-a', 'dns', [
        ep('10.244.1.5'),
        ep('10.244.2.7', {}, { ready: false, serving: false, terminating: true }),
      ]),
    );
    const ch = t.checkout();
    expect(ch.udpStaleEndpoints).toEqual([
      { servicePortName: 'default/dns:dns', endpoint: '10.244.2.7:5353' },
    ]);
    expect(ch.udpConntrackCleanup).toBe(true);
  });

  it('a UDP endpoint added (or one becoming ready) needs no cleanup', () => {
    const t = loaded();
    t.endpointSlices.update(
      slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7')]),
      slice('dns-a', 'dns', [ep('10.244.1.5'), ep('10.244.2.7'), ep('10.244.3.1')]),
    );
    const ch = t.checkout();
    expect(ch.changedServicePorts).toEqual(['default/dns:dns']);
    expect(ch.udpConntrackCleanup).toBe(false);
  });

  it('a TCP endpoint removed needs no cleanup', () => {
    const t = new ChangeTracker();
    const tcp = [{ name: 'http', protocol: 'TCP' as const, port: 80 }];
    t.services.update(null, svc('web', { ports: [port('http', 'TCP', 80)] }));
    t.endpointSlices.update(null, slice('w', 'web', [ep('10.244.1.5'), ep('10.244.1.6')], tcp));
    t.checkout();
    t.endpointSlices.update(
      slice('w', 'web', [ep('10.244.1.5'), ep('10.244.1.6')], tcp),
      slice('w', 'web', [ep('10.244.1.5')], tcp),
    );
    const ch = t.checkout();
    expect(ch.changedServicePorts).toEqual(['default/web:http']);
    expect(ch.udpConntrackCleanup).toBe(false);
  });

  it('a deleted UDP service leaves its addresses and NodePort stale', () => {
    const t = new ChangeTracker();
    const s = svc('dns', {
      type: 'NodePort',
      externalIPs: ['192.0.2.1'],
      ports: [port('dns', 'UDP', 53, { nodePort: 30053 })],
    });
    t.services.update(null, s);
    t.checkout();
    t.services.update(s, null);
    const ch = t.checkout();
    expect(ch.udpStaleServiceAddrs).toEqual([
      { servicePortName: 'default/dns:dns', ip: '10.96.0.10', port: 53 },
      { servicePortName: 'default/dns:dns', ip: '192.0.2.1', port: 53 },
    ]);
    expect(ch.udpStaleNodePorts).toEqual([30053]);
    expect(ch.udpConntrackCleanup).toBe(true);
  });

  it('a UDP service whose cluster IP changed leaves the old IP stale', () => {
    const t = loaded();
    t.services.update(svc('dns'), svc('dns', { clusterIPs: ['10.96.0.99'] }));
    const ch = t.checkout();
    expect(ch.udpStaleServiceAddrs).toEqual([
      { servicePortName: 'default/dns:dns', ip: '10.96.0.10', port: 53 },
    ]);
  });

  it('a UDP port going from no serving endpoint to some is newly active', () => {
    const t = new ChangeTracker();
    t.services.update(null, svc('dns'));
    t.checkout();
    t.endpointSlices.update(null, slice('dns-a', 'dns', [ep('10.244.1.5')]));
    const ch = t.checkout();
    expect(ch.udpNewlyActive).toEqual(['default/dns:dns']);
    expect(ch.udpConntrackCleanup).toBe(true);
  });
});

describe('buildEndpoints', () => {
  it('merges slices, skips non-IPv4 slices, uses the first address and sorts by ip:port', () => {
    const m = buildEndpoints([
      slice('b', 'dns', [
        ep('10.244.1.10'),
        { ...ep('10.244.1.2'), addresses: ['10.244.1.2', '10.244.9.9'] },
      ]),
      { ...slice('v6', 'dns', [ep('fd00::1')]), addressType: 'IPv6' },
      slice('a', 'dns', [ep('10.244.1.3')]),
    ]);
    expect(m.get('default/dns:dns|UDP')!.endpoints.map((e) => e.ip)).toEqual([
      '10.244.1.10',
      '10.244.1.2',
      '10.244.1.3',
    ]);
  });

  it('a duplicated endpoint keeps the local copy', () => {
    const m = buildEndpoints(
      [
        slice('a', 'dns', [ep('10.244.1.5', { nodeName: 'n2' })]),
        slice('b', 'dns', [ep('10.244.1.5', { nodeName: 'n1' })]),
      ],
      'n1',
    );
    expect(m.get('default/dns:dns|UDP')!.endpoints).toHaveLength(1);
    expect(m.get('default/dns:dns|UDP')!.endpoints[0].nodeName).toBe('n1');
  });
});

describe('ChangeTracker agrees with resolveServicePorts (src/manifests)', () => {
  it('programs the same service ports and endpoints from the same objects', () => {
    const udpTcp = [
      { name: 'dns', protocol: 'UDP' as const, port: 5353 },
      { name: 'dns', protocol: 'TCP' as const, port: 5354 },
    ];
    const state = {
      services: [
        svc('dns', {
          clusterIPs: ['10.96.0.10', 'fd00:10:96::a'],
          ipFamilies: ['IPv4', 'IPv6'],
          ports: [port('dns', 'UDP', 53)],
        }),
        svc('web', { clusterIPs: ['10.96.0.20'], ports: [port('', 'TCP', 80)] }),
        svc('headless', { clusterIPs: [] }),
      ],
      slices: [
        slice(
          'dns-b',
          'dns',
          [ep('10.244.1.5', { nodeName: 'n1' }), ep('10.244.1.6', {}, { ready: false })],
          udpTcp,
        ),
        slice('dns-a', 'dns', [ep('10.244.1.5', { nodeName: 'n2' }), ep('10.244.1.6')], udpTcp),
        slice(
          'web-1',
          'web',
          [ep('10.244.2.1'), ep('10.244.2.10')],
          [{ name: '', protocol: 'TCP', port: 8080 }],
        ),
        slice('headless-1', 'headless', [ep('10.244.3.1')]),
        {
          ...slice('dns-v6', 'dns', [ep('fd00:10:244:1::5', { nodeName: 'n1' })], udpTcp),
          addressType: 'IPv6' as const,
        },
      ],
    };
    const t = new ChangeTracker({ nodeName: 'n1' });
    for (const s of state.services) t.services.update(null, s);
    for (const s of state.slices) t.endpointSlices.update(null, s);
    t.checkout();
    const ours = t.resolveAll();
    const byName = (a: { servicePortName: string }, b: { servicePortName: string }) =>
      a.servicePortName < b.servicePortName ? -1 : 1;
    const theirs = resolveServicePorts(state, { nodeName: 'n1' }).sort(byName);
    // the IPv4 resolution is kube-proxy's IPv4 proxier's; endpoints6 its IPv6 proxier's
    expect(ours.map(({ endpoints6: _, ...r }) => r)).toEqual(theirs);
    const theirs6 = resolveServicePorts(state, { nodeName: 'n1', family: 'IPv6' }).sort(byName);
    expect(theirs6.map((r) => r.servicePortName)).toEqual(['default/dns:dns']);
    expect(ours[0].endpoints6).toEqual(theirs6[0].endpoints);
    expect(ours[0].endpoints.map((e) => [e.ip, e.port, e.nodeName, e.ready])).toEqual([
      ['10.244.1.5', 5353, 'n1', true],
      ['10.244.1.6', 5353, undefined, true],
    ]);
  });
});

// Issue 18: a checkout of thousands of objects is cut into steps (the packet loop's thread).
describe('ChangeTracker: checkoutSliced', () => {
  const vip = (k: number) => `10.96.${k >> 8}.${(k & 255) + 1}`;
  const feed = (t: ChangeTracker, n: number, gen: number) => {
    for (let k = 0; k < n; k++) {
      t.services.update(
        null,
        svc(`s${k}`, { clusterIPs: [vip(k)], ports: [port('dns', 'UDP', 53)] }),
      );
      t.endpointSlices.update(
        null,
        slice(`s${k}-a`, `s${k}`, [ep(`10.244.${gen}.${(k % 200) + 1}`)]),
      );
    }
  };
  const turnCount = () => {
    const c = {
      turns: 0,
      turn: () => new Promise<void>((r) => setImmediate(r)).then(() => void c.turns++),
    };
    return c;
  };

  it('reports and applies exactly what checkout() does, in steps', async () => {
    const a = new ChangeTracker({ now: () => 1000 });
    const b = new ChangeTracker({ now: () => 1000 });
    for (const t of [a, b]) {
      feed(t, 300, 1);
      t.checkout();
      feed(t, 300, 2); // every slice changes, UDP endpoints go stale
      for (let k = 250; k < 300; k++) t.services.update(svc(`s${k}`), null);
    }
    const whole = a.checkout();
    const c = turnCount();
    const sliced = await b.checkoutSliced(40, c.turn);
    expect(c.turns).toBeGreaterThanOrEqual(Math.floor((50 + 300 + 300) / 40));
    expect(sliced).toEqual(whole);
    expect(b.resolveAll()).toEqual(a.resolveAll());
    expect(b.pendingChanges()).toBe(0);
  });

  it('a change that comes in during the steps is taken if its object was not reached, else left for the next sync', async () => {
    for (const first of [true, false]) {
      const t = new ChangeTracker({ now: () => 1000 });
      feed(t, 100, 1);
      t.checkout();
      const v1 = svc('s7', { clusterIPs: [vip(7)], ports: [port('dns', 'UDP', 53)] });
      const v2 = { ...v1, ports: [port('dns', 'UDP', 54)] };
      // s7 pending first or last among 100 changed Services
      if (first) t.services.update(v1, v2);
      for (let k = 0; k < 100; k++) {
        if (k === 7) continue;
        const s = svc(`s${k}`, { clusterIPs: [vip(k)], ports: [port('dns', 'UDP', 53)] });
        t.services.update(s, { ...s, annotations: { 'kubetun.io/scheduler': 'rr' } });
      }
      if (!first) t.services.update(v1, v2);
      let reverted = false;
      await t.checkoutSliced(10, async () => {
        await new Promise<void>((r) => setImmediate(r));
        if (!reverted) {
          reverted = true;
          t.services.update(v2, v1); // back to v1 after the first step
        }
      });
      t.checkout();
      expect(t.appliedService('default/s7')?.ports[0].port, `s7 ${first ? 'first' : 'last'}`).toBe(
        53,
      );
      expect(t.resolve('default/s7:dns')?.port.port).toBe(53);
      expect(t.pendingChanges()).toBe(0);
    }
  });
});

// Golden tests: kube-proxy's own expected iptables-restore dumps (pkg/proxy/iptables/
// proxier_test.go: TestOverallIPTablesRules, TestSyncProxyRulesRepeated's first full sync,
// TestBadIPs, TestMasqueradeRule, TestDropInvalidRule, TestSyncProxyRulesLargeClusterMode,
// TestComputeProbability) reproduced from the same Services/EndpointSlices. Like kube-proxy's
// assertIPTablesRulesEqual, the output is passed through sortIPTablesRules first (KUBE-SERVICES
// and KUBE-NODEPORTS compared as sets keyed by service, chains alphabetically) and every other
// chain is compared in exact order.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { renderIptables } from '../../src/rules/iptables.ts';
import { computeProbability } from '../../src/rules/probability.ts';
import {
  badIPsModel,
  ep,
  fakeProxierOptions,
  makeService,
  makeSlice,
  port,
  resolve,
  slicePort,
} from './builders.ts';
import { overallModel } from './overall-model.ts';
import { chainText, checkJumps, sortDump } from './ipt-dump.ts';

const golden = (name: string) => readFileSync(new URL(`./golden/${name}`, import.meta.url), 'utf8');

describe('TestOverallIPTablesRules', () => {
  it('renders exactly the dump kube-proxy expects', () => {
    const out = renderIptables(overallModel(), fakeProxierOptions);
    expect(sortDump(out)).toBe(golden('overall.iptables'));
    expect(checkJumps(golden('overall.iptables'))).toBeNull();
    expect(checkJumps(out)).toBeNull();
  });

  it('is independent of the order services arrive in', () => {
    const model = overallModel();
    const a = renderIptables(model, fakeProxierOptions);
    const b = renderIptables([...model].reverse(), fakeProxierOptions);
    expect(b).toBe(a);
  });
});

describe('TestSyncProxyRulesRepeated (initial full sync)', () => {
  it('renders two ClusterIP services', () => {
    const services = [
      makeService('ns1', 'svc1', (s) => {
        s.clusterIPs = ['172.30.0.41'];
        s.ports = [port({ name: 'p80', port: 80 })];
      }),
      makeService('ns2', 'svc2', (s) => {
        s.clusterIPs = ['172.30.0.42'];
        s.ports = [port({ name: 'p8080', port: 8080 })];
      }),
    ];
    const slices = [
      makeSlice('ns1', 'svc1', [ep('10.0.1.1')], [slicePort('p80', 80)]),
      makeSlice('ns2', 'svc2', [ep('10.0.2.1')], [slicePort('p8080', 8080)]),
    ];
    const out = renderIptables(resolve(services, slices), fakeProxierOptions);
    expect(sortDump(out)).toBe(golden('repeated-initial.iptables'));
  });
});

describe('TestSyncProxyRulesRepeated (final forced full resync)', () => {
  it('renders svc1 and the two-endpoint svc3', () => {
    // kube-proxy's expected dump also carries "-X" lines deleting the chains of services it
    // had programmed before; a render from scratch has nothing to delete, so they are left out.
    const services = [1, 3].map((n) =>
      makeService(`ns${n}`, `svc${n}`, (s) => {
        s.clusterIPs = [`172.30.0.4${n}`];
        s.ports = [port({ name: 'p80', port: 80 })];
      }),
    );
    const slices = [
      makeSlice('ns1', 'svc1', [ep('10.0.1.1')], [slicePort('p80', 80)]),
      makeSlice('ns3', 'svc3', [ep('10.0.3.2'), ep('10.0.3.3')], [slicePort('p80', 80)]),
    ];
    const out = renderIptables(resolve(services, slices), fakeProxierOptions);
    expect(sortDump(out)).toBe(golden('repeated-final.iptables'));
  });
});

describe('TestBadIPs', () => {
  it('canonicalizes sloppy addresses and CIDRs', () => {
    const { services, slices } = badIPsModel();
    const out = renderIptables(resolve(services, slices), fakeProxierOptions);
    expect(sortDump(out)).toBe(golden('bad-ips.iptables'));
  });
});

describe('TestMasqueradeRule', () => {
  for (const randomFully of [false, true]) {
    it(`randomFully ${randomFully}`, () => {
      const out = renderIptables([], { ...fakeProxierOptions, randomFully });
      const tail = randomFully ? ' --random-fully' : '';
      expect(chainText(out, 'nat', 'KUBE-POSTROUTING')).toBe(
        '-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n' +
          '-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000\n' +
          `-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE${tail}\n`,
      );
    });
  }

  it('formats the default mark as Go %#08x does', () => {
    const out = renderIptables([], {});
    expect(chainText(out, 'nat', 'KUBE-MARK-MASQ')).toBe(
      '-A KUBE-MARK-MASQ -j MARK --or-mark 0x00004000\n',
    );
    expect(renderIptables([], { masqueradeBit: 15 })).toContain('--or-mark 0x00008000');
  });
});

describe('TestDropInvalidRule', () => {
  const tail =
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT\n' +
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n';
  const cases = [
    {
      nfacct: false,
      liberal: false,
      drop: '-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\n',
    },
    {
      nfacct: true,
      liberal: false,
      drop: '-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP\n',
    },
    { nfacct: false, liberal: true, drop: '' },
  ];
  for (const c of cases) {
    it(`tcpLiberal ${c.liberal}, nfacct ${c.nfacct}`, () => {
      const out = renderIptables([], {
        ...fakeProxierOptions,
        nfacct: c.nfacct,
        conntrackTCPLiberal: c.liberal,
      });
      expect(chainText(out, 'filter', 'KUBE-FORWARD')).toBe(c.drop + tail);
    });
  }
});

describe('TestSyncProxyRulesLargeClusterMode', () => {
  it('drops per-endpoint comments above 1000 endpoints', () => {
    const mk = (ns: string, name: string, ip: string, p: string, n: number) =>
      makeService(ns, name, (s) => {
        s.clusterIPs = [ip];
        s.ports = [port({ name: p, port: n })];
      });
    const services = [
      mk('ns1', 'svc1', '172.30.0.41', 'p80', 80),
      mk('ns2', 'svc2', '172.30.0.42', 'p8080', 8080),
      mk('ns3', 'svc3', '172.30.0.43', 'p8081', 8081),
    ];
    const many = (prefix: string) =>
      Array.from({ length: 499 }, (_, i) => ep(`${prefix}.${i % 256}.${Math.floor(i / 256)}`));
    const slices = [
      makeSlice('ns1', 'svc1', many('10.0'), [slicePort('p80', 80)]),
      makeSlice('ns2', 'svc2', many('10.1'), [slicePort('p8080', 8080)]),
    ];
    const opts = { ...fakeProxierOptions, masqueradeAll: true };
    const small = renderIptables(resolve(services, slices), opts);
    const dnat = (t: string) =>
      t.split('\n').filter((l) => l.startsWith('-A KUBE-SEP-') && l.includes('-j DNAT'));
    expect(dnat(small)).toHaveLength(998);
    expect(dnat(small)).toContain(
      '-A KUBE-SEP-DKGQUZGBKLTPAR56 -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80',
    );
    const third = makeSlice(
      'ns3',
      'svc3',
      [ep('203.0.113.4'), ep('203.0.113.8'), ep('203.0.113.12')],
      [slicePort('p8081', 8081)],
    );
    const large = renderIptables(resolve(services, [...slices, third]), opts);
    expect(dnat(large)).toHaveLength(1001);
    expect(dnat(large).filter((l) => l.includes('--comment'))).toHaveLength(0);
    expect(dnat(large)).toContain(
      '-A KUBE-SEP-DKGQUZGBKLTPAR56 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80',
    );
    expect(dnat(large)).toContain(
      '-A KUBE-SEP-RUVVH7YV3PHQBDOS -m tcp -p tcp -j DNAT --to-destination 203.0.113.4:8081',
    );
  });
});

describe('TestComputeProbability', () => {
  it('matches kube-proxy for its table', () => {
    const table: Record<number, string> = {
      1: '1.0000000000',
      2: '0.5000000000',
      10: '0.1000000000',
      100: '0.0100000000',
      1000: '0.0010000000',
      10000: '0.0001000000',
      100000: '0.0000100000',
      100001: '0.0000099999',
    };
    for (const [n, s] of Object.entries(table)) expect(computeProbability(Number(n))).toBe(s);
  });

  it('rounds exact ties to even like Go (1/2048 = 0.00048828125)', () => {
    expect(computeProbability(2048)).toBe('0.0004882812');
    expect(computeProbability(3)).toBe('0.3333333333');
  });

  it('is strictly increasing as n falls', () => {
    let prev = 0;
    let firstBad = 0;
    for (let i = 100000; i > 1 && firstBad === 0; i--) {
      const cur = Number.parseFloat(computeProbability(i));
      if (cur <= prev) firstBad = i;
      prev = cur;
    }
    expect(firstBad).toBe(0);
  });
});

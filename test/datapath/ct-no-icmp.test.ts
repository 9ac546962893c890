// Regression (issue 16): conntrack had an ICMP lifetime (`ctIcmp`, `--ct-timeout icmp=`) and
// `ct list` an ICMP tuple format for a state the datapath never creates: an echo to a VIP is
// answered or dropped, an ICMP error rides the TCP/UDP flow it quotes. Both are gone; an ICMP
// packet leaves the conntrack table as it found it.

import { describe, expect, it } from 'vitest';
import { createDatapath } from '../../src/datapath/state/datapath.ts';
import { ctTimeout } from '../../src/datapath/stages/ct.ts';
import { CT_TIMEOUT_OTHER, DEFAULT_CT_TIMEOUTS } from '../../src/datapath/state/ct-state.ts';
import { IPPROTO_ICMP } from '../../src/wire/proto.ts';
import { runConfig } from '../fixtures/run-flags.ts';
import { buildIcmpEcho, endpoint, loaderOf, run, service, servicePort } from './harness.ts';

describe('no ICMP conntrack state', () => {
  it('--ct-timeout icmp= is refused, naming the lifetimes there are', () => {
    expect(() => runConfig({ ctTimeout: 'icmp=5' })).toThrow(
      /^--ct-timeout: expected name=seconds with name one of tcp-syn-sent, .*udp-stream, got "icmp=5"/,
    );
    expect(Object.keys(DEFAULT_CT_TIMEOUTS)).not.toContain('ctIcmp');
  });

  it('an echo to a VIP and to a pod creates no conntrack entry', () => {
    const dp = createDatapath({ seed: 1 });
    loaderOf(dp).load([
      servicePort(service('web', '10.96.0.10'), 80, 'TCP', [endpoint('10.244.1.5:8080')]),
    ]);
    for (const dst of ['10.96.0.10', '10.244.1.5']) {
      run(dp, buildIcmpEcho({ src: '10.244.0.9', dst, ident: 77, seq: 1 }));
    }
    expect(dp.ct.next(0)).toBeLessThan(0);
  });

  it('an entry of any protocol without its own lifetime gets the generic one', () => {
    expect(ctTimeout(IPPROTO_ICMP, 0)).toBe(CT_TIMEOUT_OTHER);
  });
});

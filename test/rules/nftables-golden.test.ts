// Golden test: kube-proxy's TestOverallNFTablesRules (pkg/proxy/nftables/proxier_test.go),
// same Services and EndpointSlices as the iptables one, compared the way its
// assertNFTablesTransactionEqual does (sortNFTablesTransaction on both sides).

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { type NftOptions, renderNftables } from '../../src/rules/nftables.ts';
import { fakeProxierOptions } from './builders.ts';
import { overallModel } from './overall-model.ts';
import { nftChainRules, sortNftTransaction } from './nft-dump.ts';

const golden = readFileSync(new URL('./golden/overall.nft', import.meta.url), 'utf8');

/** NewFakeProxier in pkg/proxy/nftables. */
const nftFakeOptions: NftOptions = {
  ...fakeProxierOptions,
  nodePortAddresses: ['192.168.0.2/32', '2001:db8::1/128'],
  serviceCIDRs: ['172.30.0.0/16'],
};

describe('TestOverallNFTablesRules', () => {
  it('renders the transaction kube-proxy expects', () => {
    const out = renderNftables(overallModel(), nftFakeOptions);
    expect(sortNftTransaction(out)).toBe(sortNftTransaction(golden));
  });

  it('uses the addrtype-free NodePort dispatch when every address takes NodePorts', () => {
    const out = renderNftables(overallModel(), { ...nftFakeOptions, nodePortAddresses: [] });
    expect(nftChainRules(out, 'services')).toEqual([
      'ip daddr . meta l4proto . th dport vmap @service-ips',
      'fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports',
    ]);
    expect(out).not.toContain('nodeport-ips');
  });
});

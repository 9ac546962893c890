// Offline: the iptables ruleset `lab up --mode iptables` loads on a node is kube-proxy's for
// that node — local-traffic detector on the cluster CIDR, hairpin masquerade per endpoint, a
// REJECT for the service without endpoints, and no nfacct match (the module may be missing).
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { nodeIptablesRules } from '../../src/lab/kube-proxy.ts';
import { loadTopology } from '../../src/lab/topology.ts';

const t = loadTopology(join(import.meta.dirname, '../../lab/topology.yaml'));

describe('lab iptables mode rules', () => {
  const rules = nodeIptablesRules(t, t.nodes[0]!);

  it('masquerades service traffic from outside the cluster CIDR (detect-local)', () => {
    expect(rules).toMatch(/-d 10\.96\.0\.10 --dport 80 ! -s 10\.244\.0\.0\/16 -j KUBE-MARK-MASQ/);
  });

  it('masquerades hairpin traffic of every web endpoint and DNATs to it', () => {
    for (const ip of ['10.244.1.2', '10.244.1.3', '10.244.2.2']) {
      expect(rules).toContain(`-s ${ip} -j KUBE-MARK-MASQ`);
      expect(rules).toMatch(
        new RegExp(`-j DNAT --to-destination ${ip.replace(/\./g, '\\.')}:8080`),
      );
    }
  });

  it('rejects the service without endpoints and uses no nfacct match', () => {
    expect(rules).toMatch(/-d 10\.96\.0\.30 --dport 80 -j REJECT/);
    expect(rules).not.toContain('nfacct');
  });
});

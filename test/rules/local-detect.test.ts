// kube-proxy's local traffic detector (src/rules/local-detect.ts): the four detectLocalMode
// settings, the refusals kube-proxy makes, and the matches both renderers write for them (the
// ClusterIP masquerade rule and the ETP Local short-circuit for pods).
import { describe, expect, it } from 'vitest';
import { renderIptables } from '../../src/rules/iptables.ts';
import {
  iptablesLocalMatch,
  localDetector,
  localSourceCidr,
  nftLocalMatch,
} from '../../src/rules/local-detect.ts';
import { renderNftables } from '../../src/rules/nftables.ts';
import { ep, makeService, makeSlice, port, resolve, slicePort } from './builders.ts';

describe('detectLocalMode', () => {
  it('defaults to ClusterCIDR; without a cluster CIDR there is no detector', () => {
    expect(localDetector({ clusterCidr: '10.244.0.0/16' })).toEqual({
      mode: 'ClusterCIDR',
      by: 'cidr',
      cidr: '10.244.0.0/16',
    });
    expect(localDetector({ mode: '' }).by).toBe('none');
    expect(localDetector({ mode: 'NodeCIDR', clusterCidr: '10.244.0.0/16' }).by).toBe('none');
  });

  it('NodeCIDR uses the node pod CIDR; the interface modes name devices', () => {
    const node = localDetector({ mode: 'NodeCIDR', nodeCidr: '10.244.1.0/24' });
    expect(iptablesLocalMatch(node)).toEqual({
      local: ['-s', '10.244.1.0/24'],
      notLocal: ['!', '-s', '10.244.1.0/24'],
    });
    const br = localDetector({ mode: 'BridgeInterface', bridgeInterface: 'cni0' });
    expect(iptablesLocalMatch(br)).toEqual({
      local: ['-i', 'cni0'],
      notLocal: ['!', '-i', 'cni0'],
    });
    expect(nftLocalMatch(br)).toEqual({ local: 'iif cni0', notLocal: 'iif != cni0' });
    const pre = localDetector({ mode: 'InterfaceNamePrefix', interfaceNamePrefix: 'cali' });
    expect(iptablesLocalMatch(pre)).toEqual({
      local: ['-i', 'cali+'],
      notLocal: ['!', '-i', 'cali+'],
    });
    expect(nftLocalMatch(pre)).toEqual({ local: 'iif "cali*"', notLocal: 'iif != "cali*"' });
    // the datapath cannot see the ingress device through the TUN: the node's pod CIDR stands in
    expect(localSourceCidr(br, '10.244.1.0/24')).toBe('10.244.1.0/24');
    expect(localSourceCidr(node, '10.244.9.0/24')).toBe('10.244.1.0/24');
    expect(localSourceCidr(localDetector({}), '10.244.1.0/24')).toBe('');
  });

  it.each([
    [{ mode: 'Bridge' }, /unknown detect-local-mode "Bridge"/],
    [{ mode: 'BridgeInterface' }, /^detectLocal.bridgeInterface: required/],
    [{ mode: 'InterfaceNamePrefix' }, /^detectLocal.interfaceNamePrefix: required/],
    [{ clusterCidr: '10.244.0.0' }, /^clusterCIDR: "10.244.0.0" is not an IPv4 or IPv6 CIDR/],
  ])('refuses %o as kube-proxy does', (input, msg) => {
    expect(() => localDetector(input)).toThrow(msg);
  });
});

describe('renderers with a detector', () => {
  // web: ClusterIP 172.30.0.41:80 with ETP Local on an external IP, one local endpoint
  const svc = makeService('ns1', 'web', (s) => {
    s.clusterIPs = ['172.30.0.41'];
    s.ports = [port({ name: 'p80', port: 80 })];
    s.externalIPs = ['192.168.99.11'];
    s.externalTrafficPolicy = 'Local';
  });
  const slice = makeSlice(
    'ns1',
    'web',
    [ep('10.180.0.1', { nodeName: 'node1' })],
    [slicePort('p80', 80)],
  );
  const ports = resolve([svc], [slice]);
  const bridge = localDetector({ mode: 'BridgeInterface', bridgeInterface: 'cni0' });

  it('iptables: off-bridge sources are masqueraded, bridge traffic short-circuits ETP Local', () => {
    const text = renderIptables(ports, { nodeName: 'node1', localDetector: bridge });
    expect(text).toMatch(
      /-A KUBE-SVC-\S+ .*-d 172\.30\.0\.41 --dport 80 ! -i cni0 -j KUBE-MARK-MASQ/,
    );
    expect(text).toMatch(/-A KUBE-EXT-\S+ .*pod traffic.* -i cni0 -j KUBE-SV[CL]-/);
    expect(text).not.toMatch(/ ! -s 10\./);
  });

  it('nftables: the same decisions with iif', () => {
    const text = renderNftables(ports, { nodeName: 'node1', localDetector: bridge });
    expect(text).toContain('ip daddr 172.30.0.41 iif != cni0 jump mark-for-masquerade');
    expect(text).toMatch(/iif cni0 goto service-\S+ comment "short-circuit pod traffic"/);
  });

  it('without a detector neither rule is written (kube-proxy without --cluster-cidr)', () => {
    const text = renderIptables(ports, { nodeName: 'node1' });
    expect(text).not.toMatch(/-i cni0| ! -s 10\./);
  });
});

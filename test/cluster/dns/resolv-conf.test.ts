// A Pod's resolv.conf for each dnsPolicy, as the kubelet writes it, and its placement under
// /etc/netns/<ns>/ (in a temporary folder here; the root test checks `ip netns exec` reads it).
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  type PodDns,
  parseResolvConf,
  placeResolvConf,
  removeResolvConf,
  resolvConf,
} from '../../../src/cluster/dns/resolv-conf.ts';

const NODE =
  '# the node\nnameserver 192.0.2.1\nnameserver 192.0.2.2\nsearch corp.example\noptions timeout:2 edns0\n';
const DNS_IP = '10.96.0.53';
const pod = (namespace: string, spec: PodDns['spec'] = {}): PodDns => ({
  metadata: { namespace },
  spec,
});

describe('resolvConf', () => {
  it('ClusterFirst (also when dnsPolicy is unset): kube-dns, the namespace search path, ndots:5', () => {
    const want = [
      'nameserver 10.96.0.53',
      'search shop.svc.cluster.local svc.cluster.local cluster.local corp.example',
      'options ndots:5',
      '',
    ].join('\n');
    expect(
      resolvConf(pod('shop', { dnsPolicy: 'ClusterFirst' }), DNS_IP, 'cluster.local', NODE),
    ).toBe(want);
    expect(resolvConf(pod('shop'), DNS_IP, 'cluster.local', NODE)).toBe(want);
    expect(resolvConf(pod('default'), DNS_IP, 'cluster.local', '')).toBe(
      'nameserver 10.96.0.53\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n',
    );
  });

  it('Default: the node resolv.conf', () => {
    expect(resolvConf(pod('shop', { dnsPolicy: 'Default' }), DNS_IP, 'cluster.local', NODE)).toBe(
      'nameserver 192.0.2.1\nnameserver 192.0.2.2\nsearch corp.example\noptions timeout:2 edns0\n',
    );
  });

  it('ClusterFirst on the host network falls back to Default; ClusterFirstWithHostNet does not', () => {
    const host = resolvConf(
      pod('a', { dnsPolicy: 'ClusterFirst', hostNetwork: true }),
      DNS_IP,
      'cluster.local',
      NODE,
    );
    expect(host).toMatch(/^nameserver 192\.0\.2\.1\n/);
    const withHost = resolvConf(
      pod('a', { dnsPolicy: 'ClusterFirstWithHostNet', hostNetwork: true }),
      DNS_IP,
      'cluster.local',
      NODE,
    );
    expect(withHost).toMatch(/^nameserver 10\.96\.0\.53\nsearch a\.svc\.cluster\.local /);
  });

  it('no cluster DNS IP: the kubelet falls back to Default', () => {
    expect(resolvConf(pod('a'), [], 'cluster.local', NODE)).toMatch(/^nameserver 192\.0\.2\.1\n/);
  });

  it('None + dnsConfig: only what the Pod asks for', () => {
    const p = pod('a', {
      dnsPolicy: 'None',
      dnsConfig: {
        nameservers: ['1.2.3.4'],
        searches: ['ns1.svc.cluster-domain.example', 'my.dns.search.suffix'],
        options: [{ name: 'ndots', value: '2' }, { name: 'edns0' }],
      },
    });
    expect(resolvConf(p, DNS_IP, 'cluster.local', NODE)).toBe(
      'nameserver 1.2.3.4\nsearch ns1.svc.cluster-domain.example my.dns.search.suffix\noptions ndots:2 edns0\n',
    );
  });

  it('dnsConfig merges into ClusterFirst: appended without repeats, options by name', () => {
    const p = pod('a', {
      dnsConfig: {
        nameservers: [DNS_IP, '9.9.9.9', '8.8.8.8', '1.1.1.1'],
        searches: ['cluster.local', 'extra.example'],
        options: [{ name: 'ndots', value: '1' }, { name: 'single-request-reopen' }],
      },
    });
    const c = parseResolvConf(resolvConf(p, DNS_IP, 'cluster.local', ''));
    expect(c.nameservers).toEqual([DNS_IP, '9.9.9.9', '8.8.8.8']); // at most 3, as the kubelet caps
    expect(c.searches).toEqual([
      'a.svc.cluster.local',
      'svc.cluster.local',
      'cluster.local',
      'extra.example',
    ]);
    expect(c.options).toEqual([{ name: 'ndots', value: '1' }, { name: 'single-request-reopen' }]);
  });

  it('a trailing dot on the cluster domain does not reach the search path', () => {
    expect(resolvConf(pod('a'), DNS_IP, 'cluster.local.', '')).toContain(
      'search a.svc.cluster.local svc.cluster.local cluster.local\n',
    );
  });
});

describe('placeResolvConf / removeResolvConf', () => {
  it('writes <etc>/<netns>/resolv.conf and removes it with its folder, keeping <etc>', () => {
    const etc = mkdtempSync(join(tmpdir(), 'kd-netns-'));
    try {
      const file = placeResolvConf('kd-pod-a', 'nameserver 10.96.0.53\n', etc);
      expect(file).toBe(join(etc, 'kd-pod-a', 'resolv.conf'));
      expect(readFileSync(file, 'utf8')).toBe('nameserver 10.96.0.53\n');
      placeResolvConf('kd-pod-a', 'nameserver 10.96.0.54\n', etc); // replaced, not appended
      expect(readFileSync(file, 'utf8')).toBe('nameserver 10.96.0.54\n');
      removeResolvConf('kd-pod-a', etc);
      expect(existsSync(join(etc, 'kd-pod-a'))).toBe(false);
      expect(existsSync(etc)).toBe(true);
      removeResolvConf('kd-pod-a', etc); // again: nothing to do, no error
    } finally {
      rmSync(etc, { recursive: true, force: true });
    }
  });

  it('leaves files others placed for the namespace', () => {
    const etc = mkdtempSync(join(tmpdir(), 'kd-netns-'));
    try {
      placeResolvConf('kd-pod-b', 'nameserver 10.96.0.53\n', etc);
      mkdirSync(join(etc, 'kd-pod-b'), { recursive: true });
      writeFileSync(join(etc, 'kd-pod-b', 'hosts'), '127.0.0.1 localhost\n');
      removeResolvConf('kd-pod-b', etc);
      expect(existsSync(join(etc, 'kd-pod-b', 'resolv.conf'))).toBe(false);
      expect(existsSync(join(etc, 'kd-pod-b', 'hosts'))).toBe(true);
    } finally {
      rmSync(etc, { recursive: true, force: true });
    }
  });

  it('refuses a name that would leave the folder', () => {
    expect(() => placeResolvConf('../etc', 'x', '/nonexistent')).toThrow(
      'not a network namespace name',
    );
  });
});

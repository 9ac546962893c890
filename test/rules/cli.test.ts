// `kubetun rules` end to end: manifests (TestOverallIPTablesRules as YAML) through the loader,
// resolver and renderer, compared with kube-proxy's expected dump; then the same output loaded
// into a real kernel with iptables-restore inside a scratch network namespace.

import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { renderRules } from '../../src/cli/rules.ts';
import { KubetunError } from '../../src/manifests/errors.ts';
import { checkJumps, sortDump } from './ipt-dump.ts';
import { sortNftTransaction } from './nft-dump.ts';

const fixture = new URL('./fixtures/overall', import.meta.url).pathname;
const golden = readFileSync(new URL('./golden/overall.iptables', import.meta.url), 'utf8');
const fake = {
  manifests: fixture,
  mode: 'iptables' as const,
  nodePortRange: '1-65535',
  nodeName: 'test-node',
  clusterCIDR: '10.0.0.0/8',
  nodeIPs: ['192.168.0.2'],
  masqueradeMark: '0x4000',
  randomFully: false,
};

describe('kubetun rules (iptables)', () => {
  it('reproduces TestOverallIPTablesRules from manifests', async () => {
    expect(sortDump(await renderRules(fake))).toBe(golden);
  });

  it('prints the same through the command line', () => {
    const out = execFileSync(
      'node',
      [
        'bin/kubetun.mjs',
        'rules',
        '--manifests',
        fixture,
        '--service-node-port-range',
        '1-65535',
        '--node-name',
        'test-node',
        '--cluster-cidr',
        '10.0.0.0/8',
        '--node-ip',
        '192.168.0.2',
      ],
      { encoding: 'utf8' },
    );
    // Defaults differ from kube-proxy's test fake only in the mark spelling and --random-fully.
    const expected = golden
      .replaceAll('0x4000', '0x00004000')
      .replace('-j MASQUERADE\n', '-j MASQUERADE --random-fully\n');
    expect(sortDump(out)).toBe(expected);
    expect(checkJumps(out)).toBeNull();
  });

  it('names the file and field of a bad manifest, and rejects a bad CIDR', async () => {
    await expect(renderRules({ ...fake, nodePortRange: undefined })).rejects.toThrow(
      /nodePort 3001 is out of range 30000-32767/,
    );
    await expect(renderRules({ ...fake, clusterCIDR: '10.0.0.0/33' })).rejects.toBeInstanceOf(
      KubetunError,
    );
    const r = spawnSync(
      'node',
      ['bin/kubetun.mjs', 'rules', '--manifests', fixture, '--mode', 'ipvs'],
      {
        encoding: 'utf8',
      },
    );
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('--mode: "ipvs" is not iptables or nftables');
  });
});

describe('kubetun rules (nftables)', () => {
  it('reproduces TestOverallNFTablesRules from manifests', async () => {
    const nftGolden = readFileSync(new URL('./golden/overall.nft', import.meta.url), 'utf8');
    const out = await renderRules({
      ...fake,
      mode: 'nftables',
      nodeIPs: ['192.168.0.2', '192.168.1.2'],
      nodePortAddresses: ['192.168.0.2/32'],
      serviceCIDRs: ['172.30.0.0/16'],
    });
    expect(sortNftTransaction(out)).toBe(sortNftTransaction(nftGolden));
  });
});

describe('kubetun rules --ip-family (a dual-stack Service from manifests)', () => {
  const dual = new URL('./fixtures/dual-stack', import.meta.url).pathname;
  const base = { manifests: dual, nodeName: 'node-1', nfacct: false };
  it("IPv6: the IPv6 proxier's ip6tables-restore input and ip6 table, IPv6 addresses only", async () => {
    const ipt = await renderRules({ ...base, mode: 'iptables', ipFamily: 'IPv6', jumps: true });
    expect(ipt).toContain('-d fd00:10:96::a --dport 80');
    expect(ipt).toContain('-j DNAT --to-destination [fd00:10:244:1::5]:8080');
    expect(ipt).toContain('ip6tables -w -t nat -I PREROUTING');
    expect(ipt).not.toContain('10.244.1.5');
    const nft = await renderRules({ ...base, mode: 'nftables', ipFamily: 'IPv6' });
    expect(nft).toContain('add element ip6 kube-proxy cluster-ips { fd00:10:96::a }');
    expect(nft).toContain('dnat to [fd00:10:244:1::5]:8080');
    expect(nft).not.toContain('10.96.0.10');
  });
  it('IPv4 (the default): the IPv4 half only', async () => {
    const ipt = await renderRules({ ...base, mode: 'iptables' });
    expect(ipt).toContain('-j DNAT --to-destination 10.244.1.5:8080');
    expect(ipt).not.toContain('fd00:');
  });
  it("takes kube-proxy's dual --cluster-cidr v4,v6: each family's proxier its own CIDR", async () => {
    const dual = '10.244.0.0/16,fd00:10:244::/56';
    const v6 = await renderRules({
      ...base,
      mode: 'iptables',
      ipFamily: 'IPv6',
      clusterCIDR: dual,
    });
    // ClusterIP traffic from outside the IPv6 cluster CIDR is masqueraded
    expect(v6).toContain('-d fd00:10:96::a --dport 80 ! -s fd00:10:244::/56 -j KUBE-MARK-MASQ');
    expect(v6).not.toContain('10.244.0.0/16');
    const v4 = await renderRules({ ...base, mode: 'nftables', clusterCIDR: dual });
    expect(v4).toContain('ip saddr != 10.244.0.0/16');
    expect(v4).not.toContain('fd00:10:244::/56');
    // the IPv6 proxier of an IPv4-only --cluster-cidr has no detector, as kube-proxy's
    const none = await renderRules({
      ...base,
      mode: 'iptables',
      ipFamily: 'IPv6',
      clusterCIDR: '10.244.0.0/16',
    });
    expect(none).not.toMatch(/ ! -s /);
    const r = spawnSync(
      'node',
      [
        'bin/kubetun.mjs',
        'rules',
        '--manifests',
        base.manifests,
        '--cluster-cidr',
        '10.1.0.0/16,10.2.0.0/16',
      ],
      { encoding: 'utf8' },
    );
    expect([r.status, r.stderr.split('\n')[0]]).toEqual([
      2,
      'kubetun rules: --cluster-cidr: "10.1.0.0/16,10.2.0.0/16" has more than one IPv4 CIDR',
    ]);
  });
});

describe('kubetun rules output in a real kernel', () => {
  const ns = `ktrules-${process.pid}`;
  afterAll(() => {
    spawnSync('ip', ['netns', 'del', ns]);
  });

  it('is accepted by iptables-restore and by the jump commands', async () => {
    execFileSync('ip', ['netns', 'add', ns]);
    // nfacct objects are created by kube-proxy through netlink; without them use --no-nfacct.
    const text = await renderRules({ ...fake, nfacct: false, jumps: true });
    const [restore, jumps] = text.split('# jumps from the built-in chains:\n');
    execFileSync('ip', ['netns', 'exec', ns, 'iptables-restore', '--noflush'], { input: restore });
    execFileSync('ip', ['netns', 'exec', ns, 'sh', '-e'], { input: jumps });
    const saved = execFileSync('ip', ['netns', 'exec', ns, 'iptables-save'], { encoding: 'utf8' });
    const rules = (s: string) => s.split('\n').filter((l) => l.startsWith('-A ')).length;
    expect(rules(saved)).toBe(rules(restore) + 14);
    expect(saved).toContain(
      '-A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80"',
    );
    expect(saved).toContain(
      '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    );
  });

  it('is accepted by nft -f', async () => {
    const text = await renderRules({ ...fake, mode: 'nftables', serviceCIDRs: ['172.30.0.0/16'] });
    const nft = (...args: string[]) =>
      execFileSync('ip', ['netns', 'exec', ns, 'nft', ...args], { input: text, encoding: 'utf8' });
    nft('-f', '-');
    const listed = nft('list', 'table', 'ip', 'kube-proxy');
    expect(listed).toContain('chain service-HVFWP5L3-ns5/svc5/tcp/p80');
    expect(listed).toContain('numgen random mod 2 vmap');
    expect(listed).toContain('masquerade fully-random');
  });
});

// Root test: kube-proxy's leftovers as the agent checks for them (it refuses to start beside
// them), also in another namespace — the lab's mode switch waits until its nodes are clean by
// this same check (src/lab/compare/mode.ts). CI once saw IPv6's table survive the switch, which
// the switch's own narrower check (IPv4's table, KUBE-SERVICES) did not look for.
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findKubeProxyRules } from '../../src/node/kube-proxy-leftovers.ts';
import { inNs } from '../../src/sh.ts';

const ns = `ktr-${process.pid}-kpl`;
const at = (argv: string[]) => inNs(ns, argv);
const run = (argv: string[]) => {
  const r = spawnSync(argv[0], argv.slice(1), { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${argv.join(' ')}: ${r.stderr}`);
};

beforeAll(() => run(['ip', 'netns', 'add', ns]));
afterAll(() => run(['ip', 'netns', 'del', ns]));

describe('findKubeProxyRules', () => {
  it("finds kube-proxy's IPv6 nftables table alone, in the namespace it is asked about", () => {
    expect(findKubeProxyRules(at)).toEqual([]);
    run(at(['nft', 'add', 'table', 'ip6', 'kube-proxy']));
    expect(findKubeProxyRules(at)).toEqual(['nftables table ip6 kube-proxy']);
    run(at(['nft', 'add', 'table', 'ip', 'kube-proxy']));
    expect(findKubeProxyRules(at)).toEqual([
      'nftables table ip kube-proxy',
      'nftables table ip6 kube-proxy',
    ]);
    run(at(['nft', 'flush', 'ruleset']));
    expect(findKubeProxyRules(at)).toEqual([]);
  });
});

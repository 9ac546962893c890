// The `kubetun run` option schema (src/node/options.ts) is the one declaration of each flag:
// commander's options, the validated config, the lab's argv and docs/run-flags.md all come from
// it. A flag added to RUN_OPTIONS needs a sample value below (the Record type asks for it) and
// nothing else here: the round trip argv → commander → config covers it.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { AGENT_NODE_OPTIONS } from '../../src/runtime.ts';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { RUN_FLAGS_DOC, runFlagsMarkdown } from '../../scripts/gen-run-flags-doc.ts';
import { addRunOptions } from '../../src/cli/run.ts';
import { UserError } from '../../src/errors.ts';
import { kubetunArgv } from '../../src/lab/provision.ts';
import { loadTopology } from '../../src/lab/topology.ts';
import {
  flagOf,
  OptionError,
  RUN_OPTION_KEYS,
  type RawValue,
  type RunFlags,
  type RunOptionKey,
  resolveRunConfig,
  runArgv,
} from '../../src/node/options.ts';

/** A value for every flag, none of them its default (a switch: the non-default side). */
const SAMPLE: Record<RunOptionKey, RawValue> = {
  manifests: '/srv/manifests',
  kubeconfig: '/etc/kubeconfig',
  nodeZone: 'zone-b',
  scheduler: 'maglev',
  metricsBindAddress: '127.0.0.1:9100',
  healthzBindAddress: '',
  syncPeriod: '5000',
  minSyncPeriod: '250',
  config: '/etc/kube-proxy.conf',
  nodeName: 'node7',
  hostnameOverride: 'ignored-by-node-name',
  nodeIp: '10.250.0.7',
  nodeIpV6: 'fd00:250::7',
  podCidr: '10.244.7.0/24',
  clusterCidr: '10.240.0.0/12',
  clusterCidrV6: 'fd00:240::/56',
  detectLocalMode: 'InterfaceNamePrefix',
  podBridgeInterface: 'br0',
  podInterfaceNamePrefix: 'cali',
  serviceCidr: '10.100.0.0/16',
  serviceCidrV6: 'fd00:100::/112',
  podCidrV6: 'fd00:244:7::/64',
  uplink: 'eth1',
  tun: 'kt9',
  procSysNet: '/host/proc/sys/net',
  ctlSocket: '/run/x/node7.sock',
  podIfaces: 'va,vb',
  podRescanMs: '0',
  batch: '128',
  tunQueue: '1024',
  offload: false,
  vipEcho: true,
  watchdog: false,
  restartGrace: '0',
  cleanupKubeProxy: true,
  logLevel: 'debug',
  ctMax: '4096',
  ctDropInvalid: true,
  ctTimeout: 'tcp-established=600,udp=10',
  ctGcInterval: '60',
  ctGcMinInterval: '5',
  ctGcMaxInterval: '600',
};

const ctx = { cores: 2, inCluster: false };

/** What commander makes of `kubetun run ARGV` with the schema's options. */
function parsed(argv: string[]): RunFlags {
  const cmd = addRunOptions(new Command('run').exitOverride());
  cmd.parse(argv, { from: 'user' });
  return cmd.opts() as RunFlags;
}

describe('kubetun run option schema', () => {
  it('argv derived from the schema parses back to the same config, every flag included', () => {
    const argv = runArgv(SAMPLE);
    for (const k of RUN_OPTION_KEYS) {
      const spelled = argv.filter((a) => a === `--${flagOf(k)}` || a === `--no-${flagOf(k)}`);
      expect(spelled, `--${flagOf(k)} once in the argv`).toHaveLength(1);
    }
    const direct = resolveRunConfig(SAMPLE, ctx);
    expect(resolveRunConfig(parsed(argv), ctx)).toEqual(direct);
    // every sample is not a default: each flag moved the config
    const defaults = resolveRunConfig(
      { manifests: '/m', nodeName: 'n', nodeIp: '10.0.0.1', podCidr: '10.244.0.0/24' },
      ctx,
    );
    expect(direct.datapath).toMatchObject({
      ctCapacity: 4096,
      ctDropInvalid: true,
      vipEcho: true,
      ctTcpEstablished: 600,
      ctUdp: 10,
      nodeIp: 0x0afa0007,
    });
    expect(direct.gc).toEqual({ intervalSec: 60, minIntervalSec: 5, maxIntervalSec: 600 });
    expect(defaults.datapath.ctCapacity).toBe(131072);
    expect(defaults.gc).toEqual({ intervalSec: 300, minIntervalSec: 10, maxIntervalSec: 43200 });
  });

  it('commander applies the schema defaults, and a config from defaults alone equals it', () => {
    const given = ['--manifests', '/m', '--node-name', 'n', '--node-ip', '10.0.0.1'];
    const argv = [...given, '--pod-cidr', '10.244.0.0/24'];
    const fromCli = resolveRunConfig(parsed(argv), ctx);
    const fromObject = resolveRunConfig(
      { manifests: '/m', nodeName: 'n', nodeIp: '10.0.0.1', podCidr: '10.244.0.0/24' },
      ctx,
    );
    expect(fromCli).toEqual(fromObject);
    expect(fromCli).toMatchObject({
      scheduler: 'random',
      tun: 'kt0',
      uplink: 'eth0',
      batch: 64,
      podRescanMs: 2000,
      restartGrace: 15_000,
      offload: true,
      watchdog: true,
      vipEcho: false,
      ctlSocket: '/run/kubetun/n.sock',
      metricsBindAddress: { host: '127.0.0.1', port: 10249 },
      healthzBindAddress: { host: '0.0.0.0', port: 10256 },
    });
  });

  it('the IPv6 CIDRs: canonical, a bad one named, --pod-cidr-v6 only beside --service-cidr-v6', () => {
    const base = { manifests: '/m', nodeName: 'n', nodeIp: '10.0.0.1', podCidr: '10.244.0.0/24' };
    const ok = resolveRunConfig(
      { ...base, serviceCidrV6: 'FD00:10:96:0::/112', podCidrV6: 'fd00:244:1::/64' },
      ctx,
    );
    expect([ok.serviceCidrV6, ok.podCidrV6]).toEqual(['fd00:10:96::/112', 'fd00:244:1::/64']);
    expect(ok.net.serviceCidr6?.prefix).toBe(112);
    expect(resolveRunConfig(base, ctx).serviceCidrV6).toBeUndefined();
    expect(() => resolveRunConfig({ ...base, serviceCidrV6: '10.96.0.0/16' }, ctx)).toThrow(
      /^--service-cidr-v6: expected an IPv6 CIDR/,
    );
    expect(() => resolveRunConfig({ ...base, podCidrV6: 'fd00:244:1::/64' }, ctx)).toThrow(
      /^--pod-cidr-v6: needs --service-cidr-v6/,
    );
  });

  it('--node-ip-v6: an IPv6 unicast address of the node, canonical, into the datapath (nodeIp6)', () => {
    const base = {
      manifests: '/m',
      nodeName: 'n',
      nodeIp: '10.0.0.1',
      podCidr: '10.244.0.0/24',
      serviceCidrV6: 'fd00:10:96::/112',
      podCidrV6: 'fd00:244:1::/64',
    };
    const ok = resolveRunConfig({ ...base, nodeIpV6: 'FD00:250:0::2' }, ctx);
    expect(ok.nodeIpV6).toBe('fd00:250::2');
    expect(ok.datapath).toMatchObject({ nodeIp6: 'fd00:250::2', podCidr6: 'fd00:244:1::/64' });
    expect(resolveRunConfig(base, ctx).datapath).not.toHaveProperty('nodeIp6');
    const bad = (v: string) => () => resolveRunConfig({ ...base, nodeIpV6: v }, ctx);
    expect(bad('10.0.0.2')).toThrow(/^--node-ip-v6: expected an IPv6 address/);
    expect(bad('fd00::/64')).toThrow(/^--node-ip-v6: expected an IPv6 address/);
    for (const [v, why] of [
      ['::', 'unspecified or loopback'],
      ['::1', 'unspecified or loopback'],
      ['ff02::1', 'multicast'],
      ['fe80::1', 'link-local'],
      ['::ffff:10.0.0.1', 'IPv4-mapped'],
      ['fd00:10:96::5', ''],
    ] as const) {
      expect(bad(v)).toThrow(
        why ? new RegExp(`^--node-ip-v6: .*${why}`) : /lies in --service-cidr-v6/,
      );
    }
    const { serviceCidrV6: _s, podCidrV6: _p, ...v4only } = base;
    expect(() => resolveRunConfig({ ...v4only, nodeIpV6: 'fd00:250::2' }, ctx)).toThrow(
      /^--node-ip-v6: needs --service-cidr-v6/,
    );
  });

  it("the lab's agent argv is the schema's: it parses back to the topology's node", () => {
    const t = loadTopology(fileURLToPath(new URL('../../lab/topology.yaml', import.meta.url)));
    const n = t.nodes[1]!;
    const argv = kubetunArgv(t, n, 'eth1', '/run/x/n.sock', '/usr/bin/node', '/view');
    // node, the agent's V8 options (src/runtime.ts AGENT_NODE_OPTIONS), the CLI, `run`
    const head = 1 + AGENT_NODE_OPTIONS.length + 2;
    expect(argv.slice(0, head)).toEqual([
      '/usr/bin/node',
      ...AGENT_NODE_OPTIONS,
      expect.stringMatching(/kubetun\.mjs$/),
      'run',
    ]);
    const c = resolveRunConfig(parsed(argv.slice(head)), ctx);
    expect(c).toMatchObject({
      manifests: '/view',
      nodeName: n.name,
      nodeIp: n.ip,
      podCidr: n.podCidr,
      clusterCidr: t.clusterCidr,
      serviceCidr: t.serviceCidr,
      uplink: 'eth1',
      ctlSocket: '/run/x/n.sock',
      // the dual-stack topology: IPv6 ClusterIPs, NodePorts on the node's IPv6 address, and
      // the IPv6 cluster CIDR's masquerade decisions
      serviceCidrV6: t.ipv6!.serviceCidr,
      podCidrV6: n.podCidrV6,
      nodeIpV6: n.ip6,
      net: { clusterCidr6: t.ipv6!.clusterCidr },
    });
  });

  it('a bad value is an OptionError (a UserError) naming the flag', () => {
    for (const [k, bad] of [
      ['batch', '0'],
      ['ctGcMaxInterval', 'x'],
      ['podRescanMs', '-1'],
      ['tun', 'a;b'],
    ] as const) {
      let err: unknown;
      try {
        resolveRunConfig({ ...SAMPLE, [k]: bad }, ctx);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(OptionError);
      expect(err).toBeInstanceOf(UserError);
      expect((err as Error).message).toMatch(new RegExp(`^--${flagOf(k)}: `));
    }
  });

  it('docs/run-flags.md is generated from it (npx tsx scripts/gen-run-flags-doc.ts)', () => {
    expect(readFileSync(RUN_FLAGS_DOC, 'utf8')).toBe(runFlagsMarkdown());
    for (const k of RUN_OPTION_KEYS) expect(runFlagsMarkdown()).toContain(flagOf(k));
  });
});

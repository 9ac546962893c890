// `kubetun run` flag validation and pod interface discovery from routes (no root needed).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { podIfacesFor, podIfacesFromRoutes } from '../../src/node/discover.ts';
import { clusterCidrText } from '../../src/node/options.ts';
import { localDetector } from '../../src/rules/local-detect.ts';
import { parseCidr } from '../../src/wire/addr.ts';
import { runConfig } from '../fixtures/run-flags.ts';

describe('run options', () => {
  it('defaults the control socket to /run/kubetun/<node>.sock and splits --pod-ifaces', () => {
    const o = runConfig({ podIfaces: 'va, vb,' });
    expect(o.ctlSocket).toBe('/run/kubetun/node1.sock');
    expect(o.podIfaces).toEqual(['va', 'vb']);
    expect(runConfig().podIfaces).toBeUndefined();
  });

  it('--vip-echo is off unless given (then the datapath answers ping to a VIP)', () => {
    expect(runConfig().vipEcho).toBe(false);
    expect(runConfig({ vipEcho: true }).datapath.vipEcho).toBe(true);
  });

  it('parses addresses and CIDRs', () => {
    const { net } = runConfig();
    expect(net.nodeIp).toBe(0x0afa0002);
    expect(net.serviceCidr).toEqual(parseCidr('10.96.0.0/16'));
  });

  it.each([
    [{ nodeIp: '10.250.0' }, /^--node-ip: /],
    [{ podCidr: '10.244.1.0' }, /^--pod-cidr: .*missing \/prefix/],
    [{ serviceCidr: '10.96.0.0/33' }, /^--service-cidr: /],
    [{ tun: 'a-name-that-is-too-long' }, /^--tun: invalid interface name/],
    [{ uplink: 'eth0; rm -rf /' }, /^--uplink: invalid interface name/],
    [{ podIfaces: 'ok,b@d$' }, /^--pod-ifaces: invalid interface name "b@d\$"/],
    [{ nodeName: 'Node_1' }, /^--node-name: not a Kubernetes node name/],
    [{ logLevel: 'loud' }, /^--log-level: one of/],
    [{ batch: '0' }, /^--batch: /],
    [{ detectLocalMode: 'Bridge' }, /^--detect-local-mode: detectLocalMode: unknown/],
    [{ detectLocalMode: 'BridgeInterface' }, /^--detect-local-mode: detectLocal.bridgeInterface/],
    [
      { detectLocalMode: 'BridgeInterface', podBridgeInterface: 'cni0;x' },
      /^--pod-bridge-interface: invalid interface name/,
    ],
  ])('rejects %o naming the flag', (bad, msg) => {
    expect(() => runConfig(bad)).toThrow(msg);
  });
});

describe("IPv6 cluster CIDR (--cluster-cidr-v6, or kube-proxy's --cluster-cidr v4,v6)", () => {
  const v6 = { serviceCidrV6: 'fd00:10:96::/112', nodeIpV6: 'fd00:250::2' };

  it('either spelling gives the datapath its IPv6 "from a pod" network', () => {
    const dual = runConfig({ ...v6, clusterCidr: 'FD00:10:244::/56, 10.244.0.0/16' });
    expect(dual.clusterCidr).toBe('10.244.0.0/16,fd00:10:244::/56');
    expect(dual.net.clusterCidr).toEqual(parseCidr('10.244.0.0/16'));
    expect(dual.net.clusterCidr6).toBe('fd00:10:244::/56');
    expect(dual.datapath).toMatchObject({ clusterCidr: '10.244.0.0/16' });
    expect(dual.datapath.clusterCidr6).toBe('fd00:10:244::/56');
    expect(clusterCidrText(dual)).toBe('10.244.0.0/16,fd00:10:244::/56');
    const flag = runConfig({ ...v6, clusterCidrV6: 'fd00:10:244::/56' });
    expect(flag.datapath.clusterCidr6).toBe('fd00:10:244::/56');
    expect(clusterCidrText(flag)).toBe('10.244.0.0/16,fd00:10:244::/56');
    // both, the same: fine
    const both = { ...v6, clusterCidr: '10.244.0.0/16,fd00:10:244::/56' };
    expect(runConfig({ ...both, clusterCidrV6: 'fd00:10:244::/56' }).net.clusterCidr6).toBe(
      'fd00:10:244::/56',
    );
    // none: IPv6 ClusterIP traffic is not masqueraded (kube-proxy without an IPv6 cluster CIDR)
    expect(runConfig(v6).datapath).not.toHaveProperty('clusterCidr6');
    expect(runConfig(v6).net.local6.by).toBe('none');
  });

  it('the IPv6 detector follows --detect-local-mode per family, as kube-proxy', () => {
    const withPods6 = { ...v6, podCidrV6: 'fd00:10:244:1::/64' };
    // NodeCIDR: the node's IPv6 pod CIDR, not the cluster's
    const node = runConfig({
      ...withPods6,
      detectLocalMode: 'NodeCIDR',
      clusterCidrV6: 'fd00::/48',
    });
    expect(node.datapath.clusterCidr6).toBe('fd00:10:244:1::/64');
    // the interface modes: the node's IPv6 pod CIDR stands for "came in on a pod interface"
    const br = runConfig({
      ...withPods6,
      detectLocalMode: 'BridgeInterface',
      podBridgeInterface: 'cni0',
    });
    expect(br.net.local6).toMatchObject({ by: 'iface', iface: 'cni0' });
    expect(br.datapath.clusterCidr6).toBe('fd00:10:244:1::/64');
  });

  it.each([
    [
      { ...v6, clusterCidr: 'fd00:10:244::/56' },
      /^--cluster-cidr: needs an IPv4 CIDR: one CIDR per family/,
    ],
    [
      { ...v6, clusterCidr: '10.244.0.0/16,10.245.0.0/16' },
      /^--cluster-cidr: expected one CIDR per family/,
    ],
    [
      { ...v6, clusterCidr: '10.244.0.0/16,fd00::/56,fd01::/56' },
      /^--cluster-cidr: expected one CIDR per family/,
    ],
    [{ ...v6, clusterCidr: '10.244.0.0/16,fd00::1' }, /^--cluster-cidr: expected an IPv6 CIDR/],
    [{ ...v6, clusterCidrV6: '10.244.0.0/16' }, /^--cluster-cidr-v6: expected an IPv6 CIDR/],
    [
      { ...v6, clusterCidr: '10.244.0.0/16,fd00:1::/56', clusterCidrV6: 'fd00:2::/56' },
      /^--cluster-cidr-v6: fd00:2::\/56 differs from the IPv6 CIDR in --cluster-cidr \(fd00:1::\/56\): give one$/,
    ],
    [
      { clusterCidrV6: 'fd00:1::/56' },
      /^--cluster-cidr-v6: the IPv6 cluster CIDR fd00:1::\/56 needs --service-cidr-v6/,
    ],
    [
      { clusterCidr: '10.244.0.0/16,fd00:1::/56' },
      /^--cluster-cidr: the IPv6 cluster CIDR fd00:1::\/56 needs --service-cidr-v6/,
    ],
  ])('rejects %o in one line naming the flag', (bad, msg) => {
    let err: Error | undefined;
    try {
      runConfig(bad);
    } catch (e) {
      err = e as Error;
    }
    expect(err?.message).toMatch(msg);
    expect(err?.message).not.toContain('\n');
  });
});

describe('pod interface discovery', () => {
  const pod = parseCidr('10.244.1.0/24');
  const routes = [
    { dst: 'default', dev: 'eth0' },
    { dst: '10.244.1.12', dev: 'vb' },
    { dst: '10.244.1.10', dev: 'va' },
    { dst: '10.244.1.11', dev: 'va' },
    { dst: '10.244.2.0/24', dev: 'eth0' }, // another node's pods
    { dst: '10.244.0.0/16', dev: 'vx' }, // wider than the pod CIDR
    { dst: '10.244.1.0/24', dev: 'kt0' }, // excluded device
    { dst: '10.244.1.64/26', dev: 'vc' }, // a narrower block inside counts
  ];

  it('finds devices with routes inside the pod CIDR, excluding uplink and TUN', () => {
    expect(podIfacesFromRoutes(routes, pod, ['eth0', 'kt0', 'lo'])).toEqual(['va', 'vb', 'vc']);
  });

  // flannel / the bridge plugin: the pod CIDR is cni0's connected route, the pods its ports
  const bridged = [
    { dst: 'default', dev: 'eth0' },
    { dst: '10.244.1.0/24', dev: 'cni0' },
    { dst: '10.244.2.0/24', dev: 'eth0' },
  ];
  const links = [
    { ifname: 'lo' },
    { ifname: 'eth0' },
    { ifname: 'cni0', linkinfo: { info_kind: 'bridge' } },
    { ifname: 'vethb2', master: 'cni0', linkinfo: { info_kind: 'veth' } },
    { ifname: 'vetha1', master: 'cni0', linkinfo: { info_kind: 'veth' } },
    { ifname: 'cali1', linkinfo: { info_kind: 'veth' } },
    { ifname: 'cali2', linkinfo: { info_kind: 'veth' } },
    { ifname: 'kt0', linkinfo: { info_kind: 'tun' } },
  ];
  const ex = ['eth0', 'kt0', 'lo'];

  it('a bridge found by route is replaced by its ports (a port-to-port reply is caught)', () => {
    const cidr = localDetector({ clusterCidr: '10.244.0.0/16' });
    expect(podIfacesFor(cidr, bridged, links, pod, ex)).toEqual(['vetha1', 'vethb2']);
    // host routes: as before, the veths themselves
    expect(podIfacesFor(cidr, routes, links, pod, ex)).toEqual(['va', 'vb', 'vc']);
  });

  it("BridgeInterface hooks the named bridge's ports, InterfaceNamePrefix the prefixed links", () => {
    const br = localDetector({ mode: 'BridgeInterface', bridgeInterface: 'cni0' });
    expect(podIfacesFor(br, [], links, pod, ex)).toEqual(['vetha1', 'vethb2']);
    const cali = localDetector({ mode: 'InterfaceNamePrefix', interfaceNamePrefix: 'cali' });
    expect(podIfacesFor(cali, routes, links, pod, ex)).toEqual(['cali1', 'cali2']);
  });
});

describe('kubetun run with bad input', () => {
  const main = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
  const run = (args: string[]) =>
    spawnSync(process.execPath, ['--import', 'tsx', main, 'run', ...args], { encoding: 'utf8' });

  it('stops on a bad manifest before touching the node, naming file and field', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kt-run-bad-'));
    try {
      writeFileSync(
        join(dir, 'svc.yaml'),
        'apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIP: 10.96.0.5, ports: [{port: 99999}]}\n',
      );
      const r = run([
        '--manifests',
        dir,
        '--node-name',
        'n1',
        '--node-ip',
        '10.0.0.1',
        '--pod-cidr',
        '10.244.1.0/24',
        '--ctl-socket',
        join(dir, 'n1.sock'),
        '--tun',
        'ktbad0',
      ]);
      // a user mistake: exit 2, one line on stderr (no stack), and the fatal line in the log
      expect(r.status).toBe(2);
      expect(r.stderr).toMatch(/^kubetun run: .*svc\.yaml.*spec\.ports\[0\]\.port/);
      expect(r.stderr).not.toMatch(/\n\s+at /);
      // the manifest worker's own "manifest refused" line may come before or after it
      const lines = r.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { msg: string; err: string });
      const line = lines.find((l) => l.msg === 'kubetun run failed to start');
      expect(line, r.stdout).toBeDefined();
      expect(line!.err).toContain('svc.yaml');
      expect(line!.err).toContain('spec.ports[0].port');
      expect(existsSync(join(dir, 'n1.state.json'))).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('names the flag of a bad option', () => {
    const r = run([
      '--manifests',
      '/nonexistent',
      '--node-name',
      'n1',
      '--node-ip',
      '10.0.0',
      '--pod-cidr',
      '10.244.1.0/24',
    ]);
    expect(r.status).toBe(2);
    expect(r.stdout).toContain('--node-ip: ');
    expect(r.stderr.trim().split('\n')[0]).toMatch(/^kubetun run: --node-ip: /);
  });
});

// src/node/discover.ts reads the routes and links pod discovery needs from /proc/net/route and
// /sys/class/net instead of forking `ip -j` at every rescan. Root: in a namespace of its own
// (ip netns exec remounts /sys for it), what the files give must be what `ip -j` gives.
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  localAddrsFrom,
  parseProcNetRoute,
  podIfacesFor,
  podsOnBridge,
} from '../../src/node/discover.ts';
import { LAB_PREFIX } from '../../src/lab/prefix.ts';
import { sh } from '../../src/sh.ts';
import { parseCidr } from '../../src/wire/addr.ts';

const NS = `${LAB_PREFIX}disc-${process.pid}`;
const ip = (...a: string[]) => sh(['ip', '-n', NS, ...a]);

describe('parseProcNetRoute', () => {
  it('reads the hex address and mask in memory order; skips routes without a device', () => {
    const text = [
      'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT',
      'eth1\t00000000\t0138A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0',
      'eth1\t0038A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0',
      'veth-a\t0201F40A\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0',
      'cni0\t0001F40A\t00000000\t0001\t0\t0\t0\t0080FFFF\t0\t0\t0',
      '*\t0009F40A\t00000000\t0201\t0\t0\t0\t00FFFFFF\t0\t0\t0',
      '*\t4001F40A\t00000000\t0001\t0\t0\t0\tC0FFFFFF\t0\t0\t0', // blackhole
    ].join('\n');
    expect(parseProcNetRoute(text)).toEqual([
      { dst: 'default', dev: 'eth1', type: 'unicast' },
      { dst: '192.168.56.0/24', dev: 'eth1', type: 'unicast' },
      { dst: '10.244.1.2/32', dev: 'veth-a', type: 'unicast' },
      { dst: '10.244.1.0/17', dev: 'cni0', type: 'unicast' },
    ]);
  });
});

describe('the files against ip -j, in a namespace with veths, a bridge and a blackhole', () => {
  beforeAll(() => {
    sh(['ip', 'netns', 'add', NS]);
    ip('link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'up1');
    ip('link', 'add', 'veth-a', 'type', 'veth', 'peer', 'name', 'pa');
    ip('link', 'add', 'cni0', 'type', 'bridge');
    ip('link', 'add', 'vb1', 'type', 'veth', 'peer', 'name', 'pb1');
    ip('link', 'set', 'vb1', 'master', 'cni0');
    for (const d of ['up0', 'up1', 'veth-a', 'pa', 'cni0', 'vb1', 'pb1']) ip('link', 'set', d, 'up');
    ip('addr', 'add', '172.30.0.11/24', 'dev', 'up0');
    ip('route', 'add', 'default', 'via', '172.30.0.1');
    ip('route', 'add', '10.244.1.2/32', 'dev', 'veth-a');
    ip('addr', 'add', '10.244.1.129/25', 'dev', 'cni0');
    ip('route', 'add', 'blackhole', '10.244.1.64/26');
  });
  afterAll(() => {
    sh(['ip', 'netns', 'del', NS]);
  });

  it('finds the same pod interfaces as from ip -j (the veth, the bridge port)', () => {
    const code = `
      import { readFileSync } from 'node:fs';
      import { execFileSync } from 'node:child_process';
      const d = await import(${JSON.stringify(new URL('../../src/node/discover.ts', import.meta.url).href)});
      const j = (a) => JSON.parse(execFileSync('ip', a, { encoding: 'utf8' }) || '[]');
      console.log(JSON.stringify({
        files: { routes: d.parseProcNetRoute(readFileSync('/proc/net/route', 'utf8')), links: d.readLinks() },
        ip: { routes: j(['-j', '-4', 'route', 'show', 'table', 'main']), links: j(['-j', '-d', 'link', 'show']) },
      }));`;
    const r = spawnSync(
      'ip',
      ['netns', 'exec', NS, process.execPath, '--import', 'tsx', '--input-type=module', '-e', code],
      { encoding: 'utf8', timeout: 60_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    const { files, ip: viaIp } = JSON.parse(r.stdout);
    const cidr = parseCidr('10.244.1.0/24');
    const local = { by: 'cidr', cidr } as never;
    const found = podIfacesFor(local, files.routes, files.links, cidr, ['up0']);
    expect(found).toEqual(['vb1', 'veth-a']);
    expect(found).toEqual(podIfacesFor(local, viaIp.routes, viaIp.links, cidr, ['up0']));
    const masters = (ls: { ifname: string; master?: string }[]) =>
      Object.fromEntries(ls.filter((l) => l.master).map((l) => [l.ifname, l.master]));
    expect(masters(files.links)).toEqual(masters(viaIp.links));
    // the pods on the bridge's /25 are bridged; a /32 veth alone is routed
    expect(podsOnBridge(local, files.routes, files.links, cidr, ['up0'])).toBe(true);
    const veths = files.routes.filter((x: { dev: string }) => x.dev !== 'cni0');
    expect(podsOnBridge(local, veths, files.links, cidr, ['up0'])).toBe(false);
  });

  it("lists the node's own global addresses of each family, once each, not the TUN's nor lo's", () => {
    ip('addr', 'add', '10.244.1.1/32', 'dev', 'veth-a'); // a pod gateway, on every veth
    ip('addr', 'add', '10.244.1.1/32', 'dev', 'pa');
    ip('-6', 'addr', 'add', 'fd00:172:30::b/64', 'dev', 'up0', 'nodad');
    const j = JSON.parse(ip('-j', 'addr', 'show'));
    expect(localAddrsFrom(j, ['pa', 'lo'])).toEqual({
      v4: ['10.244.1.1', '10.244.1.129', '172.30.0.11'],
      v6: ['fd00:172:30::b'], // its link-local addresses are not global
    });
    expect(localAddrsFrom(j, ['up0', 'veth-a', 'pa']).v4).toEqual(['10.244.1.129']);
  });
});

// Offline tests of the lab's plan: topology parsing and validation, the commands lab up would
// run, and the check that manifests only name pods the topology creates.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { patternChunks } from '../../lab/servers/pattern.mjs';
import { growScenario, shrinkScenario, writeScenario } from '../../scripts/bench-e2e/manifests.ts';
import { renderStaticView } from '../../src/lab/control-plane.ts';
import { nodeIptablesRules } from '../../src/lab/kube-proxy.ts';
import {
  checkManifestEndpoints,
  type LabService,
  readLabServices,
} from '../../src/lab/manifests.ts';
import { planUp } from '../../src/lab/plan.ts';
import { loadManifests } from '../../src/manifests/index.ts';
import {
  LAB_PREFIX,
  labNamespaces,
  loadTopology,
  parseTopology,
  type Topology,
  TopologyError,
} from '../../src/lab/topology.ts';

const DEFAULT = join(import.meta.dirname, '../../lab/topology.yaml');
const text = readFileSync(DEFAULT, 'utf8');

function parseWith(edit: (s: string) => string) {
  return parseTopology(edit(text), DEFAULT);
}

/** The prefix as a regular expression (it may hold dots). */
const P = LAB_PREFIX.replace(/[.]/g, '\\.');

describe('lab topology', () => {
  it('derives namespaces, interfaces and gateways from the default file', () => {
    const t = loadTopology(DEFAULT);
    expect(labNamespaces(t)).toEqual([
      `${LAB_PREFIX}underlay`,
      `${LAB_PREFIX}node1`,
      `${LAB_PREFIX}node2`,
      `${LAB_PREFIX}pod-a`,
      `${LAB_PREFIX}pod-b`,
      `${LAB_PREFIX}pod-c`,
      `${LAB_PREFIX}pod-d`,
      `${LAB_PREFIX}client`,
    ]);
    const [n1, n2] = t.nodes;
    expect(n1!.gateway).toBe('10.244.1.1');
    expect(n2!.gateway).toBe('10.244.2.1');
    expect(n2!.pods.map((p) => [p.name, p.node, p.hostIf])).toEqual([
      ['pod-c', 'node2', 'veth-pod-c'],
      ['pod-d', 'node2', 'veth-pod-d'],
    ]);
    expect(t.manifests).toBe(join(import.meta.dirname, '../../lab/manifests'));
  });

  it('names file, object and field when a pod IP is outside its node CIDR', () => {
    const err = (() => {
      try {
        parseWith((s) => s.replace('name: pod-c, ip: 10.244.2.2', 'name: pod-c, ip: 10.244.1.9'));
      } catch (e) {
        return e as TopologyError;
      }
    })();
    expect(err).toBeInstanceOf(TopologyError);
    expect(err!.message).toContain(DEFAULT);
    expect([err!.object, err!.field]).toEqual(['pod pod-c', 'ip']);
  });

  it('rejects duplicate names, the gateway as pod IP, overlapping pod CIDRs and long names', () => {
    expect(() => parseWith((s) => s.replace('name: pod-d', 'name: pod-a'))).toThrow(
      /pod pod-a: name: pod-a is already used/,
    );
    expect(() => parseWith((s) => s.replace('ip: 10.244.1.2', 'ip: 10.244.1.1'))).toThrow(
      /gateway 10.244.1.1/,
    );
    expect(() =>
      parseWith((s) => s.replace('podCidr: 10.244.2.0/24', 'podCidr: 10.244.0.0/23')),
    ).toThrow(/overlaps node node1/);
    expect(() => parseWith((s) => s.replace('name: pod-b', 'name: pod-bbbbbbbbbb'))).toThrow(
      /at most 10 characters/,
    );
    expect(() => parseWith((s) => s.replace('ip: 172.30.0.12', 'ip: 172.31.0.12'))).toThrow(
      /node node2: ip: .*underlay/,
    );
  });
});

describe('lab up plan', () => {
  const cmds = planUp(loadTopology(DEFAULT)).flatMap((p) => p.cmds.map((c) => c.join(' ')));

  it('only runs ip commands that name a lab namespace', () => {
    for (const c of cmds)
      expect(c).toMatch(
        new RegExp(`^ip (-n ${P}[a-z0-9-]+ |netns add ${P}[a-z0-9-]+$|netns exec ${P}[a-z0-9-]+ )`),
      );
  });

  it('gives every pod a /32 route on its node, the gateway on its veth and proxy_arp', () => {
    expect(cmds).toContain(`ip -n ${LAB_PREFIX}node2 route add 10.244.2.3/32 dev veth-pod-d`);
    expect(cmds).toContain(`ip -n ${LAB_PREFIX}node2 addr add 10.244.2.1/32 dev veth-pod-d`);
    expect(cmds).toContain(
      `ip -n ${LAB_PREFIX}pod-d route add default via 10.244.2.1 dev eth0 onlink`,
    );
    expect(cmds.find((c) => c.startsWith(`ip netns exec ${LAB_PREFIX}node2 sysctl`))).toContain(
      'net.ipv4.conf.veth-pod-d.proxy_arp=1',
    );
  });

  it("cni: bridge joins pods to the node's cni0 (gateway /24 on it), without host routes or proxy_arp", () => {
    const b = planUp(parseWith((s) => `cni: bridge\n${s}`)).flatMap((p) =>
      p.cmds.map((c) => c.join(' ')),
    );
    expect(b).toContain('ip -n kt-node2 link add cni0 type bridge');
    expect(b).toContain('ip -n kt-node2 addr add 10.244.2.1/24 dev cni0');
    expect(b).toContain('ip -n kt-node2 link set veth-pod-d master cni0 up');
    expect(b).toContain('ip -n kt-pod-d addr add 10.244.2.3/24 dev eth0');
    expect(b).toContain('ip -n kt-pod-d route add default via 10.244.2.1 dev eth0');
    expect(
      b.filter((c) => / route add 10\.244\.\d+\.\d+\/32 /.test(c) || /proxy_arp/.test(c)),
    ).toEqual([]);
    expect(() => parseWith((s) => `cni: flannel\n${s}`)).toThrow(
      /topology: cni: "flannel" is not one of routes, bridge/,
    );
  });

  it('routes each node to the other nodes pod CIDRs over the underlay (host-gw)', () => {
    expect(cmds).toContain(
      `ip -n ${LAB_PREFIX}node1 route add 10.244.2.0/24 via 172.30.0.12 dev eth0`,
    );
    expect(cmds).toContain(
      `ip -n ${LAB_PREFIX}node2 route add 10.244.1.0/24 via 172.30.0.11 dev eth0`,
    );
    expect(cmds).toContain(
      `ip -n ${LAB_PREFIX}client route add 10.244.1.0/24 via 172.30.0.11 dev eth0`,
    );
  });
});

describe('lab manifests', () => {
  const t = loadTopology(DEFAULT);
  const view = (topo: Topology) =>
    renderStaticView(topo, mkdtempSync(join(tmpdir(), 'kubetun-view-'))).then(readLabServices);
  const endpointPods = (services: LabService[], name: string) =>
    services
      .find((s) => s.name === name)!
      .ports[0]!.endpoints.map((e) => e.targetName)
      .sort();

  it('give, through the selectors and the hand-written slice, the endpoint sets the lab always had', async () => {
    const services = await view(t);
    expect(checkManifestEndpoints(t, services)).toEqual([]);
    const web = services.find((s) => s.name === 'web')!;
    expect(new Set(web.ports[0]!.endpoints.map((e) => e.nodeName))).toEqual(
      new Set(['node1', 'node2']),
    );
    expect(endpointPods(services, 'web')).toEqual(['pod-a', 'pod-b', 'pod-c']);
    expect(endpointPods(services, 'web-rr')).toEqual(['pod-a', 'pod-b', 'pod-c']);
    expect(endpointPods(services, 'sticky')).toEqual(['pod-a', 'pod-b']);
    expect(endpointPods(services, 'udp-echo')).toEqual(['pod-b', 'pod-d']);
    expect(endpointPods(services, 'web-np')).toEqual(['pod-a', 'pod-d']);
    expect(endpointPods(services, 'web-local')).toEqual(['pod-d']);
    expect(services.find((s) => s.name === 'empty')!.ports[0]!.endpoints).toEqual([]);
    // the named targetPort "http" resolved to the Pods' container port
    expect(web.ports[0]!.endpoints.map((e) => e.port)).toEqual([8080, 8080, 8080]);
  });

  it('leave room for the e2e benchmark: its scenario over these manifests is admitted whole', async () => {
    // scripts/bench-e2e copies lab/manifests and adds its own Services at fixed ClusterIPs
    const sc = writeScenario(mkdtempSync(join(tmpdir(), 'kubetun-bench-')), t.manifests!, 50);
    expect(() => loadManifests(sc.manifests)).not.toThrow();
    const refused: string[] = [];
    await renderStaticView(
      loadTopology(sc.topology),
      mkdtempSync(join(tmpdir(), 'kubetun-view-')),
      (m) => refused.push(m),
    );
    expect(refused).toEqual([]);
  });

  it('leave room for the e2e benchmark grown in place: every filler Service reaches the view and the rules', async () => {
    // bench:e2e grows the manifests dir in place; the data planes read the control plane's view
    const sc = writeScenario(mkdtempSync(join(tmpdir(), 'kubetun-bench-')), t.manifests!, 10);
    const { probe, added } = growScenario(sc, 600); // past the .250 wrap of the filler VIPs
    expect(added).toBe(600 - sc.services);
    const refused: string[] = [];
    const dir = mkdtempSync(join(tmpdir(), 'kubetun-view-'));
    const grown = loadTopology(sc.topology);
    await renderStaticView(grown, dir, (m) => refused.push(m));
    expect(refused).toEqual([]);
    const view = loadManifests(dir);
    expect(view.services).toHaveLength(600);
    expect(view.services.some((s) => s.clusterIPs.includes(probe))).toBe(true);
    const rules = nodeIptablesRules(grown, grown.nodes[0]!, dir);
    expect(rules).toMatch(new RegExp(`-d ${probe.replaceAll('.', '\\.')} --dport 80 -j KUBE-SVC-`));
    shrinkScenario(sc);
    expect(loadManifests(sc.manifests).services).toHaveLength(sc.services);
  });

  it('flag a hand-written endpoint IP that no pod of the topology has', async () => {
    const moved = parseWith((s) =>
      s.replace('name: pod-d, ip: 10.244.2.3', 'name: pod-d, ip: 10.244.2.9'),
    );
    const dir = mkdtempSync(join(tmpdir(), 'kubetun-view-'));
    await renderStaticView(moved, dir);
    const problems = checkManifestEndpoints(moved, readLabServices(dir));
    // The selector-backed services follow pod-d to its new address; the hand-written slice does not.
    expect(problems).toEqual([
      expect.stringMatching(/default\/web-local port TCP\/80: endpoint 10\.244\.2\.3: no pod/),
    ]);
    // nor does its IPv6 one (pod-d's IPv6 address moved with its IPv4 offset: fd00:10:244:2::9)
    expect(checkManifestEndpoints(moved, readLabServices(dir, 'IPv6'), 'IPv6')).toEqual([
      expect.stringMatching(/default\/web-local port TCP\/80: endpoint fd00:10:244:2::3: no pod/),
    ]);
    // where pod-d is, both of web-local's hand-written slices name it
    const here = mkdtempSync(join(tmpdir(), 'kubetun-view-'));
    await renderStaticView(t, here);
    expect(checkManifestEndpoints(t, readLabServices(here, 'IPv6'), 'IPv6')).toEqual([]);
  });
});

describe('lab byte pattern', () => {
  it('is the same stream whatever the chunk size (server and test chunk differently)', () => {
    const join = (chunks: Iterable<Uint8Array>) =>
      Buffer.concat([...chunks].map((c) => Buffer.from(c)));
    const a = join(patternChunks(1_000_003, 4096));
    const b = join(patternChunks(1_000_003, 65536));
    expect(a.length).toBe(1_000_003);
    expect(a.equals(b)).toBe(true);
    expect(a.subarray(0, 4096).equals(a.subarray(4096, 8192))).toBe(false);
  });
});

// `lab show` offline: the drawing of the default lab (every node, pod, client and Service, the
// endpoints where they live, pods only the view knows), the roles the compare report names
// addresses by, and the flow paths with their addresses before and after each hop — worked out
// as kube-proxy would (DNAT, hairpin and NodePort masquerade, ETP Local, source ranges).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { UsageError } from '../../src/errors.ts';
import { renderStaticViewSync } from '../../src/lab/control-plane.ts';
import { DEFAULT_TOPOLOGY } from '../../src/lab/lab.ts';
import { traceFlow } from '../../src/lab/show/flow.ts';
import { addressRoles, labDrawing } from '../../src/lab/show/model.ts';
import { renderShowPage } from '../../src/lab/show/show.ts';
import { renderTopologySvg } from '../../src/lab/show/svg.ts';
import { loadTopology } from '../../src/lab/topology.ts';
import { loadManifests, resolveServicePorts } from '../../src/manifests/index.ts';
import type { ResolvedServicePort } from '../../src/model.ts';

const t = loadTopology(DEFAULT_TOPOLOGY);
const viewDir = mkdtempSync(join(tmpdir(), 'kubetun-show-'));
const ports = resolveServicePorts(loadManifests(renderStaticViewSync(t, viewDir)));
afterAll(() => rmSync(viewDir, { recursive: true, force: true }));

/** The view plus one Deployment pod the topology does not name (what `lab apply` adds). */
function withDeploymentPod(): ResolvedServicePort[] {
  const web = ports.find((r) => r.service.name === 'web')!;
  const extra = {
    ...web.endpoints[0]!,
    ip: '10.244.2.9',
    nodeName: 'node2',
    targetName: 'api-7d9f',
  };
  return [...ports.filter((r) => r !== web), { ...web, endpoints: [...web.endpoints, extra] }];
}

describe('lab show drawing', () => {
  it('draws every node, pod, client and Service, each endpoint on its node', () => {
    const d = labDrawing(t, withDeploymentPod(), {
      mode: 'kubetun',
      counters: new Map([['node1', [['TX_DNAT', 7]]]]),
    });
    const svg = renderTopologySvg(d);
    for (const n of t.nodes) expect(svg).toContain(`<g id="node-${n.name}" data-role="node">`);
    for (const p of t.nodes.flatMap((n) => n.pods)) {
      expect(svg).toContain(`<g id="pod-${p.name}" data-role="pod">`);
      expect(svg).toContain(`>${p.ip}<`);
    }
    expect(svg).toContain('<g id="client-client" data-role="client">');
    for (const s of new Set(ports.map((r) => r.service.name)))
      expect(svg).toMatch(new RegExp(`<g id="svc-(kube-system/)?${s}" data-role="service"`));
    // the Deployment's pod is drawn in node2, from the view
    expect(d.pods.find((p) => p.name === 'api-7d9f')).toMatchObject({
      node: 'node2',
      fromView: true,
    });
    expect(svg).toContain('<g id="pod-api-7d9f" data-role="pod">');
    const web = d.services.find((s) => s.name === 'web')!;
    expect(web.endpoints.map((e) => `${e.pod}@${e.node}`)).toEqual([
      'pod-a@node1',
      'pod-b@node1',
      'pod-c@node2',
      'api-7d9f@node2',
    ]);
    expect(svg).toContain('TX_DNAT: 7');
    expect(svg).toContain('data plane: kubetun');
    expect(svg).toMatch(/viewBox="0 0 \d+ \d+" width="100%"/);
  });

  it('names every address by its role', () => {
    const roles = addressRoles(labDrawing(t, ports));
    expect(roles.get('10.244.2.3')).toBe('pod-d');
    expect(roles.get('10.96.0.10')).toBe('VIP web');
    expect(roles.get('172.30.0.12')).toBe('node2');
    expect(roles.get('10.244.1.1')).toBe('node1 gw');
    expect(roles.get('172.30.0.100')).toBe('client');
    expect(roles.get('172.30.0.200')).toBe('LB web-lb');
  });

  it('marks capture points on the links they capture', () => {
    const svg = renderTopologySvg(labDrawing(t, ports), {
      captures: [
        { at: { kind: 'pod', name: 'pod-d' }, label: 'pod-d veth (client)' },
        { at: { kind: 'node', name: 'node2' }, label: 'node2 eth0' },
      ],
    });
    expect(svg.match(/data-role="capture"/g)).toHaveLength(2);
    expect(svg).toContain('data-at="pod:pod-d"><title>pod-d veth (client)</title>');
  });
});

describe('lab show --flow', () => {
  const d = labDrawing(t, ports, { mode: 'nftables' });
  const flow = (spec: string) => traceFlow(d, ports, spec);

  it('pod → ClusterIP: DNAT on the pod’s node, then the underlay to the endpoint’s node', () => {
    const f = flow('pod-a→web@pod-c');
    expect(f.verdict).toBe('delivered');
    const nat = f.hops.find((h) => h.before !== h.after)!;
    expect(nat).toMatchObject({
      at: { kind: 'node', name: 'node1' },
      before: '10.244.1.2:eph → 10.96.0.10:80 TCP',
      after: '10.244.1.2:eph → 10.244.2.2:8080 TCP',
    });
    expect(nat.what).toBe('kube-proxy nftables rules on node1: DNAT');
    expect(f.hops.map((h) => `${h.at.kind}:${h.at.name}`)).toEqual([
      'pod:pod-a',
      'node:node1',
      'node:node1',
      'underlay:underlay',
      'node:node2',
      'pod:pod-c',
    ]);
    // without @, an endpoint on another node is drawn, and the others are named
    expect(flow('pod-a->web').summary).toMatch(/drawn to pod-c on node2; one of 3 eligible/);
  });

  it('hairpin: the endpoint is the client, masqueraded to the node’s gateway', () => {
    const nat = flow('pod-a→web@pod-a').hops.find((h) => h.before !== h.after)!;
    expect(nat.after).toBe('10.244.1.1:eph → 10.244.1.2:8080 TCP');
    expect(nat.what).toMatch(/masquerade to 10\.244\.1\.1 \(hairpin/);
  });

  it('NodePort, externalTrafficPolicy Cluster: DNAT and masquerade to the node IP', () => {
    const nat = flow('client→web-np@pod-d').hops.find((h) => h.before !== h.after)!;
    expect(nat.before).toBe('172.30.0.100:eph → 172.30.0.11:30080 TCP');
    expect(nat.after).toBe('172.30.0.11:snat-port → 10.244.2.3:8080 TCP');
    // to the local endpoint the masquerade address is the gateway (the veth's address)
    const local = flow('client→web-np@pod-a').hops.find((h) => h.before !== h.after)!;
    expect(local.after).toBe('10.244.1.1:snat-port → 10.244.1.2:8080 TCP');
  });

  it('externalTrafficPolicy Local keeps the client address, and drops at a node without a local endpoint', () => {
    const ok = flow('client→web-local');
    expect(ok.hops.find((h) => h.before !== h.after)!.after).toBe(
      '172.30.0.100:eph → 10.244.2.3:8080 TCP',
    );
    const drop = flow('client→172.30.0.11:30081');
    expect(drop.verdict).toBe('dropped');
    expect(drop.hops.at(-1)!.what).toMatch(/node1 has no ready local endpoint: dropped/);
  });

  it('refuses: source ranges drop, no endpoints reject', () => {
    expect(flow('client→web-lb-deny').hops.at(-1)!.what).toMatch(
      /outside loadBalancerSourceRanges 192\.0\.2\.0\/24: dropped/,
    );
    expect(flow('client→web-lb').verdict).toBe('delivered');
    const empty = flow('pod-d→empty');
    expect(empty.verdict).toBe('refused');
    expect(empty.hops.at(-1)!.after).toBe('(rejected)');
  });

  it('pod → pod is routed untranslated', () => {
    const f = flow('pod-a→pod-d');
    expect(f.hops.every((h) => h.before === h.after)).toBe(true);
    expect(f.hops.at(-1)!.at).toEqual({ kind: 'pod', name: 'pod-d' });
  });

  it('says what to fix for a bad flow', () => {
    for (const [spec, msg] of [
      ['pod-a', /expected SOURCE→DESTINATION/],
      ['pod-z→web', /no pod or client named "pod-z"/],
      ['pod-a→nope', /no pod or Service named "nope"/],
      ['pod-a→web@pod-d', /pod-d is not an eligible endpoint of web/],
    ] as const) {
      expect(() => flow(spec)).toThrow(UsageError);
      expect(() => flow(spec)).toThrow(msg);
    }
  });

  it('draws the flow as numbered hops with the addresses before and after', () => {
    const html = renderShowPage({ drawing: d, ports, flow: flow('pod-a→web@pod-c') });
    expect(html.match(/data-role="hop"/g)).toHaveLength(6);
    expect(html).toContain(
      '10.244.1.2:eph → 10.96.0.10:80 TCP   ⇒   10.244.1.2:eph → 10.244.2.2:8080 TCP',
    );
    expect(html).toContain('<td class="changed">10.244.1.2:eph → 10.244.2.2:8080 TCP</td>');
    expect(html).not.toMatch(/(src|href)="https?:/);
  });
});

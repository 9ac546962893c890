// What a picture of the lab shows, independent of how it is drawn: the nodes (with their
// counters), the pods on each — the topology's named pods and any other pod the control plane's
// view puts endpoints on (a Deployment's pods) —, the external clients, the underlay, and the
// Services with the node each endpoint lives on. `lab show` and the `lab compare` report both
// draw this (src/lab/show/svg.ts), and the report names addresses by the roles it gives them.
import type { ResolvedServicePort } from '../../model.ts';
import { ipInCidr } from '../../manifests/ip.ts';
import type { Topology } from '../topology.ts';

export interface DrawNode {
  name: string;
  ip: string;
  podCidr: string;
  gateway: string;
  uplink: string;
  /** counter lines to print inside the node (name, value), most telling first */
  counters: [string, number | string][];
}

export interface DrawPod {
  name: string;
  ip: string;
  node: string;
  hostIf: string;
  /** not one of the topology's named pods: seen only as an endpoint in the view */
  fromView: boolean;
}

export interface DrawClient {
  name: string;
  ip: string;
  uplink: string;
}

export interface DrawEndpoint {
  ip: string;
  port: number;
  ready: boolean;
  /** the pod's name, or the address when no pod has it */
  pod: string;
  node: string | null;
}

export interface DrawService {
  /** namespace/name, or just the name in namespace default */
  name: string;
  type: string;
  clusterIP: string;
  /** external IPs and LoadBalancer ingress IPs */
  external: string[];
  /** "80/TCP", "80:30080/TCP" as kubectl prints them */
  ports: string[];
  endpoints: DrawEndpoint[];
}

export interface LabDrawing {
  title: string;
  /** the lab's data plane (kubetun, iptables, nftables, none) or '' when unknown */
  mode: string;
  underlayCidr: string;
  nodes: DrawNode[];
  pods: DrawPod[];
  clients: DrawClient[];
  services: DrawService[];
}

const shortName = (ns: string, name: string) => (ns === 'default' ? name : `${ns}/${name}`);

/** The drawing of a lab: its topology plus the control plane's view (resolved service ports). */
export function labDrawing(
  t: Topology,
  ports: readonly ResolvedServicePort[],
  opts: { mode?: string; counters?: Map<string, [string, number | string][]> } = {},
): LabDrawing {
  const pods: DrawPod[] = t.nodes.flatMap((n) =>
    n.pods.map((p) => ({
      name: p.name,
      ip: p.ip,
      node: n.name,
      hostIf: p.hostIf,
      fromView: false,
    })),
  );
  const byIp = new Map(pods.map((p) => [p.ip, p]));
  const services = new Map<string, DrawService>();
  for (const r of ports) {
    const key = shortName(r.service.namespace, r.service.name);
    let svc = services.get(key);
    if (!svc) {
      svc = {
        name: key,
        type: r.service.type ?? 'ClusterIP',
        clusterIP: r.service.clusterIPs[0] ?? '',
        external: [...(r.service.loadBalancerIPs ?? []), ...(r.service.externalIPs ?? [])],
        ports: [],
        endpoints: [],
      };
      services.set(key, svc);
    }
    const np = r.port.nodePort ? `:${r.port.nodePort}` : '';
    svc.ports.push(`${r.port.port}${np}/${r.port.protocol}`);
    for (const e of r.endpoints) {
      let pod = byIp.get(e.ip);
      if (!pod) {
        // A pod the topology does not name (a Deployment's): placed by nodeName or pod CIDR.
        const node = e.nodeName ?? t.nodes.find((n) => ipInCidr(e.ip, n.podCidr))?.name;
        if (node) {
          pod = { name: e.targetName ?? e.ip, ip: e.ip, node, hostIf: '', fromView: true };
          pods.push(pod);
          byIp.set(e.ip, pod);
        }
      }
      if (svc.endpoints.some((x) => x.ip === e.ip)) continue;
      svc.endpoints.push({
        ip: e.ip,
        port: e.port,
        ready: e.ready,
        pod: pod?.name ?? e.ip,
        node: pod?.node ?? e.nodeName ?? null,
      });
    }
  }
  return {
    title: t.name,
    mode: opts.mode ?? '',
    underlayCidr: t.underlayCidr,
    nodes: t.nodes.map((n) => ({
      name: n.name,
      ip: n.ip,
      podCidr: n.podCidr,
      gateway: n.gateway,
      uplink: n.uplink,
      counters: opts.counters?.get(n.name) ?? [],
    })),
    pods,
    clients: t.clients.map((c) => ({ name: c.name, ip: c.ip, uplink: c.uplink })),
    services: [...services.values()],
  };
}

/**
 * Every address of the lab by the role it plays: pod-d, node2, node1 gw, client, VIP web,
 * LB web-lb. The compare report's ladder columns are labelled with these.
 */
export function addressRoles(d: LabDrawing): Map<string, string> {
  const roles = new Map<string, string>();
  const set = (ip: string, role: string) => {
    if (ip && !roles.has(ip)) roles.set(ip, role);
  };
  for (const p of d.pods) set(p.ip, p.name);
  for (const n of d.nodes) {
    set(n.ip, n.name);
    set(n.gateway, `${n.name} gw`);
  }
  for (const c of d.clients) set(c.ip, c.name);
  for (const s of d.services) {
    set(s.clusterIP, `VIP ${s.name}`);
    for (const ip of s.external) set(ip, `${s.type === 'LoadBalancer' ? 'LB' : 'ext'} ${s.name}`);
  }
  return roles;
}

// What the lab needs to know about its manifests: each service's cluster IP and ports and the
// endpoints behind each port — for `lab status`, the demos, and the check at `lab up` that every
// endpoint is a pod the topology actually creates (a typo there would otherwise show up as a
// mysterious timeout much later). Read with the same loader `kubetun run` uses, so a manifest
// the data plane would reject fails `lab up` early with the loader's message.
import { loadManifests, resolveServicePorts } from '../manifests/index.ts';
import type { IPFamily } from '../model.ts';
import { allPods, type LabPod, type Topology } from './topology.ts';

export interface LabEndpoint {
  ip: string;
  port: number;
  ready: boolean;
  nodeName?: string;
  targetName?: string;
}

export interface LabServicePort {
  name: string;
  protocol: string;
  port: number;
  targetPort: number | string;
  /** 0 unless the Service is NodePort or LoadBalancer */
  nodePort: number;
  endpoints: LabEndpoint[];
}

export interface LabService {
  namespace: string;
  name: string;
  clusterIP: string;
  /** spec.type: ClusterIP, NodePort, LoadBalancer */
  type: string;
  /** spec.externalIPs and the LoadBalancer ingress IPs, as kubectl's EXTERNAL-IP shows them */
  externalIPs: string[];
  ports: LabServicePort[];
}

/**
 * The Services as the data plane of one family sees them (IPv6: the IPv6 ClusterIPs of
 * dual-stack Services and their IPv6 endpoints); clusterIP is the address of that family.
 */
export function readLabServices(dir: string, family: IPFamily = 'IPv4'): LabService[] {
  const byName = new Map<string, LabService>();
  const ofFamily = (ip: string) => ip.includes(':') === (family === 'IPv6');
  for (const r of resolveServicePorts(loadManifests(dir), { family })) {
    const key = `${r.service.namespace}/${r.service.name}`;
    let svc = byName.get(key);
    if (!svc) {
      svc = {
        namespace: r.service.namespace,
        name: r.service.name,
        clusterIP: r.service.clusterIPs.find(ofFamily) ?? '',
        type: r.service.type ?? 'ClusterIP',
        externalIPs: [...(r.service.loadBalancerIPs ?? []), ...(r.service.externalIPs ?? [])],
        ports: [],
      };
      byName.set(key, svc);
    }
    svc.ports.push({
      name: r.port.name,
      protocol: r.port.protocol,
      port: r.port.port,
      targetPort: r.port.targetPort,
      nodePort: r.port.nodePort ?? 0,
      endpoints: r.endpoints.map((e) => ({
        ip: e.ip,
        port: e.port,
        ready: e.ready,
        nodeName: e.nodeName,
        targetName: e.targetName,
      })),
    });
  }
  return [...byName.values()];
}

/**
 * Problems that would make the lab lie: endpoints that are no pod of the topology, endpoints
 * said to be on another node than the pod is, target names that do not match the pod, and
 * endpoint ports the pods do not serve. `family`: the family the services were read in
 * (readLabServices), whose pod addresses the endpoints must be.
 */
export function checkManifestEndpoints(
  t: Topology,
  services: LabService[],
  family: IPFamily = 'IPv4',
): string[] {
  const address = (p: LabPod) => (family === 'IPv6' ? p.ip6 : p.ip);
  const pods = new Map(allPods(t).map((p) => [address(p), p]));
  const problems: string[] = [];
  for (const s of services) {
    for (const port of s.ports) {
      for (const e of port.endpoints) {
        const where = `${t.manifests}: ${s.namespace}/${s.name} port ${port.protocol}/${port.port}: endpoint ${e.ip}`;
        const pod = pods.get(e.ip);
        if (!pod) {
          problems.push(`${where}: no pod in ${t.file} has this IP`);
          continue;
        }
        if (e.nodeName && e.nodeName !== pod.node)
          problems.push(`${where}: nodeName is ${e.nodeName} but ${pod.name} runs on ${pod.node}`);
        if (e.targetName && e.targetName !== pod.name)
          problems.push(
            `${where}: targetRef.name is ${e.targetName} but the pod with this IP is ${pod.name}`,
          );
        const served = port.protocol === 'UDP' ? t.udpPort : t.httpPort;
        if (e.port !== served)
          problems.push(
            `${where}: targets ${port.protocol} port ${e.port} but the lab pods serve ${port.protocol} on ${served}`,
          );
      }
    }
  }
  return problems;
}

/** The pod behind an endpoint IP, for messages like "answered by pod-c (node2)". */
export function podByIp(t: Topology, ip: string): LabPod | undefined {
  return allPods(t).find((p) => p.ip === ip);
}

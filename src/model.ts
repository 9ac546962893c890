// The cluster model: what kubetun knows about Services and EndpointSlices, independent of where
// it came from (a manifests directory, the Kubernetes API) and of what consumes it (the maps,
// the kube-proxy ruleset renderer, the lab). Plain objects: this is the slow world.

export type Protocol = 'TCP' | 'UDP' | 'SCTP';
export type ServiceType = 'ClusterIP' | 'NodePort' | 'LoadBalancer' | 'ExternalName';
export type TrafficPolicy = 'Cluster' | 'Local';
export type IPFamily = 'IPv4' | 'IPv6';
export type IPFamilyPolicy = 'SingleStack' | 'PreferDualStack' | 'RequireDualStack';

/** Where an object came from, so errors and logs can name it. */
export interface Origin {
  file: string;
  /** index of the YAML document within the file (0-based) */
  doc: number;
}

export interface ServicePort {
  /** '' when the port is unnamed */
  name: string;
  protocol: Protocol;
  port: number;
  /** a number, or the name of a container port (resolved per endpoint from the slice ports) */
  targetPort: number | string;
  /** 0 when none */
  nodePort: number;
}

export interface Service {
  namespace: string;
  name: string;
  type: ServiceType;
  /**
   * spec.clusterIPs (or [spec.clusterIP]), at most one per family, primary first; [] for
   * headless (clusterIP: None) and ExternalName
   */
  clusterIPs: string[];
  /**
   * spec.ipFamilies as the apiserver defaults them (one per clusterIP, in the same order; a
   * headless Service may have families and no IPs). Absent on objects built by hand: then the
   * families of clusterIPs. [] for ExternalName.
   */
  ipFamilies?: IPFamily[];
  /** spec.ipFamilyPolicy as defaulted; absent on objects built by hand (SingleStack) */
  ipFamilyPolicy?: IPFamilyPolicy;
  ports: ServicePort[];
  /** spec.selector; undefined for selector-less services with hand-made EndpointSlices */
  selector?: Record<string, string>;
  sessionAffinity: 'None' | 'ClientIP';
  /** sessionAffinityConfig.clientIP.timeoutSeconds, default 10800 */
  affinityTimeoutSeconds: number;
  externalTrafficPolicy: TrafficPolicy;
  internalTrafficPolicy: TrafficPolicy;
  externalIPs: string[];
  /** status.loadBalancer.ingress[].ip */
  loadBalancerIPs: string[];
  loadBalancerSourceRanges: string[];
  /** 0 when none */
  healthCheckNodePort: number;
  /** spec.trafficDistribution, e.g. 'PreferClose' */
  trafficDistribution?: string;
  annotations: Record<string, string>;
  labels: Record<string, string>;
  origin?: Origin;
}

export interface EndpointConditions {
  /** nil in the API means true (ready); the loader applies the API's defaults */
  ready: boolean;
  serving: boolean;
  terminating: boolean;
}

export interface Endpoint {
  addresses: string[];
  conditions: EndpointConditions;
  nodeName?: string;
  zone?: string;
  /** hints.forZones[].name */
  hintsForZones?: string[];
  /** hints.forNodes[].name */
  hintsForNodes?: string[];
  /** targetRef.name, e.g. the pod name */
  targetName?: string;
}

export interface EndpointSlicePort {
  /** '' when unnamed */
  name: string;
  protocol: Protocol;
  port: number;
}

export interface EndpointSlice {
  namespace: string;
  name: string;
  /** the kubernetes.io/service-name label */
  serviceName: string;
  addressType: 'IPv4' | 'IPv6' | 'FQDN';
  ports: EndpointSlicePort[];
  endpoints: Endpoint[];
  origin?: Origin;
}

export interface ClusterState {
  services: Service[];
  slices: EndpointSlice[];
}

/** One endpoint of one service port, after merging slices and resolving the port. */
export interface ResolvedEndpoint {
  ip: string;
  port: number;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  nodeName?: string;
  zone?: string;
  hintsForZones?: string[];
  hintsForNodes?: string[];
  targetName?: string;
}

/**
 * A service port with its endpoints: the unit kube-proxy programs (one KUBE-SVC chain, one
 * service master entry in the maps).
 */
export interface ResolvedServicePort {
  service: Service;
  port: ServicePort;
  /** kube-proxy's ServicePortName string: "ns/name:portName", or "ns/name" when unnamed */
  servicePortName: string;
  /** deduplicated by ip:port, sorted by kube-proxy's order (the "ip:port" string) */
  endpoints: ResolvedEndpoint[];
  /**
   * The endpoints of the Service's IPv6 EndpointSlices, resolved the same way, for a data plane
   * serving both families (the change tracker fills it; absent elsewhere). `endpoints` holds
   * the resolving family's (IPv4 unless resolveServicePorts was asked for IPv6), what a
   * kube-proxy of that family sees.
   */
  endpoints6?: ResolvedEndpoint[];
}

/** The family of a ClusterIP, external or endpoint address already validated as an IP. */
export function familyOfIP(ip: string): IPFamily {
  return ip.includes(':') ? 'IPv6' : 'IPv4';
}

/** Whether one of `ips` is of `family` (no array made). */
export function hasFamily(ips: readonly string[], family: IPFamily): boolean {
  for (const ip of ips) if (familyOfIP(ip) === family) return true;
  return false;
}

/** The addresses of `ips` in family `f` (a kube-proxy of one family sees only those). */
export function ipsOfFamily(ips: readonly string[], f: IPFamily): string[] {
  return ips.filter((ip) => familyOfIP(ip) === f);
}

export function servicePortName(svc: Service, port: ServicePort): string {
  return port.name ? `${svc.namespace}/${svc.name}:${port.name}` : `${svc.namespace}/${svc.name}`;
}

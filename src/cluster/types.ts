// API-shaped plain objects, as parsed from YAML (kubectl output, lab/manifests) and as the lab's
// store keeps them. Field names and nesting are the Kubernetes API's, so a file written by
// kubectl round-trips unchanged; only the fields the lab reads are typed, the rest pass through.
//
// These are the wire shapes (the "repr" of the slow world). The data plane's own model of
// Services and slices is src/model.ts, which src/manifests/ builds from these objects.

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ObjectMeta {
  name: string;
  namespace?: string;
  generateName?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string | null;
  deletionTimestamp?: string;
  deletionGracePeriodSeconds?: number;
  ownerReferences?: OwnerReference[];
}

export interface KObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  spec?: unknown;
  status?: unknown;
  [extra: string]: unknown;
}

export type Protocol = 'TCP' | 'UDP' | 'SCTP';
export type ServiceType = 'ClusterIP' | 'NodePort' | 'LoadBalancer' | 'ExternalName';
export type TrafficPolicy = 'Cluster' | 'Local';

// ---- selectors -------------------------------------------------------------------------------

export interface LabelSelectorRequirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  values?: string[];
}

/** metav1.LabelSelector (Deployments, ReplicaSets); Services use a plain map instead. */
export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: LabelSelectorRequirement[];
}

// ---- Service ---------------------------------------------------------------------------------

export interface ServicePortSpec {
  name?: string;
  protocol?: Protocol;
  appProtocol?: string;
  port: number;
  /** a number, or the name of a container port resolved per Pod */
  targetPort?: number | string;
  nodePort?: number;
}

export interface ServiceSpec {
  type?: ServiceType;
  selector?: Record<string, string>;
  ports?: ServicePortSpec[];
  clusterIP?: string;
  clusterIPs?: string[];
  ipFamilies?: string[];
  ipFamilyPolicy?: 'SingleStack' | 'PreferDualStack' | 'RequireDualStack';
  externalName?: string;
  externalIPs?: string[];
  publishNotReadyAddresses?: boolean;
  sessionAffinity?: 'None' | 'ClientIP';
  sessionAffinityConfig?: { clientIP?: { timeoutSeconds?: number } };
  externalTrafficPolicy?: TrafficPolicy;
  internalTrafficPolicy?: TrafficPolicy;
  healthCheckNodePort?: number;
  allocateLoadBalancerNodePorts?: boolean;
  loadBalancerSourceRanges?: string[];
  trafficDistribution?: string;
}

export interface Service extends KObject {
  kind: 'Service';
  spec: ServiceSpec;
  status?: { loadBalancer?: { ingress?: { ip?: string; hostname?: string }[] } };
}

// ---- EndpointSlice ---------------------------------------------------------------------------

export interface EndpointConditions {
  ready?: boolean;
  serving?: boolean;
  terminating?: boolean;
}

export interface ObjectReference {
  kind?: string;
  namespace?: string;
  name?: string;
  uid?: string;
}

export interface EndpointSpec {
  addresses: string[];
  conditions?: EndpointConditions;
  hostname?: string;
  targetRef?: ObjectReference;
  nodeName?: string;
  zone?: string;
  hints?: { forZones?: { name: string }[]; forNodes?: { name: string }[] };
}

export interface EndpointPortSpec {
  name?: string;
  protocol?: Protocol;
  port?: number;
  appProtocol?: string;
}

export interface EndpointSlice extends KObject {
  kind: 'EndpointSlice';
  addressType: 'IPv4' | 'IPv6' | 'FQDN';
  endpoints: EndpointSpec[];
  ports?: EndpointPortSpec[];
}

// ---- Pod -------------------------------------------------------------------------------------

export interface ContainerPort {
  name?: string;
  containerPort: number;
  protocol?: Protocol;
  hostPort?: number;
}

export interface Probe {
  httpGet?: { path?: string; port: number | string; host?: string; scheme?: string };
  tcpSocket?: { port: number | string; host?: string };
  exec?: { command: string[] };
  initialDelaySeconds?: number;
  periodSeconds?: number;
  timeoutSeconds?: number;
  successThreshold?: number;
  failureThreshold?: number;
}

export interface LifecycleHandler {
  exec?: { command: string[] };
  sleep?: { seconds: number };
  httpGet?: { path?: string; port: number | string };
}

export interface Container {
  name: string;
  image?: string;
  command?: string[];
  args?: string[];
  ports?: ContainerPort[];
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  startupProbe?: Probe;
  lifecycle?: { preStart?: LifecycleHandler; preStop?: LifecycleHandler };
  imagePullPolicy?: string;
  terminationMessagePath?: string;
  terminationMessagePolicy?: string;
  resources?: unknown;
  [extra: string]: unknown;
}

export interface PodSpec {
  containers: Container[];
  initContainers?: Container[];
  nodeName?: string;
  hostname?: string;
  subdomain?: string;
  restartPolicy?: 'Always' | 'OnFailure' | 'Never';
  terminationGracePeriodSeconds?: number;
  dnsPolicy?: 'ClusterFirst' | 'ClusterFirstWithHostNet' | 'Default' | 'None';
  dnsConfig?: {
    nameservers?: string[];
    searches?: string[];
    options?: { name: string; value?: string }[];
  };
  schedulerName?: string;
  securityContext?: unknown;
  hostNetwork?: boolean;
  [extra: string]: unknown;
}

export interface PodCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  lastTransitionTime?: string;
  reason?: string;
}

export interface PodStatus {
  phase?: 'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Unknown';
  podIP?: string;
  podIPs?: { ip: string }[];
  hostIP?: string;
  conditions?: PodCondition[];
  startTime?: string;
  containerStatuses?: unknown[];
}

export interface Pod extends KObject {
  kind: 'Pod';
  spec: PodSpec;
  status?: PodStatus;
}

export interface PodTemplateSpec {
  metadata?: Partial<ObjectMeta>;
  spec: PodSpec;
}

// ---- Deployment / ReplicaSet -----------------------------------------------------------------

export interface DeploymentSpec {
  replicas?: number;
  selector: LabelSelector;
  template: PodTemplateSpec;
  strategy?: {
    type?: 'RollingUpdate' | 'Recreate';
    rollingUpdate?: { maxSurge?: number | string; maxUnavailable?: number | string };
  };
  minReadySeconds?: number;
  revisionHistoryLimit?: number;
  progressDeadlineSeconds?: number;
  paused?: boolean;
}

export interface Deployment extends KObject {
  kind: 'Deployment';
  spec: DeploymentSpec;
  status?: Record<string, unknown>;
}

export interface ReplicaSetSpec {
  replicas?: number;
  selector: LabelSelector;
  template: PodTemplateSpec;
  minReadySeconds?: number;
}

export interface ReplicaSet extends KObject {
  kind: 'ReplicaSet';
  spec: ReplicaSetSpec;
  status?: Record<string, unknown>;
}

// ---- Node / Namespace ------------------------------------------------------------------------

export interface Node extends KObject {
  kind: 'Node';
  spec?: { podCIDR?: string; podCIDRs?: string[]; unschedulable?: boolean };
  status?: {
    addresses?: { type: string; address: string }[];
    conditions?: { type: string; status: string }[];
  };
}

export interface Namespace extends KObject {
  kind: 'Namespace';
  spec?: { finalizers?: string[] };
  status?: { phase?: 'Active' | 'Terminating' };
}

/** Well-known names shared by the apiserver, the controllers and the agents. */
export const LABEL_SERVICE_NAME = 'kubernetes.io/service-name';
export const LABEL_MANAGED_BY = 'endpointslice.kubernetes.io/managed-by';
export const CONTROLLER_NAME = 'endpointslice-controller.k8s.io';
export const LABEL_ZONE = 'topology.kubernetes.io/zone';
export const LABEL_HEADLESS = 'service.kubernetes.io/headless';

/** "Kind namespace/name" (cluster-scoped: "Kind name"), the way errors name an object. */
export function objectName(o: { kind?: unknown; metadata?: unknown }): string {
  const kind = typeof o.kind === 'string' && o.kind !== '' ? o.kind : 'object';
  const md = (o.metadata ?? {}) as Partial<ObjectMeta>;
  const name = typeof md.name === 'string' && md.name !== '' ? md.name : '<no name>';
  if (CLUSTER_SCOPED.has(kind)) return `${kind} ${name}`;
  const ns = typeof md.namespace === 'string' && md.namespace !== '' ? md.namespace : 'default';
  return `${kind} ${ns}/${name}`;
}

export const CLUSTER_SCOPED: ReadonlySet<string> = new Set(['Namespace', 'Node']);

// The apiserver's defaulting (pkg/apis/core/v1/defaults.go, pkg/apis/apps/v1/defaults.go and the
// Service registry's normalisation), applied to a copy before validation. Only what the lab and
// the agents read, plus what `kubectl get -o yaml` shows on a real cluster for these objects.
import type {
  Container,
  Deployment,
  EndpointSlice,
  KObject,
  Namespace,
  Pod,
  PodSpec,
  Probe,
  ReplicaSet,
  Service,
} from './types.ts';

export const DEFAULT_AFFINITY_TIMEOUT_SECONDS = 10800;
export const DEFAULT_GRACE_PERIOD_SECONDS = 30;
export const DEFAULT_REVISION_HISTORY_LIMIT = 10;
export const DEFAULT_PROGRESS_DEADLINE_SECONDS = 600;

/** Defaults `o` in place (it is the caller's copy) and returns it. */
export function defaultObject(o: KObject): KObject {
  switch (o.kind) {
    case 'Service':
      defaultService(o as Service);
      break;
    case 'Pod':
      if (isObject(o.spec)) defaultPodSpec((o as Pod).spec);
      break;
    case 'Deployment':
      defaultDeployment(o as Deployment);
      break;
    case 'ReplicaSet':
      defaultReplicaSet(o as ReplicaSet);
      break;
    case 'EndpointSlice':
      defaultEndpointSlice(o as EndpointSlice);
      break;
    case 'Namespace':
      defaultNamespace(o as Namespace);
      break;
  }
  return o;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** NodePort, LoadBalancer, or ClusterIP with external IPs (apiservice.ExternallyAccessible). */
export function externallyAccessible(s: Service['spec']): boolean {
  return (
    s.type === 'NodePort' ||
    s.type === 'LoadBalancer' ||
    ((s.type ?? 'ClusterIP') === 'ClusterIP' && (s.externalIPs?.length ?? 0) > 0)
  );
}

/** type LoadBalancer with externalTrafficPolicy Local: the only case with a health node port. */
export function needsHealthCheckNodePort(s: Service['spec']): boolean {
  return s.type === 'LoadBalancer' && s.externalTrafficPolicy === 'Local';
}

/** Whether the Service gets node ports allocated. */
export function needsNodePorts(s: Service['spec']): boolean {
  return (
    s.type === 'NodePort' ||
    (s.type === 'LoadBalancer' && s.allocateLoadBalancerNodePorts !== false)
  );
}

function defaultService(svc: Service): void {
  if (!isObject(svc.spec)) svc.spec = {};
  const s = svc.spec;
  s.type ??= 'ClusterIP';
  s.sessionAffinity ??= 'None';
  if (s.sessionAffinity === 'ClientIP') {
    s.sessionAffinityConfig ??= {};
    s.sessionAffinityConfig.clientIP ??= {};
    s.sessionAffinityConfig.clientIP.timeoutSeconds ??= DEFAULT_AFFINITY_TIMEOUT_SECONDS;
  }
  if (Array.isArray(s.ports)) {
    for (const p of s.ports) {
      if (!isObject(p)) continue;
      p.protocol ??= 'TCP';
      if (p.targetPort === undefined || p.targetPort === 0 || p.targetPort === '') {
        p.targetPort = p.port;
      }
    }
  }
  if (externallyAccessible(s)) s.externalTrafficPolicy ??= 'Cluster';
  if (s.type !== 'ExternalName') {
    s.internalTrafficPolicy ??= 'Cluster';
    s.ipFamilyPolicy ??= 'SingleStack';
    s.ipFamilies ??= ['IPv4'];
  }
  if (s.type === 'LoadBalancer') s.allocateLoadBalancerNodePorts ??= true;
}

export function defaultPodSpec(spec: PodSpec): void {
  spec.restartPolicy ??= 'Always';
  spec.terminationGracePeriodSeconds ??= DEFAULT_GRACE_PERIOD_SECONDS;
  spec.dnsPolicy ??= 'ClusterFirst';
  spec.schedulerName ??= 'default-scheduler';
  spec.securityContext ??= {};
  spec.enableServiceLinks ??= true;
  for (const c of [...(spec.containers ?? []), ...(spec.initContainers ?? [])]) {
    if (isObject(c)) defaultContainer(c);
  }
}

function defaultContainer(c: Container): void {
  c.terminationMessagePath ??= '/dev/termination-log';
  c.terminationMessagePolicy ??= 'File';
  c.imagePullPolicy ??= pullPolicy(c.image);
  for (const p of c.ports ?? []) if (isObject(p)) p.protocol ??= 'TCP';
  for (const probe of [c.readinessProbe, c.livenessProbe, c.startupProbe]) {
    if (isObject(probe)) defaultProbe(probe);
  }
}

/** Always for ":latest" or no tag (and no digest), else IfNotPresent. */
function pullPolicy(image: string | undefined): string {
  if (typeof image !== 'string' || image.includes('@')) return 'IfNotPresent';
  const last = image.slice(image.lastIndexOf('/') + 1);
  const colon = last.lastIndexOf(':');
  const tag = colon < 0 ? '' : last.slice(colon + 1);
  return tag === '' || tag === 'latest' ? 'Always' : 'IfNotPresent';
}

function defaultProbe(p: Probe): void {
  p.timeoutSeconds ??= 1;
  p.periodSeconds ??= 10;
  p.successThreshold ??= 1;
  p.failureThreshold ??= 3;
  if (isObject(p.httpGet)) {
    p.httpGet.path ??= '/';
    p.httpGet.scheme ??= 'HTTP';
  }
}

function defaultDeployment(d: Deployment): void {
  if (!isObject(d.spec)) return;
  const s = d.spec;
  s.replicas ??= 1;
  // kubectl create deployment writes `strategy: {}`: the type defaults, then its parameters.
  s.strategy ??= {};
  s.strategy.type ??= 'RollingUpdate';
  if (s.strategy.type === 'RollingUpdate') {
    s.strategy.rollingUpdate ??= {};
    s.strategy.rollingUpdate.maxUnavailable ??= '25%';
    s.strategy.rollingUpdate.maxSurge ??= '25%';
  }
  s.revisionHistoryLimit ??= DEFAULT_REVISION_HISTORY_LIMIT;
  s.progressDeadlineSeconds ??= DEFAULT_PROGRESS_DEADLINE_SECONDS;
  if (isObject(s.template) && isObject(s.template.spec)) defaultPodSpec(s.template.spec);
}

function defaultReplicaSet(r: ReplicaSet): void {
  if (!isObject(r.spec)) return;
  r.spec.replicas ??= 1;
  if (isObject(r.spec.template) && isObject(r.spec.template.spec)) {
    defaultPodSpec(r.spec.template.spec);
  }
}

function defaultEndpointSlice(e: EndpointSlice): void {
  for (const p of Array.isArray(e.ports) ? e.ports : []) {
    if (!isObject(p)) continue;
    p.protocol ??= 'TCP';
    p.name ??= '';
  }
}

function defaultNamespace(n: Namespace): void {
  n.spec = isObject(n.spec) ? n.spec : {};
  n.spec.finalizers ??= ['kubernetes'];
  n.status = isObject(n.status) ? n.status : {};
  n.status.phase ??= 'Active';
}

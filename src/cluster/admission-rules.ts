// Validation the apiserver applies on create/update that the agent's manifests readers do not
// (those take what a real cluster already accepted, including kube-proxy's test fixtures): names,
// labels and selectors, the type-dependent Service fields, Pod and Deployment specs, immutable
// fields. Messages follow pkg/apis/core/validation and pkg/apis/apps/validation.
import {
  dns1035LabelProblem,
  dns1123LabelProblem,
  dns1123SubdomainProblem,
  ianaSvcNameProblem,
  labelKeyProblem,
  labelValueProblem,
} from '../manifests/names.ts';
import { externallyAccessible, needsHealthCheckNodePort } from './admission-defaults.ts';
import { matchesSelector } from './selector.ts';
import type {
  Container,
  Deployment,
  EndpointSlice,
  KObject,
  LabelSelector,
  PodSpec,
  Probe,
  ReplicaSet,
  Service,
} from './types.ts';

export interface Problem {
  code: string;
  field: string;
  reason: string;
}

const INVALID = 'ADMISSION_INVALID';
const REQUIRED = 'ADMISSION_REQUIRED';

/** Problems in the defaulted object `o`; `old` is the stored version on an update. */
export function validateObject(o: KObject, _ctx: unknown, old: KObject | undefined): Problem[] {
  const out: Problem[] = [];
  const add = (field: string, reason: string, code = INVALID) => out.push({ code, field, reason });
  validateMeta(o, add);
  switch (o.kind) {
    case 'Service':
      validateService(o as Service, add);
      break;
    case 'Pod':
      validatePodSpec(o.spec as PodSpec, 'spec', add);
      break;
    case 'EndpointSlice':
      validateEndpointSlice(o as EndpointSlice, add);
      break;
    case 'Deployment':
    case 'ReplicaSet':
      validateWorkload(o as Deployment | ReplicaSet, old as Deployment | undefined, add);
      break;
  }
  return out;
}

type Add = (field: string, reason: string, code?: string) => void;

function validateMeta(o: KObject, add: Add): void {
  const md = o.metadata;
  const nameRule =
    o.kind === 'Service'
      ? dns1035LabelProblem
      : o.kind === 'Namespace'
        ? dns1123LabelProblem
        : dns1123SubdomainProblem;
  const bad = nameRule(md.name);
  if (bad) add('metadata.name', `Invalid value: ${bad}`);
  if (md.namespace !== undefined) {
    const ns = dns1123LabelProblem(md.namespace);
    if (ns) add('metadata.namespace', `Invalid value: ${ns}`);
  }
  validateLabels(md.labels, 'metadata.labels', add);
  if (md.annotations !== undefined && !isStringMap(md.annotations)) {
    add('metadata.annotations', 'must be a mapping of strings to strings');
  }
}

function isStringMap(v: unknown): boolean {
  return (
    typeof v === 'object' &&
    v !== null &&
    !Array.isArray(v) &&
    Object.values(v).every((x) => typeof x === 'string')
  );
}

export function validateLabels(labels: unknown, field: string, add: Add): void {
  if (labels === undefined || labels === null) return;
  if (typeof labels !== 'object' || Array.isArray(labels)) {
    add(field, 'must be a mapping of strings to strings');
    return;
  }
  for (const [k, v] of Object.entries(labels)) {
    const f = `${field}["${k}"]`;
    const bad = labelKeyProblem(k) ?? (typeof v === 'string' ? labelValueProblem(v) : null);
    if (typeof v !== 'string') add(f, `must be a string, got ${JSON.stringify(v)} (quote it)`);
    else if (bad) add(f, `Invalid value: ${bad}`);
  }
}

function validateService(svc: Service, add: Add): void {
  const s = svc.spec;
  if (s.type !== 'ExternalName') validateLabels(s.selector, 'spec.selector', add);
  if (s.type === 'ExternalName' && typeof s.externalName === 'string' && s.externalName !== '') {
    const bad = dns1123SubdomainProblem(s.externalName.replace(/\.$/, ''));
    if (bad) add('spec.externalName', `Invalid value: ${bad}`);
  }
  if (s.externalTrafficPolicy !== undefined && !externallyAccessible(s)) {
    add(
      'spec.externalTrafficPolicy',
      `Invalid value: "${s.externalTrafficPolicy}": may only be set for externally-accessible services`,
    );
  }
  if (s.healthCheckNodePort && !needsHealthCheckNodePort(s)) {
    add(
      'spec.healthCheckNodePort',
      `Invalid value: ${s.healthCheckNodePort}: may only be set when \`type\` is 'LoadBalancer' and \`externalTrafficPolicy\` is 'Local'`,
    );
  }
  if ((s.loadBalancerSourceRanges?.length ?? 0) > 0 && s.type !== 'LoadBalancer') {
    add(
      'spec.loadBalancerSourceRanges',
      "Forbidden: may only be used when `type` is 'LoadBalancer'",
    );
  }
  if (s.publishNotReadyAddresses !== undefined && typeof s.publishNotReadyAddresses !== 'boolean') {
    add('spec.publishNotReadyAddresses', 'must be true or false');
  }
  if (s.allocateLoadBalancerNodePorts !== undefined && s.type !== 'LoadBalancer') {
    add(
      'spec.allocateLoadBalancerNodePorts',
      "Forbidden: may only be used when `type` is 'LoadBalancer'",
    );
  }
}

// The apiserver's size limits (1000 endpoints, 100 ports, 100 addresses) are the manifests
// reader's (parseEndpointSlice, which admission runs too): one rule in one place.
function validateEndpointSlice(e: EndpointSlice, add: Add): void {
  const eps = Array.isArray(e.endpoints) ? e.endpoints : [];
  eps.forEach((ep, i) => {
    if (typeof ep !== 'object' || ep === null) return;
    if (ep.hostname !== undefined) {
      const bad =
        typeof ep.hostname === 'string' ? dns1123LabelProblem(ep.hostname) : 'must be a string';
      if (bad) add(`endpoints[${i}].hostname`, `Invalid value: ${bad}`);
    }
    if (ep.nodeName !== undefined) {
      const bad =
        typeof ep.nodeName === 'string' ? dns1123SubdomainProblem(ep.nodeName) : 'must be a string';
      if (bad) add(`endpoints[${i}].nodeName`, `Invalid value: ${bad}`);
    }
  });
}

// ---- Pods ------------------------------------------------------------------------------------

const RESTART_POLICIES = ['Always', 'OnFailure', 'Never'];
const DNS_POLICIES = ['ClusterFirst', 'ClusterFirstWithHostNet', 'Default', 'None'];
const PROTOCOLS = ['TCP', 'UDP', 'SCTP'];

export function validatePodSpec(spec: PodSpec | undefined, path: string, add: Add): void {
  if (typeof spec !== 'object' || spec === null) {
    add(path, 'Required value', REQUIRED);
    return;
  }
  const containers = Array.isArray(spec.containers) ? spec.containers : [];
  if (containers.length === 0) add(`${path}.containers`, 'Required value', REQUIRED);
  const names = new Set<string>();
  const portNames = new Set<string>();
  containers.forEach((c, i) => {
    const cp = `${path}.containers[${i}]`;
    if (typeof c !== 'object' || c === null) {
      add(cp, 'must be a mapping');
      return;
    }
    validateContainer(c, cp, add, spec);
    if (names.has(c.name)) add(`${cp}.name`, `Duplicate value: "${c.name}"`);
    names.add(c.name);
    (c.ports ?? []).forEach((p, j) => {
      if (!p?.name) return;
      if (portNames.has(p.name)) add(`${cp}.ports[${j}].name`, `Duplicate value: "${p.name}"`);
      portNames.add(p.name);
    });
  });
  oneOf(spec.restartPolicy, RESTART_POLICIES, `${path}.restartPolicy`, add);
  oneOf(spec.dnsPolicy, DNS_POLICIES, `${path}.dnsPolicy`, add);
  if (spec.dnsPolicy === 'None' && !(spec.dnsConfig?.nameservers?.length ?? 0)) {
    add(
      `${path}.dnsConfig`,
      'Required value: must provide `dnsConfig` with at least one nameserver when `dnsPolicy` is None',
      REQUIRED,
    );
  }
  nonNegative(spec.terminationGracePeriodSeconds, `${path}.terminationGracePeriodSeconds`, add);
  for (const f of ['hostname', 'subdomain'] as const) {
    const v = spec[f];
    if (v === undefined) continue;
    const bad = typeof v === 'string' ? dns1123LabelProblem(v) : 'must be a string';
    if (bad) add(`${path}.${f}`, `Invalid value: ${bad}`);
  }
  if (spec.nodeName !== undefined) {
    const bad =
      typeof spec.nodeName === 'string'
        ? dns1123SubdomainProblem(spec.nodeName)
        : 'must be a string';
    if (bad) add(`${path}.nodeName`, `Invalid value: ${bad}`);
  }
}

function validateContainer(c: Container, path: string, add: Add, spec: PodSpec): void {
  if (typeof c.name !== 'string' || c.name === '') add(`${path}.name`, 'Required value', REQUIRED);
  else {
    const bad = dns1123LabelProblem(c.name);
    if (bad) add(`${path}.name`, `Invalid value: ${bad}`);
  }
  if (typeof c.image !== 'string' || c.image.trim() === '') {
    add(`${path}.image`, 'Required value', REQUIRED);
  }
  (Array.isArray(c.ports) ? c.ports : []).forEach((p, j) => {
    const pp = `${path}.ports[${j}]`;
    if (typeof p !== 'object' || p === null) {
      add(pp, 'must be a mapping');
      return;
    }
    portNumber(p.containerPort, `${pp}.containerPort`, add, true);
    if (p.name !== undefined) {
      const bad = typeof p.name === 'string' ? ianaSvcNameProblem(p.name) : 'must be a string';
      if (bad) add(`${pp}.name`, `Invalid value: ${bad}`);
    }
    oneOf(p.protocol, PROTOCOLS, `${pp}.protocol`, add);
  });
  if (c.readinessProbe !== undefined)
    validateProbe(c.readinessProbe, `${path}.readinessProbe`, add, false);
  if (c.livenessProbe !== undefined)
    validateProbe(c.livenessProbe, `${path}.livenessProbe`, add, true);
  if (c.startupProbe !== undefined)
    validateProbe(c.startupProbe, `${path}.startupProbe`, add, true);
  const preStop = c.lifecycle?.preStop;
  if (preStop !== undefined) {
    const pp = `${path}.lifecycle.preStop`;
    handlerCount(preStop, pp, add);
    const secs = preStop.sleep?.seconds;
    if (preStop.sleep !== undefined) {
      const grace = spec.terminationGracePeriodSeconds ?? 30;
      if (!Number.isInteger(secs) || (secs as number) < 1 || (secs as number) > grace) {
        add(
          `${pp}.sleep.seconds`,
          `Invalid value: ${JSON.stringify(secs)}: must be greater than 0 and less than terminationGracePeriodSeconds (${grace})`,
        );
      }
    }
  }
}

function validateProbe(p: Probe, path: string, add: Add, successMustBeOne: boolean): void {
  if (typeof p !== 'object' || p === null) {
    add(path, 'must be a mapping');
    return;
  }
  handlerCount(p, path, add);
  const port = p.httpGet?.port ?? p.tcpSocket?.port;
  const portField = p.httpGet ? `${path}.httpGet.port` : `${path}.tcpSocket.port`;
  if ((p.httpGet || p.tcpSocket) && port === undefined) add(portField, 'Required value', REQUIRED);
  else if (typeof port === 'number') portNumber(port, portField, add, true);
  else if (typeof port === 'string') {
    const bad = ianaSvcNameProblem(port);
    if (bad) add(portField, `Invalid value: ${bad}`);
  }
  for (const f of [
    'periodSeconds',
    'timeoutSeconds',
    'successThreshold',
    'failureThreshold',
  ] as const) {
    const v = p[f];
    if (v !== undefined && (!Number.isInteger(v) || v < 1)) {
      add(
        `${path}.${f}`,
        `Invalid value: ${JSON.stringify(v)}: must be greater than or equal to 1`,
      );
    }
  }
  nonNegative(p.initialDelaySeconds, `${path}.initialDelaySeconds`, add);
  if (successMustBeOne && p.successThreshold !== undefined && p.successThreshold !== 1) {
    add(`${path}.successThreshold`, `Invalid value: ${p.successThreshold}: must be 1`);
  }
}

/** A probe or lifecycle handler names exactly one action. */
function handlerCount(h: object, path: string, add: Add): void {
  const kinds = ['exec', 'httpGet', 'tcpSocket', 'sleep', 'grpc'].filter(
    (k) => (h as Record<string, unknown>)[k] !== undefined,
  );
  if (kinds.length === 0) add(path, 'Required value: must specify a handler type', REQUIRED);
  if (kinds.length > 1)
    add(`${path}.${kinds[1]}`, 'Forbidden: may not specify more than 1 handler type');
}

function portNumber(v: unknown, field: string, add: Add, required: boolean): void {
  if (v === undefined) {
    if (required) add(field, 'Required value', REQUIRED);
    return;
  }
  if (!Number.isInteger(v) || (v as number) < 1 || (v as number) > 65535) {
    add(field, `Invalid value: ${JSON.stringify(v)}: must be between 1 and 65535, inclusive`);
  }
}

function nonNegative(v: unknown, field: string, add: Add): void {
  if (v !== undefined && (!Number.isInteger(v) || (v as number) < 0)) {
    add(field, `Invalid value: ${JSON.stringify(v)}: must be greater than or equal to 0`);
  }
}

function oneOf(v: unknown, allowed: string[], field: string, add: Add): void {
  if (v !== undefined && !allowed.includes(v as string)) {
    add(
      field,
      `Unsupported value: ${JSON.stringify(v)}: supported values: ${allowed.map((a) => `"${a}"`).join(', ')}`,
    );
  }
}

// ---- Deployments and ReplicaSets --------------------------------------------------------------

function validateWorkload(d: Deployment | ReplicaSet, old: Deployment | undefined, add: Add): void {
  const s = d.spec;
  if (typeof s !== 'object' || s === null) {
    add('spec', 'Required value', REQUIRED);
    return;
  }
  nonNegative(s.replicas, 'spec.replicas', add);
  validateSelector(s.selector, add);
  const labels = s.template?.metadata?.labels;
  validateLabels(labels, 'spec.template.metadata.labels', add);
  if (s.selector && !isEmptySelector(s.selector) && !matchesSelector(labels ?? {}, s.selector)) {
    add(
      'spec.template.metadata.labels',
      `Invalid value: ${JSON.stringify(labels ?? {})}: \`selector\` does not match template \`labels\``,
    );
  }
  validatePodSpec(s.template?.spec, 'spec.template.spec', add);
  const rp = s.template?.spec?.restartPolicy;
  if (rp !== undefined && rp !== 'Always') {
    add(
      'spec.template.spec.restartPolicy',
      `Unsupported value: "${rp}": supported values: "Always"`,
    );
  }
  if (d.kind === 'Deployment') validateStrategy(d as Deployment, add);
  if (old && JSON.stringify(old.spec?.selector) !== JSON.stringify(s.selector)) {
    add('spec.selector', `Invalid value: ${JSON.stringify(s.selector)}: field is immutable`);
  }
}

function isEmptySelector(sel: LabelSelector): boolean {
  return (
    Object.keys(sel.matchLabels ?? {}).length === 0 && (sel.matchExpressions ?? []).length === 0
  );
}

function validateSelector(sel: LabelSelector | undefined, add: Add): void {
  if (sel === undefined || sel === null) {
    add('spec.selector', 'Required value', REQUIRED);
    return;
  }
  if (isEmptySelector(sel)) {
    add('spec.selector', 'Invalid value: {}: empty selector is invalid for deployment');
    return;
  }
  validateLabels(sel.matchLabels, 'spec.selector.matchLabels', add);
  (sel.matchExpressions ?? []).forEach((r, i) => {
    const f = `spec.selector.matchExpressions[${i}]`;
    oneOf(r.operator, ['In', 'NotIn', 'Exists', 'DoesNotExist'], `${f}.operator`, add);
    const n = r.values?.length ?? 0;
    if ((r.operator === 'In' || r.operator === 'NotIn') && n === 0) {
      add(
        `${f}.values`,
        "Required value: must be specified when `operator` is 'In' or 'NotIn'",
        REQUIRED,
      );
    }
    if ((r.operator === 'Exists' || r.operator === 'DoesNotExist') && n > 0) {
      add(
        `${f}.values`,
        "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
      );
    }
  });
}

const PERCENT = /^(\d+)%$/;

function validateStrategy(d: Deployment, add: Add): void {
  const st = d.spec.strategy ?? {};
  oneOf(st.type, ['RollingUpdate', 'Recreate'], 'spec.strategy.type', add);
  if (st.type === 'Recreate' && st.rollingUpdate !== undefined) {
    add(
      'spec.strategy.rollingUpdate',
      "Forbidden: may not be specified when strategy `type` is 'Recreate'",
    );
  }
  const ru = st.rollingUpdate;
  if (st.type !== 'RollingUpdate' || !ru) return;
  const value = (v: unknown, field: string): number | undefined => {
    if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
    const m = typeof v === 'string' ? PERCENT.exec(v) : null;
    if (m && Number(m[1]) <= 100) return Number(m[1]);
    add(
      field,
      `Invalid value: ${JSON.stringify(v)}: must be a non-negative integer or a percentage (0%-100%)`,
    );
    return undefined;
  };
  const surge = value(ru.maxSurge, 'spec.strategy.rollingUpdate.maxSurge');
  const unavailable = value(ru.maxUnavailable, 'spec.strategy.rollingUpdate.maxUnavailable');
  if (surge === 0 && unavailable === 0) {
    add(
      'spec.strategy.rollingUpdate.maxUnavailable',
      'Invalid value: 0: may not be 0 when `maxSurge` is 0',
    );
  }
  nonNegative(d.spec.revisionHistoryLimit, 'spec.revisionHistoryLimit', add);
  nonNegative(d.spec.minReadySeconds, 'spec.minReadySeconds', add);
}

// The apiserver's part of a write: defaulting, validation and allocation, for the kinds the lab
// serves. admit() is pure except for the allocator it is given: on success the allocator holds
// exactly what the admitted object uses (old values it no longer uses are released); on refusal
// it is as it was.
//
//   admit(obj, ctx, file)
//     kind unknown      → {ignored: "<one line>"}    the caller prints it once per kind and file
//     shape             → apiVersion, kind, metadata.name           (refused: {errors})
//     default           → pkg/apis/core/v1/defaults.go, apps/v1 defaults   (admission-defaults.ts)
//     carry over        → an update keeps the clusterIP / nodePorts it was given, as a PATCH would
//     allocate          → clusterIP(s), nodePort(s), healthCheckNodePort (the allocator's rules)
//     validate          → the same readers the agent's manifests mode uses (src/manifests), plus
//                         the rules only the apiserver's create path applies (admission-rules.ts)
//
// Every error names the file, "Kind namespace/name" and the field path, as the apiserver's
// field.Error does ("spec.ports[0].nodePort: Invalid value: 30080: provided port is already
// allocated").
import { parseEndpointSlice } from '../manifests/endpointslice.ts';
import { ManifestError } from '../manifests/errors.ts';
import { ObjectReader } from '../manifests/fields.ts';
import { parseService } from '../manifests/service.ts';
import type { Allocator, PortRange } from './allocator.ts';
import { defaultObject } from './admission-defaults.ts';
import { type Problem, validateObject } from './admission-rules.ts';
import { allocateService, type Taken } from './service-alloc.ts';
import { CLUSTER_SCOPED, type KObject, objectName, type Service } from './types.ts';

export interface AdmissionContext {
  serviceCidr: string;
  nodePortRange: PortRange;
  allocator: Allocator;
  /** the stored object of that kind and name (an update), or undefined (a create) */
  get(kind: string, namespace: string, name: string): KObject | undefined;
  /** the pod network (--cluster-cidr): external IPs there would shadow Pods */
  clusterCidr?: string;
}

export interface AdmissionError {
  code: string;
  file: string;
  /** "Kind namespace/name", or "Kind name" for cluster-scoped kinds */
  object: string;
  /** e.g. "spec.ports[0].nodePort"; "" when about the whole object */
  field: string;
  reason: string;
  /** "file: object: field: reason", ready to print */
  message: string;
}

export type AdmissionResult =
  | { object: KObject }
  | { errors: AdmissionError[] }
  | { ignored: string };

/** apiVersion each kind is served at. */
export const ADMITTED_KINDS: Readonly<Record<string, string>> = {
  Service: 'v1',
  Pod: 'v1',
  Namespace: 'v1',
  Node: 'v1',
  EndpointSlice: 'discovery.k8s.io/v1',
  Deployment: 'apps/v1',
  ReplicaSet: 'apps/v1',
};

export function admit(obj: unknown, ctx: AdmissionContext, file: string): AdmissionResult {
  const shape = checkShape(obj, file);
  if ('errors' in shape || 'ignored' in shape) return shape;
  const o = defaultObject(structuredClone(shape.object));
  const name = objectName(o);
  // An IPv4-only lab keeps no IPv6 slice, as it keeps no IPv6 ClusterIP of a PreferDualStack
  // Service (service-alloc.ts): one manifests directory serves both topologies (the VM lab's
  // has no ipv6 block), and no data plane there could use it.
  if (o.kind === 'EndpointSlice' && o.addressType === 'IPv6' && !ctx.allocator.serviceCidrV6) {
    return {
      ignored: `${file}: ${name}: addressType IPv6 on an IPv4-only lab (its topology has no ipv6 block); ignored`,
    };
  }
  const fail = (ps: Problem[]) => ({ errors: ps.map((p) => toError(p, file, name)) });

  const old = ctx.get(o.kind, o.metadata.namespace ?? '', o.metadata.name);
  let taken: Taken = { values: [], release: [] };
  if (o.kind === 'Service') {
    const r = allocateService(o as Service, old as Service | undefined, ctx.allocator, name);
    taken = r.taken;
    if (r.problems.length > 0) {
      rollback(ctx.allocator, taken);
      return fail(r.problems);
    }
  }
  const problems = [...validateWithReaders(o, file, ctx), ...validateObject(o, ctx, old)];
  if (problems.length > 0) {
    rollback(ctx.allocator, taken);
    return fail(problems);
  }
  for (const [pool, v] of taken.release) ctx.allocator.release(pool, v);
  return { object: o };
}

type Shape = { object: KObject } | { errors: AdmissionError[] } | { ignored: string };

function checkShape(obj: unknown, file: string): Shape {
  const bad = (field: string, reason: string, object = 'object'): Shape => ({
    errors: [toError({ code: 'ADMISSION_SHAPE', field, reason }, file, object)],
  });
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) {
    return bad('', 'a Kubernetes object must be a mapping with apiVersion, kind and metadata');
  }
  const o = obj as Record<string, unknown>;
  if (typeof o.kind !== 'string' || o.kind === '') return bad('kind', 'required field is missing');
  const kind = o.kind;
  const want = ADMITTED_KINDS[kind];
  if (want === undefined) {
    return { ignored: `${file}: kind ${kind} is not served by the lab; ignored` };
  }
  const name = objectName(o);
  if (o.apiVersion !== want) {
    const got = typeof o.apiVersion === 'string' ? o.apiVersion : '';
    return bad('apiVersion', `unsupported apiVersion "${got}" for ${kind} (want ${want})`, name);
  }
  const md = o.metadata;
  if (typeof md !== 'object' || md === null || Array.isArray(md)) {
    return bad('metadata', 'required field is missing', name);
  }
  const m = md as Record<string, unknown>;
  if (typeof m.name !== 'string' || m.name === '') {
    const hint =
      typeof m.generateName === 'string' ? ' (generateName is for the caller to expand)' : '';
    return bad('metadata.name', `required field is missing${hint}`, name);
  }
  if (m.namespace !== undefined && typeof m.namespace !== 'string') {
    return bad('metadata.namespace', 'must be a string', name);
  }
  const copy = {
    ...(o as unknown as KObject),
    metadata: { ...(m as unknown as KObject['metadata']) },
  };
  if (CLUSTER_SCOPED.has(kind)) delete copy.metadata.namespace;
  else if (!copy.metadata.namespace) copy.metadata.namespace = 'default';
  return { object: copy };
}

/**
 * Service and EndpointSlice go through the agent's own readers (src/manifests): one set of
 * rules for what the data plane accepts, whether the object came through the lab or a directory.
 */
function validateWithReaders(o: KObject, file: string, ctx: AdmissionContext): Problem[] {
  if (o.kind !== 'Service' && o.kind !== 'EndpointSlice') return [];
  const r = new ObjectReader(file, 0, o.kind, '');
  try {
    if (o.kind === 'Service') {
      parseServiceForAdmission(r, o, ctx);
    } else {
      parseSliceForAdmission(r, o);
    }
    return [];
  } catch (e) {
    if (!(e instanceof ManifestError)) throw e;
    return [{ code: e.code, field: e.field, reason: e.reason }];
  }
}

function parseServiceForAdmission(r: ObjectReader, o: KObject, ctx: AdmissionContext): void {
  parseService(r, o as unknown as Record<string, unknown>, {
    nodePortRange: ctx.nodePortRange,
    serviceCidr: ctx.serviceCidr,
    clusterCidr: ctx.clusterCidr,
  });
}

function parseSliceForAdmission(r: ObjectReader, o: KObject): void {
  parseEndpointSlice(r, o as unknown as Record<string, unknown>);
}

function rollback(a: Allocator, t: Taken): void {
  for (const [pool, v] of t.values) a.release(pool, v);
}

function toError(p: Problem, file: string, object: string): AdmissionError {
  const parts = [file, object, p.field].filter((s) => s !== '');
  return {
    code: p.code,
    file,
    object,
    field: p.field,
    reason: p.reason,
    message: `${parts.join(': ')}: ${p.reason}`,
  };
}

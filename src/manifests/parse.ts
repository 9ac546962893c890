// Kubernetes YAML (or JSON) text → ClusterState. Services and EndpointSlices are kept; other
// kinds are ignored (a manifests directory usually holds Deployments too); `List` kinds are
// unpacked. Anything the API server would reject is rejected here, naming file, object, field.
import { type Document, parseAllDocuments } from 'yaml';
import type { ClusterState } from '../model.ts';
import { parseEndpointSlice } from './endpointslice.ts';
import { ManifestError } from './errors.ts';
import { type Json, ObjectReader } from './fields.ts';
import { parseService, type ServiceParseOptions } from './service.ts';

export type ParseOptions = ServiceParseOptions;

export function parseManifests(text: string, file: string, opts: ParseOptions = {}): ClusterState {
  const state: ClusterState = { services: [], slices: [] };
  parseAllDocuments(text).forEach((doc, i) => {
    const value = documentValue(doc as Document, file, i);
    if (value === undefined || value === null) return; // an empty document, e.g. a trailing ---
    if (typeof value !== 'object' || Array.isArray(value)) {
      throw new ManifestError(
        'MANIFEST_NOT_AN_OBJECT',
        { file, object: `document ${i}`, field: '' },
        'a Kubernetes object must be a mapping with apiVersion and kind',
      );
    }
    addObject(state, value as Json, file, i, '', opts);
  });
  checkState(state);
  return state;
}

export function documentValue(doc: Document, file: string, index: number): unknown {
  const where = { file, object: `document ${index}`, field: '' };
  const err = doc.errors[0];
  if (err) {
    // yaml's message starts "<what> at line L, column C:" and then quotes the source.
    const first = err.message.split('\n')[0].replace(/:$/, '');
    throw new ManifestError('MANIFEST_YAML_SYNTAX', where, `YAML syntax error: ${first}`, {
      cause: err,
    });
  }
  try {
    return doc.toJS({ maxAliasCount: 100 });
  } catch (e) {
    throw new ManifestError('MANIFEST_YAML_SYNTAX', where, `YAML error: ${(e as Error).message}`, {
      cause: e,
    });
  }
}

/** Documents without a kind are not Kubernetes objects (kustomization.yaml, values files). */
function addObject(
  state: ClusterState,
  o: Json,
  file: string,
  doc: number,
  prefix: string,
  opts: ParseOptions,
): void {
  const kind = typeof o.kind === 'string' ? o.kind : '';
  const apiVersion = typeof o.apiVersion === 'string' ? o.apiVersion : '';
  if (kind === 'Service') {
    const r = new ObjectReader(file, doc, kind, prefix);
    wantApiVersion(r, apiVersion, 'v1');
    state.services.push({ ...parseService(r, o, opts), origin: { file, doc } });
  } else if (kind === 'EndpointSlice') {
    const r = new ObjectReader(file, doc, kind, prefix);
    wantApiVersion(r, apiVersion, 'discovery.k8s.io/v1');
    state.slices.push({ ...parseEndpointSlice(r, o), origin: { file, doc } });
  } else if (kind.endsWith('List') && apiVersion === 'v1' && prefix === '') {
    const r = new ObjectReader(file, doc, kind, prefix);
    r.list(o.items, 'items').forEach((item, i) => {
      const path = `items[${i}]`;
      addObject(
        state,
        r.map(item, path) ?? r.wrongType(path, 'a mapping', item),
        file,
        doc,
        path,
        opts,
      );
    });
  }
}

function wantApiVersion(r: ObjectReader, got: string, want: string): void {
  if (got !== want) {
    r.fail(
      'MANIFEST_API_VERSION',
      'apiVersion',
      `unsupported apiVersion "${got}" for ${r.kind} (kubetun reads ${want})`,
    );
  }
}

/**
 * Checks across objects that the API server's uniqueness and allocators would enforce: one
 * object per name, one Service per ClusterIP, one Service per nodePort and protocol.
 */
export function checkState(state: ClusterState): void {
  const seen = new Map<string, { file: string; doc: number }>();
  const claim = (
    key: string,
    origin: { file: string; doc: number } | undefined,
    fail: (prev: string) => never,
  ) => {
    const prev = seen.get(key);
    if (prev) fail(`${prev.file} document ${prev.doc}`);
    seen.set(key, origin ?? { file: '?', doc: 0 });
  };
  for (const s of state.services) {
    const where = {
      file: s.origin?.file ?? '',
      object: `Service ${s.namespace}/${s.name}`,
      field: '',
    };
    claim(`svc ${s.namespace}/${s.name}`, s.origin, (prev) => {
      throw new ManifestError(
        'MANIFEST_DUPLICATE_OBJECT',
        { ...where, field: 'metadata.name' },
        `already defined in ${prev}`,
      );
    });
    s.clusterIPs.forEach((ip, i) => {
      claim(`ip ${ip}`, s.origin, (prev) => {
        const field = s.clusterIPs.length > 1 ? `spec.clusterIPs[${i}]` : 'spec.clusterIP';
        throw new ManifestError(
          'MANIFEST_CONFLICT',
          { ...where, field },
          `clusterIP ${ip} is already used by the Service in ${prev}`,
        );
      });
    });
    s.ports.forEach((p, i) => {
      if (p.nodePort === 0) return;
      claim(`np ${p.nodePort}/${p.protocol}`, s.origin, (prev) => {
        const field = `spec.ports[${i}].nodePort`;
        throw new ManifestError(
          'MANIFEST_CONFLICT',
          { ...where, field },
          `nodePort ${p.nodePort}/${p.protocol} is already used by the Service in ${prev}`,
        );
      });
    });
  }
  for (const sl of state.slices) {
    const where = {
      file: sl.origin?.file ?? '',
      object: `EndpointSlice ${sl.namespace}/${sl.name}`,
      field: 'metadata.name',
    };
    claim(`slice ${sl.namespace}/${sl.name}`, sl.origin, (prev) => {
      throw new ManifestError('MANIFEST_DUPLICATE_OBJECT', where, `already defined in ${prev}`);
    });
  }
}

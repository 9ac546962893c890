// Kubernetes YAML (or JSON) text → ClusterState. Services and EndpointSlices are kept; other
// kinds are ignored (a manifests directory usually holds Deployments too); `List` kinds are
// unpacked. Anything the API server would reject is rejected here, naming file, object, field.
import {
  type Document,
  isMap,
  isPair,
  isScalar,
  isSeq,
  LineCounter,
  type Node,
  parseAllDocuments,
} from 'yaml';
import type { ClusterState, EndpointSlice, Service } from '../model.ts';
import { parseEndpointSlice } from './endpointslice.ts';
import { ManifestError, type ManifestErrorCode, ManifestFileError } from './errors.ts';
import { type Json, ObjectReader } from './fields.ts';
import { parseService, type ServiceParseOptions } from './service.ts';
import { fastYamlValues } from './yaml-fast.ts';

export type ParseOptions = ServiceParseOptions;

export function parseManifests(text: string, file: string, opts: ParseOptions = {}): ClusterState {
  const state = parseObjects(text, file, opts);
  checkState(state);
  return state;
}

/** parseManifests without the checks across objects (checkState): each object on its own. */
export function parseObjects(text: string, file: string, opts: ParseOptions = {}): ClusterState {
  const state: ClusterState = { services: [], slices: [] };
  const sink: ParseSink = {
    service: (s) => state.services.push(s),
    slice: (s) => state.slices.push(s),
    ignored: () => {},
    refused: (err) => {
      throw err;
    },
  };
  parseDocuments(text, file, opts, sink);
  return state;
}

/** Where parseDocuments delivers each object of a file. */
export interface ParseSink {
  service(s: Service): void;
  slice(s: EndpointSlice): void;
  /** an object of a kind kubetun does not read (Deployment, ConfigMap...) */
  ignored(kind: string, doc: number): void;
  /**
   * One object is invalid. `raw` is the object as decoded (to know which object it meant to
   * be), `doc` its document. Throw to stop the file; return to go on with the next object.
   */
  refused(err: ManifestError, raw: unknown, doc: number): void;
}

/**
 * Each document of one file, object by object. A YAML syntax error throws (the file cannot be
 * read reliably past it); an invalid object goes to sink.refused.
 */
export function parseDocuments(
  text: string,
  file: string,
  opts: ParseOptions,
  sink: ParseSink,
): void {
  yamlValues(text, file).forEach((value, i) => {
    if (value === undefined || value === null) return; // an empty document, e.g. a trailing ---
    if (typeof value !== 'object' || Array.isArray(value)) {
      const err = new ManifestError(
        'MANIFEST_NOT_AN_OBJECT',
        { file, object: `document ${i}`, field: '' },
        'a Kubernetes object must be a mapping with apiVersion and kind',
      );
      sink.refused(err, value, i);
      return;
    }
    addObject(sink, value as Json, file, i, '', opts);
  });
}

/**
 * Every YAML document of `text` as a plain value (null for an empty one) — the one YAML reader
 * of the agent's manifests, the lab's `apply` and the cluster DNS view. Text in the manifests'
 * usual subset is read by yaml-fast.ts (the same values, ~20x faster); the rest by `yaml`. A syntax error or a key
 * given twice in one mapping is a ManifestError naming the file, document, line and column.
 * yaml's own duplicate-key check compares every key with every other key of its mapping — a
 * Service with 97k annotations kept agents busy for minutes (issue 18) — so it is off, and
 * duplicateKey() checks each key once against a Set.
 */
export function yamlValues(text: string, file: string): unknown[] {
  // the manifests' common subset first (yaml-fast.ts: the same values, or undefined)
  return fastYamlValues(text) ?? yamlPackageValues(text, file);
}

/** yamlValues through the `yaml` package alone: any YAML, errors with line and column. */
export function yamlPackageValues(text: string, file: string): unknown[] {
  const lines = new LineCounter();
  return parseAllDocuments(text, { uniqueKeys: false, lineCounter: lines }).map((doc, i) =>
    documentValue(doc as Document, file, i, lines),
  );
}

function documentValue(doc: Document, file: string, index: number, lines: LineCounter): unknown {
  const where = { file, object: `document ${index}`, field: '' };
  const err = doc.errors[0];
  if (err) {
    // yaml's message starts "<what> at line L, column C:" and then quotes the source.
    const first = err.message.split('\n')[0].replace(/:$/, '');
    throw new ManifestFileError('MANIFEST_YAML_SYNTAX', where, `YAML syntax error: ${first}`, {
      cause: err,
    });
  }
  const dup = duplicateKey(doc.contents);
  if (dup) {
    const { line, col } = lines.linePos(dup.offset);
    throw new ManifestFileError(
      'MANIFEST_YAML_SYNTAX',
      where,
      `YAML syntax error: Map keys must be unique ("${dup.key}" again at line ${line}, column ${col})`,
    );
  }
  try {
    return doc.toJS({ maxAliasCount: 100 });
  } catch (e) {
    throw new ManifestFileError(
      'MANIFEST_YAML_SYNTAX',
      where,
      `YAML error: ${(e as Error).message}`,
      {
        cause: e,
      },
    );
  }
}

/** Documents without a kind are not Kubernetes objects (kustomization.yaml, values files). */
function addObject(
  sink: ParseSink,
  o: Json,
  file: string,
  doc: number,
  prefix: string,
  opts: ParseOptions,
): void {
  const kind = typeof o.kind === 'string' ? o.kind : '';
  const apiVersion = typeof o.apiVersion === 'string' ? o.apiVersion : '';
  const r = new ObjectReader(file, doc, kind, prefix);
  const guard = (read: () => void) => {
    try {
      read();
    } catch (e) {
      if (!(e instanceof ManifestError)) throw e;
      sink.refused(e, o, doc);
    }
  };
  if (kind === 'Service') {
    guard(() => {
      wantApiVersion(r, apiVersion, 'v1');
      sink.service({ ...parseService(r, o, opts), origin: { file, doc } });
    });
  } else if (kind === 'EndpointSlice') {
    guard(() => {
      wantApiVersion(r, apiVersion, 'discovery.k8s.io/v1');
      sink.slice({ ...parseEndpointSlice(r, o), origin: { file, doc } });
    });
  } else if (kind.endsWith('List') && apiVersion === 'v1' && prefix === '') {
    let items: unknown[] = [];
    guard(() => {
      items = r.list(o.items, 'items');
    });
    items.forEach((item, i) => {
      const path = `items[${i}]`;
      let m: Json | undefined;
      guard(() => {
        m = r.map(item, path) ?? r.wrongType(path, 'a mapping', item);
      });
      if (m) addObject(sink, m, file, doc, path, opts);
    });
  } else if (kind !== '') {
    sink.ignored(kind, doc);
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

/** One uniqueness claim an object makes: its name, each ClusterIP, each nodePort + protocol. */
export interface Claim {
  key: string;
  fail: (holder: string) => ManifestError;
}

type Obj = { origin?: { file: string; doc: number } };

/**
 * The claims the API server's uniqueness and allocators enforce, for one Service or slice.
 * A check makes them for every object and refuses one in thousands at most: a refusal's
 * error (and its message's "where") is built by its `fail`, only when called.
 */
export function objectClaims(
  o: Service | EndpointSlice,
  kind: 'Service' | 'EndpointSlice',
): Claim[] {
  const err = (code: ManifestErrorCode, field: string, reason: string) =>
    new ManifestError(
      code,
      { file: (o as Obj).origin?.file ?? '', object: `${kind} ${o.namespace}/${o.name}`, field },
      reason,
    );
  const claims: Claim[] = [
    {
      key: `${kind === 'Service' ? 'svc' : 'slice'} ${o.namespace}/${o.name}`,
      fail: (prev) =>
        err('MANIFEST_DUPLICATE_OBJECT', 'metadata.name', `already defined in ${prev}`),
    },
  ];
  if (kind === 'EndpointSlice') return claims;
  const s = o as Service;
  s.clusterIPs.forEach((ip, i) => {
    claims.push({
      key: `ip ${ip}`,
      fail: (prev) =>
        err(
          'MANIFEST_CONFLICT',
          s.clusterIPs.length > 1 ? `spec.clusterIPs[${i}]` : 'spec.clusterIP',
          `clusterIP ${ip} is already used by the Service in ${prev}`,
        ),
    });
  });
  s.ports.forEach((p, i) => {
    if (p.nodePort === 0) return;
    claims.push({
      key: `np ${p.nodePort}/${p.protocol}`,
      fail: (prev) =>
        err(
          'MANIFEST_CONFLICT',
          `spec.ports[${i}].nodePort`,
          `nodePort ${p.nodePort}/${p.protocol} is already used by the Service in ${prev}`,
        ),
    });
  });
  return claims;
}

/** "file document N", how a conflict names the object that holds a claim. */
export function originName(o: Obj): string {
  return o.origin ? `${o.origin.file} document ${o.origin.doc}` : '?';
}

/**
 * Checks across objects that the API server's uniqueness and allocators would enforce: one
 * object per name, one Service per ClusterIP, one Service per nodePort and protocol. Throws the
 * first conflict. Each claim's holder is kept as the object (named only in a refusal).
 */
export function checkState(state: ClusterState): void {
  const seen = new Map<string, Obj>();
  const check = (o: Service | EndpointSlice, kind: 'Service' | 'EndpointSlice') => {
    for (const c of objectClaims(o, kind)) {
      const prev = seen.get(c.key);
      if (prev !== undefined) throw c.fail(originName(prev));
      seen.set(c.key, o);
    }
  };
  for (const s of state.services) check(s, 'Service');
  for (const s of state.slices) check(s, 'EndpointSlice');
}

/** The first key that appears twice in one mapping (a Set per mapping: linear in the keys). */
function duplicateKey(node: unknown): { key: string; offset: number } | undefined {
  if (isMap(node)) {
    const seen = new Set<string>();
    for (const item of node.items) {
      if (!isPair(item)) continue;
      const k = item.key;
      const key = isScalar(k) ? String(k.value) : String(k);
      if (seen.has(key)) return { key, offset: (k as Node | null)?.range?.[0] ?? 0 };
      seen.add(key);
      const inner = duplicateKey(item.value);
      if (inner) return inner;
    }
  } else if (isSeq(node)) {
    for (const item of node.items) {
      const inner = duplicateKey(item);
      if (inner) return inner;
    }
  }
  return undefined;
}

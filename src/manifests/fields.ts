// Typed reads from a decoded YAML document, each one able to say exactly where a bad value is.
// The API server would reject these objects; we must too, with the same kind of message
// (file, object, field path, reason), because there is no API server in front of a manifests
// directory.
import { ManifestError, type ManifestErrorCode } from './errors.ts';

export type Json = Record<string, unknown>;

/** `a.b` / `a[1]` path building that copes with the empty root path. */
export function sub(path: string, key: string | number): string {
  if (typeof key === 'number') return `${path}[${key}]`;
  return path === '' ? key : `${path}.${key}`;
}

function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a mapping';
  return `${typeof v} ${JSON.stringify(v)}`;
}

/**
 * The reader for one object: knows its file, how to name it, and the path prefix of the object
 * inside its document ("items[3]." for List members).
 */
export class ObjectReader {
  object: string;
  constructor(
    readonly file: string,
    readonly doc: number,
    readonly kind: string,
    readonly prefix: string,
  ) {
    this.object =
      prefix === '' ? `${kind} in document ${doc}` : `${kind} in document ${doc} ${prefix}`;
  }

  /** Once metadata has been read, name the object the way kubectl does. */
  named(namespace: string, name: string): void {
    this.object = `${this.kind} ${namespace}/${name}`;
  }

  fail(code: ManifestErrorCode, field: string, reason: string): never {
    const full =
      this.prefix === '' ? field : field === '' ? this.prefix : `${this.prefix}.${field}`;
    throw new ManifestError(code, { file: this.file, object: this.object, field: full }, reason);
  }

  missing(field: string, why = ''): never {
    return this.fail('MANIFEST_MISSING_FIELD', field, `required field is missing${why}`);
  }

  wrongType(field: string, want: string, v: unknown): never {
    return this.fail('MANIFEST_WRONG_TYPE', field, `must be ${want}, got ${typeName(v)}`);
  }

  map(v: unknown, field: string): Json | undefined {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'object' || Array.isArray(v)) return this.wrongType(field, 'a mapping', v);
    return v as Json;
  }

  /** A list; with `max`, longer ones are refused as the apiserver's field.TooMany does. */
  list(v: unknown, field: string, max?: number): unknown[] {
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) return this.wrongType(field, 'a list', v);
    if (max !== undefined && v.length > max)
      this.fail(
        'MANIFEST_TOO_LONG',
        field,
        `Too many: ${v.length}: must have at most ${max} items`,
      );
    return v;
  }

  str(v: unknown, field: string): string | undefined {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'string') return this.wrongType(field, 'a string', v);
    return v;
  }

  reqStr(v: unknown, field: string): string {
    const s = this.str(v, field);
    if (s === undefined || s === '') return this.missing(field);
    return s;
  }

  int(v: unknown, field: string): number | undefined {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v))
      return this.wrongType(field, 'an integer', v);
    return v;
  }

  bool(v: unknown, field: string): boolean | undefined {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'boolean') return this.wrongType(field, 'true or false', v);
    return v;
  }

  /** A string→string mapping such as labels, annotations, selector. */
  strMap(v: unknown, field: string): Record<string, string> {
    const m = this.map(v, field) ?? {};
    const out: Record<string, string> = {};
    for (const [k, val] of Object.entries(m)) {
      const path = `${field}["${k}"]`;
      if (typeof val !== 'string') {
        // YAML reads `8080`, `true`, `1.0` as numbers and booleans; Kubernetes wants strings here.
        const hint = typeof val === 'number' || typeof val === 'boolean' ? ' (quote it)' : '';
        this.fail('MANIFEST_WRONG_TYPE', path, `must be a string, got ${typeName(val)}${hint}`);
      }
      out[k] = val;
    }
    return out;
  }

  /** One of a fixed set of strings, with a default when absent. */
  oneOf<T extends string>(
    v: unknown,
    field: string,
    allowed: readonly T[],
    dflt: T,
    code: ManifestErrorCode = 'MANIFEST_INVALID_VALUE',
  ): T {
    const s = this.str(v, field);
    if (s === undefined || s === '') return dflt;
    if (!(allowed as readonly string[]).includes(s)) {
      return this.fail(
        code,
        field,
        `unsupported value "${s}" (expected one of ${allowed.join(', ')})`,
      );
    }
    return s as T;
  }
}

export interface Meta {
  namespace: string;
  name: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

/**
 * The apiserver's limit on one object's annotations, keys and values together, in bytes
 * (apimachinery ValidateAnnotations, TotalAnnotationSizeLimitB = 256 KiB).
 */
export const ANNOTATIONS_MAX_BYTES = 256 * 1024;

/** metadata.{name,namespace,labels,annotations}; names the reader's object once known. */
export function readMeta(r: ObjectReader, o: Json): Meta {
  const md = r.map(o.metadata, 'metadata');
  if (!md) return r.missing('metadata.name');
  const name = r.reqStr(md.name, 'metadata.name');
  const namespace = r.str(md.namespace, 'metadata.namespace') || 'default';
  r.named(namespace, name);
  const annotations = r.strMap(md.annotations, 'metadata.annotations');
  let bytes = 0;
  for (const [k, v] of Object.entries(annotations))
    bytes += Buffer.byteLength(k) + Buffer.byteLength(v);
  if (bytes > ANNOTATIONS_MAX_BYTES) {
    r.fail(
      'MANIFEST_TOO_LONG',
      'metadata.annotations',
      `Too long: must have at most ${ANNOTATIONS_MAX_BYTES} bytes (has ${bytes}), as the API server refuses`,
    );
  }
  return { namespace, name, labels: r.strMap(md.labels, 'metadata.labels'), annotations };
}

// A manifests file or directory → ClusterState. A directory is read non-recursively, its
// .yaml/.yml/.json files in byte order of their names, so results do not depend on readdir order.
// loadManifests is all-or-nothing (the agent's start, the lab's renderers); loadManifestsPartial
// refuses object by object, as the API server does, for the agent's hot reload.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { ClusterState, EndpointSlice, Service } from '../model.ts';
import { ManifestError, ManifestFileError } from './errors.ts';
import {
  checkState,
  objectClaims,
  originName,
  type ParseOptions,
  parseDocuments,
  parseObjects,
} from './parse.ts';

const MANIFEST_FILE = /\.(ya?ml|json)$/i;

/**
 * All or nothing: the first refusal throws — the one a file-by-file read finds first (each
 * file parsed and checked as parseManifests does, then the checks across files). A valid
 * directory is checked once, as a whole; the files are checked one by one only to pick the
 * refusal to throw (a conflict inside an earlier file comes before a later file's error).
 * `onFile` sees each file's objects once the file parsed, before the next is read and before
 * the checks across files: what it is handed is not loaded until this returns.
 */
export function loadManifests(
  pathOrDir: string,
  opts: ParseOptions = {},
  onFile?: (one: ClusterState) => void,
): ClusterState {
  const state: ClusterState = { services: [], slices: [] };
  const files: ClusterState[] = [];
  try {
    for (const file of manifestFiles(pathOrDir)) {
      const one = parseObjects(readText(file), file, opts);
      files.push(one);
      onFile?.(one);
      state.services.push(...one.services);
      state.slices.push(...one.slices);
    }
    checkState(state);
  } catch (err) {
    for (const one of files) checkState(one);
    throw err;
  }
  return state;
}

/** The files loadManifests reads, in the order it reads them. */
export function manifestFiles(pathOrDir: string): string[] {
  let isDir: boolean;
  try {
    isDir = statSync(pathOrDir).isDirectory();
  } catch (e) {
    throw ioError(pathOrDir, e);
  }
  if (!isDir) return [pathOrDir];
  let names: string[];
  try {
    names = readdirSync(pathOrDir);
  } catch (e) {
    throw ioError(pathOrDir, e);
  }
  return names
    .filter((n) => MANIFEST_FILE.test(n))
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
    .map((n) => join(pathOrDir, n))
    .filter((p) => statSync(p).isFile());
}

function readText(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (e) {
    throw ioError(file, e);
  }
}

function ioError(file: string, e: unknown): ManifestError {
  const reason = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
  return new ManifestFileError(
    'MANIFEST_IO',
    { file, object: '', field: '' },
    `cannot read: ${reason}`,
    { cause: e },
  );
}

/** What a tolerant load found: the state to apply, the refusals, the ignored kinds. */
export interface PartialLoad {
  /** the valid objects, and for each refused one its previous good version (if any) */
  state: ClusterState;
  /** one per refused object (or unreadable file), each naming file, object and field */
  errors: ManifestError[];
  /** one line per file that holds kinds kubetun does not read */
  ignored: string[];
}

type Kind = 'Service' | 'EndpointSlice';
type AnyObj = Service | EndpointSlice;

const keyOf = (kind: Kind, o: { namespace: string; name: string }) =>
  `${kind} ${o.namespace}/${o.name}`;

/**
 * Loads like the API server admits: object by object. A refused object keeps its previous good
 * version (from `previous`) while every other object moves on; a file that cannot be read or
 * parsed as YAML keeps all its previous objects. Only an unreadable directory throws.
 */
export function loadManifestsPartial(
  pathOrDir: string,
  opts: ParseOptions = {},
  previous: ClusterState = { services: [], slices: [] },
): PartialLoad {
  const out: PartialLoad = { state: { services: [], slices: [] }, errors: [], ignored: [] };
  const keepKeys = new Set<string>(); // refused objects whose identity is known
  const keepOrigins = new Set<string>(); // "file" or "file#doc" whose identity is not
  const loaded: [Kind, AnyObj][] = [];
  for (const file of manifestFiles(pathOrDir)) {
    const one = loadFile(file, opts);
    if ('error' in one) {
      out.errors.push(one.error);
      keepOrigins.add(file);
      continue;
    }
    loaded.push(...one.objects);
    out.errors.push(...one.refused.map((r) => r.err));
    for (const r of one.refused) {
      if (r.key) keepKeys.add(r.key);
      else keepOrigins.add(`${file}#${r.doc}`);
    }
    if (one.ignored.size > 0) {
      const kinds = [...one.ignored].join(', ');
      out.ignored.push(`${file}: ignored kind ${kinds} (kubetun reads Service and EndpointSlice)`);
    }
  }
  const defined = new Set(loaded.map(([k, o]) => keyOf(k, o)));
  const prev = previousObjects(previous);
  for (const [k, o] of prev) {
    const key = keyOf(k, o);
    if (defined.has(key)) continue;
    const f = o.origin?.file ?? '';
    if (keepKeys.has(key) || keepOrigins.has(f) || keepOrigins.has(`${f}#${o.origin?.doc}`)) {
      loaded.push([k, o]);
      defined.add(key);
    }
  }
  const checked = claimAll(loaded, new Map(prev.map(([k, o]) => [keyOf(k, o), o])));
  out.errors.push(...checked.errors);
  for (const [k, o] of checked.kept) {
    if (k === 'Service') out.state.services.push(o as Service);
    else out.state.slices.push(o as EndpointSlice);
  }
  return out;
}

function previousObjects(s: ClusterState): [Kind, AnyObj][] {
  return [
    ...s.services.map((o) => ['Service', o] as [Kind, AnyObj]),
    ...s.slices.map((o) => ['EndpointSlice', o] as [Kind, AnyObj]),
  ];
}

type FileLoad =
  | { error: ManifestError }
  | {
      objects: [Kind, AnyObj][];
      refused: { err: ManifestError; key?: string; doc: number }[];
      ignored: Set<string>;
    };

function loadFile(file: string, opts: ParseOptions): FileLoad {
  const objects: [Kind, AnyObj][] = [];
  const refused: { err: ManifestError; key?: string; doc: number }[] = [];
  const ignored = new Set<string>();
  try {
    parseDocuments(readText(file), file, opts, {
      service: (s) => objects.push(['Service', s]),
      slice: (s) => objects.push(['EndpointSlice', s]),
      ignored: (kind) => ignored.add(kind),
      refused: (err, raw, doc) => refused.push({ err, key: rawKey(raw), doc }),
    });
  } catch (e) {
    if (e instanceof ManifestError) return { error: e };
    throw e;
  }
  return { objects, refused, ignored };
}

/** "Kind namespace/name" of an object as decoded, when it says that much. */
function rawKey(raw: unknown): string | undefined {
  if (typeof raw !== 'object' || raw === null) return undefined;
  const o = raw as { kind?: unknown; metadata?: { name?: unknown; namespace?: unknown } };
  if (o.kind !== 'Service' && o.kind !== 'EndpointSlice') return undefined;
  const name = o.metadata?.name;
  if (typeof name !== 'string' || name === '') return undefined;
  const ns =
    typeof o.metadata?.namespace === 'string' && o.metadata.namespace
      ? o.metadata.namespace
      : 'default';
  return `${o.kind} ${ns}/${name}`;
}

/**
 * The cross-object claims (names, ClusterIPs, nodePorts), tolerant: objects unchanged since the
 * previous load claim first, so a new or edited object that collides is the one refused (and
 * falls back to its previous version when that one still fits), as the API server would refuse
 * the write that comes second.
 */
function claimAll(
  objs: [Kind, AnyObj][],
  prev: Map<string, AnyObj>,
): { kept: [Kind, AnyObj][]; errors: ManifestError[] } {
  const same = (k: Kind, o: AnyObj) => {
    const p = prev.get(keyOf(k, o));
    return p !== undefined && JSON.stringify(p) === JSON.stringify(o);
  };
  const order = [...objs.filter(([k, o]) => same(k, o)), ...objs.filter(([k, o]) => !same(k, o))];
  const seen = new Map<string, AnyObj>(); // each claim's holder, named only in a refusal
  const kept: [Kind, AnyObj][] = [];
  const errors: ManifestError[] = [];
  const tryClaim = (k: Kind, o: AnyObj): ManifestError | undefined => {
    const claims = objectClaims(o, k);
    for (const c of claims) {
      const holder = seen.get(c.key);
      if (holder !== undefined) return c.fail(originName(holder));
    }
    for (const c of claims) seen.set(c.key, o);
    return undefined;
  };
  for (const [k, o] of order) {
    const err = tryClaim(k, o);
    if (!err) {
      kept.push([k, o]);
      continue;
    }
    errors.push(err);
    // the previous version, if it still fits (a duplicate name never does: it is the same name)
    const p = prev.get(keyOf(k, o));
    if (p && p !== o && !tryClaim(k, p)) kept.push([k, p]);
  }
  return { kept, errors };
}

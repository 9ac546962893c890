// The manifests directory's last good state and what one reload changes in it: the part of
// ManifestDirSource that reads, parses, validates and diffs, with no timers and no sink, so it
// runs the same in the agent's main thread and in the manifest worker (manifest-worker.ts),
// where it keeps the YAML parser and kube-apiserver's checks off the packet loop.
//
// A reload refuses object by object (loadManifestsPartial): a refused object keeps its last good
// version, the rest moves on. Before the first complete read, a file that could not be read at
// all is like an informer that has not synced: nothing is applied. A `strict` reload (the
// agent's start) is all or nothing instead (loadManifests): the first refusal, nothing applied.
//
// The state here is each object's JSON, not the object (issue 18: about a quarter of the heap,
// and the worker that computes a reload exits): the diff compares an object's JSON with its last
// good one, so an untouched object is no event at all; the previous objects a tolerant load
// falls back to are parsed back from it when a reload needs them, and the manifest worker hands
// its changes to the main thread as that JSON (JsonChange), whose side keeps the objects and
// makes this state from them for the next worker (manifest-worker.ts). An object's JSON parses
// back to an equal object that prints as the same JSON again: the model is plain data (strings,
// numbers, booleans, arrays, objects; no undefined, NaN or -0 —
// test/control/source-dir-worker.test.ts).
//
// The strict first load from an empty state can stream (reload's `stream`): each file's objects
// go out as JSON changes once the file parsed, while the next one is read, so their owner feeds
// its trackers in parallel with the parse (issue 18: the agent's 10k-Service start). Nothing of
// it is in force before the reload says `applied`: a refusal later in the directory ends the
// reload with `fatal`, and the owner of a strict start gives up (the agent does not start).
import { ManifestFileError } from '../manifests/errors.ts';
import { loadManifests, loadManifestsPartial } from '../manifests/load.ts';
import type { ParseOptions } from '../manifests/parse.ts';
import type { ClusterState, EndpointSlice, Service } from '../model.ts';
import { namespacedName } from './tracker.ts';

/** One object's change: its namespaced name and its new version (null: it went away). */
export type Change<T> = [name: string, cur: T | null];

/** The last good state: each object's JSON by namespaced name (DirState, the manifest worker). */
export interface CompactState {
  services: Map<string, string>;
  slices: Map<string, string>;
  /** a complete read has been applied */
  loaded: boolean;
}

/** The new JSON of each change, in the order of DirDelta's services and slices (null: gone). */
export interface DeltaJson {
  services: (string | null)[];
  slices: (string | null)[];
}

export interface DirDelta {
  services: Change<Service>[];
  slices: Change<EndpointSlice>[];
  /** one per refused object or unreadable file; the whole directory unreadable: one, fatal */
  errors: Error[];
  fatal: boolean;
  /** one line per file that holds kinds kubetun does not read */
  ignored: string[];
  /** the load was applied: the changes above are the state in force from now on */
  applied: boolean;
  /** objects in force after this reload */
  counts: { services: number; slices: number };
  /** the JSON of each change above (the manifest worker hands its changes over as this) */
  json: DeltaJson;
}

export class DirState {
  readonly state: CompactState;

  constructor(
    private readonly dir: string,
    private readonly parse: ParseOptions | undefined,
    /** all-or-nothing replacement for the tolerant load (tests) */
    private readonly load?: (dir: string) => ClusterState,
    state?: CompactState,
  ) {
    this.state = state ?? { services: new Map(), slices: new Map(), loaded: false };
  }

  /**
   * `strict`: all or nothing (loadManifests), the first refusal fatal — the agent's start.
   * `stream`: a strict load from an empty state hands each file's objects to it as they parse
   * (see the header) and the delta then lists none of them; any other load ignores it.
   */
  reload(strict = false, stream?: Stream): DirDelta {
    const st = this.state;
    const delta: DirDelta = {
      services: [],
      slices: [],
      errors: [],
      fatal: false,
      ignored: [],
      applied: false,
      counts: { services: st.services.size, slices: st.slices.size },
      json: { services: [], slices: [] },
    };
    if (stream && strict && !this.load && st.services.size + st.slices.size === 0)
      return this.streamFirst(delta, stream);
    let state: ClusterState;
    try {
      if (this.load) state = this.load(this.dir);
      else if (strict) state = loadManifests(this.dir, this.parse);
      else {
        const previous = {
          services: parsed<Service>(st.services),
          slices: parsed<EndpointSlice>(st.slices),
        };
        const r = loadManifestsPartial(this.dir, this.parse, previous);
        state = r.state;
        delta.errors = r.errors;
        delta.ignored = r.ignored;
      }
    } catch (err) {
      delta.errors = [err instanceof Error ? err : new Error(String(err))];
      delta.fatal = true;
      return delta;
    }
    if (!st.loaded && delta.errors.some(unreadable)) return delta;
    st.loaded = true;
    delta.applied = true;
    st.services = diff(st.services, state.services, delta.services, delta.json.services);
    st.slices = diff(st.slices, state.slices, delta.slices, delta.json.slices);
    delta.counts = { services: st.services.size, slices: st.slices.size };
    return delta;
  }

  /** The strict load from an empty state, each file's objects streamed as it parses. */
  private streamFirst(delta: DirDelta, stream: Stream): DirDelta {
    const services = new Map<string, string>();
    const slices = new Map<string, string>();
    try {
      loadManifests(this.dir, this.parse, (one) =>
        stream(asJson(one.services, services), asJson(one.slices, slices)),
      );
    } catch (err) {
      delta.errors = [err instanceof Error ? err : new Error(String(err))];
      delta.fatal = true;
      return delta;
    }
    const st = this.state;
    st.loaded = true;
    st.services = services;
    st.slices = slices;
    delta.applied = true;
    delta.counts = { services: services.size, slices: slices.size };
    return delta;
  }
}

/** A streamed file's part of a strict load: its Services' and slices' changes, as JSON. */
export type Stream = (services: JsonChange[], slices: JsonChange[]) => void;

/** New objects as changes, each also set in `state` (no name repeats: the load checks that). */
function asJson<T extends { namespace: string; name: string }>(
  objs: T[],
  state: Map<string, string>,
): JsonChange[] {
  const out: JsonChange[] = [];
  for (const o of objs) {
    const name = namespacedName(o);
    const json = JSON.stringify(o);
    state.set(name, json);
    out.push([name, json]);
  }
  return out;
}

/**
 * One change as JSON: the object's namespaced name and its JSON (null: it went away) — the
 * compact state's entry, and how the manifest worker hands a change over (a string crosses
 * the thread boundary as a copy of its bytes; the object itself would be serialized and
 * rebuilt field by field on both sides, about 2x the time of the JSON.parse it replaces).
 */
export type JsonChange = [name: string, json: string | null];

/** The changes as objects: each one's JSON parsed (the JSON is the object: see the header). */
export function parseChanges<T>(changes: readonly JsonChange[]): Change<T>[] {
  return changes.map(([name, json]) => [name, json === null ? null : (JSON.parse(json) as T)]);
}

function parsed<T>(m: Map<string, string>): T[] {
  return [...m.values()].map((j) => JSON.parse(j) as T);
}

/** The file as a whole could not be read or parsed (as opposed to one object refused). */
function unreadable(e: Error): boolean {
  return e instanceof ManifestFileError;
}

/** The new state by name; every name whose JSON differs (or that went away) into `out`. */
function diff<T extends { namespace: string; name: string }>(
  before: Map<string, string>,
  objs: T[],
  out: Change<T>[],
  outJson: (string | null)[],
): Map<string, string> {
  const after = new Map<string, string>();
  for (const o of objs) {
    const name = namespacedName(o);
    const json = JSON.stringify(o);
    after.set(name, json);
    if (before.get(name) === json) continue;
    out.push([name, o]);
    outJson.push(json);
  }
  for (const name of before.keys()) {
    if (after.has(name)) continue;
    out.push([name, null]);
    outJson.push(null);
  }
  return after;
}

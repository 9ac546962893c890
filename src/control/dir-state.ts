// The manifests directory's last good state and what one reload changes in it: the part of
// ManifestDirSource that reads, parses, validates and diffs, with no timers and no sink, so it
// runs the same in the agent's main thread and in the manifest worker (manifest-worker.ts),
// where it keeps the YAML parser and kube-apiserver's checks off the packet loop.
//
// A reload refuses object by object (loadManifestsPartial): a refused object keeps its last good
// version, the rest moves on. Before the first complete read, a file that could not be read at
// all is like an informer that has not synced: nothing is applied. The diff compares each
// object's JSON with its last good version, so an untouched object is no event at all.
import { ManifestFileError } from '../manifests/errors.ts';
import { loadManifestsPartial } from '../manifests/load.ts';
import type { ParseOptions } from '../manifests/parse.ts';
import type { ClusterState, EndpointSlice, Service } from '../model.ts';
import { namespacedName } from './tracker.ts';

/** One object's change: its namespaced name and its new version (null: it went away). */
export type Change<T> = [name: string, cur: T | null];

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
}

export class DirState {
  services = new Map<string, Service>();
  slices = new Map<string, EndpointSlice>();
  loaded = false;

  constructor(
    private readonly dir: string,
    private readonly parse: ParseOptions | undefined,
    /** all-or-nothing replacement for the tolerant load (tests) */
    private readonly load?: (dir: string) => ClusterState,
  ) {}

  reload(): DirDelta {
    const delta: DirDelta = {
      services: [],
      slices: [],
      errors: [],
      fatal: false,
      ignored: [],
      applied: false,
      counts: { services: this.services.size, slices: this.slices.size },
    };
    let state: ClusterState;
    try {
      if (this.load) state = this.load(this.dir);
      else {
        const previous = {
          services: [...this.services.values()],
          slices: [...this.slices.values()],
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
    if (!this.loaded && delta.errors.some(unreadable)) return delta;
    this.loaded = true;
    delta.applied = true;
    this.services = diff(this.services, state.services, delta.services);
    this.slices = diff(this.slices, state.slices, delta.slices);
    delta.counts = { services: this.services.size, slices: this.slices.size };
    return delta;
  }
}

/** The file as a whole could not be read or parsed (as opposed to one object refused). */
function unreadable(e: Error): boolean {
  return e instanceof ManifestFileError;
}

/** The new objects by name; every name whose JSON differs (or that went away) into `out`. */
function diff<T extends { namespace: string; name: string }>(
  before: Map<string, T>,
  objs: T[],
  out: Change<T>[],
): Map<string, T> {
  const after = new Map(objs.map((o) => [namespacedName(o), o]));
  for (const [name, cur] of after) {
    const prev = before.get(name);
    if (prev !== undefined && JSON.stringify(prev) === JSON.stringify(cur)) continue;
    out.push([name, cur]);
  }
  for (const name of before.keys()) if (!after.has(name)) out.push([name, null]);
  return after;
}

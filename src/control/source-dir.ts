// The manifests-directory source: a directory of Service/EndpointSlice YAML, reloaded when it
// changes, fed to the change trackers object by object.
//
// fs.watch is fast but not reliable everywhere (network and overlay filesystems, editors that
// replace the directory, inotify limits), so a slow poll of the files' size and mtime backs it
// up; bursts of events (an editor writes a temp file, renames, chmods) are debounced into one
// reload. A reload refuses object by object, as the API server would: an invalid object keeps
// its last good version (a file that is not valid YAML keeps all of its objects) while the rest
// of the directory moves on, and each refusal (file, object, field) goes to onError. Kinds
// kubetun does not read are reported once per file through onIgnored, not as errors.

import { type FSWatcher, statSync, watch } from 'node:fs';
import { loadManifestsPartial, manifestFiles } from '../manifests/load.ts';
import { ManifestFileError } from '../manifests/errors.ts';
import type { ParseOptions } from '../manifests/parse.ts';
import type { ClusterState, EndpointSlice, Service } from '../model.ts';
import { type Clock, systemClock, type TimerHandle } from './clock.ts';
import { namespacedName } from './tracker.ts';

/** Where updates go: a ChangeTracker satisfies this. */
export interface UpdateSink {
  services: { update(prev: Service | null, cur: Service | null): boolean };
  endpointSlices: { update(prev: EndpointSlice | null, cur: EndpointSlice | null): boolean };
}

export interface DirSourceOptions {
  dir: string;
  sink: UpdateSink;
  /** a reload left changes pending: ask for a sync (runner.run()) */
  onChange?: () => void;
  /** the first good load is in (runner.setInitialized for both sources) */
  onSynced?: () => void;
  /** an object (or file) was refused; its previous version stays. ManifestError: file, object, field */
  onError?: (err: Error) => void;
  /** a file holds kinds kubetun does not read: one line, reported once per file and kinds */
  onIgnored?: (line: string) => void;
  /** the agent's networks, for the API server's address rules (service CIDR, pod network) */
  parse?: ParseOptions;
  /** a reload succeeded (for logs) */
  onReload?: (info: { services: number; slices: number; changed: boolean }) => void;
  load?: (dir: string) => ClusterState;
  clock?: Clock;
  /** events within this window make one reload */
  debounceMs?: number;
  /** poll period for the fallback; 0 disables polling */
  pollIntervalMs?: number;
  /** use fs.watch (default true) */
  watch?: boolean;
}

export class ManifestDirSource {
  /** the objects in force: each one's last version that loaded without error */
  services = new Map<string, Service>();
  slices = new Map<string, EndpointSlice>();
  /** the refusals of the last reload (one message per line), undefined when there were none */
  lastError: Error | undefined;
  lastErrors: Error[] = [];
  private readonly reported = new Set<string>();
  loaded = false;
  reloads = 0;

  private readonly o: DirSourceOptions;
  private readonly clock: Clock;
  private readonly load: ((dir: string) => ClusterState) | undefined;
  private watcher: FSWatcher | undefined;
  private debounce: TimerHandle | undefined;
  private poll: TimerHandle | undefined;
  private signature = '';
  private stopped = false;

  constructor(opts: DirSourceOptions) {
    this.o = opts;
    this.clock = opts.clock ?? systemClock;
    this.load = opts.load;
  }

  /** Loads once now, then watches. Returns whether the first load succeeded. */
  start(): boolean {
    this.stopped = false;
    const ok = this.reload();
    if (this.o.watch !== false) this.startWatch();
    this.schedulePoll();
    return ok;
  }

  stop(): void {
    this.stopped = true;
    this.watcher?.close();
    this.watcher = undefined;
    if (this.debounce !== undefined) this.clock.clearTimeout(this.debounce);
    if (this.poll !== undefined) this.clock.clearTimeout(this.poll);
    this.debounce = undefined;
    this.poll = undefined;
  }

  /**
   * Loads the directory and feeds the differences to the sink. False (and onError per refusal)
   * when anything was refused; the valid objects are applied either way.
   */
  reload(): boolean {
    this.signature = this.currentSignature();
    const got = this.loadState();
    if ('fatal' in got) {
      this.setErrors([got.fatal]);
      return false;
    }
    const { state, errors } = got;
    this.setErrors(errors);
    // Before the first complete read, a file that could not be read at all is like an informer
    // that has not synced: applying the rest would program a state missing its objects.
    if (!this.loaded && errors.some(unreadable)) return false;
    this.reloads++;
    const changed = this.apply(state);
    this.o.onReload?.({ services: this.services.size, slices: this.slices.size, changed });
    if (!this.loaded) {
      this.loaded = true;
      this.o.onSynced?.();
    }
    if (changed) this.o.onChange?.();
    return errors.length === 0;
  }

  /** A custom `load` is all-or-nothing; the default refuses object by object. */
  private loadState(): { fatal: Error } | { state: ClusterState; errors: Error[] } {
    try {
      if (this.load) return { state: this.load(this.o.dir), errors: [] };
      const previous = { services: [...this.services.values()], slices: [...this.slices.values()] };
      const r = loadManifestsPartial(this.o.dir, this.o.parse, previous);
      for (const line of r.ignored) {
        if (this.reported.has(line)) continue;
        this.reported.add(line);
        this.o.onIgnored?.(line);
      }
      return { state: r.state, errors: r.errors };
    } catch (err) {
      return { fatal: err instanceof Error ? err : new Error(String(err)) };
    }
  }

  private setErrors(errors: Error[]): void {
    this.lastErrors = errors;
    this.lastError =
      errors.length === 0
        ? undefined
        : errors.length === 1
          ? errors[0]
          : new Error(errors.map((e) => e.message).join('\n'));
    for (const e of errors) this.o.onError?.(e);
  }

  private apply(state: ClusterState): boolean {
    const svcs = byName(state.services);
    const slices = byName(state.slices);
    let pending = false;
    pending = diff(this.services, svcs, (p, c) => this.o.sink.services.update(p, c)) || pending;
    pending =
      diff(this.slices, slices, (p, c) => this.o.sink.endpointSlices.update(p, c)) || pending;
    this.services = svcs;
    this.slices = slices;
    return pending;
  }

  /** Debounced reload request (fs.watch events, tests). */
  requestReload(): void {
    if (this.stopped) return;
    if (this.debounce !== undefined) this.clock.clearTimeout(this.debounce);
    this.debounce = this.clock.setTimeout(() => {
      this.debounce = undefined;
      this.reload();
    }, this.o.debounceMs ?? 100);
  }

  private startWatch(): void {
    try {
      this.watcher = watch(this.o.dir, { persistent: false }, () => this.requestReload());
      this.watcher.on('error', () => {
        // The directory went away or was replaced; the poll notices and re-arms the watch.
        this.watcher?.close();
        this.watcher = undefined;
      });
    } catch {
      this.watcher = undefined;
    }
  }

  private schedulePoll(): void {
    const every = this.o.pollIntervalMs ?? 2000;
    if (this.stopped || every <= 0) return;
    this.poll = this.clock.setTimeout(() => {
      this.poll = undefined;
      if (this.o.watch !== false && !this.watcher) this.startWatch();
      if (this.currentSignature() !== this.signature) this.requestReload();
      this.schedulePoll();
    }, every);
  }

  /** Names, sizes and mtimes of the manifest files: changes when any file does. */
  private currentSignature(): string {
    try {
      return manifestFiles(this.o.dir)
        .map((f) => {
          const st = statSync(f);
          return `${f}\0${st.size}\0${st.mtimeMs}`;
        })
        .join('\n');
    } catch (err) {
      return `error ${(err as Error).message}`;
    }
  }
}

/** The file as a whole could not be read or parsed (as opposed to one object refused). */
function unreadable(e: Error): boolean {
  return e instanceof ManifestFileError;
}

function byName<T extends { namespace: string; name: string }>(objs: T[]): Map<string, T> {
  return new Map(objs.map((o) => [namespacedName(o), o]));
}

/** Feeds add/update/delete for every name that differs; returns whether changes are pending. */
function diff<T>(
  before: Map<string, T>,
  after: Map<string, T>,
  update: (prev: T | null, cur: T | null) => boolean,
): boolean {
  let pending = false;
  for (const [name, cur] of after) {
    const prev = before.get(name) ?? null;
    // An untouched object is no event at all, as with an informer: it must not count in the
    // *_changes_total metrics on every reload.
    if (prev !== null && JSON.stringify(prev) === JSON.stringify(cur)) continue;
    pending = update(prev, cur) || pending;
  }
  for (const [name, prev] of before) if (!after.has(name)) pending = update(prev, null) || pending;
  return pending;
}

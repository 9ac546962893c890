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
//
// The reading, parsing, validation and diff live in DirState (dir-state.ts). With `worker` (the
// agent, whose packet loop shares this thread) DirState runs in the manifest worker and only
// its changes come back, a slice at a time with the event loop turning between slices
// (manifest-worker.ts); without, it runs here, synchronously (tests, the lab's tools).

import { type FSWatcher, statSync, watch } from 'node:fs';
import { manifestFiles } from '../manifests/load.ts';
import type { ParseOptions } from '../manifests/parse.ts';
import type { ClusterState, EndpointSlice, Service } from '../model.ts';
import { type Clock, systemClock, type TimerHandle } from './clock.ts';
import { type Change, DirState } from './dir-state.ts';
import { ManifestWorker, type WorkerOutcome } from './manifest-worker.ts';

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
  /**
   * a slice of the worker's changes reached the sink before its reload finished (the strict
   * first load streams: the Proxier's prefill programs what has arrived while the rest parses)
   */
  onSlice?: () => void;
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
  /**
   * read, parse and validate in the manifest worker (the agent: the packet loop shares this
   * thread); reload() then returns a Promise. Ignored with a custom `load`.
   */
  worker?: boolean;
  /**
   * the first load is all or nothing (loadManifests): a refusal applies nothing and is the
   * load's one error (the agent's start: a bad manifest stops it before it touches the node)
   */
  strictStart?: boolean;
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
  private readonly state: DirState;
  private readonly worker: ManifestWorker | undefined;
  /** the sink has changes from this reload's slices that no onChange announced yet */
  private pending = false;
  private running: Promise<boolean> | undefined;
  private next: Promise<boolean> | undefined;
  private watcher: FSWatcher | undefined;
  private debounce: TimerHandle | undefined;
  private poll: TimerHandle | undefined;
  private signature = '';
  private stopped = false;

  constructor(opts: DirSourceOptions) {
    this.o = opts;
    this.clock = opts.clock ?? systemClock;
    this.state = new DirState(opts.dir, opts.parse, opts.load);
    if (opts.worker && !opts.load) this.worker = new ManifestWorker(opts.dir, opts.parse);
  }

  /** Loads once now, then watches. Returns whether the first load succeeded. */
  start(): boolean | Promise<boolean> {
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
    void this.worker?.stop();
  }

  /**
   * Loads the directory and feeds the differences to the sink. False (and onError per refusal)
   * when anything was refused; the valid objects are applied either way. With `worker`, a
   * Promise: the work runs in the manifest worker and the changes arrive in slices.
   */
  reload(): boolean | Promise<boolean> {
    this.signature = this.currentSignature();
    if (this.worker) return this.reloadInWorker(this.worker);
    const d = this.state.reload(this.strictNow());
    this.applyChanges(d.services, d.slices);
    return this.finish(d);
  }

  private reloadInWorker(w: ManifestWorker): Promise<boolean> {
    // The reload running read the files before this request: one more runs after it (however
    // many requests came meanwhile), and its outcome is the answer.
    if (this.running) {
      this.next ??= this.running.then(() => {
        this.next = undefined;
        return this.stopped ? false : this.reload();
      });
      return this.next;
    }
    const onChunk = (svcs: Change<Service>[], slices: Change<EndpointSlice>[]) => {
      if (this.stopped) return;
      this.applyChanges(svcs, slices);
      if (this.pending) this.o.onSlice?.();
    };
    const run = w.reload(onChunk, this.strictNow()).then((d) => {
      this.running = undefined;
      return this.finish(d);
    });
    this.running = run;
    return run;
  }

  private strictNow(): boolean {
    return this.o.strictStart === true && !this.loaded;
  }

  private applyChanges(svcs: Change<Service>[], slices: Change<EndpointSlice>[]): void {
    const sink = this.o.sink;
    for (const c of svcs)
      this.pending = feed(this.services, c, (p, v) => sink.services.update(p, v)) || this.pending;
    for (const c of slices)
      this.pending =
        feed(this.slices, c, (p, v) => sink.endpointSlices.update(p, v)) || this.pending;
  }

  /** A reload's outcome, once its changes are in: errors, ignored kinds, the callbacks. */
  private finish(d: WorkerOutcome): boolean {
    for (const line of d.ignored) {
      if (this.reported.has(line)) continue;
      this.reported.add(line);
      this.o.onIgnored?.(line);
    }
    this.setErrors(d.errors);
    if (!d.applied) return false;
    this.reloads++;
    const changed = this.pending;
    this.pending = false;
    this.o.onReload?.({ services: this.services.size, slices: this.slices.size, changed });
    if (!this.loaded) {
      this.loaded = true;
      this.o.onSynced?.();
    }
    if (changed) this.o.onChange?.();
    return d.errors.length === 0;
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

/** One change into `objs` and the sink; returns whether the sink has changes pending. */
function feed<T>(
  objs: Map<string, T>,
  [name, cur]: Change<T>,
  update: (prev: T | null, cur: T | null) => boolean,
): boolean {
  const prev = objs.get(name) ?? null;
  if (cur === null) objs.delete(name);
  else objs.set(name, cur);
  return update(prev, cur);
}

// The main thread's half of the manifest worker (manifest-worker-main.ts runs the other half):
// ManifestDirSource hands it a reload, gets the changes back in slices — the worker posts them
// as they are ready, they wait in a queue here, and one is applied per turn of the event loop
// (TUN batches go between two) — and the reload's outcome last. The parser, the apiserver's
// checks and the diff never run here. A strict first load's slices come while the worker still
// parses (dir-state.ts: streamed), so on two cores the trackers fill in parallel with the parse;
// they are not the state in force until the outcome says `applied` (a refused strict start
// leaves them there, and its owner — the agent's start — gives up).
//
// A worker is ended once its reload is in, unless the directory is small (WARM_MAX_OBJECTS):
// then it stays for WARM_MS for the next reload, and is ended when none came. Between reloads
// no second heap holds a copy of a large directory (issue 18: an agent at 10k Services kept
// ~100 MiB in an idle worker); a small one is cheap to keep (~18 MiB for the lab's view), and a
// fresh worker is not cheap to start: booting the bundle and a first, unoptimised parse are
// ~250 ms of CPU for the lab's 37 KB view, a warm worker's reload ~50 ms. At nice 10 on a node
// at load 8-9 a cold reload reached the maps 0.9-2.1 s after the view changed, the warm ones
// of the same rollout 0.1-1.3 s (the runner's 1 s minimum sync period included) — the time a
// terminating endpoint still takes new connections (the soak's churn, issue 18).
// The last good state lives here too, as the objects every slice applied made (the same
// objects the trackers hold), and a new worker gets it as each object's JSON (CompactState),
// made from them in steps before it boots: ~11 MiB of JSON strings at 10k Services are not
// kept between reloads (issue 18's RSS), for ~70 ms of CPU, in steps, at each cold reload. An
// object's JSON parses back to an equal object and prints again as the same text (dir-state.ts),
// so the new worker diffs against exactly what the last one handed over. A worker that dies
// fails its reload with one error, and the slices it had delivered are in that state, so the
// next reload starts from the truth. A warm worker's own state is that same state: it computed
// it, and every slice of it was applied here before its reload finished.
//
// The worker runs the bundle's entry or, from the sources, boots through tsx's CommonJS require
// hook (workers do not inherit tsx's ESM hooks on Node 20): src/runtime.ts.
import { Worker } from 'node:worker_threads';
import { workerSource } from '../runtime.ts';
import { ManifestError, ManifestFileError } from '../manifests/errors.ts';
import type { ParseOptions } from '../manifests/parse.ts';
import type { EndpointSlice, Service } from '../model.ts';
import { type Change, type CompactState, type DirDelta, parseChanges } from './dir-state.ts';
import { CHECKOUT_STEP, inSteps } from './turns.ts';
import type { WireError, WorkerData, WorkerReply, WorkerRequest } from './manifest-worker-main.ts';

/** A reload's outcome once every slice has been applied (the changes went to onChunk). */
export type WorkerOutcome = Omit<DirDelta, 'services' | 'slices' | 'json'>;

/** A directory of at most this many objects keeps its worker between reloads. */
export const WARM_MAX_OBJECTS = 2000;
/** How long a kept worker waits for the next reload before it is ended. */
export const WARM_MS = 10_000;

export class ManifestWorker {
  private worker: Worker | undefined;
  /** the kept worker's end, if no reload comes first */
  private idle: ReturnType<typeof setTimeout> | undefined;
  /** the last good state: what every slice applied so far made of it (see the header) */
  readonly state: ObjectState = { services: new Map(), slices: new Map(), loaded: false };
  /** stop() calls so far: a reload whose worker was still booting when one came gives up */
  private stops = 0;
  /** worker threads started so far (logs, tests) */
  boots = 0;

  constructor(
    private readonly dir: string,
    private readonly parse: ParseOptions | undefined,
    private readonly warm = { maxObjects: WARM_MAX_OBJECTS, ms: WARM_MS },
  ) {}

  /** A worker is kept, waiting for the next reload. */
  get warmNow(): boolean {
    return this.idle !== undefined;
  }

  /**
   * One reload; onChunk gets each slice of changes, in order, between two event-loop turns.
   * `strict`: all or nothing, the first refusal fatal (the agent's first load).
   */
  async reload(
    onChunk: (services: Change<Service>[], slices: Change<EndpointSlice>[]) => void,
    strict = false,
  ): Promise<WorkerOutcome> {
    const stops = this.stops;
    const w = this.takeWarm() ?? (await this.boot());
    if (stops !== this.stops) {
      this.end(w);
      return this.failure('stopped while it booted');
    }
    return new Promise<WorkerOutcome>((resolve) => {
      // the worker's replies not applied yet, in order; one applied per turn (`pump`)
      const queue: WorkerReply[] = [];
      let pumping = false;
      let settled = false;
      const finish = (o: WorkerOutcome) => {
        settled = true;
        queue.length = 0;
        w.off('message', onMessage);
        w.off('error', onError);
        w.off('exit', onExit);
        if (o.applied && !o.fatal && this.small()) this.keep(w);
        else this.end(w);
        resolve(o);
      };
      const pump = () => {
        const m = queue.shift();
        if (settled || m === undefined) {
          pumping = false;
          return;
        }
        if (m.type === 'done') {
          if (m.applied) this.state.loaded = true;
          finish({ ...m, errors: m.errors.map(fromWire) });
          return;
        }
        const svcs = parseChanges<Service>(m.services);
        const slices = parseChanges<EndpointSlice>(m.slices);
        applyObjects(this.state.services, svcs);
        applyObjects(this.state.slices, slices);
        onChunk(svcs, slices);
        setImmediate(pump);
      };
      const onMessage = (m: WorkerReply) => {
        queue.push(m);
        if (pumping) return;
        pumping = true;
        setImmediate(pump);
      };
      const failed = (why: string) => finish(this.failure(why));
      const onError = (err: Error) => failed(`failed: ${err.message}`);
      const onExit = (code: number) => failed(`exited (${code})`);
      w.on('message', onMessage);
      w.on('error', onError);
      w.on('exit', onExit);
      w.postMessage({ type: 'load', strict } satisfies WorkerRequest);
    });
  }

  stop(): Promise<number> | undefined {
    this.stops++;
    const w = this.worker;
    if (this.idle !== undefined) clearTimeout(this.idle);
    this.idle = undefined;
    this.worker = undefined;
    return w?.terminate();
  }

  /** A reload that failed as a whole: one error, nothing applied, the last good state kept. */
  private failure(why: string): WorkerOutcome {
    const e = new Error(`manifest worker ${why}; the last good state stays`);
    const counts = { services: this.state.services.size, slices: this.state.slices.size };
    return { errors: [e], fatal: true, ignored: [], applied: false, counts };
  }

  /** A new worker, handed the last good state as JSON (made in steps: see the header). */
  private async boot(): Promise<Worker> {
    const state = await compactState(this.state);
    const workerData: WorkerData = { dir: this.dir, parse: this.parse, state };
    const w = new Worker(workerSource('manifest-worker'), { eval: true, workerData });
    this.boots++;
    this.worker = w;
    return w;
  }

  /** The kept worker, now busy with a reload (undefined: none is kept). */
  private takeWarm(): Worker | undefined {
    if (this.idle === undefined || !this.worker) return undefined;
    clearTimeout(this.idle);
    this.idle = undefined;
    this.worker.off('exit', this.lost);
    return this.worker;
  }

  private small(): boolean {
    return this.state.services.size + this.state.slices.size <= this.warm.maxObjects;
  }

  /** Keeps `w` for the next reload; ended after the warm window, forgotten if it dies. */
  private keep(w: Worker): void {
    w.once('exit', this.lost);
    this.idle = setTimeout(() => this.end(w), this.warm.ms);
    this.idle.unref();
  }

  private end(w: Worker): void {
    if (this.idle !== undefined) clearTimeout(this.idle);
    this.idle = undefined;
    w.off('exit', this.lost);
    if (this.worker === w) this.worker = undefined;
    void w.terminate();
  }

  /** A kept worker exited on its own: the next reload boots another. */
  private readonly lost = () => {
    if (this.idle !== undefined) clearTimeout(this.idle);
    this.idle = undefined;
    this.worker = undefined;
  };
}

/** The last good state as the objects in force, by namespaced name. */
export interface ObjectState {
  services: Map<string, Service>;
  slices: Map<string, EndpointSlice>;
  /** a complete read has been applied */
  loaded: boolean;
}

/** One slice of changes into the objects in force. */
function applyObjects<T>(state: Map<string, T>, changes: readonly Change<T>[]): void {
  for (const [name, cur] of changes) {
    if (cur === null) state.delete(name);
    else state.set(name, cur);
  }
}

/** The objects as each one's JSON, CHECKOUT_STEP objects between two turns of the event loop. */
async function compactState(st: ObjectState): Promise<CompactState> {
  const out: CompactState = { services: new Map(), slices: new Map(), loaded: st.loaded };
  await inSteps([...st.services], CHECKOUT_STEP, ([n, o]) =>
    out.services.set(n, JSON.stringify(o)),
  );
  await inSteps([...st.slices], CHECKOUT_STEP, ([n, o]) => out.slices.set(n, JSON.stringify(o)));
  return out;
}

/** A refusal as the worker sent it, back to the class it was (file, object, field). */
function fromWire(e: WireError): Error {
  if (e.kind === 'other') return new Error(e.message);
  const where = { file: e.file, object: e.object, field: e.field };
  if (e.kind === 'file')
    return new ManifestFileError(e.code as ManifestFileError['code'], where, e.reason);
  return new ManifestError(e.code, where, e.reason);
}

// The main thread's half of the manifest worker (manifest-worker-main.ts runs the other half):
// ManifestDirSource hands it a reload, gets the changes back in slices — each slice applied,
// then the event loop runs (TUN batches go first) before the next one is asked for — and the
// reload's outcome last. The parser, the apiserver's checks and the diff never run here.
//
// One worker per reload, ended once the reload is in: between reloads no second heap holds a
// copy of the directory (issue 18: an agent at 10k Services kept ~100 MiB in an idle worker).
// The last good state lives here instead, as each object's JSON (CompactState, a quarter of the
// objects' size), handed to the next worker; a worker that dies fails its reload with one error,
// and the slices it had delivered are in that state, so the next reload starts from the truth.
//
// The worker runs the bundle's entry or, from the sources, boots through tsx's CommonJS require
// hook (workers do not inherit tsx's ESM hooks on Node 20): src/runtime.ts.
import { Worker } from 'node:worker_threads';
import { workerSource } from '../runtime.ts';
import { ManifestError, ManifestFileError } from '../manifests/errors.ts';
import type { ParseOptions } from '../manifests/parse.ts';
import type { EndpointSlice, Service } from '../model.ts';
import {
  applyToState,
  type Change,
  type CompactState,
  type DirDelta,
  parseChanges,
} from './dir-state.ts';
import type { WireError, WorkerData, WorkerReply, WorkerRequest } from './manifest-worker-main.ts';

/** A reload's outcome once every slice has been applied (the changes went to onChunk). */
export type WorkerOutcome = Omit<DirDelta, 'services' | 'slices' | 'json'>;

export class ManifestWorker {
  private worker: Worker | undefined;
  /** the last good state: what every slice applied so far made of it */
  readonly state: CompactState = { services: new Map(), slices: new Map(), loaded: false };

  constructor(
    private readonly dir: string,
    private readonly parse: ParseOptions | undefined,
  ) {}

  /**
   * One reload; onChunk gets each slice of changes, in order, between two event-loop turns.
   * `strict`: all or nothing, the first refusal fatal (the agent's first load).
   */
  reload(
    onChunk: (services: Change<Service>[], slices: Change<EndpointSlice>[]) => void,
    strict = false,
  ): Promise<WorkerOutcome> {
    const data: WorkerData = { dir: this.dir, parse: this.parse, state: this.state };
    const w = bootWorker(data);
    this.worker = w;
    return new Promise<WorkerOutcome>((resolve) => {
      const finish = (o: WorkerOutcome) => {
        w.off('message', onMessage);
        w.off('error', onError);
        w.off('exit', onExit);
        if (this.worker === w) this.worker = undefined;
        void w.terminate();
        resolve(o);
      };
      const onMessage = (m: WorkerReply) => {
        if (m.type === 'done') {
          if (m.applied) this.state.loaded = true;
          finish({ ...m, errors: m.errors.map(fromWire) });
          return;
        }
        applyToState(this.state.services, m.services);
        applyToState(this.state.slices, m.slices);
        onChunk(parseChanges<Service>(m.services), parseChanges<EndpointSlice>(m.slices));
        setImmediate(() => w.postMessage({ type: 'next' } satisfies WorkerRequest));
      };
      const failed = (why: string) => {
        const e = new Error(`manifest worker ${why}; the last good state stays`);
        const counts = { services: this.state.services.size, slices: this.state.slices.size };
        finish({ errors: [e], fatal: true, ignored: [], applied: false, counts });
      };
      const onError = (err: Error) => failed(`failed: ${err.message}`);
      const onExit = (code: number) => failed(`exited (${code})`);
      w.on('message', onMessage);
      w.on('error', onError);
      w.on('exit', onExit);
      w.postMessage({ type: 'load', strict } satisfies WorkerRequest);
    });
  }

  stop(): Promise<number> | undefined {
    const w = this.worker;
    this.worker = undefined;
    return w?.terminate();
  }
}

function bootWorker(workerData: WorkerData): Worker {
  return new Worker(workerSource('manifest-worker'), { eval: true, workerData });
}

/** A refusal as the worker sent it, back to the class it was (file, object, field). */
function fromWire(e: WireError): Error {
  if (e.kind === 'other') return new Error(e.message);
  const where = { file: e.file, object: e.object, field: e.field };
  if (e.kind === 'file')
    return new ManifestFileError(e.code as ManifestFileError['code'], where, e.reason);
  return new ManifestError(e.code, where, e.reason);
}

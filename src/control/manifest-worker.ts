// The main thread's half of the manifest worker (manifest-worker-main.ts runs the other half):
// ManifestDirSource hands it a reload, gets the changes back in slices — each slice applied,
// then the event loop runs (TUN batches go first) before the next one is asked for — and the
// reload's outcome last. The parser, the apiserver's checks and the diff never run here.
//
// The worker runs the bundle's entry or, from the sources, boots through tsx's CommonJS require
// hook (workers do not inherit tsx's ESM hooks on Node 20): src/runtime.ts. A worker that dies is replaced on the next reload; the reload it was
// running fails with one error, so the last good state stays in force.
import { Worker } from 'node:worker_threads';
import { workerSource } from '../runtime.ts';
import { ManifestError, ManifestFileError } from '../manifests/errors.ts';
import type { ParseOptions } from '../manifests/parse.ts';
import type { EndpointSlice, Service } from '../model.ts';
import type { Change, DirDelta } from './dir-state.ts';
import type { WireError, WorkerReply, WorkerRequest } from './manifest-worker-main.ts';

/** A reload's outcome once every slice has been applied (the changes went to onChunk). */
export type WorkerOutcome = Omit<DirDelta, 'services' | 'slices'>;

export class ManifestWorker {
  private worker: Worker | undefined;

  constructor(
    private readonly dir: string,
    private readonly parse: ParseOptions | undefined,
  ) {}

  /** One reload; onChunk gets each slice of changes, in order, between two event-loop turns. */
  reload(
    onChunk: (services: Change<Service>[], slices: Change<EndpointSlice>[]) => void,
  ): Promise<WorkerOutcome> {
    const w = this.start();
    w.ref();
    return new Promise<WorkerOutcome>((resolve) => {
      const finish = (o: WorkerOutcome) => {
        w.off('message', onMessage);
        w.off('error', onError);
        w.off('exit', onExit);
        w.unref();
        resolve(o);
      };
      const onMessage = (m: WorkerReply) => {
        if (m.type === 'done') {
          finish({ ...m, errors: m.errors.map(fromWire) });
          return;
        }
        if (m.type !== 'chunk') return;
        onChunk(m.services, m.slices);
        setImmediate(() => w.postMessage({ type: 'next' } satisfies WorkerRequest));
      };
      const failed = (why: string) => {
        if (this.worker === w) this.worker = undefined;
        const e = new Error(`manifest worker ${why}; the last good state stays`);
        const counts = { services: 0, slices: 0 };
        finish({ errors: [e], fatal: true, ignored: [], applied: false, counts });
      };
      const onError = (err: Error) => failed(`failed: ${err.message}`);
      const onExit = (code: number) => failed(`exited (${code})`);
      w.on('message', onMessage);
      w.on('error', onError);
      w.on('exit', onExit);
      w.postMessage({ type: 'load' } satisfies WorkerRequest);
    });
  }

  stop(): Promise<number> | undefined {
    const w = this.worker;
    this.worker = undefined;
    return w?.terminate();
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const w = bootWorker({ dir: this.dir, parse: this.parse });
    w.on('exit', () => {
      if (this.worker === w) this.worker = undefined;
    });
    w.unref();
    this.worker = w;
    return w;
  }
}

/**
 * The agent's start-up check (loadManifests: every object valid, or the first refusal thrown,
 * naming file, object and field) in a worker of its own, so that a restarted agent whose packet
 * loop already runs does not stall it while the directory is parsed.
 */
export function checkManifestsOffThread(dir: string, parse?: ParseOptions): Promise<void> {
  const w = bootWorker({ dir, parse, check: true });
  return new Promise<void>((resolve, reject) => {
    w.once('message', (m: WorkerReply) => {
      void w.terminate();
      if (m.type === 'checked' && m.error) reject(fromWire(m.error));
      else resolve();
    });
    w.once('error', (err) => reject(new Error(`manifest check failed: ${err.message}`)));
  });
}

function bootWorker(workerData: object): Worker {
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

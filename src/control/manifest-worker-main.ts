// The manifest worker's thread (started by manifest-worker.ts): reads, parses, validates and
// diffs the manifests directory (DirState) off the packet thread, then hands the changes over
// in slices, one per request, so the main thread decodes and applies at most CHUNK objects
// between two TUN batches. No import.meta here: this file is loaded through tsx's CommonJS hook.
import { parentPort, workerData } from 'node:worker_threads';
import { ManifestError, ManifestFileError } from '../manifests/errors.ts';
import { loadManifests } from '../manifests/load.ts';
import { type Change, type DirDelta, DirState } from './dir-state.ts';
import type { EndpointSlice, Service } from '../model.ts';

/** Objects per slice handed to the main thread. */
const CHUNK = 200;

export type WorkerRequest = { type: 'load' } | { type: 'next' };
export type WireError =
  | { kind: 'other'; message: string }
  | {
      kind: 'file' | 'object';
      message: string;
      code: ManifestError['code'];
      file: string;
      object: string;
      field: string;
      reason: string;
    };
export type WorkerReply =
  | { type: 'chunk'; services: Change<Service>[]; slices: Change<EndpointSlice>[] }
  | ({ type: 'done'; errors: WireError[] } & Omit<DirDelta, 'services' | 'slices' | 'errors'>)
  | { type: 'checked'; error?: WireError };

const port = parentPort;
const data = workerData as {
  dir: string;
  parse: ConstructorParameters<typeof DirState>[1];
  check?: boolean;
};
if (port && data.check) {
  // the agent's start: every object valid, all or nothing (loadManifests), then this exits
  let error: WireError | undefined;
  try {
    loadManifests(data.dir, data.parse);
  } catch (e) {
    error = wireError(e instanceof Error ? e : new Error(String(e)));
  }
  port.postMessage({ type: 'checked', error } satisfies WorkerReply);
} else if (port) {
  const { dir, parse } = data;
  const state = new DirState(dir, parse);
  let queue: WorkerReply[] = [];
  port.on('message', (m: WorkerRequest) => {
    if (m.type === 'load') queue = slices(state.reload());
    const next = queue.shift();
    if (next) port.postMessage(next);
  });
}

/** Deletions first (a ClusterIP given up by one object may be taken by another in a later slice). */
function slices(d: DirDelta): WorkerReply[] {
  const out: WorkerReply[] = [];
  const svcs = [
    ...d.services.filter((c) => c[1] === null),
    ...d.services.filter((c) => c[1] !== null),
  ];
  const sl = [...d.slices.filter((c) => c[1] === null), ...d.slices.filter((c) => c[1] !== null)];
  for (let i = 0; i < svcs.length; i += CHUNK)
    out.push({ type: 'chunk', services: svcs.slice(i, i + CHUNK), slices: [] });
  for (let i = 0; i < sl.length; i += CHUNK)
    out.push({ type: 'chunk', services: [], slices: sl.slice(i, i + CHUNK) });
  const { services: _s, slices: _l, errors, ...rest } = d;
  out.push({ type: 'done', ...rest, errors: errors.map(wireError) });
  return out;
}

/** An error as a plain object; `kind` keeps its class (a file error, an object's, another). */
function wireError(e: Error): WireError {
  if (!(e instanceof ManifestError)) return { kind: 'other', message: e.message };
  const { code, file, object, field, reason } = e;
  const kind = e instanceof ManifestFileError ? 'file' : 'object';
  return { kind, message: e.message, code, file, object, field, reason };
}

// The manifest worker's thread (started by manifest-worker.ts for one reload): reads, parses,
// validates and diffs the manifests directory (DirState, seeded with the last good state the
// main thread keeps) off the packet thread, and posts the changes in slices of CHUNK objects
// as they are ready — the strict first load each file's as it parses (DirState's stream), any
// other once the diff is made — then the outcome. The main thread queues them and decodes and
// applies one slice per turn of its event loop, at most CHUNK objects between two TUN batches
// (manifest-worker.ts); a slice is its objects' JSON (dir-state.ts JsonChange), which the main
// thread keeps as its state and parses into the objects it applies. The thread is then ended:
// its heap (the parsed files, their garbage) is not kept between reloads.
// No import.meta here: this file is loaded through tsx's CommonJS hook.
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { ManifestError, ManifestFileError } from '../manifests/errors.ts';
import {
  type Change,
  type CompactState,
  type DirDelta,
  DirState,
  type JsonChange,
} from './dir-state.ts';

/**
 * Objects per slice handed to the main thread, which parses their JSON and feeds them to the
 * trackers in one task. 64 as CHECKOUT_STEP: 200 took up to 36 ms (feed) + 12 ms (parse) of one
 * task in the stall test's 5,000-Service load at load ~8; a slice more per 64 objects is one
 * more message each way, and the reload took no longer (4.6-7.2 s against 6.8-10.6 s).
 */
const CHUNK = 64;

export type WorkerRequest = { type: 'load'; strict: boolean };
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
  | { type: 'chunk'; services: JsonChange[]; slices: JsonChange[] }
  | ({ type: 'done'; errors: WireError[] } & Omit<
      DirDelta,
      'services' | 'slices' | 'errors' | 'json'
    >);

export interface WorkerData {
  dir: string;
  parse: ConstructorParameters<typeof DirState>[1];
  state: CompactState;
}

/**
 * This thread's nice: it yields the CPU to the packet loop's thread (Linux schedules threads one
 * by one), which on a loaded two-core node otherwise waits while the parse runs
 * (test/node/stall.test.ts). Not 19: one run at load 15 with the worker at nice 19 spent 54 s on
 * 5,000 Services (8.6 s in another at load 17) — too near starving it behind every other
 * process; 10 weighs it at a tenth of a nice-0 thread.
 */
const WORKER_NICE = 10;

/** WORKER_NICE for this thread alone (/proc/thread-self names it). Best effort. */
function yieldToPacketLoop(): void {
  try {
    setPriority(Number(readlinkSync('/proc/thread-self').split('/').pop()), WORKER_NICE);
  } catch {
    // not Linux, or not allowed: the worker runs at the process's priority
  }
}

const port = parentPort;
if (port) {
  yieldToPacketLoop();
  const { dir, parse, state } = workerData as WorkerData;
  const dirState = new DirState(dir, parse, undefined, state);
  const post = (m: WorkerReply) => port.postMessage(m);
  port.on('message', (m: WorkerRequest) => {
    const d = dirState.reload(m.strict, (svcs, sl) => chunks(svcs, sl, post));
    chunks(
      deletionsFirst(d.services, d.json.services),
      deletionsFirst(d.slices, d.json.slices),
      post,
    );
    const { services: _s, slices: _l, errors, json: _j, ...rest } = d;
    post({ type: 'done', ...rest, errors: errors.map(wireError) });
  });
}

/** Services, then slices, CHUNK objects a slice. */
function chunks(svcs: JsonChange[], sl: JsonChange[], post: (m: WorkerReply) => void): void {
  for (let i = 0; i < svcs.length; i += CHUNK)
    post({ type: 'chunk', services: svcs.slice(i, i + CHUNK), slices: [] });
  for (let i = 0; i < sl.length; i += CHUNK)
    post({ type: 'chunk', services: [], slices: sl.slice(i, i + CHUNK) });
}

/**
 * Each change as its name and JSON, deletions first (a ClusterIP given up by one object may be
 * taken by another in a later slice).
 */
function deletionsFirst<T>(changes: Change<T>[], json: (string | null)[]): JsonChange[] {
  const gone: JsonChange[] = [];
  const kept: JsonChange[] = [];
  changes.forEach(([name, cur], i) => {
    if (cur === null) gone.push([name, null]);
    else kept.push([name, json[i]]);
  });
  return [...gone, ...kept];
}

/** An error as a plain object; `kind` keeps its class (a file error, an object's, another). */
function wireError(e: Error): WireError {
  if (!(e instanceof ManifestError)) return { kind: 'other', message: e.message };
  const { code, file, object, field, reason } = e;
  const kind = e instanceof ManifestFileError ? 'file' : 'object';
  return { kind, message: e.message, code, file, object, field, reason };
}

// A manifests file or directory → ClusterState. A directory is read non-recursively, its
// .yaml/.yml/.json files in byte order of their names, so results do not depend on readdir order.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { ClusterState } from '../model.ts';
import { ManifestError } from './errors.ts';
import { checkState, type ParseOptions, parseManifests } from './parse.ts';

const MANIFEST_FILE = /\.(ya?ml|json)$/i;

export function loadManifests(pathOrDir: string, opts: ParseOptions = {}): ClusterState {
  const state: ClusterState = { services: [], slices: [] };
  for (const file of manifestFiles(pathOrDir)) {
    const one = parseManifests(readText(file), file, opts);
    state.services.push(...one.services);
    state.slices.push(...one.slices);
  }
  checkState(state);
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
  return new ManifestError(
    'MANIFEST_IO',
    { file, object: '', field: '' },
    `cannot read: ${reason}`,
    { cause: e },
  );
}

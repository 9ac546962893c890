// Reading the objects of YAML/JSON files as `kubectl apply -f FILE|DIR` does: every document of
// every .yaml/.yml/.json file of a directory (not recursively, in name order), `kind: List`
// unpacked; empty documents skipped. Syntax errors name the file and document, as the agent's
// manifests loader does (the same document reader).
import { readFileSync } from 'node:fs';
import { ManifestFileError } from '../manifests/errors.ts';
import { manifestFiles } from '../manifests/load.ts';
import { yamlValues } from '../manifests/parse.ts';

export interface FileObject {
  file: string;
  object: unknown;
}

/** The objects of a file or a directory's files; throws ManifestError on unreadable YAML. */
export function readObjects(pathOrDir: string): FileObject[] {
  return manifestFiles(pathOrDir).flatMap((file) => {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      throw new ManifestFileError(
        'MANIFEST_IO',
        { file, object: '', field: '' },
        `cannot read: ${(e as NodeJS.ErrnoException).code}`,
      );
    }
    return parseObjects(text, file);
  });
}

export function parseObjects(text: string, file: string): FileObject[] {
  const out: FileObject[] = [];
  yamlValues(text, file).forEach((value) => {
    const v = value as { kind?: unknown; items?: unknown } | null;
    if (v === undefined || v === null) return;
    if (
      typeof v === 'object' &&
      typeof v.kind === 'string' &&
      v.kind.endsWith('List') &&
      Array.isArray(v.items)
    ) {
      for (const item of v.items) out.push({ file, object: item });
    } else {
      out.push({ file, object: v });
    }
  });
  return out;
}

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadManifests, ManifestError, manifestFiles } from '../../src/manifests/index.ts';

const DIR = 'test/fixtures/load-order';

describe('loadManifests', () => {
  it('reads the .yaml/.yml/.json files of a directory in byte order, not recursing', () => {
    expect(manifestFiles(DIR)).toEqual([
      join(DIR, 'B.YAML'),
      join(DIR, 'a.json'),
      join(DIR, 'b-slice.yml'),
      join(DIR, 'c.yaml'),
    ]);
    const state = loadManifests(DIR);
    expect(state.services.map((s) => [s.name, s.origin?.file])).toEqual([
      ['b', join(DIR, 'B.YAML')],
      ['a', join(DIR, 'a.json')],
      ['c', join(DIR, 'c.yaml')],
    ]);
    expect(state.slices.map((s) => s.name)).toEqual(['b-1']);
  });

  it('reads a single file', () => {
    const state = loadManifests(join(DIR, 'c.yaml'));
    expect(state.services.map((s) => s.name)).toEqual(['c']);
  });

  it('loads the replay fixture cluster', () => {
    const state = loadManifests('test/fixtures/cluster');
    expect(state.services.map((s) => `${s.namespace}/${s.name}`)).toEqual([
      'default/web',
      'kube-system/dns',
      'default/empty',
    ]);
    expect(state.slices.map((s) => s.name)).toEqual(['web-abc12', 'dns-xyz']);
  });

  it('rejects a missing path with MANIFEST_IO naming it', () => {
    const err = catchError(() => loadManifests('test/fixtures/does-not-exist'));
    expect(err.code).toBe('MANIFEST_IO');
    expect(err.file).toBe('test/fixtures/does-not-exist');
    expect(err.message).toBe('test/fixtures/does-not-exist: cannot read: ENOENT');
  });
});

describe('loadManifests across files', () => {
  let dir = '';
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = '';
  });
  const svc = (name: string, ip: string) =>
    `apiVersion: v1\nkind: Service\nmetadata: { name: ${name} }\nspec: { clusterIP: ${ip}, ports: [ { port: 80 } ] }\n`;

  it('rejects the same Service defined in two files, naming both', () => {
    dir = mkdtempSync(join(tmpdir(), 'kubetun-manifests-'));
    writeFileSync(join(dir, '1.yaml'), svc('web', '10.96.0.1'));
    writeFileSync(
      join(dir, '2.yaml'),
      `---\n${svc('other', '10.96.0.2')}---\n${svc('web', '10.96.0.3')}`,
    );
    const err = catchError(() => loadManifests(dir));
    expect(err.code).toBe('MANIFEST_DUPLICATE_OBJECT');
    expect(err.file).toBe(join(dir, '2.yaml'));
    expect(err.object).toBe('Service default/web');
    expect(err.message).toContain(`already defined in ${join(dir, '1.yaml')} document 0`);
  });

  it('rejects a ClusterIP claimed by Services in two files', () => {
    dir = mkdtempSync(join(tmpdir(), 'kubetun-manifests-'));
    writeFileSync(join(dir, '1.yaml'), svc('a', '10.96.0.1'));
    writeFileSync(join(dir, '2.yaml'), svc('b', '10.96.0.1'));
    const err = catchError(() => loadManifests(dir));
    expect([err.code, err.file, err.object, err.field]).toEqual([
      'MANIFEST_CONFLICT',
      join(dir, '2.yaml'),
      'Service default/b',
      'spec.clusterIP',
    ]);
  });

  it('with several refusals, throws the one a file-by-file read meets first', () => {
    dir = mkdtempSync(join(tmpdir(), 'kubetun-manifests-'));
    // 1.yaml alone is valid; 2.yaml holds a conflict inside it (b and c) and one with 1.yaml
    // (a2 on a's address, earlier in its Services than c); 3.yaml is not valid YAML
    writeFileSync(join(dir, '1.yaml'), svc('a', '10.96.0.1'));
    const two = [svc('a2', '10.96.0.1'), svc('b', '10.96.0.2'), svc('c', '10.96.0.2')];
    writeFileSync(join(dir, '2.yaml'), two.join('---\n'));
    writeFileSync(join(dir, '3.yaml'), 'kind: [');
    const inside = catchError(() => loadManifests(dir));
    expect([inside.file, inside.object]).toEqual([join(dir, '2.yaml'), 'Service default/c']);
    // without the conflict inside 2.yaml: 3.yaml's syntax error comes before the checks across files
    writeFileSync(join(dir, '2.yaml'), two.slice(0, 2).join('---\n'));
    const syntax = catchError(() => loadManifests(dir));
    expect([syntax.code, syntax.file]).toEqual(['MANIFEST_YAML_SYNTAX', join(dir, '3.yaml')]);
    // and without 3.yaml, the conflict across files
    rmSync(join(dir, '3.yaml'));
    const across = catchError(() => loadManifests(dir));
    expect([across.file, across.object]).toEqual([join(dir, '2.yaml'), 'Service default/a2']);
  });

  it('names the bad file among good ones', () => {
    dir = mkdtempSync(join(tmpdir(), 'kubetun-manifests-'));
    writeFileSync(join(dir, '1.yaml'), svc('a', '10.96.0.1'));
    writeFileSync(join(dir, '2.yaml'), svc('b', '10.96.0.256'));
    const err = catchError(() => loadManifests(dir));
    expect(err.message).toMatch(
      new RegExp(`^${join(dir, '2.yaml')}: Service default/b: spec.clusterIP: `),
    );
  });
});

function catchError(f: () => unknown): ManifestError {
  try {
    f();
  } catch (e) {
    if (e instanceof ManifestError) return e;
    throw e;
  }
  throw new Error('expected a ManifestError');
}

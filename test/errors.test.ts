import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  formatError,
  KubetunError,
  NoLabError,
  NotRootError,
  UsageError,
  UserError,
} from '../src/errors.ts';
import { LabError } from '../src/lab/error.ts';
import { TopologyError } from '../src/lab/topology.ts';
import { ManifestError, ManifestFileError } from '../src/manifests/errors.ts';
import { readObjects } from '../src/cluster/files.ts';
import { yamlValues } from '../src/manifests/parse.ts';
import { LocalDetectError, localDetector } from '../src/rules/local-detect.ts';
import { CommandError } from '../src/sh.ts';
import { OptionError } from '../src/node/options.ts';
import { PcapError } from '../src/pcap/format.ts';

describe('the one error base class', () => {
  it('every area error is a KubetunError; user mistakes are UserErrors with exit status 2', () => {
    const user = [
      new ManifestError('MANIFEST_BAD_IP', { file: 'f', object: 'o', field: 'x' }, 'bad'),
      new TopologyError('t.yaml', 'node[0]', 'ip', 'bad'),
      new OptionError('node-ip', 'bad'),
      new PcapError('PCAP_BAD_MAGIC', 'bad'),
      new UsageError('bad'),
      new NotRootError('lab up'),
      new NoLabError(),
      new LocalDetectError('detectLocalMode: bad'),
    ];
    for (const e of user) {
      expect(e).toBeInstanceOf(UserError);
      expect(e.exitStatus).toBe(2);
    }
    const env = [new LabError('ip failed'), new CommandError(['ip', 'x'], 'no', new Error('x'))];
    for (const e of env) {
      expect(e).toBeInstanceOf(KubetunError);
      expect(e).not.toBeInstanceOf(UserError);
      expect(e.exitStatus).toBe(1);
    }
  });

  it('names itself after its class and keeps its stable code', () => {
    expect(new NotRootError('lab up').name).toBe('NotRootError');
    expect(new NotRootError('lab up').code).toBe('NOT_ROOT');
    expect(new LabError('x').name).toBe('LabError');
  });

  it('prints one line and, if there is one, a hint line; never the stack', () => {
    expect(formatError(new UsageError('--node: "x y" is not a node name'), 'svc list')).toBe(
      'kubetun svc list: --node: "x y" is not a node name\n',
    );
    const text = formatError(new NotRootError('lab up'), 'lab up');
    expect(text.split('\n').filter(Boolean)).toEqual([
      'kubetun lab up: needs root (it builds network namespaces and writes /run)',
      '  hint: run it as root, e.g. sudo npx kubetun lab up',
    ]);
    expect(text).not.toMatch(/\bat .*\.ts:\d+/);
  });
});

const SRC = fileURLToPath(new URL('../src/', import.meta.url));
const sources = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? sources(join(dir, e.name))
      : e.name.endsWith('.ts')
        ? [join(dir, e.name)]
        : [],
  );

describe('errors are matched by class, not by code or message', () => {
  it('KubetunError is the only class in src/ extending Error', () => {
    const direct = sources(SRC).flatMap((f) =>
      [
        ...readFileSync(f, 'utf8').matchAll(
          /class (\w+) extends (?:Error|RangeError|TypeError)\b/g,
        ),
      ].map((m) => m[1]),
    );
    expect(direct).toEqual(['KubetunError']);
  });

  it("a file that cannot be read or parsed is a ManifestFileError; one object's mistake is not", () => {
    const catchOf = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        return e;
      }
      return undefined;
    };
    expect(catchOf(() => readObjects('/nonexistent/x.yaml'))).toBeInstanceOf(ManifestFileError);
    expect(catchOf(() => yamlValues('a: [', 'f.yaml'))).toBeInstanceOf(ManifestFileError);
    const obj = new ManifestError('MANIFEST_BAD_IP', { file: 'f', object: 'o', field: 'x' }, 'bad');
    expect(obj).not.toBeInstanceOf(ManifestFileError);
    expect(catchOf(() => localDetector({ mode: 'Bogus' }))).toBeInstanceOf(UserError);
  });

  it('no code or message string decides a branch in src/ (code === / code.includes on our errors)', () => {
    const hits = sources(SRC).flatMap((f) =>
      readFileSync(f, 'utf8')
        .split('\n')
        .filter((l) =>
          /code\s*===\s*'MANIFEST_|\.code\.includes\(|\.name\s*===\s*'\w+Error'/.test(l),
        )
        .map((l) => `${f}: ${l.trim()}`),
    );
    expect(hits).toEqual([]);
  });
});

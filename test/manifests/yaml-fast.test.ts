// The fast YAML reader (src/manifests/yaml-fast.ts) against the `yaml` package it stands in for:
// whatever it returns must be exactly what the package returns (values, key order, own
// properties, -0 and NaN), and text the package refuses (a syntax error, a key given twice) must
// never be read by it. Hand-written edge cases, the repository's own YAML, and a seeded run of
// mutated manifests; and the shapes manifests are written in must take the fast path, or it
// would be a reader that never reads.
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { yamlPackageValues, yamlValues } from '../../src/manifests/parse.ts';
import { fastYamlValues } from '../../src/manifests/yaml-fast.ts';
import { stringify } from 'yaml';

/** A value as a string that tells apart everything toEqual might not (key order, -0, protos). */
function canon(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v === 'number') return Object.is(v, -0) ? 'n:-0' : `n:${v}`;
  if (typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return `[${v.map(canon).join(',')}]`;
  if (typeof v === 'object') {
    const proto = Object.getPrototypeOf(v) === Object.prototype ? '' : '!proto';
    const keys = Object.getOwnPropertyNames(v);
    const o = v as Record<string, unknown>;
    return `{${proto}${keys.map((k) => `${JSON.stringify(k)}:${canon(Object.getOwnPropertyDescriptor(o, k)!.value)}`).join(',')}}`;
  }
  return `?${typeof v}`;
}

/** The package's reading: its values, or 'error' for what yamlValues refuses. */
function general(text: string): string {
  try {
    return canon(yamlPackageValues(text, 'f.yaml'));
  } catch {
    return 'error';
  }
}

/** Fails when the fast reader returns anything the package does not; true when it read it. */
function agree(text: string): boolean {
  const fast = fastYamlValues(text);
  if (fast === undefined) return false;
  const want = general(text);
  if (canon(fast) !== want) {
    throw new Error(
      `fast reader disagrees on ${JSON.stringify(text)}:\n fast ${canon(fast)}\n yaml ${want}`,
    );
  }
  return true;
}

const EDGE = [
  '',
  '\n',
  '# c\n',
  '---\n',
  '---',
  'a: 1\n---\n',
  '---\na: 1',
  '# c\n---\na: 1',
  'a: 1\n---\n---\nb: 2',
  'a: 1\n--- \n',
  'a: 1\n---  # x\nb: 2',
  '\n\n---\n\n',
  '--- a: 1',
  '---a: 1',
  '...\n',
  'a: 1\n...\n',
  '%YAML 1.2\n---\na: 1',
  'a:\n- 1\n- 2',
  'a:\n  - 1\nb: 2',
  'a: b: c',
  "a: 'x''y'",
  "a: 'x'''",
  "a: ''",
  'a: ""',
  'a: "x\\ty"',
  'a: "\\u00e9\\x41\\U0001F600\\/\\"\\\\\\0\\a\\b\\e\\f\\n\\r\\v\\N\\_\\L\\P\\ "',
  'a: "\\uD800"',
  'a: "\\q"',
  'a: "\\x4"',
  'a: "\\U00110000"',
  'a: "x',
  "a: 'x",
  'a: x # c',
  'a: x#c',
  'a: x #',
  'a: -1',
  'a: -',
  'a: - 1',
  'a: -#',
  'a: --x',
  'a: [1, 2,]',
  'a: [1, 2,,]',
  'a: [,]',
  'a: {b: c,}',
  'a: {b}',
  'a: {b: }',
  'a: {b: , c: d}',
  'a: [a: b]',
  'a: [a, b]x',
  'a: [a, b] # c',
  'a: [a, b]#c',
  'a: []',
  'a: {}',
  'a: [ ]',
  'a: { }',
  'a: [a b, c]',
  'a: [http://x]',
  'a: [-1]',
  'a: [a#b]',
  '{a: 1}',
  '[a, b]',
  '- a\n- b',
  'a: [1\n, 2]',
  'k: 0o17',
  'k: 0o8',
  'k: 1e3',
  'k: 1E+3',
  'k: .5',
  'k: 5.',
  'k: +1',
  'k: -0',
  'k: +0.0',
  'k: 00',
  'k: 007',
  'k: 0x1F',
  'k: 0X1F',
  'k: 1_000',
  'k: 12345678901234567890',
  'k: :x',
  'k: ?x',
  'k: x:y',
  'k: x: y',
  'k: x:',
  'k: http://a.b/c?d=e#f',
  'k: a :b',
  'k: a,b]c{d}',
  'k: a[0]',
  "k: it's",
  'k: say "hi"',
  'k:\n',
  'k:  \n  # c\nj: 1',
  '- - a\n  - b',
  '-\n  a: 1',
  '-\n- b',
  '- # c\n  a: 1',
  '- a: 1\n  b: 2\n- c',
  '- a:\n  - 1\n  b: 2',
  '- a: 1\n   b: 2',
  'a:\n- b: 1\n  c: 2\nd: 3',
  'a:\n  b:\n  c: 1',
  "k: 'a' ",
  'k: "a" # x',
  "k: 'a'x",
  'k: "a"#x',
  'a: {b: c} x',
  '? a\n: b',
  'a: &x 1\nb: *x',
  'a: !!str 1',
  'a: |\n  x\n',
  'a: >-\n  x\n',
  'k: [a, [b, {c: d}]]',
  'k: {"a":1}',
  "k: {'a': 1}",
  'k: {"a" : 1}',
  'k: {a:1}',
  'k: {a : 1}',
  'k: [a:1]',
  '__proto__: 1',
  'constructor: 1\ntoString: 2',
  'k: {__proto__: 1}',
  '"__proto__": {a: 1}',
  'k: ~',
  'k: Null',
  'k: nULL',
  'k: TRUE',
  'k: tRue',
  'k: .NaN',
  'k: .nan',
  'k: -.inf',
  'k: .Inf',
  'k: 1.10',
  'k: 1e',
  'a:   x   ',
  ' a: 1\n b: 2',
  'a:\n  b: 1\n c: 2',
  '- a\nb: 1',
  'a: 1\n- b',
  'a: 1\na: 2',
  'a: 1\n"a": 2',
  "a: 1\n'a': 2",
  'k: {a: 1, a: 2}',
  'null: 1\n~: 2',
  'null: 1',
  '"null": 1\n~: 2',
  '80: x',
  '"80": x',
  'true: x',
  '1.0: x\n1: y',
  '.foo: 1',
  '-x: 1',
  'a  : 1',
  'a :1',
  'a:1',
  'a:b: c',
  'a b: c',
  'a/b.c-d_e: f',
  '"a b": c',
  "'a''b': c",
  '"a\\"b": c',
  '"a": b\n"c" : d',
  'k:\n  v',
  'k: a\n  b',
  'k: a\n\n  b',
  'k: "a"\n  b',
  'k: [a]\n  b',
  'a:\n  b: 1\n    c: 2',
  'a:\n    b: 1\n  c: 2',
  'a:\n  - 1\n   - 2',
  '- 1\n  - 2',
  `k: ${'x'.repeat(2000)}`,
  `${'k'.repeat(1100)}: 1`,
  `${'k'.repeat(999)}: 1`,
  `"${'k'.repeat(1100)}": 1`,
  `k: {${'k'.repeat(1100)}: 1}`,
  `k: ${'['.repeat(80)}${']'.repeat(80)}`,
  `${Array.from({ length: 80 }, (_, i) => `${' '.repeat(i)}a:`).join('\n')} 1`,
  'k: v\r\n',
  'k:\tv',
  'k: é',
  '\ufeffk: v',
  'k: v\x85',
];

describe('fast YAML reader', () => {
  it('agrees with the yaml package on every edge case it reads, and refuses the rest', () => {
    for (const t of EDGE) agree(t);
  });

  it('refuses what the package refuses: syntax errors, keys given twice, block scalars', () => {
    for (const t of [
      'a: b: c',
      'a: 1\na: 2',
      'k: {a: 1, a: 2}',
      "k: 'a'x",
      'a: |\n  x\n',
      'a: &x 1\nb: *x',
      'k: v\r\n',
    ]) {
      expect(fastYamlValues(t), t).toBeUndefined();
    }
  });

  it('reads the shapes manifests are written in (kubectl, yaml.stringify, hand-written, flow)', () => {
    const kubectl = readFileSync('test/fixtures/kubectl/svc-nodeport.yaml', 'utf8');
    const handWritten = readFileSync('lab/manifests/web.yaml', 'utf8');
    const stringified = stringify({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: {
        name: 'web',
        namespace: 'demo',
        annotations: { 'example.com/a': 'x: y', b: '80' },
      },
      spec: { clusterIP: '10.96.0.10', ports: [{ port: 80, targetPort: 8080, protocol: 'TCP' }] },
    });
    const flow =
      'apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: bench}\nspec:\n  clusterIP: 10.96.0.1\n  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]\n';
    for (const t of [kubectl, handWritten, stringified, flow]) expect(agree(t), t).toBe(true);
  });

  it("agrees with the package on the repository's own YAML", () => {
    const files = execFileSync('git', ['ls-files', '*.yaml', '*.yml'], { encoding: 'utf8' })
      .split('\n')
      .filter(Boolean);
    let read = 0;
    for (const f of files) if (agree(readFileSync(f, 'utf8'))) read++;
    expect(read).toBeGreaterThan(files.length / 2); // most take the fast path
  });

  it('agrees with the package on 20k mutated manifests (seeded)', () => {
    const corpus = [
      readFileSync('test/fixtures/kubectl/svc-nodeport.yaml', 'utf8'),
      readFileSync('lab/manifests/web.yaml', 'utf8'),
      readFileSync('test/fixtures/cluster/slices.yaml', 'utf8'),
      "a:\n- b: 1\n  c: [x, {y: \"z\\n\"}]\n- - d\n  - 'e''f'\nk: {p: q, r: [1, 0x1f, .5, ~]}\n---\n- x\n",
      ...EDGE.filter((t) => t.length < 300),
    ];
    const tokens = [
      ' ',
      '  ',
      '\n',
      ':',
      ': ',
      '- ',
      '-',
      '#',
      ' #',
      "'",
      '"',
      '\\',
      '[',
      ']',
      '{',
      '}',
      ',',
      '---\n',
      '...',
      'null',
      '~',
      '1',
      '.5',
      '0x1',
      'e3',
      '&a ',
      '*a',
      '!',
      '|',
      '>',
      '?',
      'a',
      '%',
      '\t',
      'true',
      '__proto__',
      '"\\u0041"',
    ];
    let seed = 0x2545f491;
    const rnd = (n: number) => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) % n;
    };
    let read = 0;
    const runs = 20_000;
    for (let r = 0; r < runs; r++) {
      let t = corpus[rnd(corpus.length)];
      for (let m = 1 + rnd(3); m > 0; m--) {
        const at = rnd(t.length + 1);
        const lines = t.split('\n');
        const li = rnd(lines.length);
        switch (rnd(5)) {
          case 0:
            t = t.slice(0, at) + tokens[rnd(tokens.length)] + t.slice(at);
            break;
          case 1:
            t = t.slice(0, at) + t.slice(at + 1 + rnd(4));
            break;
          case 2:
            lines.splice(li, 0, lines[li]);
            t = lines.join('\n');
            break;
          case 3:
            lines[li] =
              (rnd(2) ? ' ' : '') + lines[li].slice(rnd(2) * Math.min(1, lines[li].search(/\S|$/)));
            t = lines.join('\n');
            break;
          default:
            t = t.slice(0, at) + t.slice(at, at + 1 + rnd(8)) + t.slice(at);
        }
      }
      if (agree(t)) read++;
    }
    // the mutants must exercise the fast path, not only its refusals
    expect(read).toBeGreaterThan(runs / 10);
  });

  it('yamlValues reads a file the fast reader refuses through the package, errors named', () => {
    expect(yamlValues('a: |\n  x\n', 'f.yaml')).toEqual([{ a: 'x\n' }]);
    expect(() => yamlValues('a: 1\na: 2', 'f.yaml')).toThrow(
      /Map keys must be unique \("a" again at line 2, column 1\)/,
    );
  });
});

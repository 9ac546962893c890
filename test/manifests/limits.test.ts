// The apiserver's limits in manifests mode (issue 18 point 2): a key given twice in one mapping
// is refused with its line and column (checked once per key, not against every other key — the
// check that made a 10 MB Service with 97k annotations stall the agents for minutes), and one
// object's annotations are at most 256 KiB, refused naming file, object and field.
import { describe, expect, it } from 'vitest';
import { ManifestError } from '../../src/manifests/errors.ts';
import { ANNOTATIONS_MAX_BYTES } from '../../src/manifests/fields.ts';
import { parseManifests } from '../../src/manifests/parse.ts';

const svc = (metadataExtra: string) => `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
${metadataExtra}spec:
  clusterIP: 10.96.0.10
  ports: [{port: 80, targetPort: 8080}]
`;

function refusal(text: string): ManifestError {
  try {
    parseManifests(text, 'f.yaml');
  } catch (err) {
    expect(err).toBeInstanceOf(ManifestError);
    return err as ManifestError;
  }
  throw new Error('accepted');
}

/** One Service whose annotations hold `keys` entries of about `width` bytes each. */
function annotated(keys: number, width: number): string {
  const lines = ['  annotations:'];
  const pad = 'x'.repeat(Math.max(0, width - 24));
  for (let i = 0; i < keys; i++) lines.push(`    example.com/k${i}: "${pad}${i}"`);
  return svc(`${lines.join('\n')}\n`);
}

describe('duplicate keys', () => {
  it('a key given twice is refused with where the second one is', () => {
    const e = refusal(svc('  name: other\n'));
    expect(e.code).toBe('MANIFEST_YAML_SYNTAX');
    expect(e.message).toContain('Map keys must be unique ("name" again at line 6, column 3)');
    expect(e.message).toContain('f.yaml');
  });

  it('also inside annotations, sequences of mappings and the second document', () => {
    expect(refusal(svc('  annotations: {a: "1", b: "2", a: "3"}\n')).message).toMatch(
      /"a" again at line 6/,
    );
    const ports = svc('').replace(
      '[{port: 80, targetPort: 8080}]',
      '[{port: 80, port: 81, targetPort: 8080}]',
    );
    expect(refusal(ports).message).toMatch(/"port" again/);
    expect(refusal(`${svc('')}---\n${svc('  labels: {x: a, x: b}\n')}`).message).toMatch(
      /document 1.*"x" again at line 15/,
    );
  });

  it('the same key in different mappings is fine', () => {
    const text = svc('  labels: {app: web}\n  annotations: {app: web}\n');
    expect(parseManifests(text, 'f.yaml').services[0].labels).toEqual({ app: 'web' });
  });
});

describe('annotations: at most 256 KiB per object, keys and values together', () => {
  it('a Service just under the limit is taken, with all its annotations', () => {
    const keys = Math.floor(ANNOTATIONS_MAX_BYTES / 64) - 1;
    const s = parseManifests(annotated(keys, 40), 'f.yaml').services[0];
    expect(Object.keys(s.annotations)).toHaveLength(keys);
  });

  it('the 1 MB / 9.2k-key Service of the probe is refused naming file, object and field', () => {
    const e = refusal(annotated(9200, 100));
    expect(e.code).toBe('MANIFEST_TOO_LONG');
    expect(e.message).toMatch(
      /f\.yaml.*Service default\/web.*metadata\.annotations.*Too long: must have at most 262144 bytes \(has \d+\)/,
    );
  });
});

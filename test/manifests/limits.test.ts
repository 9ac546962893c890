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

describe("EndpointSlice sizes: the apiserver's 1000 endpoints, 100 ports, 100 addresses", () => {
  const sliceDoc = (endpoints: number, ports: number, addresses: number) => {
    const addrs = Array.from({ length: addresses }, (_, i) => `10.244.${i >> 8}.${(i & 255) + 1}`);
    const eps = Array.from(
      { length: endpoints },
      (_, i) => `- addresses: [${i === 0 ? addrs.join(', ') : `10.245.${(i + 1) >> 8}.${(i + 1) & 255}`}]`,
    );
    const ps = Array.from({ length: ports }, (_, i) => `- {name: p${i}, port: ${8000 + i}}`);
    return `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports:
${ps.join('\n')}
endpoints:
${eps.join('\n')}
`;
  };
  it('at the limits a slice is taken', () => {
    const st = parseManifests(sliceDoc(1000, 100, 100), 'f.yaml');
    expect(st.slices[0]?.endpoints).toHaveLength(1000);
    expect(st.slices[0]?.ports).toHaveLength(100);
  });
  it.each([
    [1001, 1, 1, 'endpoints', 'Too many: 1001: must have at most 1000 items'],
    [1, 101, 1, 'ports', 'Too many: 101: must have at most 100 items'],
    [1, 1, 101, 'endpoints[0].addresses', 'Too many: 101: must have at most 100 items'],
  ])('%i endpoints, %i ports, %i addresses: refused at %s', (e, p, a, field, reason) => {
    const err = refusal(sliceDoc(e, p, a));
    expect(err.code).toBe('MANIFEST_TOO_LONG');
    expect(err.file).toBe('f.yaml');
    expect(err.object).toBe('EndpointSlice default/web-1');
    expect(err.field).toBe(field);
    expect(err.reason).toBe(reason);
  });
});

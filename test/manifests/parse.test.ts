import { describe, expect, it } from 'vitest';
import { KubetunError, ManifestError, parseManifests } from '../../src/manifests/index.ts';

const FILE = 'manifests/web.yaml';

const WEB = `
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 10.96.0.10
  ports:
  - port: 80
`;

describe('parseManifests: Service defaults', () => {
  it('applies the API defaults to a minimal Service', () => {
    const { services, slices } = parseManifests(WEB, FILE);
    expect(slices).toEqual([]);
    expect(services).toEqual([
      {
        namespace: 'default',
        name: 'web',
        type: 'ClusterIP',
        clusterIPs: ['10.96.0.10'],
        ipFamilies: ['IPv4'],
        ipFamilyPolicy: 'SingleStack',
        ports: [{ name: '', protocol: 'TCP', port: 80, targetPort: 80, nodePort: 0 }],
        sessionAffinity: 'None',
        affinityTimeoutSeconds: 10800,
        externalTrafficPolicy: 'Cluster',
        internalTrafficPolicy: 'Cluster',
        externalIPs: [],
        loadBalancerIPs: [],
        loadBalancerSourceRanges: [],
        healthCheckNodePort: 0,
        annotations: {},
        labels: {},
        origin: { file: FILE, doc: 0 },
      },
    ]);
  });

  it('reads every field it models', () => {
    const text = `
apiVersion: v1
kind: Service
metadata: { name: lb, namespace: shop, labels: { app: lb }, annotations: { a: b } }
spec:
  type: LoadBalancer
  clusterIP: 10.96.0.20
  clusterIPs: [10.96.0.20]
  selector: { app: lb }
  ports:
  - { name: http, port: 80, targetPort: web, nodePort: 30080 }
  - { name: dns, protocol: UDP, port: 53, targetPort: 5353, nodePort: 30053 }
  sessionAffinity: ClientIP
  sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } }
  externalTrafficPolicy: Local
  internalTrafficPolicy: Local
  healthCheckNodePort: 32000
  externalIPs: [192.0.2.10]
  loadBalancerSourceRanges: [" 198.51.100.0/24 "]
  trafficDistribution: PreferClose
status:
  loadBalancer: { ingress: [ { ip: 203.0.113.7 }, { hostname: lb.example.com } ] }
`;
    const [svc] = parseManifests(text, FILE).services;
    expect(svc).toMatchObject({
      namespace: 'shop',
      type: 'LoadBalancer',
      clusterIPs: ['10.96.0.20'],
      selector: { app: 'lb' },
      ports: [
        { name: 'http', protocol: 'TCP', port: 80, targetPort: 'web', nodePort: 30080 },
        { name: 'dns', protocol: 'UDP', port: 53, targetPort: 5353, nodePort: 30053 },
      ],
      sessionAffinity: 'ClientIP',
      affinityTimeoutSeconds: 60,
      externalTrafficPolicy: 'Local',
      internalTrafficPolicy: 'Local',
      healthCheckNodePort: 32000,
      externalIPs: ['192.0.2.10'],
      loadBalancerIPs: ['203.0.113.7'],
      loadBalancerSourceRanges: ['198.51.100.0/24'],
      trafficDistribution: 'PreferClose',
      labels: { app: 'lb' },
      annotations: { a: 'b' },
    });
  });

  it('models headless and ExternalName Services with no cluster IPs', () => {
    const text = `
apiVersion: v1
kind: Service
metadata: { name: db }
spec: { clusterIP: None, ports: [ { port: 5432 } ] }
---
apiVersion: v1
kind: Service
metadata: { name: ext }
spec: { type: ExternalName, externalName: example.com }
`;
    const { services } = parseManifests(text, FILE);
    expect(services.map((s) => [s.name, s.type, s.clusterIPs, s.origin?.doc])).toEqual([
      ['db', 'ClusterIP', [], 0],
      ['ext', 'ExternalName', [], 1],
    ]);
  });
});

describe('parseManifests: EndpointSlice defaults', () => {
  it('defaults conditions (ready nil → true, serving nil → ready, terminating nil → false)', () => {
    const text = `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-abc, labels: { kubernetes.io/service-name: web } }
addressType: IPv4
ports: [ { port: 8080 }, { name: extra } ]
endpoints:
- addresses: [10.244.1.5]
- addresses: [10.244.1.6]
  conditions: { ready: false }
- addresses: [10.244.1.7]
  conditions: { ready: false, serving: true, terminating: true }
  nodeName: n1
  zone: z1
  hints: { forZones: [ { name: z1 } ], forNodes: [ { name: n1 } ] }
  targetRef: { kind: Pod, name: web-7 }
`;
    const [slice] = parseManifests(text, FILE).slices;
    expect(slice).toEqual({
      namespace: 'default',
      name: 'web-abc',
      serviceName: 'web',
      addressType: 'IPv4',
      // the port without a number is skipped, as kube-proxy does
      ports: [{ name: '', protocol: 'TCP', port: 8080 }],
      endpoints: [
        {
          addresses: ['10.244.1.5'],
          conditions: { ready: true, serving: true, terminating: false },
        },
        {
          addresses: ['10.244.1.6'],
          conditions: { ready: false, serving: false, terminating: false },
        },
        {
          addresses: ['10.244.1.7'],
          conditions: { ready: false, serving: true, terminating: true },
          nodeName: 'n1',
          zone: 'z1',
          hintsForZones: ['z1'],
          hintsForNodes: ['n1'],
          targetName: 'web-7',
        },
      ],
      origin: { file: FILE, doc: 0 },
    });
  });
});

describe('parseManifests: documents', () => {
  it('skips empty documents and unknown kinds, unpacks Lists', () => {
    const text = `---
apiVersion: apps/v1
kind: Deployment
metadata: { name: web }
---
---
# a kustomization-like document without kind
resources: [a.yaml]
---
apiVersion: v1
kind: List
items:
- ${JSON.stringify({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'a' }, spec: { clusterIP: '10.96.0.1', ports: [{ port: 1 }] } })}
- { apiVersion: v1, kind: ConfigMap, metadata: { name: c } }
- ${JSON.stringify({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'b' }, spec: { clusterIP: '10.96.0.2', ports: [{ port: 2 }] } })}
`;
    const { services } = parseManifests(text, FILE);
    expect(services.map((s) => s.name)).toEqual(['a', 'b']);
  });

  it('parses JSON', () => {
    const json = JSON.stringify({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'j', namespace: 'x' },
      spec: { clusterIP: '10.96.0.3', ports: [{ port: 3, protocol: 'UDP' }] },
    });
    const [svc] = parseManifests(json, 'x.json').services;
    expect([svc.namespace, svc.name, svc.ports[0].protocol]).toEqual(['x', 'j', 'UDP']);
  });
});

/** A Service document with `spec` replaced. */
function svc(spec: string, meta = '{ name: web, namespace: shop }'): string {
  return `apiVersion: v1\nkind: Service\nmetadata: ${meta}\nspec:\n${spec}\n`;
}

function slice(
  body: string,
  meta = '{ name: web-1, namespace: shop, labels: { kubernetes.io/service-name: web } }',
): string {
  return `apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: ${meta}\n${body}\n`;
}

interface Bad {
  what: string;
  text: string;
  code: string;
  object: string;
  field: string;
  reason: RegExp;
}

const PORTS = '  ports: [ { port: 80 } ]';
const SVC = 'Service shop/web';
const SL = 'EndpointSlice shop/web-1';

const BAD: Bad[] = [
  {
    what: 'bad clusterIP',
    text: svc(`  clusterIP: 10.96.0.300\n${PORTS}`),
    code: 'MANIFEST_CLUSTER_IP',
    object: SVC,
    field: 'spec.clusterIP',
    reason: /IP address or "None".*300/,
  },
  {
    what: 'IPv6 clusterIP that is not an address',
    text: svc(`  clusterIP: "fd00::g1"\n${PORTS}`),
    code: 'MANIFEST_CLUSTER_IP',
    object: SVC,
    field: 'spec.clusterIP',
    reason: /"fd00::g1" is not a valid IP address/,
  },
  {
    what: 'clusterIP with a leading zero',
    text: svc(`  clusterIP: 10.96.0.010\n${PORTS}`),
    code: 'MANIFEST_CLUSTER_IP',
    object: SVC,
    field: 'spec.clusterIP',
    reason: /leading zero/,
  },
  {
    what: 'bad secondary clusterIP',
    text: svc(`  clusterIPs: [10.96.0.1, nope]\n${PORTS}`),
    code: 'MANIFEST_CLUSTER_IP',
    object: SVC,
    field: 'spec.clusterIPs[1]',
    reason: /"nope" is not a valid IP address/,
  },
  {
    what: 'clusterIPs[0] != clusterIP',
    text: svc(`  clusterIP: 10.96.0.1\n  clusterIPs: [10.96.0.2]\n${PORTS}`),
    code: 'MANIFEST_CLUSTER_IP',
    object: SVC,
    field: 'spec.clusterIPs[0]',
    reason: /must match/,
  },
  {
    what: 'headless NodePort',
    text: svc(`  type: NodePort\n  clusterIP: None\n${PORTS}`),
    code: 'MANIFEST_CLUSTER_IP',
    object: SVC,
    field: 'spec.clusterIP',
    reason: /only allowed for type ClusterIP/,
  },
  {
    what: 'missing clusterIP',
    text: svc(PORTS),
    code: 'MANIFEST_MISSING_FIELD',
    object: SVC,
    field: 'spec.clusterIP',
    reason: /allocates no ClusterIPs/,
  },
  {
    what: 'port out of range',
    text: svc(
      '  clusterIP: 10.96.0.1\n  ports: [ { name: a, port: 80 }, { name: b, port: 70000 } ]',
    ),
    code: 'MANIFEST_PORT_RANGE',
    object: SVC,
    field: 'spec.ports[1].port',
    reason: /70000 is out of range 1-65535/,
  },
  {
    what: 'port zero',
    text: svc('  clusterIP: 10.96.0.1\n  ports: [ { port: 0 } ]'),
    code: 'MANIFEST_PORT_RANGE',
    object: SVC,
    field: 'spec.ports[0].port',
    reason: /out of range/,
  },
  {
    what: 'port missing',
    text: svc('  clusterIP: 10.96.0.1\n  ports: [ { name: x } ]'),
    code: 'MANIFEST_MISSING_FIELD',
    object: SVC,
    field: 'spec.ports[0].port',
    reason: /required/,
  },
  {
    what: 'port as a string',
    text: svc('  clusterIP: 10.96.0.1\n  ports: [ { port: "80" } ]'),
    code: 'MANIFEST_WRONG_TYPE',
    object: SVC,
    field: 'spec.ports[0].port',
    reason: /integer/,
  },
  {
    what: 'no ports',
    text: svc('  clusterIP: 10.96.0.1'),
    code: 'MANIFEST_MISSING_FIELD',
    object: SVC,
    field: 'spec.ports',
    reason: /required/,
  },
  {
    what: 'unknown protocol',
    text: svc('  clusterIP: 10.96.0.1\n  ports: [ { port: 80, protocol: ICMP } ]'),
    code: 'MANIFEST_UNKNOWN_PROTOCOL',
    object: SVC,
    field: 'spec.ports[0].protocol',
    reason: /"ICMP".*TCP, UDP, SCTP/,
  },
  {
    what: 'lowercase protocol',
    text: svc('  clusterIP: 10.96.0.1\n  ports: [ { port: 80, protocol: tcp } ]'),
    code: 'MANIFEST_UNKNOWN_PROTOCOL',
    object: SVC,
    field: 'spec.ports[0].protocol',
    reason: /"tcp"/,
  },
  {
    what: 'duplicate service port',
    text: svc('  clusterIP: 10.96.0.1\n  ports: [ { name: a, port: 80 }, { name: b, port: 80 } ]'),
    code: 'MANIFEST_DUPLICATE_PORT',
    object: SVC,
    field: 'spec.ports[1].port',
    reason: /duplicate port 80\/TCP \(also spec.ports\[0\]\)/,
  },
  {
    what: 'duplicate port name',
    text: svc('  clusterIP: 10.96.0.1\n  ports: [ { name: a, port: 80 }, { name: a, port: 81 } ]'),
    code: 'MANIFEST_DUPLICATE_PORT',
    object: SVC,
    field: 'spec.ports[1].name',
    reason: /duplicate port name "a"/,
  },
  {
    what: 'unnamed port among several',
    text: svc('  clusterIP: 10.96.0.1\n  ports: [ { name: a, port: 80 }, { port: 81 } ]'),
    code: 'MANIFEST_MISSING_FIELD',
    object: SVC,
    field: 'spec.ports[1].name',
    reason: /more than one port/,
  },
  {
    what: 'nodePort out of range',
    text: svc(
      '  type: NodePort\n  clusterIP: 10.96.0.1\n  ports: [ { port: 80, nodePort: 8080 } ]',
    ),
    code: 'MANIFEST_NODEPORT_RANGE',
    object: SVC,
    field: 'spec.ports[0].nodePort',
    reason: /8080 is out of range 30000-32767/,
  },
  {
    what: 'nodePort on ClusterIP',
    text: svc('  clusterIP: 10.96.0.1\n  ports: [ { port: 80, nodePort: 30080 } ]'),
    code: 'MANIFEST_INVALID_VALUE',
    object: SVC,
    field: 'spec.ports[0].nodePort',
    reason: /type is ClusterIP/,
  },
  {
    what: 'NodePort without nodePort',
    text: svc('  type: NodePort\n  clusterIP: 10.96.0.1\n  ports: [ { port: 80 } ]'),
    code: 'MANIFEST_MISSING_FIELD',
    object: SVC,
    field: 'spec.ports[0].nodePort',
    reason: /allocates none/,
  },
  {
    what: 'targetPort out of range',
    text: svc('  clusterIP: 10.96.0.1\n  ports: [ { port: 80, targetPort: 65536 } ]'),
    code: 'MANIFEST_PORT_RANGE',
    object: SVC,
    field: 'spec.ports[0].targetPort',
    reason: /65536/,
  },
  {
    what: 'quoted numeric targetPort',
    text: svc('  clusterIP: 10.96.0.1\n  ports: [ { port: 80, targetPort: "8080" } ]'),
    code: 'MANIFEST_INVALID_VALUE',
    object: SVC,
    field: 'spec.ports[0].targetPort',
    reason: /without quotes/,
  },
  {
    what: 'unknown type',
    text: svc(`  type: Magic\n  clusterIP: 10.96.0.1\n${PORTS}`),
    code: 'MANIFEST_INVALID_VALUE',
    object: SVC,
    field: 'spec.type',
    reason: /"Magic"/,
  },
  {
    what: 'bad affinity timeout',
    text: svc(
      `  clusterIP: 10.96.0.1\n${PORTS}\n  sessionAffinity: ClientIP\n  sessionAffinityConfig: { clientIP: { timeoutSeconds: 0 } }`,
    ),
    code: 'MANIFEST_INVALID_VALUE',
    object: SVC,
    field: 'spec.sessionAffinityConfig.clientIP.timeoutSeconds',
    reason: /out of range 1-86400/,
  },
  {
    what: 'bad externalIP',
    text: svc(`  clusterIP: 10.96.0.1\n${PORTS}\n  externalIPs: [1.2.3]`),
    code: 'MANIFEST_BAD_IP',
    object: SVC,
    field: 'spec.externalIPs[0]',
    reason: /"1.2.3"/,
  },
  {
    what: 'bad source range',
    text: svc(`  clusterIP: 10.96.0.1\n${PORTS}\n  loadBalancerSourceRanges: [10.0.0.0/33]`),
    code: 'MANIFEST_BAD_IP',
    object: SVC,
    field: 'spec.loadBalancerSourceRanges[0]',
    reason: /prefix/,
  },
  {
    what: 'bad LB ingress IP',
    text: `${svc(`  clusterIP: 10.96.0.1\n${PORTS}`)}status: { loadBalancer: { ingress: [ { ip: x } ] } }\n`,
    code: 'MANIFEST_BAD_IP',
    object: SVC,
    field: 'status.loadBalancer.ingress[0].ip',
    reason: /"x"/,
  },
  {
    what: 'unquoted number as an annotation',
    text: svc(
      `  clusterIP: 10.96.0.1\n${PORTS}`,
      '{ name: web, namespace: shop, annotations: { prometheus.io/port: 8080 } }',
    ),
    code: 'MANIFEST_WRONG_TYPE',
    object: SVC,
    field: 'metadata.annotations["prometheus.io/port"]',
    reason: /must be a string, got number 8080 \(quote it\)/,
  },
  {
    what: 'missing name',
    text: svc(`  clusterIP: 10.96.0.1\n${PORTS}`, '{ namespace: shop }'),
    code: 'MANIFEST_MISSING_FIELD',
    object: 'Service in document 0',
    field: 'metadata.name',
    reason: /required/,
  },
  {
    what: 'wrong apiVersion',
    text: svc(`  clusterIP: 10.96.0.1\n${PORTS}`).replace('v1', 'v2'),
    code: 'MANIFEST_API_VERSION',
    object: 'Service in document 0',
    field: 'apiVersion',
    reason: /"v2"/,
  },
  {
    what: 'slice without service-name label',
    text: slice('addressType: IPv4', '{ name: web-1, namespace: shop }'),
    code: 'MANIFEST_SLICE_NO_SERVICE',
    object: SL,
    field: 'metadata.labels["kubernetes.io/service-name"]',
    reason: /belongs to no Service/,
  },
  {
    what: 'bad addressType',
    text: slice('addressType: IPv5'),
    code: 'MANIFEST_ADDRESS_TYPE',
    object: SL,
    field: 'addressType',
    reason: /"IPv5".*IPv4, IPv6, FQDN/,
  },
  {
    what: 'missing addressType',
    text: slice('endpoints: []'),
    code: 'MANIFEST_MISSING_FIELD',
    object: SL,
    field: 'addressType',
    reason: /required/,
  },
  {
    what: 'bad endpoint address',
    text: slice(
      'addressType: IPv4\nendpoints: [ { addresses: [10.244.1.5] }, { addresses: [10.244.1] } ]',
    ),
    code: 'MANIFEST_BAD_IP',
    object: SL,
    field: 'endpoints[1].addresses[0]',
    reason: /"10.244.1"/,
  },
  {
    what: 'IPv4 address in an IPv6 slice',
    text: slice('addressType: IPv6\nendpoints: [ { addresses: [10.244.1.5] } ]'),
    code: 'MANIFEST_BAD_IP',
    object: SL,
    field: 'endpoints[0].addresses[0]',
    reason: /IPv6/,
  },
  {
    what: 'endpoint without addresses',
    text: slice('addressType: IPv4\nendpoints: [ { addresses: [] } ]'),
    code: 'MANIFEST_MISSING_FIELD',
    object: SL,
    field: 'endpoints[0].addresses',
    reason: /required/,
  },
  {
    what: 'non-boolean condition',
    text: slice(
      'addressType: IPv4\nendpoints: [ { addresses: [10.244.1.5], conditions: { ready: "yes" } } ]',
    ),
    code: 'MANIFEST_WRONG_TYPE',
    object: SL,
    field: 'endpoints[0].conditions.ready',
    reason: /true or false/,
  },
  {
    what: 'slice port out of range',
    text: slice('addressType: IPv4\nports: [ { port: 99999 } ]'),
    code: 'MANIFEST_PORT_RANGE',
    object: SL,
    field: 'ports[0].port',
    reason: /99999/,
  },
  {
    what: 'slice port unknown protocol',
    text: slice('addressType: IPv4\nports: [ { port: 80, protocol: HTTP } ]'),
    code: 'MANIFEST_UNKNOWN_PROTOCOL',
    object: SL,
    field: 'ports[0].protocol',
    reason: /"HTTP"/,
  },
  {
    what: 'duplicate slice port name',
    text: slice('addressType: IPv4\nports: [ { port: 80 }, { port: 81 } ]'),
    code: 'MANIFEST_DUPLICATE_PORT',
    object: SL,
    field: 'ports[1].name',
    reason: /duplicate port name ""/,
  },
  {
    what: 'List member',
    text: `apiVersion: v1\nkind: List\nitems:\n- ${JSON.stringify({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'shop' }, spec: { clusterIP: '10.96.0.1', ports: [{ port: -1 }] } })}\n`,
    code: 'MANIFEST_PORT_RANGE',
    object: SVC,
    field: 'items[0].spec.ports[0].port',
    reason: /-1/,
  },
  {
    what: 'two Services with one name',
    text: `${svc(`  clusterIP: 10.96.0.1\n${PORTS}`)}---\n${svc(`  clusterIP: 10.96.0.2\n${PORTS}`)}`,
    code: 'MANIFEST_DUPLICATE_OBJECT',
    object: SVC,
    field: 'metadata.name',
    reason: /already defined in manifests\/web.yaml document 0/,
  },
  {
    what: 'two Services with one clusterIP',
    text: `${svc(`  clusterIP: 10.96.0.1\n${PORTS}`)}---\n${svc(`  clusterIP: 10.96.0.1\n${PORTS}`, '{ name: other, namespace: shop }')}`,
    code: 'MANIFEST_CONFLICT',
    object: 'Service shop/other',
    field: 'spec.clusterIP',
    reason: /10.96.0.1 is already used/,
  },
  {
    what: 'two Services with one nodePort',
    text: `${svc('  type: NodePort\n  clusterIP: 10.96.0.1\n  ports: [ { port: 80, nodePort: 30080 } ]')}---\n${svc('  type: NodePort\n  clusterIP: 10.96.0.2\n  ports: [ { port: 81, nodePort: 30080 } ]', '{ name: other, namespace: shop }')}`,
    code: 'MANIFEST_CONFLICT',
    object: 'Service shop/other',
    field: 'spec.ports[0].nodePort',
    reason: /30080\/TCP is already used/,
  },
  {
    what: 'document that is not a mapping',
    text: 'just a string\n',
    code: 'MANIFEST_NOT_AN_OBJECT',
    object: 'document 0',
    field: '',
    reason: /mapping/,
  },
];

describe('parseManifests: rejects bad input naming file, object and field', () => {
  it.each(BAD)('$what', ({ text, code, object, field, reason }) => {
    let err: unknown;
    try {
      parseManifests(text, FILE);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ManifestError);
    expect(err).toBeInstanceOf(KubetunError);
    const me = err as ManifestError;
    expect({ code: me.code, file: me.file, object: me.object, field: me.field }).toEqual({
      code,
      file: FILE,
      object,
      field,
    });
    expect(me.reason).toMatch(reason);
    expect(me.message).toContain(FILE);
    expect(me.message).toContain(object);
    expect(me.message).toContain(field);
    expect(me.message).toContain(me.reason);
  });

  it('reports YAML syntax errors with document and line', () => {
    const text = `${WEB}---\napiVersion: v1\nkind: Service\nmetadata:\n  name: [web\n  x: 1\n`;
    const err = catchError(() => parseManifests(text, FILE));
    expect(err.code).toBe('MANIFEST_YAML_SYNTAX');
    expect(err.object).toBe('document 1');
    expect(err.message).toMatch(
      /^manifests\/web.yaml: document 1: YAML syntax error: .* at line \d+, column \d+$/,
    );
  });

  it('reports duplicate keys as YAML errors with their line', () => {
    const err = catchError(() => parseManifests('a: 1\nb: 2\na: 3\n', FILE));
    expect(err.code).toBe('MANIFEST_YAML_SYNTAX');
    expect(err.message).toContain('at line 3, column 1');
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

describe('the API server address rules (issue 18: a Service took over a pod IP)', () => {
  const svc = (spec: string) =>
    `apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec: ${spec}\n`;
  const slice = (addr: string) =>
    [
      'apiVersion: discovery.k8s.io/v1',
      'kind: EndpointSlice',
      'metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}',
      'addressType: IPv4',
      'ports: [{port: 8080}]',
      `endpoints: [{addresses: [${addr}]}]`,
    ].join('\n');
  const nets = { serviceCidr: '10.96.0.0/16', clusterCidr: '10.244.0.0/16' };
  const fails = (text: string, opts = {}) => {
    try {
      parseManifests(text, 'm.yaml', opts);
    } catch (e) {
      return (e as Error).message;
    }
    return 'accepted';
  };

  it('a ClusterIP outside the service CIDR (or its network/broadcast address) is refused', () => {
    const pod = svc('{clusterIP: 10.244.2.2, ports: [{port: 8080}]}');
    expect(fails(pod)).toBe('accepted'); // without the agent's networks there is nothing to check
    expect(fails(pod, nets)).toBe(
      'm.yaml: Service default/web: spec.clusterIP: Invalid value: "10.244.2.2": provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/16',
    );
    expect(fails(svc('{clusterIP: 10.96.0.0, ports: [{port: 80}]}'), nets)).toContain(
      '(the network address is never allocated)',
    );
    expect(fails(svc('{clusterIP: 10.96.255.255, ports: [{port: 80}]}'), nets)).toContain(
      '(the broadcast address is never allocated)',
    );
    expect(fails(svc('{clusterIP: 10.96.0.10, ports: [{port: 80}]}'), nets)).toBe('accepted');
  });

  it('external IPs: not special, not in the pod network, not in the service CIDR', () => {
    const ext = (ip: string) =>
      svc(`{clusterIP: 10.96.0.10, externalIPs: [${ip}], ports: [{port: 80}]}`);
    expect(fails(ext('10.244.2.2'), nets)).toContain(
      'spec.externalIPs[0]: "10.244.2.2" is inside the pod network 10.244.0.0/16: it would take over a Pod\'s address',
    );
    expect(fails(ext('10.96.0.20'), nets)).toContain('is inside the service CIDR 10.96.0.0/16');
    expect(fails(ext('127.0.0.1'))).toContain('may not be in the loopback range (127.0.0.0/8)');
    expect(fails(ext('192.168.99.22'), nets)).toBe('accepted');
    // kube-proxy's dual-stack --cluster-cidr: each family's pod network
    const dual = { ...nets, clusterCidr: '10.244.0.0/16,fd00:10:244::/56' };
    expect(fails(ext('10.244.2.2'), dual)).toContain('inside the pod network 10.244.0.0/16:');
    expect(fails(ext('"fd00:10:244:1::5"'), dual)).toContain(
      '"fd00:10:244:1::5" is inside the pod network fd00:10:244::/56:',
    );
    expect(fails(ext('"fd00:99::5"'), dual)).toBe('accepted');
  });

  it('endpoint addresses: no loopback, unspecified, link-local or multicast', () => {
    const cases: [string, string][] = [
      ['127.0.0.1', 'may not be in the loopback range (127.0.0.0/8)'],
      ['0.0.0.0', 'may not be unspecified (0.0.0.0)'],
      ['169.254.169.254', 'may not be in the link-local range (169.254.0.0/16)'],
      ['224.0.0.5', 'may not be in the link-local multicast range (224.0.0.0/24)'],
      ['239.1.2.3', 'may not be a multicast address (224.0.0.0/4)'],
      ['255.255.255.255', 'may not be the broadcast address (255.255.255.255)'],
    ];
    for (const [addr, why] of cases) {
      expect(fails(slice(addr))).toBe(
        `m.yaml: EndpointSlice default/web-1: endpoints[0].addresses[0]: "${addr}" ${why}`,
      );
    }
    expect(fails(slice('10.244.1.5'))).toBe('accepted');
  });
});

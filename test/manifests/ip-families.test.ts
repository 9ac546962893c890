// Dual-stack Services as the apiserver has them: spec.clusterIPs, ipFamilies and ipFamilyPolicy
// with the validation of pkg/apis/core/validation (ValidateServiceClusterIPsRelatedFields) and
// the defaulting of pkg/registry/core/service/storage/alloc.go (initIPFamilyFields), IPv6
// service CIDRs, IPv6 EndpointSlices, and the per-family resolve a kube-proxy of one family sees.
import { describe, expect, it } from 'vitest';
import { ManifestError, parseManifests } from '../../src/manifests/index.ts';
import { parseServiceCidrs } from '../../src/manifests/ip.ts';
import { endpointString, resolveServicePorts } from '../../src/manifests/resolve.ts';

const FILE = 'svc.yaml';
const DUAL = '10.96.0.0/12,fd00:10:96::/112';

function svc(spec: string): string {
  return `apiVersion: v1\nkind: Service\nmetadata: { name: web, namespace: shop }\nspec:\n${spec}\n  ports: [ { port: 80 } ]\n`;
}

function parse(spec: string, serviceCidr?: string) {
  const s = parseManifests(svc(spec), FILE, serviceCidr ? { serviceCidr } : {}).services[0];
  return { ips: s.clusterIPs, families: s.ipFamilies, policy: s.ipFamilyPolicy };
}

function refusal(spec: string, serviceCidr?: string): ManifestError {
  try {
    parseManifests(svc(spec), FILE, serviceCidr ? { serviceCidr } : {});
  } catch (e) {
    expect(e).toBeInstanceOf(ManifestError);
    return e as ManifestError;
  }
  throw new Error('accepted');
}

describe('ipFamilies / ipFamilyPolicy defaulting (the registry)', () => {
  it('infers families from clusterIPs, primary first, and defaults the policy to SingleStack', () => {
    expect(parse('  clusterIP: 10.96.0.10', DUAL)).toEqual({
      ips: ['10.96.0.10'],
      families: ['IPv4'],
      policy: 'SingleStack',
    });
    expect(parse('  clusterIP: "fd00:10:96::a"', DUAL)).toEqual({
      ips: ['fd00:10:96::a'],
      families: ['IPv6'],
      policy: 'SingleStack',
    });
  });

  it('reads a dual-stack Service in either order', () => {
    const v6first = parse(
      '  ipFamilyPolicy: PreferDualStack\n  clusterIP: "fd00:10:96::a"\n  clusterIPs: ["fd00:10:96::a", 10.96.0.10]',
      DUAL,
    );
    expect(v6first).toEqual({
      ips: ['fd00:10:96::a', '10.96.0.10'],
      families: ['IPv6', 'IPv4'],
      policy: 'PreferDualStack',
    });
    const v4first = parse(
      '  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv4, IPv6]\n  clusterIPs: [10.96.0.10, "fd00:10:96::a"]',
      DUAL,
    );
    expect(v4first.families).toEqual(['IPv4', 'IPv6']);
  });

  it('PreferDualStack on a single-stack cluster keeps one family', () => {
    expect(
      parse('  ipFamilyPolicy: PreferDualStack\n  clusterIP: 10.96.0.10', '10.96.0.0/12'),
    ).toEqual({ ips: ['10.96.0.10'], families: ['IPv4'], policy: 'PreferDualStack' });
  });

  it('headless without a selector defaults to RequireDualStack with both families, even on a single-stack cluster', () => {
    expect(parse('  clusterIP: None', '10.96.0.0/12')).toEqual({
      ips: [],
      families: ['IPv4', 'IPv6'],
      policy: 'RequireDualStack',
    });
    expect(parse('  clusterIP: None', 'fd00:10:96::/112').families).toEqual(['IPv6', 'IPv4']);
  });

  it('headless with a selector defaults to SingleStack with the primary family', () => {
    expect(
      parse('  clusterIP: None\n  selector: { app: web }', 'fd00:10:96::/112,10.96.0.0/12'),
    ).toEqual({ ips: [], families: ['IPv6'], policy: 'SingleStack' });
  });
});

describe('dual-stack validation, each refusal naming its field', () => {
  it.each([
    [
      'two IPs under SingleStack',
      '  ipFamilyPolicy: SingleStack\n  clusterIPs: [10.96.0.10, "fd00:10:96::a"]',
      'spec.ipFamilyPolicy',
      /must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified/,
    ],
    [
      'two IPs with no policy (defaults to SingleStack)',
      '  clusterIPs: [10.96.0.10, "fd00:10:96::a"]',
      'spec.ipFamilyPolicy',
      /when multiple cluster IPs are specified/,
    ],
    [
      'two families under SingleStack',
      '  ipFamilyPolicy: SingleStack\n  ipFamilies: [IPv4, IPv6]\n  clusterIP: 10.96.0.10',
      'spec.ipFamilyPolicy',
      /when multiple IP families are specified/,
    ],
    [
      'two IPv4 ClusterIPs',
      '  ipFamilyPolicy: RequireDualStack\n  clusterIPs: [10.96.0.10, 10.96.0.11]',
      'spec.clusterIPs',
      /may specify no more than one IP for each IP family/,
    ],
    [
      'three ClusterIPs',
      '  ipFamilyPolicy: RequireDualStack\n  clusterIPs: [10.96.0.10, "fd00:10:96::a", 10.96.0.11]',
      'spec.clusterIPs',
      /may only hold up to 2 values/,
    ],
    [
      'an IP of the other family than ipFamilies says',
      '  ipFamilies: [IPv6]\n  clusterIP: 10.96.0.10',
      'spec.clusterIPs[0]',
      /expected an IPv6 value as indicated by `ipFamilies\[0\]`/,
    ],
    [
      'a family twice',
      '  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv4, IPv4]\n  clusterIP: 10.96.0.10',
      'spec.ipFamilies[1]',
      /Duplicate value: "IPv4"/,
    ],
    [
      'an unknown family',
      '  ipFamilies: [IPv5]\n  clusterIP: 10.96.0.10',
      'spec.ipFamilies[0]',
      /unsupported value "IPv5"/,
    ],
    [
      'an unknown policy',
      '  ipFamilyPolicy: DualStack\n  clusterIP: 10.96.0.10',
      'spec.ipFamilyPolicy',
      /unsupported value "DualStack" \(expected one of SingleStack, PreferDualStack, RequireDualStack\)/,
    ],
    [
      'None beside an address',
      '  clusterIPs: [None, 10.96.0.10]',
      'spec.clusterIPs',
      /'None' must be the first and only value/,
    ],
  ])('%s', (_what, spec, field, reason) => {
    const e = refusal(spec, DUAL);
    expect(e.field).toBe(field);
    expect(e.object).toBe('Service shop/web');
    expect(e.file).toBe(FILE);
    expect(e.reason).toMatch(reason);
  });

  it('refuses what the cluster is not configured for', () => {
    const v4only = '10.96.0.0/12';
    const e1 = refusal('  ipFamilyPolicy: RequireDualStack\n  clusterIP: 10.96.0.10', v4only);
    expect([e1.field, e1.reason]).toEqual([
      'spec.ipFamilyPolicy',
      'Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services',
    ]);
    const e2 = refusal('  clusterIP: "fd00:10:96::a"', v4only);
    expect([e2.field, e2.reason]).toEqual([
      'spec.clusterIPs[0]',
      'IPv6 is not configured on this cluster',
    ]);
    const e3 = refusal('  ipFamilies: [IPv6]\n  clusterIP: None\n  selector: { a: b }', v4only);
    expect([e3.field, e3.reason]).toEqual([
      'spec.ipFamilies[0]',
      'Invalid value: "IPv6": not configured on this cluster',
    ]);
  });

  it('checks each ClusterIP against the service CIDR of its family', () => {
    const out = refusal(
      '  ipFamilyPolicy: PreferDualStack\n  clusterIPs: [10.96.0.10, "fd00:10:97::a"]',
      DUAL,
    );
    expect(out.field).toBe('spec.clusterIPs[1]');
    expect(out.reason).toBe(
      'Invalid value: "fd00:10:97::a": provided IP is not in the valid range. The range of valid IPs is fd00:10:96::/112',
    );
    const net = refusal('  clusterIP: "fd00:10:96::"', DUAL);
    expect(net.reason).toMatch(/the network address is never allocated/);
    // IPv6 has no broadcast address: the last one of the range is a ClusterIP like any other
    expect(parse('  clusterIP: "fd00:10:96::ffff"', DUAL).ips).toEqual(['fd00:10:96::ffff']);
  });

  it('a defaulted second family needs its ClusterIP in the file (kubetun allocates none)', () => {
    const e = refusal('  ipFamilyPolicy: RequireDualStack\n  clusterIP: 10.96.0.10', DUAL);
    expect(e.code).toBe('MANIFEST_MISSING_FIELD');
    expect(e.field).toBe('spec.clusterIPs[1]');
    expect(e.reason).toMatch(
      /the IPv6 ClusterIP of ipFamilies\[1\].*give one from fd00:10:96::\/112/,
    );
  });

  it('ExternalName may set neither ipFamilies nor ipFamilyPolicy', () => {
    const base = '  type: ExternalName\n  externalName: example.com\n';
    const text = (extra: string) =>
      `apiVersion: v1\nkind: Service\nmetadata: { name: ext }\nspec:\n${base}${extra}\n`;
    for (const [extra, field] of [
      ['  ipFamilies: [IPv4]', 'spec.ipFamilies'],
      ['  ipFamilyPolicy: SingleStack', 'spec.ipFamilyPolicy'],
    ]) {
      expect(() => parseManifests(text(extra), FILE)).toThrow(
        expect.objectContaining({ field, reason: "may not be set when `type` is 'ExternalName'" }),
      );
    }
    expect(parseManifests(text(''), FILE).services[0].ipFamilies).toEqual([]);
  });

  it('IPv6 external IPs, load-balancer IPs and source ranges are read; a link-local one is not', () => {
    const s = parseManifests(
      `apiVersion: v1\nkind: Service\nmetadata: { name: lb }\nspec:\n  type: LoadBalancer\n  clusterIP: "fd00:10:96::b"\n  externalIPs: ["2001:db8::99"]\n  loadBalancerSourceRanges: ["2001:db8:1::/48"]\n  ports: [ { port: 80, nodePort: 30080 } ]\nstatus: { loadBalancer: { ingress: [ { ip: "2001:db8::1:1" } ] } }\n`,
      FILE,
      { serviceCidr: DUAL },
    ).services[0];
    expect([s.externalIPs, s.loadBalancerIPs, s.loadBalancerSourceRanges]).toEqual([
      ['2001:db8::99'],
      ['2001:db8::1:1'],
      ['2001:db8:1::/48'],
    ]);
    const e = refusal('  clusterIP: 10.96.0.10\n  externalIPs: ["fe80::1"]', DUAL);
    expect([e.field, e.reason]).toEqual([
      'spec.externalIPs[0]',
      '"fe80::1" may not be in the link-local range (fe80::/10)',
    ]);
    const inRange = refusal('  clusterIP: 10.96.0.10\n  externalIPs: ["fd00:10:96::7"]', DUAL);
    expect(inRange.reason).toMatch(/inside the service CIDR/);
  });
});

describe('parseServiceCidrs (--service-cluster-ip-range)', () => {
  it('takes one CIDR or one per family, the first being primary', () => {
    expect(parseServiceCidrs('fd00:10:96::/112,10.96.0.0/12')).toMatchObject({
      primary: 'IPv6',
      v6: { text: 'fd00:10:96::/112' },
      v4: { prefix: 12 },
    });
  });
  it.each([
    ['10.96.0.0/12,10.97.0.0/16', /two IPv4 CIDRs/],
    ['fd00::/64', /for 128-bit addresses the mask must be >= 108/],
    ['10.0.0.0/8', /the mask must be >= 12/],
    ['fd00::/112,10.96.0.0/12,10.97.0.0/16', /at most two CIDRs/],
    ['fd00::zz/112', /not a valid IPv6 CIDR/],
  ])('refuses %j', (text, why) => {
    expect(() => parseServiceCidrs(text)).toThrow(why);
  });
});

const DUAL_WEB = `
apiVersion: v1
kind: Service
metadata: { name: web, namespace: shop }
spec:
  ipFamilyPolicy: RequireDualStack
  clusterIPs: [10.96.0.10, "fd00:10:96::a"]
  selector: { app: web }
  ports: [ { name: http, port: 80, targetPort: 8080 } ]
---
apiVersion: v1
kind: Service
metadata: { name: v4only, namespace: shop }
spec: { clusterIP: 10.96.0.11, ports: [ { port: 80 } ] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-v4, namespace: shop, labels: { kubernetes.io/service-name: web } }
addressType: IPv4
ports: [ { name: http, port: 8080 } ]
endpoints: [ { addresses: [10.244.1.5] } ]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-v6, namespace: shop, labels: { kubernetes.io/service-name: web } }
addressType: IPv6
ports: [ { name: http, port: 8080 } ]
endpoints: [ { addresses: ["fd00:10:244:1::5"] }, { addresses: ["fd00:10:244:2::5"] } ]
`;

describe('IPv6 EndpointSlices and the per-family resolve', () => {
  it('each family sees its own ClusterIP and only the slices of its addressType', () => {
    const state = parseManifests(DUAL_WEB, FILE, { serviceCidr: DUAL });
    const view = (family: 'IPv4' | 'IPv6') =>
      resolveServicePorts(state, { family }).map((r) => [
        r.servicePortName,
        r.endpoints.map(endpointString),
      ]);
    expect(view('IPv4')).toEqual([
      ['shop/web:http', ['10.244.1.5:8080']],
      ['shop/v4only', []],
    ]);
    expect(view('IPv6')).toEqual([
      ['shop/web:http', ['[fd00:10:244:1::5]:8080', '[fd00:10:244:2::5]:8080']],
    ]);
  });

  it('refuses an IPv6 slice endpoint that no Service can forward to, naming it', () => {
    const bad = DUAL_WEB.replace('"fd00:10:244:2::5"', '"fe80::5"');
    expect(() => parseManifests(bad, FILE)).toThrow(
      expect.objectContaining({
        object: 'EndpointSlice shop/web-v6',
        field: 'endpoints[1].addresses[0]',
        reason: '"fe80::5" may not be in the link-local range (fe80::/10)',
      }),
    );
  });
});

// `lab get` / `lab describe` print kubectl's columns: checked against objects the store admitted.
import { describe, expect, it } from 'vitest';
import { age, describeService, formatObjects } from '../../src/lab/get.ts';
import type { EndpointSlice, Pod, Service } from '../../src/cluster/types.ts';

const T0 = Date.parse('2026-12-01T10:00:00Z');
const svc: Service = {
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name: 'web-np', namespace: 'default', creationTimestamp: '2026-12-01T09:55:00Z' },
  spec: {
    type: 'NodePort',
    selector: { app: 'web' },
    clusterIP: '10.96.0.80',
    clusterIPs: ['10.96.0.80'],
    ports: [
      { name: 'http', port: 80, targetPort: 8080, protocol: 'TCP', nodePort: 30080 },
      { name: 'udp', port: 53, targetPort: 5353, protocol: 'UDP', nodePort: 30053 },
    ],
  },
};

describe('lab get', () => {
  it("formats ages as kubectl's HumanDuration", () => {
    const ago = (s: number) => age(new Date(T0 - s * 1000).toISOString(), T0);
    expect([
      ago(45),
      ago(119),
      ago(200),
      ago(600),
      ago(3 * 3600 + 60),
      ago(20 * 3600),
      ago(3 * 86400 + 3600),
    ]).toEqual(['45s', '119s', '3m20s', '10m', '3h1m', '20h', '3d1h']);
  });

  it('prints services with TYPE, CLUSTER-IP, EXTERNAL-IP, PORT(S) and, wide, the SELECTOR', () => {
    const text = formatObjects('Service', [svc], 'wide');
    const [head, row] = text.trimEnd().split('\n');
    expect(head!.split(/\s{2,}/)).toEqual([
      'NAME',
      'TYPE',
      'CLUSTER-IP',
      'EXTERNAL-IP',
      'PORT(S)',
      'AGE',
      'SELECTOR',
    ]);
    expect(row!.split(/\s{2,}/).filter((_, i) => i !== 5)).toEqual([
      'web-np',
      'NodePort',
      '10.96.0.80',
      '<none>',
      '80:30080/TCP,53:30053/UDP',
      'app=web',
    ]);
  });

  it('prints pods Terminating while they have a deletionTimestamp, READY as ready/containers', () => {
    const pod: Pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'web-1', namespace: 'default', deletionTimestamp: '2026-12-01T10:00:00Z' },
      spec: { nodeName: 'node1', containers: [{ name: 'echo', image: 'nginx' }] },
      status: {
        phase: 'Running',
        podIP: '10.244.1.7',
        containerStatuses: [{ name: 'echo', ready: true, restartCount: 2 }],
      },
    };
    const [, row] = formatObjects('Pod', [pod], 'wide').trimEnd().split('\n');
    const cells = row!.split(/\s{2,}/);
    expect([cells[0], cells[1], cells[2], cells[3], cells[5], cells[6]]).toEqual([
      'web-1',
      '1/1',
      'Terminating',
      '2',
      '10.244.1.7',
      'node1',
    ]);
  });

  it('prints an empty slice as <unset>, and describe lists only ready endpoints', () => {
    const slice = (ready: boolean): EndpointSlice => ({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 'web-np-abcde', namespace: 'default' },
      addressType: 'IPv4',
      ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
      endpoints: [
        { addresses: ['10.244.1.2'], conditions: { ready: true } },
        { addresses: ['10.244.2.3'], conditions: { ready } },
      ],
    });
    const empty = { ...slice(true), endpoints: [] };
    expect(formatObjects('EndpointSlice', [empty], 'table')).toMatch(
      /web-np-abcde\s+IPv4\s+8080\s+<unset>/,
    );
    const d = describeService(svc, [slice(false)]);
    expect(d).toMatch(/^Name:\s+web-np$/m);
    expect(d).toMatch(/^Selector:\s+app=web$/m);
    expect(d).toMatch(/^NodePort:\s+http {2}30080\/TCP$/m);
    expect(d).toMatch(/^Endpoints:\s+10\.244\.1\.2:8080$/m);
  });
});

// `kubetun lab get / describe`: the lab's objects in the columns kubectl prints (kubectl's
// printers in pkg/printers/internalversion), through the one table printer (inspect/table.ts).
import { stringify } from 'yaml';
import { formatTable, NONE, type Row } from '../inspect/table.ts';
import type {
  Deployment,
  EndpointSlice,
  KObject,
  Node,
  Pod,
  ReplicaSet,
  Service,
} from '../cluster/types.ts';
import { LabError } from './error.ts';

/** kubectl's resource names and short names, to API kinds. */
const KINDS: Record<string, string> = {
  pod: 'Pod',
  pods: 'Pod',
  po: 'Pod',
  service: 'Service',
  services: 'Service',
  svc: 'Service',
  endpointslice: 'EndpointSlice',
  endpointslices: 'EndpointSlice',
  deployment: 'Deployment',
  deployments: 'Deployment',
  deploy: 'Deployment',
  replicaset: 'ReplicaSet',
  replicasets: 'ReplicaSet',
  rs: 'ReplicaSet',
  node: 'Node',
  nodes: 'Node',
  no: 'Node',
  namespace: 'Namespace',
  namespaces: 'Namespace',
  ns: 'Namespace',
};

export function kindOf(resource: string): string {
  const k = KINDS[resource.toLowerCase().replace(/\.(apps|discovery\.k8s\.io)$/, '')];
  if (!k)
    throw new LabError(
      `the server doesn't have a resource type "${resource}" (the lab serves pods, services, endpointslices, deployments, replicasets, nodes, namespaces)`,
    );
  return k;
}

/** kubectl's duration.HumanDuration: 45s, 3m20s, 15m, 5h3m, 20h, 3d4h, 30d. */
export function age(since: string | null | undefined, now = Date.now()): string {
  if (!since) return NONE;
  const s = Math.floor((now - Date.parse(since)) / 1000);
  if (s < 0) return '0s';
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return s % 60 === 0 ? `${m}m` : `${m}m${s % 60}s`;
  if (m < 180) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 8) return m % 60 === 0 ? `${h}h` : `${h}h${m % 60}m`;
  if (h < 48) return `${h}h`;
  if (h < 192) return h % 24 === 0 ? `${Math.floor(h / 24)}d` : `${Math.floor(h / 24)}d${h % 24}h`;
  return `${Math.floor(h / 24)}d`;
}

interface Columns<T> {
  headers: string[];
  wide: string[];
  row: (o: T, now: number) => Row;
  wideRow: (o: T) => Row;
}

const selectorText = (sel: Record<string, string> | undefined) =>
  Object.entries(sel ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(',');

export function podStatus(p: Pod): string {
  if (p.metadata.deletionTimestamp) return 'Terminating';
  const cs = (p.status?.containerStatuses ?? []) as { state?: { waiting?: { reason?: string } } }[];
  const waiting = cs.find((c) => c.state?.waiting?.reason)?.state?.waiting?.reason;
  if (waiting && p.status?.phase !== 'Failed') return waiting;
  return p.status?.phase ?? 'Pending';
}

const PODS: Columns<Pod> = {
  headers: ['NAME', 'READY', 'STATUS', 'RESTARTS', 'AGE'],
  wide: ['IP', 'NODE', 'NOMINATED NODE', 'READINESS GATES'],
  row: (p, now) => {
    const cs = (p.status?.containerStatuses ?? []) as { ready?: boolean; restartCount?: number }[];
    const ready = cs.filter((c) => c.ready).length;
    const restarts = cs.reduce((a, c) => a + (c.restartCount ?? 0), 0);
    return [
      p.metadata.name,
      `${ready}/${p.spec.containers.length}`,
      podStatus(p),
      restarts,
      age(p.metadata.creationTimestamp, now),
    ];
  },
  wideRow: (p) => [p.status?.podIP, p.spec.nodeName, NONE, NONE],
};

export function servicePorts(s: Service): string {
  const ports = s.spec.ports ?? [];
  if (ports.length === 0) return NONE;
  return ports
    .map((p) => `${p.port}${p.nodePort ? `:${p.nodePort}` : ''}/${p.protocol ?? 'TCP'}`)
    .join(',');
}

function externalIP(s: Service): string {
  if (s.spec.type === 'ExternalName') return s.spec.externalName ?? NONE;
  const ips = [
    ...(s.status?.loadBalancer?.ingress ?? []).map((i) => i.ip ?? i.hostname ?? ''),
    ...(s.spec.externalIPs ?? []),
  ];
  if (ips.length > 0) return ips.join(',');
  return s.spec.type === 'LoadBalancer' ? '<pending>' : NONE;
}

const SERVICES: Columns<Service> = {
  headers: ['NAME', 'TYPE', 'CLUSTER-IP', 'EXTERNAL-IP', 'PORT(S)', 'AGE'],
  wide: ['SELECTOR'],
  row: (s, now) => [
    s.metadata.name,
    s.spec.type ?? 'ClusterIP',
    s.spec.clusterIP ?? NONE,
    externalIP(s),
    servicePorts(s),
    age(s.metadata.creationTimestamp, now),
  ],
  wideRow: (s) => [selectorText(s.spec.selector)],
};

/** kubectl's formatDiscoveryEndpoints: the first three addresses, "+ N more...". */
function sliceEndpoints(s: EndpointSlice): string {
  const addrs = (s.endpoints ?? []).flatMap((e) => e.addresses);
  if (addrs.length === 0) return '<unset>';
  const more = addrs.length > 3 ? ` + ${addrs.length - 3} more...` : '';
  return addrs.slice(0, 3).join(',') + more;
}

const SLICES: Columns<EndpointSlice> = {
  headers: ['NAME', 'ADDRESSTYPE', 'PORTS', 'ENDPOINTS', 'AGE'],
  wide: [],
  row: (s, now) => {
    const ports = (s.ports ?? []).map((p) => p.port).filter((p) => p !== undefined);
    return [
      s.metadata.name,
      s.addressType,
      ports.length > 0 ? ports.join(',') : '<unset>',
      sliceEndpoints(s),
      age(s.metadata.creationTimestamp, now),
    ];
  },
  wideRow: () => [],
};

const containers = (spec: { containers: { name: string; image?: string }[] }) => [
  spec.containers.map((c) => c.name).join(','),
  spec.containers.map((c) => c.image ?? '').join(','),
];

const DEPLOYMENTS: Columns<Deployment> = {
  headers: ['NAME', 'READY', 'UP-TO-DATE', 'AVAILABLE', 'AGE'],
  wide: ['CONTAINERS', 'IMAGES', 'SELECTOR'],
  row: (d, now) => {
    const st = (d.status ?? {}) as {
      readyReplicas?: number;
      updatedReplicas?: number;
      availableReplicas?: number;
    };
    return [
      d.metadata.name,
      `${st.readyReplicas ?? 0}/${d.spec.replicas ?? 1}`,
      st.updatedReplicas ?? 0,
      st.availableReplicas ?? 0,
      age(d.metadata.creationTimestamp, now),
    ];
  },
  wideRow: (d) => [...containers(d.spec.template.spec), selectorText(d.spec.selector.matchLabels)],
};

const REPLICASETS: Columns<ReplicaSet> = {
  headers: ['NAME', 'DESIRED', 'CURRENT', 'READY', 'AGE'],
  wide: ['CONTAINERS', 'IMAGES', 'SELECTOR'],
  row: (r, now) => {
    const st = (r.status ?? {}) as { replicas?: number; readyReplicas?: number };
    return [
      r.metadata.name,
      r.spec.replicas ?? 1,
      st.replicas ?? 0,
      st.readyReplicas ?? 0,
      age(r.metadata.creationTimestamp, now),
    ];
  },
  wideRow: (r) => [...containers(r.spec.template.spec), selectorText(r.spec.selector.matchLabels)],
};

const NODES: Columns<Node> = {
  headers: ['NAME', 'STATUS', 'ROLES', 'AGE', 'VERSION'],
  wide: ['INTERNAL-IP', 'EXTERNAL-IP', 'OS-IMAGE', 'KERNEL-VERSION', 'CONTAINER-RUNTIME'],
  row: (n, now) => {
    const ready = (n.status?.conditions ?? []).some(
      (c) => c.type === 'Ready' && c.status === 'True',
    );
    return [
      n.metadata.name,
      ready ? 'Ready' : 'NotReady',
      NONE,
      age(n.metadata.creationTimestamp, now),
      'kubetun-lab',
    ];
  },
  wideRow: (n) => [
    (n.status?.addresses ?? []).find((a) => a.type === 'InternalIP')?.address,
    NONE,
    'network namespace',
    NONE,
    NONE,
  ],
};

const NAMESPACES: Columns<KObject> = {
  headers: ['NAME', 'STATUS', 'AGE'],
  wide: [],
  row: (n, now) => [n.metadata.name, 'Active', age(n.metadata.creationTimestamp, now)],
  wideRow: () => [],
};

const COLUMNS: Record<string, Columns<never>> = {
  Pod: PODS,
  Service: SERVICES,
  EndpointSlice: SLICES,
  Deployment: DEPLOYMENTS,
  ReplicaSet: REPLICASETS,
  Node: NODES,
  Namespace: NAMESPACES,
};

export type Output = 'table' | 'wide' | 'yaml' | 'json' | 'name';

/** What `lab get` prints for these objects (of one kind). */
export function formatObjects(
  kind: string,
  objs: KObject[],
  out: Output,
  o: { allNamespaces?: boolean; single?: boolean } = {},
): string {
  if (out === 'json' || out === 'yaml') {
    const doc =
      o.single && objs.length === 1
        ? objs[0]
        : { apiVersion: 'v1', items: objs, kind: 'List', metadata: { resourceVersion: '' } };
    return out === 'json' ? `${JSON.stringify(doc, null, 4)}\n` : stringify(doc);
  }
  if (out === 'name')
    return objs.map((x) => `${x.kind.toLowerCase()}/${x.metadata.name}\n`).join('');
  if (objs.length === 0) return '';
  const c = COLUMNS[kind] as unknown as Columns<KObject>;
  const now = Date.now();
  const ns = o.allNamespaces && kind !== 'Node' && kind !== 'Namespace';
  const headers = [...(ns ? ['NAMESPACE'] : []), ...c.headers, ...(out === 'wide' ? c.wide : [])];
  const rows = objs.map((x) => [
    ...(ns ? [x.metadata.namespace] : []),
    ...c.row(x, now),
    ...(out === 'wide' ? c.wideRow(x) : []),
  ]);
  return `${formatTable(headers, rows).join('\n')}\n`;
}

/** kubectl describe service, from the Service and its EndpointSlices. */
export function describeService(s: Service, slices: EndpointSlice[]): string {
  const lines: [string, string][] = [];
  const kv = (m: Record<string, string> | undefined) =>
    Object.keys(m ?? {}).length === 0 ? [NONE] : Object.entries(m!).map(([k, v]) => `${k}=${v}`);
  const add = (k: string, vs: string[]) => {
    for (const [i, v] of vs.entries()) lines.push([i === 0 ? `${k}:` : '', v]);
  };
  add('Name', [s.metadata.name]);
  add('Namespace', [s.metadata.namespace ?? 'default']);
  add('Labels', kv(s.metadata.labels));
  add('Annotations', kv(s.metadata.annotations));
  add('Selector', [selectorText(s.spec.selector) || NONE]);
  add('Type', [s.spec.type ?? 'ClusterIP']);
  if (s.spec.type === 'ExternalName') add('External Name', [s.spec.externalName ?? '']);
  else {
    add('IP Family Policy', [s.spec.ipFamilyPolicy ?? 'SingleStack']);
    add('IP Families', [(s.spec.ipFamilies ?? ['IPv4']).join(',')]);
    add('IP', [s.spec.clusterIP ?? NONE]);
    add('IPs', [(s.spec.clusterIPs ?? []).join(',') || NONE]);
  }
  const ingress = (s.status?.loadBalancer?.ingress ?? []).map((i) => i.ip ?? '');
  if (ingress.length > 0) add('LoadBalancer Ingress', [ingress.join(', ')]);
  for (const p of s.spec.ports ?? []) {
    const name = p.name || NONE;
    add('Port', [`${name}  ${p.port}/${p.protocol ?? 'TCP'}`]);
    add('TargetPort', [`${p.targetPort ?? p.port}/${p.protocol ?? 'TCP'}`]);
    if (p.nodePort) add('NodePort', [`${name}  ${p.nodePort}/${p.protocol ?? 'TCP'}`]);
    add('Endpoints', [endpointsFor(slices, p.name ?? '') || NONE]);
  }
  add('Session Affinity', [s.spec.sessionAffinity ?? 'None']);
  if (s.spec.type === 'NodePort' || s.spec.type === 'LoadBalancer')
    add('External Traffic Policy', [s.spec.externalTrafficPolicy ?? 'Cluster']);
  if (s.spec.healthCheckNodePort) add('HealthCheck NodePort', [String(s.spec.healthCheckNodePort)]);
  if (s.spec.type !== 'ExternalName')
    add('Internal Traffic Policy', [s.spec.internalTrafficPolicy ?? 'Cluster']);
  add('Events', [NONE]);
  const w = Math.max(...lines.map(([k]) => k.length)) + 2;
  return `${lines.map(([k, v]) => (k + ' '.repeat(w - k.length) + v).trimEnd()).join('\n')}\n`;
}

/** The ready endpoints of one service port, as describe lists them (ip:port,...). */
function endpointsFor(slices: EndpointSlice[], portName: string): string {
  const out: string[] = [];
  for (const s of slices) {
    const port = (s.ports ?? []).find((p) => (p.name ?? '') === portName)?.port;
    if (port === undefined) continue;
    for (const e of s.endpoints ?? []) {
      if (e.conditions?.ready === false) continue;
      for (const a of e.addresses) out.push(`${a}:${port}`);
    }
  }
  return out.join(',');
}

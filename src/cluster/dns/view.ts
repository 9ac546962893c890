// The cluster DNS server's input: the Services, EndpointSlices and Namespaces of a "view"
// directory (what the lab's control plane writes for every node), read as CoreDNS reads them
// from the API — API-shaped YAML, nothing of kubetun's datapath model.
//
// Contract:
// - readView(dir) reads the directory's .yaml/.yml/.json files (not recursively, in byte order
//   of their names), every YAML document of each, and `kind: List` items. Kinds other than
//   Service, EndpointSlice and Namespace are skipped: DNS has no use for them.
// - Only the fields DNS answers from are checked; a bad one throws ViewError naming the file,
//   `Kind namespace/name` and the field path. The caller keeps its last good view.
// - watchView(dir, onView, onError) re-reads on every change of the directory (debounced), the
//   way CoreDNS follows the API's watch; it never calls onView with a half-read directory.
import { type FSWatcher, readFileSync, watch } from 'node:fs';
import { isIP } from 'node:net';
import { UserError } from '../../errors.ts';
import { manifestFiles } from '../../manifests/load.ts';
import { yamlValues } from '../../manifests/parse.ts';
import { LABEL_SERVICE_NAME } from '../types.ts';

export interface DnsServicePort {
  name: string;
  port: number;
  protocol: string;
}

export interface DnsService {
  name: string;
  namespace: string;
  type: string;
  /** ClusterIPs: [] when headless, or not allocated yet (no clusterIP in the file). */
  clusterIPs: string[];
  /** clusterIP: None. */
  headless: boolean;
  externalName?: string;
  ports: DnsServicePort[];
  publishNotReadyAddresses: boolean;
}

export interface DnsEndpoint {
  addresses: string[];
  /** conditions.ready; the API says an unset ready means ready. */
  ready: boolean;
  hostname?: string;
}

export interface DnsSlice {
  name: string;
  namespace: string;
  /** The kubernetes.io/service-name label: the Service the slice belongs to. */
  service: string;
  addressType: string;
  ports: DnsServicePort[];
  endpoints: DnsEndpoint[];
}

export interface View {
  services: DnsService[];
  slices: DnsSlice[];
  namespaces: string[];
}

/** A view file DNS cannot read: the file, `Kind namespace/name` and field path are in it. */
export class ViewError extends UserError {
  constructor(
    readonly file: string,
    readonly object: string,
    readonly field: string,
    reason: string,
  ) {
    super('DNS_VIEW', `${file}: ${object}${field ? `: ${field}` : ''}: ${reason}`);
  }
}

/** Before publishNotReadyAddresses, this annotation did the same (the DNS spec still names it). */
const TOLERATE_UNREADY = 'service.alpha.kubernetes.io/tolerate-unready-endpoints';

export function readView(dir: string): View {
  const view: View = { services: [], slices: [], namespaces: [] };
  // Which files and in which order: the one rule the agent's manifests loader follows too.
  for (const file of manifestFiles(dir))
    for (const obj of documents(file)) addObject(view, obj, file);
  return view;
}

function documents(file: string): unknown[] {
  const out: unknown[] = [];
  let values: unknown[];
  try {
    values = yamlValues(readFileSync(file, 'utf8'), file);
  } catch (err) {
    throw new ViewError(file, '', '', (err as Error).message);
  }
  for (const obj of values) {
    if (obj === null || obj === undefined) continue;
    const items = (obj as { kind?: unknown; items?: unknown }).items;
    if ((obj as { kind?: unknown }).kind === 'List' && Array.isArray(items)) out.push(...items);
    else out.push(obj);
  }
  return out;
}

function addObject(view: View, obj: unknown, file: string): void {
  if (typeof obj !== 'object' || obj === null) return;
  const o = obj as Record<string, unknown>;
  const meta = (o.metadata ?? {}) as Record<string, unknown>;
  const name = typeof meta.name === 'string' ? meta.name : '';
  const namespace = typeof meta.namespace === 'string' ? meta.namespace : 'default';
  const f = new Fields(file, `${String(o.kind)} ${namespace}/${name}`);
  if (o.kind === 'Namespace') {
    if (name) view.namespaces.push(name.toLowerCase());
    return;
  }
  if (o.kind !== 'Service' && o.kind !== 'EndpointSlice') return;
  if (!name) f.fail('metadata.name', 'missing');
  if (o.kind === 'Service') view.services.push(service(o, meta, name, namespace, f));
  else view.slices.push(slice(o, meta, name, namespace, f));
}

function service(
  o: Record<string, unknown>,
  meta: Record<string, unknown>,
  name: string,
  namespace: string,
  f: Fields,
): DnsService {
  const spec = (o.spec ?? {}) as Record<string, unknown>;
  const type = typeof spec.type === 'string' ? spec.type : 'ClusterIP';
  const annotations = (meta.annotations ?? {}) as Record<string, unknown>;
  const ips = Array.isArray(spec.clusterIPs)
    ? spec.clusterIPs
    : spec.clusterIP === undefined
      ? []
      : [spec.clusterIP];
  const clusterIPs: string[] = [];
  ips.forEach((ip, i) => {
    if (ip === 'None' || ip === '') return;
    if (typeof ip !== 'string' || isIP(ip) === 0)
      f.fail(`spec.clusterIPs[${i}]`, `not an IP: ${ip}`);
    clusterIPs.push(ip as string);
  });
  const svc: DnsService = {
    name: name.toLowerCase(),
    namespace: namespace.toLowerCase(),
    type,
    clusterIPs: type === 'ExternalName' ? [] : clusterIPs,
    headless: type !== 'ExternalName' && (spec.clusterIP === 'None' || ips[0] === 'None'),
    ports: ports(spec.ports, 'spec.ports', f),
    publishNotReadyAddresses:
      spec.publishNotReadyAddresses === true || annotations[TOLERATE_UNREADY] === 'true',
  };
  if (type === 'ExternalName') {
    if (typeof spec.externalName !== 'string' || spec.externalName === '')
      f.fail('spec.externalName', 'an ExternalName Service needs a name');
    svc.externalName = (spec.externalName as string).replace(/\.$/, '').toLowerCase();
  }
  return svc;
}

function slice(
  o: Record<string, unknown>,
  meta: Record<string, unknown>,
  name: string,
  namespace: string,
  f: Fields,
): DnsSlice {
  const labels = (meta.labels ?? {}) as Record<string, unknown>;
  const service = labels[LABEL_SERVICE_NAME];
  if (typeof service !== 'string' || service === '')
    f.fail(`metadata.labels[${LABEL_SERVICE_NAME}]`, 'missing: DNS cannot tell its Service');
  const endpoints = Array.isArray(o.endpoints) ? o.endpoints : [];
  return {
    name,
    namespace: namespace.toLowerCase(),
    service: (service as string).toLowerCase(),
    addressType: typeof o.addressType === 'string' ? o.addressType : 'IPv4',
    ports: ports(o.ports, 'ports', f),
    endpoints: endpoints.map((e, i) => endpoint(e, `endpoints[${i}]`, f)),
  };
}

function endpoint(e: unknown, path: string, f: Fields): DnsEndpoint {
  const ep = (e ?? {}) as Record<string, unknown>;
  if (!Array.isArray(ep.addresses)) f.fail(`${path}.addresses`, 'expected a list of IPs');
  const addresses = (ep.addresses as unknown[]).map((a, i) => {
    if (typeof a !== 'string' || isIP(a) === 0)
      f.fail(`${path}.addresses[${i}]`, `not an IP: ${a}`);
    return a as string;
  });
  const conditions = (ep.conditions ?? {}) as Record<string, unknown>;
  const out: DnsEndpoint = { addresses, ready: conditions.ready !== false };
  if (typeof ep.hostname === 'string' && ep.hostname !== '')
    out.hostname = ep.hostname.toLowerCase();
  return out;
}

function ports(list: unknown, path: string, f: Fields): DnsServicePort[] {
  if (list === undefined || list === null) return [];
  if (!Array.isArray(list)) f.fail(path, 'expected a list');
  return (list as unknown[]).map((p, i) => {
    const port = (p ?? {}) as Record<string, unknown>;
    const n = port.port;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 65535)
      f.fail(`${path}[${i}].port`, 'expected a port 1..65535');
    return {
      name: typeof port.name === 'string' ? port.name.toLowerCase() : '',
      port: n as number,
      protocol: typeof port.protocol === 'string' ? port.protocol : 'TCP',
    };
  });
}

class Fields {
  constructor(
    private readonly file: string,
    private readonly object: string,
  ) {}
  fail(field: string, reason: string): never {
    throw new ViewError(this.file, this.object, field, reason);
  }
}

/**
 * Calls onView with a fresh view now and after every change of dir; a read that fails goes to
 * onError (the caller keeps serving its last good view). Returns a function that stops watching.
 */
export function watchView(
  dir: string,
  onView: (v: View) => void,
  onError: (e: Error) => void,
  debounceMs = 50,
): () => void {
  const load = () => {
    try {
      onView(readView(dir));
    } catch (e) {
      onError(e instanceof UserError ? e : new ViewError(dir, '', '', (e as Error).message));
    }
  };
  load();
  let timer: NodeJS.Timeout | undefined;
  const watcher: FSWatcher = watch(dir, () => {
    clearTimeout(timer);
    timer = setTimeout(load, debounceMs);
  });
  watcher.on('error', onError);
  return () => {
    clearTimeout(timer);
    watcher.close();
  };
}
